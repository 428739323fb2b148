"""The `[draft]` table of a scenario file (or `[[draft]]` tables), its keys (docs/draft-loop.md) checked
and expanded into cases; a problem is one `ScenarioError` naming the file, the key and what is allowed."""

from __future__ import annotations

import itertools
from dataclasses import dataclass, field, fields
from typing import Any

import torch

from perfsuite import variants
from perfsuite.cases.draft.head import HEAD_LOGITS, HeadConfig
from perfsuite.cases.draft.loop import DEFAULT_ACCEPT, LoopConfig, accept_name
from perfsuite.core import dtypes
from perfsuite.core.settings import Timing
from perfsuite.measure.execution import PATHS
from perfsuite.scenario import validate

UPCASTS = {"fp32": True, "none": False}  # the selector gets fp32 logits (SGLang's) or the head's dtype


def _accept_rules(source: str, key: str, value: Any) -> tuple[str, ...]:
    """One accept rule or a non-empty list of them, in canonical spelling."""
    items = validate.as_list(value)
    if not items or not all(isinstance(v, str) for v in items):
        raise validate.fail(source, key, f"expected one or a non-empty list of accept rules, got {value!r}")
    try:
        return tuple(dict.fromkeys(accept_name(v) for v in items))
    except ValueError as exc:
        raise validate.fail(source, key, str(exc)) from None


def _key(default: Any, check: validate.Check) -> Any:
    """A `[draft]` key: its default and its check."""
    return field(default=default, metadata={"check": check})


_BOOL = validate.scalar("true or false", lambda v: isinstance(v, bool))
_DTYPES = validate.names(lambda: list(dtypes.DTYPES), "dtype", dtypes.DTYPE_ALIASES)
_LOGITS = validate.names(lambda: list(HEAD_LOGITS), "logits behaviour")
_VARIANTS = validate.selectors(variants.names)


@dataclass(frozen=True)
class DraftSweep:
    """One cross product of draft cases (the tuple keys) and the settings that apply to all of them."""

    dtypes: tuple[str, ...] = _key(("bfloat16", "float32"), _DTYPES)
    vocab: tuple[int, ...] = _key((32000,), validate.ints(2))
    hidden: tuple[int, ...] = _key((256,), validate.ints(8))
    logits: tuple[str, ...] = _key(("head", "near_ties"), _LOGITS)
    batch: tuple[int, ...] = _key((1, 8), validate.ints(1))
    topk: tuple[int, ...] = _key((1, 4), validate.ints(1, 64))
    num_steps: tuple[int, ...] = _key((3,), validate.ints(1, 16))
    num_draft_tokens: tuple[int | str, ...] = _key(("auto",), validate.ints(2, auto=True))
    upcast: tuple[str, ...] = _key(("fp32",), validate.names(lambda: list(UPCASTS), "upcast"))
    accept: tuple[str, ...] = _key((DEFAULT_ACCEPT,), _accept_rules)
    variants: tuple[str, ...] = _key(("full_softmax", "argmax_ones", "identity"), _VARIANTS)
    paths: tuple[str, ...] = _key(("eager",), validate.names(lambda: list(PATHS), "path"))
    layers: int = _key(1, validate.integer(1, 4))
    cycles: int = _key(8, validate.integer(1, 1000))
    seed: int = _key(0, validate.integer(0))
    max_graphs: int = _key(8, validate.integer(2, 256))
    kernels: bool = _key(True, _BOOL)
    selection_share: bool = _key(True, _BOOL)


CHECKS: dict[str, validate.Check] = {f.name: f.metadata["check"] for f in fields(DraftSweep)}
GRID = tuple(f.name for f in fields(DraftSweep) if isinstance(f.default, tuple))  # crossed, in this order


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


def parse_draft(raw: Any, source: str) -> tuple[DraftSweep, ...]:
    """Check a raw `[draft]` table or `[[draft]]` array of tables; `ScenarioError` on any problem."""
    if isinstance(raw, list) and not raw:
        raise validate.fail(source, "[[draft]]", "expected at least one table")
    tables = {f"[draft#{i + 1}]": t for i, t in enumerate(raw)} if isinstance(raw, list) else {"[draft]": raw}
    sweeps = []
    for where, table in tables.items():
        if not isinstance(table, dict):
            raise validate.fail(source, where, f"expected a table, got {table!r}")
        validate.unknown_keys(source, where, table, CHECKS)
        checked = {key: CHECKS[key](source, f"{where}.{key}", v) for key, v in table.items()}
        sweeps.append(DraftSweep(**checked))
    return tuple(sweeps)


def draft_sweeps(scenario: Any) -> tuple[DraftSweep, ...]:
    """A scenario's draft sweeps (typed loosely: this module imports no loader); none without `[draft]`."""
    raw = scenario.extra.get("draft")
    return () if raw is None else parse_draft(raw, scenario.source)


def expand_draft(scenario: Any) -> list[DraftCase]:
    """All draft cases, ordered so that cases sharing a head and inputs run back to back."""
    cases: dict[str, DraftCase] = {}
    for sweep in draft_sweeps(scenario):
        for values in itertools.product(*(getattr(sweep, key) for key in GRID)):
            dtype, vocab, hidden, logits, batch, topk, steps, ndt, upcast, accept, variant, path = values
            head = HeadConfig(vocab, hidden, dtype, sweep.layers, logits, sweep.seed)
            upcast_on = UPCASTS[upcast] or head.torch_dtype == torch.float32  # fp32 heads: "none" is "fp32"
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
