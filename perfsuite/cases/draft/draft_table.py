"""The `[draft]` table of a scenario file (or several `[[draft]]` tables): validation and expansion.

    [draft]
    variants = ["full_softmax", "argmax_ones", "identity"]
    paths = ["eager", "graph"]          # eager | graph | compile
    dtypes = ["bfloat16", "float32"]    # float32 | float16 | bfloat16 (fp32, fp16, bf16)
    vocab = [32000]
    hidden = [256]                      # draft head hidden size
    layers = 1                          # residual MLP layers of the head (1..4)
    batch = [1, 8]
    topk = [1, 4]
    num_steps = [3]
    num_draft_tokens = ["auto"]         # auto: num_steps * topk + 1, capped by the tree's positions
                                        # (topk 1: num_steps + 1, SGLang's; any other value at topk 1 runs
                                        # the organisation and is labelled "not run by SGLang")
    upcast = ["fp32"]                   # the logits the selector gets: fp32 (SGLang's logits processor,
                                        # default) | none (the head's dtype: an engine without upcast)
    logits = ["head", "near_ties"]      # the head's logits behaviour (perfsuite.cases.draft.head)
    accept = ["geometric:0.8"]          # where the extend selects: each sequence's last accepted token,
                                        # accept lengths drawn per sequence and cycle, seeded:
                                        # geometric:P (each drafted token accepted with probability P;
                                        # default 0.8) | uniform (1..num_steps + 1) | all (every extend
                                        # token: the last of the num_draft_tokens positions)
    cycles = 8                          # distinct inputs per case for the consumer parity figures
    seed = 0
    max_graphs = 8                      # captured draft graphs kept at once (graph path; >= 2: a case's
                                        # graph and its no-op twin)
    kernels = true                      # count kernels (GPU) or aten ops (CPU) per cycle
    selection_share = true              # also time the cycle with the selection replaced by a no-op

`variants` also takes external selectors (`package.module:function` or a `perfsuite.selectors` entry
point, `perfsuite.variants.get`), loaded while the file is checked: one that cannot load is one line.
Every key takes one value or a list (sweep keys) and is checked here; a problem is one `ScenarioError`
naming the file, the key and what is allowed.
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass, field
from typing import Any, Protocol

import torch

from perfsuite import variants
from perfsuite.cases.draft.head import HEAD_LOGITS, HeadConfig
from perfsuite.cases.draft.loop import DEFAULT_ACCEPT, LoopConfig, accept_name
from perfsuite.core import dtypes
from perfsuite.core.settings import Timing
from perfsuite.measure.execution import PATHS
from perfsuite.scenario import validate


class ScenarioLike(Protocol):
    """What the draft tables read of a scenario (`perfsuite.scenario.load.Scenario`, whose loader calls
    `parse_draft`: this module sits below it and names no type of it)."""

    @property
    def name(self) -> str: ...
    @property
    def source(self) -> str: ...
    @property
    def timing(self) -> Timing: ...
    @property
    def extra(self) -> dict[str, Any]: ...


@dataclass(frozen=True)
class DraftSweep:
    """One cross product of draft cases, and the settings that apply to all of them."""

    variants: tuple[str, ...] = ("full_softmax", "argmax_ones", "identity")
    paths: tuple[str, ...] = ("eager",)
    dtypes: tuple[str, ...] = ("bfloat16", "float32")
    vocab: tuple[int, ...] = (32000,)
    hidden: tuple[int, ...] = (256,)
    batch: tuple[int, ...] = (1, 8)
    topk: tuple[int, ...] = (1, 4)
    num_steps: tuple[int, ...] = (3,)
    num_draft_tokens: tuple[int | str, ...] = ("auto",)
    logits: tuple[str, ...] = ("head", "near_ties")
    upcast: tuple[str, ...] = ("fp32",)
    accept: tuple[str, ...] = (DEFAULT_ACCEPT,)
    layers: int = 1
    cycles: int = 8
    seed: int = 0
    max_graphs: int = 8
    kernels: bool = True
    selection_share: bool = True


@dataclass(frozen=True)
class DraftCase:
    """One draft measurement: a variant on a path, for one head, batch and tree shape."""

    scenario: str
    variant: str
    path: str
    head: HeadConfig
    batch: int
    loop: LoopConfig
    sweep: DraftSweep = field(default_factory=DraftSweep)
    timing: Timing = field(default_factory=Timing)

    @property
    def case_id(self) -> str:
        h, c = self.head, self.loop
        return (
            f"draft/{self.variant}/{self.path}/{h.dtype}/V{h.vocab}/H{h.hidden}/B{self.batch}"
            f"/k{c.topk}/s{c.num_steps}/n{c.num_draft_tokens}/{h.logits}/{upcast_name(c)}"
            + ("" if c.accept == DEFAULT_ACCEPT else f"/accept-{c.accept}")
        )

    @property
    def config_key(self) -> tuple[HeadConfig, int, LoopConfig]:
        """Cases with the same key share a head, inputs and reference trees."""
        return (self.head, self.batch, self.loop)


UPCASTS = {"fp32": True, "none": False}
"""`upcast` values: the selector gets fp32 logits (SGLang's logits processor) or the head's dtype."""


def upcast_name(loop: LoopConfig) -> str:
    return "fp32" if loop.upcast else "none"


def _accept_rules(source: str, key: str, value: Any) -> tuple[str, ...]:
    """One accept rule or a non-empty list of them, in canonical spelling."""
    items = validate.as_list(value)
    if not items or not all(isinstance(v, str) for v in items):
        raise validate.fail(source, key, f"expected one or a non-empty list of accept rules, got {value!r}")
    try:
        return tuple(dict.fromkeys(accept_name(v) for v in items))
    except ValueError as exc:
        raise validate.fail(source, key, str(exc)) from None


# ---------------------------------------------------------------------------------------------- checks


CHECKS: dict[str, validate.Check] = {
    "variants": validate.selectors(variants.names),
    "paths": validate.names(lambda: list(PATHS), "path"),
    "dtypes": validate.names(lambda: list(dtypes.DTYPES), "dtype", dtypes.DTYPE_ALIASES),
    "vocab": validate.ints(2),
    "hidden": validate.ints(8),
    "batch": validate.ints(1),
    "topk": validate.ints(1, 64),
    "num_steps": validate.ints(1, 16),
    "num_draft_tokens": validate.ints(2, auto=True),
    "logits": validate.names(lambda: list(HEAD_LOGITS), "logits behaviour"),
    "upcast": validate.names(lambda: list(UPCASTS), "upcast"),
    "accept": _accept_rules,
    "layers": validate.scalar("an integer from 1 to 4", lambda v: validate.is_int(v) and 1 <= v <= 4),
    "cycles": validate.scalar("an integer from 1 to 1000", lambda v: validate.is_int(v) and 1 <= v <= 1000),
    "seed": validate.scalar("an integer >= 0", lambda v: validate.is_int(v) and v >= 0),
    "max_graphs": validate.scalar("an integer from 2 to 256", lambda v: validate.is_int(v) and 2 <= v <= 256),
    "kernels": validate.scalar("true or false", lambda v: isinstance(v, bool)),
    "selection_share": validate.scalar("true or false", lambda v: isinstance(v, bool)),
}


def _sweep(source: str, where: str, raw: Any) -> DraftSweep:
    if not isinstance(raw, dict):
        raise validate.fail(source, where, f"expected a table, got {raw!r}")
    validate.unknown_keys(source, where, raw, CHECKS)
    return DraftSweep(**{key: CHECKS[key](source, f"{where}.{key}", value) for key, value in raw.items()})


def parse_draft(raw: Any, source: str) -> tuple[DraftSweep, ...]:
    """Validate a raw `[draft]` table or `[[draft]]` array of tables; `ScenarioError` on any problem."""
    if isinstance(raw, list):
        if not raw:
            raise validate.fail(source, "[[draft]]", "expected at least one table")
        return tuple(_sweep(source, f"[draft#{i + 1}]", table) for i, table in enumerate(raw))
    return (_sweep(source, "[draft]", raw),)


def draft_sweeps(scenario: ScenarioLike) -> tuple[DraftSweep, ...]:
    """The scenario's draft sweeps (none when it has no `[draft]` table)."""
    raw = scenario.extra.get("draft")
    return () if raw is None else parse_draft(raw, scenario.source)


def draft_tokens_for(value: int | str, topk: int, num_steps: int) -> int:
    """`num_draft_tokens`, resolving 'auto' to `num_steps * topk + 1` capped by the scored positions."""
    if value != "auto":
        return int(value)
    return min(num_steps * topk, LoopConfig(topk, num_steps, 2).candidates) + 1


def expand_draft(scenario: ScenarioLike) -> list[DraftCase]:
    """All draft cases, ordered so that cases sharing a head and inputs run back to back."""
    cases: dict[str, DraftCase] = {}
    for sweep in draft_sweeps(scenario):
        grid = itertools.product(
            sweep.dtypes,
            sweep.vocab,
            sweep.hidden,
            sweep.logits,
            sweep.batch,
            sweep.topk,
            sweep.num_steps,
            sweep.num_draft_tokens,
            sweep.upcast,
            sweep.accept,
            sweep.variants,
            sweep.paths,
        )
        for dtype, vocab, hidden, logits, batch, topk, steps, ndt, upcast, accept, variant, path in grid:
            head = HeadConfig(vocab, hidden, dtype, sweep.layers, logits, sweep.seed)
            # fp32 heads: the upcast is a no-op, so "none" is the same case as "fp32"
            upcast_on = UPCASTS[upcast] or head.torch_dtype == torch.float32
            loop = LoopConfig(topk, steps, draft_tokens_for(ndt, topk, steps), upcast_on, accept)
            case = DraftCase(scenario.name, variant, path, head, batch, loop, sweep, scenario.timing)
            cases.setdefault(case.case_id, case)
    path_rank = {p: i for i, p in enumerate(PATHS)}
    return sorted(
        cases.values(),
        key=lambda c: (_head_key(c.head), c.batch, _loop_key(c.loop), path_rank[c.path]),
    )


def _head_key(head: HeadConfig) -> tuple:
    return (head.dtype, head.vocab, head.hidden, head.logits, head.layers, head.seed)


def _loop_key(loop: LoopConfig) -> tuple:
    default = loop.accept == DEFAULT_ACCEPT
    return (not loop.upcast, loop.topk, loop.num_steps, loop.num_draft_tokens, not default, loop.accept)
