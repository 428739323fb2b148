"""The cache-aware bytes model: which of a call's tensor passes the last-level cache absorbs.

A call is a sequence of passes (kernels), each reading and writing whole tensors. The cache is modelled as
LRU over whole tensors, cold at the start of the call (a cold case is flushed before it):

- a read of a tensor still resident since its previous touch is a cache hit; otherwise it moves the
  tensor's bytes from HBM (the logits' first read always does);
- a write allocates the tensor in the cache, dirty; it reaches HBM when the tensor is evicted within the
  call (once per dirty spell, however many passes rewrote it). A tensor still dirty when the call ends is
  written back after it, if ever (the next call's temporary usually lands on the same addresses), so it is
  not counted;
- a tensor stays resident from one touch to the next when it and every other tensor touched from that pass
  to the next (both included) fit in the cache together: LRU stack distance at tensor granularity,
  conservative where tensors stream through the cache side by side (a softmax reads the logits while it
  writes the probabilities).

With a cache of 0 bytes every pass moves its bytes from HBM: the figure is then `Traffic.total`.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass


@dataclass(frozen=True)
class Pass:
    """One kernel's sweep: the tensors it reads and writes, each as (name, bytes)."""

    reads: tuple[tuple[str, int], ...] = ()
    writes: tuple[tuple[str, int], ...] = ()

    @property
    def bytes(self) -> int:
        """Bytes it moves when nothing is cached."""
        return sum(n for _, n in self.reads) + sum(n for _, n in self.writes)

    def tensors(self) -> set[str]:
        return {name for name, _ in (*self.reads, *self.writes)}


def sweep(reads: dict[str, int] | None = None, writes: dict[str, int] | None = None) -> Pass:
    """A `Pass` from {name: bytes} maps."""
    return Pass(tuple((reads or {}).items()), tuple((writes or {}).items()))


def _sizes(passes: Iterable[Pass]) -> dict[str, int]:
    sizes: dict[str, int] = {}
    for p in passes:
        for name, n in (*p.reads, *p.writes):
            sizes[name] = max(sizes.get(name, 0), n)
    return sizes


def hbm_bytes(passes: Sequence[Pass], cache_bytes: int) -> int:
    """Bytes the passes move through HBM with a last-level cache of `cache_bytes` (see the module)."""
    if not passes:
        return 0
    sizes = _sizes(passes)
    touched = [p.tensors() for p in passes]
    last = len(passes) - 1

    def kept(name: str, first: int, through: int) -> bool:
        """Whether `name` stays resident from pass `first` through pass `through`."""
        others = set().union(*touched[first : through + 1]) - {name}
        return sizes[name] + sum(sizes[o] for o in others) <= cache_bytes

    moved = 0
    for name, size in sizes.items():
        resident = dirty = False
        previous: int | None = None
        for i, p in enumerate(passes):
            if name not in touched[i]:
                continue
            if previous is not None and not kept(name, previous, i):
                moved += size if dirty else 0  # evicted in between: a dirty tensor is written back
                resident = dirty = False
            if any(n == name for n, _ in p.reads):
                moved += 0 if resident else size
                resident = True
            if any(n == name for n, _ in p.writes):
                resident = dirty = True
            previous = i
        if dirty and previous is not None and not kept(name, previous, last):
            moved += size  # evicted by the rest of the call
    return moved
