"""What the kernel-level sections and the text summaries share: the prepared rows (`Context`), the roles the
selectors declare (`Roles`), the summary computed once (`Summary`), the order and labels of the dimensions."""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from functools import cached_property

import numpy as np
import pandas as pd

from perfsuite import variants
from perfsuite.measure.timing import UNSTABLE_SPREAD
from perfsuite.report import formatting as fmt
from perfsuite.results.columns import add_speedups, complete
from perfsuite.variants import tensor_parallel


@dataclass(frozen=True)
class Roles:
    """The variants the report singles out, as the selectors declare them (`variants.base.Variant`'s `role`,
    `held_against` and `engine_order_of`; the tensor-parallel registry's `BASELINE`)."""

    baseline: str
    shortcut: str
    torch_exact: str
    tp_baseline: str
    held: dict[str, str]  # exact kernel -> the argmax kernel it is held against
    engine_order: dict[str, str]  # lowest-index selector -> its twin in torch's tie order

    @classmethod
    def declared(cls) -> Roles:
        selectors = [variants.get(name) for name in variants.names()]
        by_role = {v.role: v.name for v in selectors if v.role}
        held = {v.name: v.held_against for v in selectors if v.held_against}
        twins = {v.engine_order_of: v.name for v in selectors if v.engine_order_of}
        named = [by_role[role] for role in ("shortcut", "torch exact")]
        return cls(variants.BASELINE, *named, tensor_parallel.BASELINE, held, twins)


BASELINE = Roles.declared().baseline
PAIRING_TEXT = (
    f"speedup = {BASELINE}'s time over the variant's, both on the same device, run, path, dtype, shape "
    "(vocab, batch, k) and logits, sampled in turn (the median of per-round ratios; the ratio of medians "
    f"where they were not): a compiled variant is compared with the compiled {BASELINE}, an eager one with "
    "the eager one, never across paths"
)  # which pairs every speedup of the report and the summary compares
DIMENSIONS = ("device", "backend", "variant", "accuracy", "path", "dtype", "logits", "l2", "status")
DTYPE_ORDER = ("float32", "float16", "bfloat16")
PATH_ORDER = ("eager", "graph", "compile")
FACET_ORDER = (*DTYPE_ORDER, *PATH_ORDER)
NUMBERS = (int, float, np.integer, np.floating)
UNIT = "device · run"  # the column naming a row's (device, run) when runs of one device are kept apart
UNSTABLE = "_unstable"  # the row's `unstable` flag as a bool (False where the rows do not say)
HELPERS = (UNIT, UNSTABLE)  # the columns `Context` adds to the rows, left out of the full results table
UNSTABLE_MARK = "⚠"
SPREAD_ABOVE = f"p20-p80 spread above {100 * UNSTABLE_SPREAD:.0f} % of the median"  # what unstable means
UNSTABLE_TEXT = (
    f"{UNSTABLE_MARK}: unstable, the p20-p80 spread of its samples is above {100 * UNSTABLE_SPREAD:.0f} % "
    "of the median (in at least one logits distribution behind the figure): do not rank on it"
)


@dataclass
class Context:
    """The prepared rows and what every section needs: ok rows, variant order and colours, devices, the
    dimension that keeps devices and runs apart (`unit`), the roles, and the raw samples where given."""

    frame: pd.DataFrame
    ok: pd.DataFrame
    variants: list[str]
    devices: list[str]
    samples: pd.DataFrame | None = None
    runs_apart: bool = False  # some device has rows of more than one run: the run is then a dimension too
    unit: str = "device"  # the column every figure and table splits by: "device", or UNIT where runs differ
    units: list[str] = field(default_factory=list)
    several_devices: bool = False  # more than one unit: a dimension to draw

    @classmethod
    def of(cls, results: pd.DataFrame, samples: pd.DataFrame | None = None) -> Context:
        frame = _prepare(results)
        ok = frame[(frame["status"] == "ok") & frame["median_us"].notna()].copy()
        unit = UNIT if UNIT in frame else "device"
        units = sorted(frame[unit].astype(str).unique())
        apart = {"runs_apart": unit == UNIT, "unit": unit, "units": units, "several_devices": len(units) > 1}
        devices = sorted(frame["device"].unique())
        return cls(frame, ok, variant_order(frame["variant"]), devices, samples, **apart)

    @cached_property
    def roles(self) -> Roles:
        return Roles.declared()

    @cached_property
    def colors(self) -> dict[str, str]:
        """A colour per variant, the same in every figure (only figures need it: plotly's palette)."""
        import plotly.express as px

        palette = px.colors.qualitative.Plotly + px.colors.qualitative.Dark24
        return {v: palette[i % len(palette)] for i, v in enumerate(self.variants)}

    def subtitle(self) -> str:
        counts = self.frame["status"].value_counts()
        parts = [f"{len(self.frame)} cases"] + [f"{counts[s]} {s}" for s in counts.index]
        where = f"devices: {', '.join(self.devices)}"
        if self.runs_apart:
            where = f"{len(self.units)} runs kept apart: {', '.join(self.units)}"
        return f"{', '.join(parts)} · {len(self.variants)} variants · {where}"


def _prepare(results: pd.DataFrame) -> pd.DataFrame:
    """The rows typed and complete, dimensions as text, speedups filled; each row's run (its `run` label,
    else the file it came from, `source`) a dimension where a device has several."""
    frame = complete(results)
    for column in DIMENSIONS:
        frame[column] = frame[column].fillna("-").astype(str)
    frame["status"] = frame["status"].replace("-", "ok")
    frame["reason"] = frame["reason"].fillna("")
    frame["topk"] = frame["topk"].fillna(-1)
    frame[UNSTABLE] = frame["unstable"].fillna(False).astype(bool)
    runs = pd.Series("", index=frame.index, dtype=object)
    for column in [c for c in ("source", "run") if c in frame]:  # run wins over source
        values = frame[column].astype(object)
        runs = runs.where(values.isna() | values.astype(str).str.strip().eq(""), values.astype(str))
    if len(frame) and runs.groupby(frame["device"]).nunique().max() > 1:
        frame[UNIT] = frame["device"] + " · " + runs.replace("", "(no run label)")
        frame["run"] = frame["run"].where(frame["run"].notna(), runs.where(runs.ne(""), float("nan")))
    return add_speedups(frame, only_missing=True)  # pytest-benchmark files carry none


def variant_order(values: Iterable[str]) -> list[str]:
    """The baseline, then the shortcut, then the others as they first appear."""
    seen, roles = list(dict.fromkeys(values)), Roles.declared()
    return sorted(seen, key=lambda v: (v != roles.baseline, v != roles.shortcut, seen.index(v)))


def ordered(values: Iterable[object], preferred: Sequence[object] = FACET_ORDER) -> list:
    """The distinct values without NaN in `facet_rank` order."""
    unique = dict.fromkeys(v for v in values if not fmt.is_nan(v))
    return sorted(unique, key=lambda v: facet_rank(v, preferred))


def facet_rank(value: object, preferred: Sequence[object] = FACET_ORDER) -> tuple[int, object]:
    """Sort key: `preferred` values first in their order (dtypes, then paths), then numbers, then text."""
    if value in preferred:
        return (0, list(preferred).index(value))
    return (1, value) if isinstance(value, NUMBERS) else (2, str(value))


def varying_keys(frame: pd.DataFrame, keys: Iterable[str]) -> list[str]:
    """The keys whose column takes more than one value in `frame`."""
    return [k for k in keys if k in frame and frame[k].nunique(dropna=False) > 1]


def case_label(keys: Sequence[str], values: Sequence[object]) -> str:
    """A case's dimensions as one label ("eager · k=1 · L2 cold")."""
    return " · ".join(dim_text(k, v) for k, v in zip(keys, values, strict=True))


def dim_text(key: str, value: object) -> str:
    """One dimension's value as a label ("k=8", "batch=64", "L2 hot", "bfloat16")."""
    if key in ("topk", "batch", "vocab"):
        return f"{'k' if key == 'topk' else key}={fmt.number(value)}"
    return f"L2 {value}" if key == "l2" else str(value)


SHAPE = ["path", "dtype", "vocab", "batch", "topk"]
SMALL = "B=1, V 129280-163840"
TIE_TIMES = ("lowest index us", "engine order us")
ARGMAX_COLUMNS = ["argmax", "argmax us", "exact/argmax", "argmax bytes"]
TIE_TEXT = (
    "What the tie policy costs: a selector that breaks ties to the lowest index (for k > 1 a compare pass "
    "and a cumulative count over [B, V]) against its twin in torch's top-k order (the same exact "
    "probabilities, no repair), on the same cases. tie repair (cost): the first one's time over its twin's, "
    "per case the ratio of their medians (sampled in turn, in the same rounds), median over cases (range, "
    "low-high: cheapest to dearest case); 1.30 means the repair adds 30 %. At k = 1 both run torch.max and "
    "the same ops: their ratio there is the measurement's own noise. Times: medians over cases."
)
TARGETS_TEXT = (
    "What the exact Triton kernel (each one held against an argmax kernel) was built to meet, on the small "
    f"batches and large vocabularies of the draft step ({SMALL}): at least 5× faster than the baseline and "
    "within 1.2× of the inexact shortcut; on every case at least as fast as the torch exact selector; at "
    "B >= 64 at least 85 % of the measured copy bandwidth. cases: the cases a target covers; met: how many "
    "meet it; worst: the worst ratio (or percent) among them."
)


class Summary(Context):
    """The prepared rows with everything the summaries show, computed once (each table on first use)."""

    @cached_property
    def keys(self) -> list[str]:
        """A case's keys: the unit, path, dtype, vocab, batch and k; backend, l2 and tp where they vary."""
        return [self.unit, *varying_keys(self.ok, ["backend"]), *SHAPE, *varying_keys(self.ok, ["l2", "tp"])]

    @cached_property
    def per_variant(self) -> pd.DataFrame:
        """One row per (case, variant): medians over logits distributions (time, speedup and its paired band,
        % of copy, bytes), how the speedup was measured, unstable rows of how many, the worst error."""
        ok = self.ok[self.ok["vocab"].notna() & self.ok["batch"].notna()]
        data = ok.astype({"vocab": int, "batch": int, "topk": int})
        data["_method"] = data["speedup_method"].astype(object).fillna("medians").astype(str)
        return data.groupby([*self.keys, "variant"], dropna=False, sort=True).agg(
            median_us=("median_us", "median"), accuracy=("accuracy", "first"),
            speedup=("speedup_vs_full", "median"), p20=("speedup_p20", "median"),
            p80=("speedup_p80", "median"), method=("_method", lambda m: ", ".join(sorted(set(m)))),
            unstable=(UNSTABLE, "sum"), rows=("variant", "size"), pct_copy=("pct_copy", "median"),
            bytes=("bytes_model", "median"), relerr=("p_relerr_f64", "max"),
        )  # fmt: skip

    def wide(self, column: str) -> pd.DataFrame:
        """One of `per_variant`' columns with a column per variant (the baseline and the shortcut first)."""
        table = self.per_variant[column].unstack("variant")
        return table[variant_order(table.columns)]

    def _fastest(self, rows: pd.DataFrame) -> pd.DataFrame:
        """Per case, the row of `rows` (of `per_variant`) with the smallest median, indexed by case."""
        return rows.loc[rows.groupby(self.keys, dropna=False)["median_us"].idxmin()].reset_index("variant")

    @cached_property
    def cases(self) -> pd.DataFrame:
        """One row per case: each variant's median, the fastest whatever its accuracy, the fastest exact one
        (`best_exact`) with its speedup (`full/best`, p20, p80), its cost over the shortcut, its bandwidth."""
        v, r = self.per_variant, self.roles
        if v.empty:
            return pd.DataFrame()
        table, fastest = self.wide("median_us"), self._fastest(v)
        table["fastest"], table["fastest_accuracy"] = fastest["variant"], fastest["accuracy"]
        table["unstable"] = v.groupby(self.keys, dropna=False)["unstable"].sum()
        exact = v[v["accuracy"] == "exact"]
        if len(exact):
            best = self._fastest(exact)
            table["best_exact"] = best["variant"]
            if r.baseline in table:
                paired = {"speedup": "full/best", "p20": "full/best p20", "p80": "full/best p80"}
                table = table.join(best[list(paired)].rename(columns=paired))
            if r.shortcut in table:
                table["best/argmax"] = best["median_us"] / table[r.shortcut]
            table["best_%copy"] = best["pct_copy"]
        return table

    @cached_property
    def findings(self) -> list[str]:
        """A line per unit and dtype: the fastest variants whatever their accuracy, then the fastest exact
        one, its speedups and in how many cases it is the fastest of all (never called so when it is not)."""
        groups = self.cases.groupby([self.unit, "dtype"], sort=True) if len(self.cases) else []
        return [self._finding(f"{unit} · {dtype}", part) for (unit, dtype), part in groups]

    def _finding(self, label: str, part: pd.DataFrame) -> str:
        n, base = len(part), self.roles.baseline
        counts = part.groupby("fastest", sort=False)["fastest_accuracy"].agg(["size", "first"])
        counts = counts.sort_values("size", ascending=False, kind="stable")
        wins = "; ".join(f"{name} ({acc}) in {k} of {n}" for name, (k, acc) in counts.iterrows())
        text = f"{label}: fastest variant (any accuracy): {wins} cases."
        best = part["best_exact"].dropna().value_counts() if "best_exact" in part else pd.Series()
        if best.empty:
            return f"{text} No exact variant was timed here."
        name = best.index[0]
        text += f" Fastest exact variant: {name} in {best.iloc[0]} of {n} cases"
        speedups = part.loc[part["best_exact"] == name].get("full/best", pd.Series()).dropna()
        if len(speedups):
            low, mid, high = (fmt.speedup(x) for x in (speedups.min(), speedups.median(), speedups.max()))
            median = speedups.median()
            reads = "faster than" if median >= 1.05 else "slower than" if median <= 0.95 else "as fast as"
            text += f", median {mid} against {base} ({low} to {high}): {reads} {base}"
            text += ", within 5 %" if 0.95 < median < 1.05 else ""
        overall = int((part["fastest"] == name).sum())
        if overall == n:
            return f"{text}; it is also the fastest variant of any accuracy in every case."
        return f"{text}; it is the fastest variant of any accuracy in {overall} of {n} cases."

    @cached_property
    def exactness(self) -> tuple[pd.DataFrame, pd.DataFrame]:
        """(k = 1, k > 1): per case and exact kernel held against an argmax kernel, its time over the argmax
        kernel's (k = 1) and the baseline's, and each one's bytes; only cases where all of them ran."""
        if self.per_variant.empty or not self.roles.held:
            return pd.DataFrame(), pd.DataFrame()
        base, parts = self.roles.baseline, []
        for exact, argmax in self.roles.held.items():
            t, b = (self.wide(c).reindex(columns=[exact, argmax, base]) for c in ("median_us", "bytes"))
            parts.append(pd.DataFrame({
                "exact": exact, "argmax": argmax, "exact us": t[exact], "argmax us": t[argmax],
                f"{base} us": t[base], "exact/argmax": t[exact] / t[argmax],
                f"exact/{base}": t[exact] / t[base], "exact bytes": b[exact], "argmax bytes": b[argmax],
                f"{base} bytes": b[base]}))  # fmt: skip
        table = pd.concat(parts).reset_index()
        one = table[table["topk"] == 1].dropna().reset_index(drop=True)
        return one, table[table["topk"] > 1].drop(columns=ARGMAX_COLUMNS).dropna().reset_index(drop=True)

    @cached_property
    def exactness_lines(self) -> list[str]:
        """The cost of exactness in a line per unit and exact kernel: medians over its shapes."""
        base, lines, table = self.roles.baseline, [], pd.concat(self.exactness)
        for (unit, exact), part in table.groupby([self.unit, "exact"]) if len(table) else []:
            one = part[part["topk"] == 1]
            k1, kn = (fmt.speedup(one[c].median()) for c in ("exact/argmax", f"exact/{base}"))
            said = [f"k = 1: {exact} / {self.roles.held[exact]} {k1}, / {base} {kn}"] if k1 else []
            over = fmt.speedup(part.loc[part["topk"] > 1, f"exact/{base}"].median())
            said += [f"k > 1: {exact} / {base} {over}"] if over else []
            lines.append(f"{unit}: cost of exactness (median over {len(part)} shapes): {'; '.join(said)}.")
        return lines

    def exactness_text(self) -> str:
        """What the cost-of-exactness tables compare."""
        held, base = ", ".join(f"{e} against {a}" for e, a in self.roles.held.items()), self.roles.baseline
        return (
            "What the exact probability costs. k = 1: each exact kernel over the argmax kernel it is held "
            f"against ({held}; topk_p = 1.0: no probability at all) and over {base} (softmax, then "
            f"top-k). k > 1: the exact fused top-k over {base}. Per shape, the ratio of the variants' "
            "medians (sampled in turn, in the same rounds; median over logits distributions); 1.10 means the "
            "exact kernel takes 10 % longer. Bytes: each one's HBM bytes by its cache-aware model."
        )

    @cached_property
    def pairs(self) -> pd.DataFrame:
        """Per (unit, path, variant): the baseline its speedups are over (the tensor-parallel one where tp >
        1) and how many of its cases were paired in turn with it, compared by medians, or had none beside."""
        r, keys = self.roles, [self.unit, "path", "variant", "against"]
        ok = self.ok[~self.ok["variant"].isin([r.baseline, r.tp_baseline])]
        how = ok["speedup_method"].astype(object).fillna("medians")
        how = how.where(ok["speedup_vs_full"].notna(), "none")
        against = ok["tp"].gt(1).map({True: r.tp_baseline, False: r.baseline}) + " · " + ok["path"]
        data = ok.assign(against=against, **{k: how == k for k in ("paired", "medians", "none")})
        out = data.groupby(keys, sort=False).agg(
            cases=("variant", "size"), paired=("paired", "sum"), medians=("medians", "sum"),
            **{"no baseline": ("none", "sum")},
        )  # fmt: skip
        order = {v: i for i, v in enumerate(variant_order(data["variant"]))}
        rank = {"variant": order.get, "path": facet_rank}
        return out.reset_index().sort_values(keys, key=lambda s: s.map(rank.get(s.name, lambda v: v)))

    @cached_property
    def ties(self) -> pd.DataFrame:
        """The lowest-index tie repair's cost (`TIE_TEXT`). Per case and logits the ratio of the two medians,
        sampled in the same rounds (their speedups' ratio would carry the baseline's noise twice)."""
        keys, ok = [self.unit, "lowest index", "engine order", "path", "dtype", "topk"], self.ok
        us = ok.groupby([*self.keys, "logits", "variant"], dropna=False)["median_us"].median()
        us = us.unstack("variant")
        parts = [
            pd.DataFrame({"lowest index": low, "engine order": twin, "lowest index us": pair[low],
                          "engine order us": pair[twin], "cost": pair[low] / pair[twin]})
            for low, twin in self.roles.engine_order.items()
            for pair in [us.reindex(columns=[low, twin]).dropna()]
        ]  # fmt: skip
        empty = pd.DataFrame(columns=[*keys, *TIE_TIMES, "cost"])
        cases = pd.concat(parts).reset_index() if len(us) and parts else empty
        out = cases.groupby(keys, sort=False).agg(
            cases=("cost", "size"), **{c: (c, "median") for c in TIE_TIMES}, cost=("cost", "median"),
            low=("cost", "min"), high=("cost", "max"),
        )  # fmt: skip
        return out.reset_index().sort_values(keys, key=lambda s: s.map(facet_rank)).reset_index(drop=True)

    @cached_property
    def shortcut(self) -> pd.DataFrame:
        """Per case the shortcut's `per_variant` row and `vs_exact`: the best exact time over its."""
        v, name = self.per_variant, self.roles.shortcut
        if name not in v.index.get_level_values("variant"):
            return pd.DataFrame()
        mine = v.xs(name, level="variant")
        exact = v[v["accuracy"] == "exact"].groupby(self.keys, dropna=False)["median_us"].min()
        return mine.assign(vs_exact=exact.reindex(mine.index) / mine["median_us"]).reset_index()

    def shortcut_verdict(self) -> str:
        """Where the shortcut beats the fastest exact variant by 5 % or more, and the error it carries."""
        name, cases = self.roles.shortcut, self.shortcut
        vs = cases["vs_exact"].dropna() if len(cases) else cases
        if vs.empty:
            return f"{name}: no exact variant timed on the same cases to compare with."
        return (
            f"{name} beats the fastest exact variant by ≥ 5 % in {fmt.percent((vs >= 1.05).mean())} of its "
            f"cases (median {fmt.speedup(vs.median())}, best {fmt.speedup(vs.max())}); its topk_p is off by "
            f"up to {fmt.number(cases['relerr'].max())} relative to float64."
        )

    @cached_property
    def targets(self) -> pd.DataFrame:
        """The Triton targets (`TARGETS_TEXT`) of each exact kernel held against an argmax kernel: the cases
        each covers, how many meet it, and the worst."""
        r, out = self.roles, []
        medians = self.wide("median_us") if len(self.per_variant) else pd.DataFrame()
        for kernel in (k for k in r.held if k in medians):
            shape = medians.index.to_frame(index=False).set_index(medians.index)
            small, every = (shape["batch"] == 1) & shape["vocab"].between(129280, 163840), shape["batch"] > 0
            checks = [  # (target, cases it covers, the ratio, threshold, higher is better)
                (f"{SMALL}: {r.baseline} / {kernel} >= 5", small, (r.baseline, kernel), 5.0, True),
                (f"{SMALL}: {kernel} / {r.shortcut} <= 1.2", small, (kernel, r.shortcut), 1.2, False),
                (f"every case: {r.torch_exact} / {kernel} >= 1", every, (r.torch_exact, kernel), 1.0, True),
            ]  # fmt: skip
            for name, mask, (a, b), threshold, higher in checks:
                if a in medians and b in medians:
                    out.append(_target(name, (medians[a] / medians[b])[mask], threshold, higher))
            copy = self.wide("pct_copy")[kernel][shape["batch"] >= 64]
            out.append(_target(f"B>=64: {kernel} bandwidth >= 85 % of measured copy", copy, 85.0, True))
        return pd.DataFrame(out, columns=["target", "cases", "met", "worst"])


def _target(name: str, values: pd.Series, threshold: float, higher: bool) -> dict[str, object]:
    """How many of `values` meet the threshold, and the worst of them."""
    values = values.dropna()
    met, worst = (values >= threshold, values.min()) if higher else (values <= threshold, values.max())
    return {"target": name, "cases": len(values), "met": int(met.sum()), "worst": worst}
