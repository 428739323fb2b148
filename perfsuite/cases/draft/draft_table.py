"""The `[draft]` table of a scenario file (or `[[draft]]` tables): validation and expansion into cases.

Its keys: docs/draft-loop.md. A problem is one `ScenarioError` naming the file, the key and what is allowed.
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass, field
from typing import Any

import torch

from perfsuite import variants
from perfsuite.cases.draft.head import HEAD_LOGITS, HeadConfig
from perfsuite.cases.draft.loop import DEFAULT_ACCEPT, LoopConfig, accept_name
from perfsuite.core import dtypes
from perfsuite.core.settings import Timing
from perfsuite.measure.execution import PATHS
from perfsuite.scenario import validate


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


UPCASTS = {"fp32": True, "none": False}  # the selector gets fp32 logits (SGLang's) or the head's dtype


def upcast_name(loop: LoopConfig) -> str:
    return "fp32" if loop.upcast else "none"


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

    @property
    def selector_dtype(self) -> torch.dtype:
        """The dtype of the logits the loop hands the selector."""
        return torch.float32 if self.loop.upcast else self.head.torch_dtype


def _accept_rules(source: str, key: str, value: Any) -> tuple[str, ...]:
    """One accept rule or a non-empty list of them, in canonical spelling."""
    items = validate.as_list(value)
    if not items or not all(isinstance(v, str) for v in items):
        raise validate.fail(source, key, f"expected one or a non-empty list of accept rules, got {value!r}")
    try:
        return tuple(dict.fromkeys(accept_name(v) for v in items))
    except ValueError as exc:
        raise validate.fail(source, key, str(exc)) from None


_BOOL = validate.scalar("true or false", lambda v: isinstance(v, bool))
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
    "kernels": _BOOL,
    "selection_share": _BOOL,
}
GRID = (
    "dtypes",
    "vocab",
    "hidden",
    "logits",
    "batch",
    "topk",
    "num_steps",
    "num_draft_tokens",
    "upcast",
    "accept",
)
"""The sweep keys crossed, then `variants` and `paths`, in the order cases are made."""


def _sweep(source: str, where: str, raw: Any) -> DraftSweep:
    if not isinstance(raw, dict):
        raise validate.fail(source, where, f"expected a table, got {raw!r}")
    validate.unknown_keys(source, where, raw, CHECKS)
    return DraftSweep(**{key: CHECKS[key](source, f"{where}.{key}", value) for key, value in raw.items()})


def parse_draft(raw: Any, source: str) -> tuple[DraftSweep, ...]:
    """Validate a raw `[draft]` table or `[[draft]]` array of tables; `ScenarioError` on any problem."""
    if not isinstance(raw, list):
        return (_sweep(source, "[draft]", raw),)
    if not raw:
        raise validate.fail(source, "[[draft]]", "expected at least one table")
    return tuple(_sweep(source, f"[draft#{i + 1}]", table) for i, table in enumerate(raw))


def draft_sweeps(scenario: Any) -> tuple[DraftSweep, ...]:
    """The draft sweeps of a scenario (`scenario.load.Scenario`: its loader reads the kinds' tables, so this
    module names no type of it); none without a `[draft]` table."""
    raw = scenario.extra.get("draft")
    return () if raw is None else parse_draft(raw, scenario.source)


def expand_draft(scenario: Any) -> list[DraftCase]:
    """All draft cases, ordered so that cases sharing a head and inputs run back to back."""
    cases: dict[str, DraftCase] = {}
    for sweep in draft_sweeps(scenario):
        grid = itertools.product(*(getattr(sweep, key) for key in (*GRID, "variants", "paths")))
        for dtype, vocab, hidden, logits, batch, topk, steps, ndt, upcast, accept, variant, path in grid:
            head = HeadConfig(vocab, hidden, dtype, sweep.layers, logits, sweep.seed)
            # fp32 heads: the upcast is a no-op, so "none" is the same case as "fp32"
            upcast_on = UPCASTS[upcast] or head.torch_dtype == torch.float32
            if ndt == "auto":  # num_steps * topk + 1, capped by the scored positions
                ndt = min(steps * topk, LoopConfig(topk, steps, 2).candidates) + 1
            loop = LoopConfig(topk, steps, ndt, upcast_on, accept)
            case = DraftCase(scenario.name, variant, path, head, batch, loop, sweep, scenario.timing)
            cases.setdefault(case.case_id, case)

    def order(case: DraftCase) -> tuple:
        h, c = case.head, case.loop
        shape = (h.dtype, h.vocab, h.hidden, h.logits, h.layers, h.seed, case.batch, not c.upcast, c.topk)
        accept = (c.accept != DEFAULT_ACCEPT, c.accept)
        return (*shape, c.num_steps, c.num_draft_tokens, *accept, PATHS.index(case.path))

    return sorted(cases.values(), key=order)
