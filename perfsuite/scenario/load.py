"""Scenario files (docs/scenarios.md): load and validate a TOML sweep, and expand it into cases.

One `[sweep]` or several `[[sweep]]` tables, each a cross product of case parameters; `[timing]`; `[inputs]`
and `[inputs.files]` (`file:NAME` logits kinds: a sweep naming them runs at their V); the other case kinds'
tables ([draft]). Every problem is one `ScenarioError` naming the file, the key and what is allowed.
"""

from __future__ import annotations

import dataclasses
import itertools
import math
import re
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from perfsuite import variants
from perfsuite.core import dtypes, kinds
from perfsuite.core.settings import Timing
from perfsuite.measure.execution import PATHS
from perfsuite.scenario import inputs, logits_files, validate
from perfsuite.scenario.logits_files import LogitsSource
from perfsuite.scenario.validate import ScenarioError
from perfsuite.variants import tensor_parallel

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover
    import tomli as tomllib


@dataclass(frozen=True)
class Inputs:
    """How logits are generated, or read from files."""

    seed: int = 0  # generated logits' seed; which rows of a file a case takes
    row_pad: int = 0  # >0: logits are a row-strided view of a wider buffer with poisoned padding
    scale: float = inputs.DEFAULT_SCALE
    files: tuple[LogitsSource, ...] = ()  # [inputs.files]: the `file:NAME` kinds, inspected at load


@dataclass(frozen=True)
class Sweep:
    """One cross product of case parameters."""

    variants: tuple[str, ...] = ("full_softmax", "argmax_ones", "identity")
    paths: tuple[str, ...] = ("eager",)
    dtypes: tuple[str, ...] = ("bfloat16", "float32")
    vocab: tuple[int, ...] = (32000, 128256)
    batch: tuple[int, ...] = (1, 16)
    topk: tuple[int, ...] = (1, 8)
    logits: tuple[str, ...] = ("gaussian", "peaked", "near_ties")
    tp: tuple[int, ...] = (1,)  # tensor-parallel ranks the vocabulary is split over


@dataclass(frozen=True)
class Case:
    """One measurement: a variant on a path, for one input shape, dtype, k and distribution."""

    scenario: str
    variant: str
    path: str
    dtype: str
    vocab: int
    batch: int
    topk: int
    logits: str
    timing: Timing = field(default_factory=Timing)
    inputs: Inputs = field(default_factory=Inputs)
    tp: int = 1

    @property
    def case_id(self) -> str:
        shape, tp = f"V{self.vocab}/B{self.batch}/k{self.topk}", f"/tp{self.tp}" if self.tp > 1 else ""
        return f"{self.variant}/{self.path}/{self.dtype}/{shape}/{self.logits}{tp}"

    @property
    def input_key(self) -> tuple[str, int, int, str]:
        """Cases with the same key share one logits tensor."""
        return (self.dtype, self.vocab, self.batch, self.logits)


@dataclass(frozen=True)
class Scenario:
    name: str
    source: str
    description: str = ""
    device: str = "auto"
    sweeps: tuple[Sweep, ...] = (Sweep(),)
    timing: Timing = field(default_factory=Timing)
    inputs: Inputs = field(default_factory=Inputs)
    extra: dict[str, Any] = field(default_factory=dict)  # the other case kinds' tables ([draft])


def _all_variant_names() -> list[str]:
    """Single-device variants, then the tensor-parallel ones."""
    return variants.names() + tensor_parallel.names()


def _load_selector(name: str) -> object | None:
    """`allgather_<selector>` or an external selector; None: neither."""
    if name.startswith(tensor_parallel.ALLGATHER_PREFIX):
        return tensor_parallel.gathered(name)
    return variants.external.load(name)


SWEEP_CHECKS = {
    "variants": validate.selectors(_all_variant_names, _load_selector),
    "paths": validate.names(lambda: list(PATHS), "path"),
    "dtypes": validate.names(lambda: list(dtypes.DTYPES), "dtype", dtypes.DTYPE_ALIASES),
    "vocab": validate.ints(1),
    "batch": validate.ints(0),
    "topk": validate.ints(1),
    "logits": validate.names(lambda: list(inputs.KINDS), "logits kind"),
    "tp": validate.ints(1),
}
TIMING_CHECKS = {
    "warmup": validate.integer(0),
    "reps": validate.integer(1),
    "max_seconds": validate.scalar(
        "a number of seconds > 0", lambda v: validate.is_number(v) and v > 0, float
    ),
    "l2": validate.scalar("'cold' or 'hot'", lambda v: v in ("cold", "hot")),
    "graph_unroll": validate.integer(1, 1000),
    "threads": validate.integer(0),
}
FILE_NAME = re.compile(r"[A-Za-z0-9_.-]+")


def _check_files(source: str, key: str, value: Any) -> tuple[LogitsSource, ...]:
    """`[inputs.files]`: NAME = "path" or { path = "...", tensor = "..." }, a file or folder relative to the
    scenario file, inspected now: one that cannot be used is a one-line error naming it."""
    if not isinstance(value, dict):
        raise validate.fail(source, key, f'expected a table of NAME = "path", got {value!r}')
    found = []
    for name, entry in value.items():
        where = f"{key}.{name}"
        if not FILE_NAME.fullmatch(name):
            raise validate.fail(source, where, "expected a name of letters, digits, '_', '.' and '-'")
        entry = {"path": entry} if isinstance(entry, str) else entry
        if not isinstance(entry, dict) or not all(isinstance(v, str) for v in entry.values()):
            raise validate.fail(
                source, where, f'expected "path" or {{ path = "...", tensor = "..." }}, got {entry!r}'
            )
        validate.unknown_keys(source, where, entry, ("path", "tensor"))
        if "path" not in entry:
            raise validate.fail(source, where, "missing path")
        path = Path(source).parent / Path(entry["path"]).expanduser()
        try:
            found.append(logits_files.inspect(name, path, entry.get("tensor", "")))
        except logits_files.LogitsFileError as exc:
            raise validate.fail(source, where, str(exc)) from None
    return tuple(found)


INPUT_CHECKS = {
    "seed": validate.integer(0),
    "row_pad": validate.integer(0),
    "scale": validate.scalar(
        "a finite number > 0", lambda v: validate.is_number(v) and 0 < v < math.inf, float
    ),
    "files": _check_files,
}
TOP_LEVEL = ("name", "description", "device", "sweep", "timing", "inputs")


def extra_tables() -> tuple[str, ...]:
    """The tables case kinds read besides [[sweep]] ([draft]), each validated by its kind when its cases
    are expanded (`perfsuite list`, and `run` before it touches its folder)."""
    return tuple(table for table in kinds.tables() if table != kinds.SWEEP_TABLE)


def _table(source: str, name: str, raw: Any, table_checks: dict[str, validate.Check], cls: type) -> Any:
    if not isinstance(raw, dict):
        raise validate.fail(source, f"[{name}]", f"expected a table, got {raw!r}")
    validate.unknown_keys(source, f"[{name}]", raw, table_checks)
    return cls(**{key: table_checks[key](source, f"[{name}].{key}", value) for key, value in raw.items()})


def _sweep(source: str, name: str, raw: Any, files: tuple[LogitsSource, ...]) -> Sweep:
    """One sweep table; its logits kinds may name [inputs.files] entries (`file:NAME`), and then it runs at
    their V (`vocab` left out, or only that V)."""
    by_kind = {f.kind: f for f in files}

    def logits(source: str, key: str, value: Any) -> tuple[str, ...]:
        for item in validate.as_list(value):
            if isinstance(item, str) and logits_files.is_file_kind(item) and item not in by_kind:
                names = ", ".join(f.name for f in files) or "none"
                message = f'{item!r} names no [inputs.files] entry (NAME = "path"); entries: {names}'
                raise validate.fail(source, key, message)
        return validate.names(lambda: [*inputs.KINDS, *by_kind], "logits kind")(source, key, value)

    sweep = _table(source, name, raw, {**SWEEP_CHECKS, "logits": logits}, Sweep)
    used = [by_kind[kind] for kind in sweep.logits if kind in by_kind]
    if not used:
        return sweep
    vocabs = {f.vocab for f in used}
    described = ", ".join(f"{f.kind} has V {f.vocab}" for f in used)
    if len(vocabs) > 1:
        raise validate.fail(
            source, f"[{name}].logits", f"{described}: give files of different V a [[sweep]] each"
        )
    (vocab,) = vocabs
    if "vocab" in raw and sweep.vocab != (vocab,):
        message = (
            f"{described}: a sweep with file logits runs at the file's V: leave vocab out or give {vocab} "
            "(other vocabularies in a [[sweep]] of their own)"
        )
        raise validate.fail(source, f"[{name}].vocab", message)
    return dataclasses.replace(sweep, vocab=(vocab,))


def parse(data: dict[str, Any], source: str) -> Scenario:
    """Validate a parsed TOML document."""
    validate.unknown_keys(source, "", data, [*TOP_LEVEL, *extra_tables()])
    for key in ("name", "description", "device"):
        if key in data and not isinstance(data[key], str):
            raise validate.fail(source, key, f"expected a string, got {data[key]!r}")
    device = data.get("device", "auto")
    if device != "auto" and device.split(":")[0] not in ("cpu", "cuda"):
        raise validate.fail(source, "device", f"expected 'auto', 'cpu', 'cuda' or 'cuda:N', got {device!r}")
    # a file with only other kinds' tables ([draft]) has no kernel-level sweep; `sweep = []` says so too
    others = [table for table in extra_tables() if table in data]
    raw_sweeps = data.get(kinds.SWEEP_TABLE, [] if others else {})
    given = _table(source, "inputs", data.get("inputs", {}), INPUT_CHECKS, Inputs)  # files before sweeps
    listed = isinstance(raw_sweeps, list)
    sweeps = tuple(
        _sweep(source, f"sweep#{i + 1}" if listed else "sweep", raw, given.files)
        for i, raw in enumerate(raw_sweeps if listed else [raw_sweeps])
    )
    return Scenario(
        name=data.get("name", Path(source).stem),
        source=source,
        description=data.get("description", ""),
        device=device,
        sweeps=sweeps,
        timing=_table(source, "timing", data.get("timing", {}), TIMING_CHECKS, Timing),
        inputs=given,
        extra={key: data[key] for key in others},
    )


def load(path: str | Path) -> Scenario:
    """Read and validate a scenario file; `ScenarioError` with a one-line message on any problem."""
    source = str(path)
    try:
        with open(path, "rb") as f:
            data = tomllib.load(f)
    except FileNotFoundError:
        raise ScenarioError(f"{source}: no such scenario file") from None
    except IsADirectoryError:
        raise ScenarioError(f"{source}: is a directory, not a scenario file") from None
    except tomllib.TOMLDecodeError as exc:
        raise ScenarioError(f"{source}: invalid TOML: {exc}") from None
    except (OSError, UnicodeDecodeError) as exc:
        raise ScenarioError(f"{source}: cannot read: {exc}") from None
    return parse(data, source)


def expand(scenario: Scenario) -> list[Case]:
    """All cases, ordered so that cases sharing one logits tensor (and one k) run back to back.

    A single-device variant on the compile path brings the baseline compiled at the same shape when its
    sweep leaves the baseline out: a compiled variant's speedup is always over a compiled full_softmax,
    never an eager one (tensor-parallel cases run eagerly only)."""
    cases: dict[str, Case] = {}
    timing, given = scenario.timing, scenario.inputs
    for s in scenario.sweeps:
        grid = itertools.product(s.tp, s.dtypes, s.vocab, s.batch, s.logits, s.topk, s.variants, s.paths)
        for tp, dtype, vocab, batch, logits, topk, variant, path in grid:
            case = Case(scenario.name, variant, path, dtype, vocab, batch, topk, logits, timing, given, tp)
            if path == "compile" and tp == 1 and not tensor_parallel.is_tp_variant(variant):
                baseline = dataclasses.replace(case, variant=variants.BASELINE)
                cases.setdefault(baseline.case_id, baseline)
            cases.setdefault(case.case_id, case)
    return sorted(cases.values(), key=lambda c: (c.tp, *c.input_key, c.topk))
