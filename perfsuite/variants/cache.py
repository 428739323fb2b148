"""The cache-aware bytes model: which of a call's tensor passes (kernels, each reading and writing whole
tensors) the last-level cache absorbs, LRU over whole tensors and cold at the call's start (the rules:
docs/measuring.md, "The cache-aware bytes model"). With a cache of 0 bytes the figure is `Traffic.total`.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass


@dataclass(frozen=True)
class Pass:
    """One kernel's sweep: the tensors it reads and writes, each as (name, bytes)."""

    reads: tuple[tuple[str, int], ...] = ()
    writes: tuple[tuple[str, int], ...] = ()

    @property
    def bytes(self) -> int:
        """Bytes it moves when nothing is cached."""
        return sum(n for _, n in (*self.reads, *self.writes))


def sweep(reads: dict[str, int] | None = None, writes: dict[str, int] | None = None) -> Pass:
    """A `Pass` from {name: bytes} maps."""
    return Pass(tuple((reads or {}).items()), tuple((writes or {}).items()))


def hbm_bytes(passes: Sequence[Pass], cache_bytes: int) -> int:
    """Bytes the passes move through HBM with a last-level cache of `cache_bytes` (see the module)."""
    sizes: dict[str, int] = {}
    for name, n in (tensor for p in passes for tensor in (*p.reads, *p.writes)):
        sizes[name] = max(sizes.get(name, 0), n)
    touched = [{name for name, _ in (*p.reads, *p.writes)} for p in passes]

    def kept(first: int, through: int) -> bool:
        """Whether every tensor touched from pass `first` through pass `through` fits in the cache."""
        return sum(sizes[t] for t in set().union(*touched[first : through + 1])) <= cache_bytes

    moved = 0
    for name, size in sizes.items():
        resident = dirty = False
        previous = -1
        for i, p in enumerate(passes):
            if name not in touched[i]:
                continue
            if previous >= 0 and not kept(previous, i):
                moved += size if dirty else 0  # evicted in between: a dirty tensor is written back
                resident = dirty = False
            if name in dict(p.reads):
                moved += 0 if resident else size
                resident = True
            if name in dict(p.writes):
                resident = dirty = True
            previous = i
        if dirty and not kept(previous, len(passes) - 1):
            moved += size  # evicted by the rest of the call
    return moved
