"""Are perfsuite's numbers trustworthy on this machine? Checks issue 11's targets (a benchmark, not a test):

    .venv/bin/python scripts/check_targets.py [--out reports/targets] [--scenario scenarios/quick.toml]

1. idle:      the sweep run twice on this commit, `perfsuite compare --fail-on 5%`: no case "slower".
2. loaded:    the same while another process keeps one core busy: at most 2 % of the cases "slower".
3. slowdown:  a third run with one variant (identity, eager) made 2x slower: flagged (its cases "slower",
              or "noisy" where a run's samples are unstable; none "same"; no other variant "slower").
4. reference: full_softmax, eager, fp32, B 5, V 32000, k 3 (cache hot) against torch.utils.benchmark at the
              same thread count and on the same clock, measured in turn in this process: perfsuite / torch
              within 0.8-1.25.

Writes DIR/targets.md (the table below, with the machine's load) and the runs' folders; exit 0 when every
target is met, 1 when one is missed, 2 on bad arguments. `--skip STEP` leaves a step out (repeatable).
Run it on an idle machine for step 1: another process's load is what step 2 measures.
"""

from __future__ import annotations

import argparse
import dataclasses
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from perfsuite import cli, variants  # noqa: E402
from perfsuite.compare.match import compare, load_side  # noqa: E402
from perfsuite.core import machine, settings  # noqa: E402
from perfsuite.core.settings import Timing  # noqa: E402
from perfsuite.measure import timing  # noqa: E402

THRESHOLD = 0.05
LOADED_SHARE = 0.02
REFERENCE_BAND = (0.8, 1.25)
SLOWED = "identity"
STEPS = ("idle", "loaded", "slowdown", "reference")


def perfsuite_run(scenario: str, out: Path) -> None:
    """`perfsuite run` in a fresh process, as a user runs it."""
    command = [sys.executable, "-m", "perfsuite", "run", scenario, "--out", str(out), "--no-progress"]
    done = subprocess.run(command, cwd=ROOT, capture_output=True, text=True)
    if done.returncode not in (0, 1):  # 1: a parity finding, still a timed run
        raise SystemExit(f"perfsuite run failed ({done.returncode}): {done.stderr.strip()[-400:]}")


def outcomes(base: Path, new: Path) -> dict[str, int]:
    """`perfsuite compare --fail-on 5%` of two runs: cases per outcome."""
    result = compare(load_side(base / "results.csv"), load_side(new / "results.csv"), THRESHOLD)
    counts = result.counts()
    counts["timed"] = int(result.table["outcome"].ne("not comparable").sum())
    return counts


class BusyCore:
    """Another process keeping one core busy while the block runs."""

    def __enter__(self) -> BusyCore:
        self.process = subprocess.Popen([sys.executable, "-c", "while True: pass"])
        time.sleep(1.0)
        return self

    def __exit__(self, *exc: object) -> None:
        self.process.kill()
        self.process.wait()


def slowed_run(scenario: str, out: Path) -> None:
    """`perfsuite run` in this process with `SLOWED` made 2x slower: each call is followed by a busy wait
    as long as the call itself."""
    original = variants.get(SLOWED)

    def twice_as_long(logits, k):
        start = time.perf_counter()
        out = original.select(logits, k)
        until = 2 * time.perf_counter() - start
        while time.perf_counter() < until:
            pass
        return out

    variants._REGISTRY[SLOWED] = dataclasses.replace(original, select=twice_as_long)
    try:
        code = cli.main(["run", scenario, "--out", str(out), "--no-progress"])
    finally:
        variants._REGISTRY[SLOWED] = original
    if code not in (0, 1):
        raise SystemExit(f"the slowed run failed ({code})")


def reference_ratios(rounds: int = 5) -> list[float]:
    """perfsuite's median over torch.utils.benchmark's for full_softmax fp32 B5 V32000 k3, hot cache, in
    turn `rounds` times at the same thread count."""
    import torch
    import torch.utils.benchmark as tb

    from perfsuite.measure.device import detect

    torch.manual_seed(0)
    logits = torch.randn(5, 32000)
    select = variants.get("full_softmax").select
    settings = Timing(warmup=10, reps=200, max_seconds=1.0, l2="hot")
    sampler = timing.host_sampler(lambda: select(logits, 3), None)  # the clock `perfsuite run` reads
    info = detect("cpu")
    assert not info.is_gpu
    ratios = []
    for _ in range(rounds):
        ours = timing.measure(sampler, settings).median_us
        timer = tb.Timer(
            "select(logits, 3)",
            globals={"select": select, "logits": logits},
            num_threads=torch.get_num_threads(),
            timer=sampler.clock,  # the same clock (the thread's CPU time at one thread): the harness compared
        )
        theirs = timer.blocked_autorange(min_run_time=1.0).median * 1e6
        ratios.append(ours / theirs)
    return ratios


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", default=str(ROOT / "reports" / "targets"))
    parser.add_argument("--scenario", default=str(ROOT / "scenarios" / "quick.toml"))
    parser.add_argument("--skip", action="append", default=[], choices=STEPS)
    args = parser.parse_args(argv)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    in_effect = settings.apply_threads(1)
    usage = machine.CpuUse()
    lines = [
        f"# Targets of issue 11 on {machine.cpu_model()}, {machine.usable_cores()} cores, {in_effect} thread",
        "",
        "| target | measured | met |",
        "|---|---|---|",
    ]
    met_all = True

    def record(name: str, measured: str, met: bool) -> None:
        nonlocal met_all
        met_all &= met
        lines.append(f"| {name} | {measured} | {'yes' if met else 'NO'} |")
        print(lines[-1], flush=True)

    todo = [s for s in STEPS if s not in args.skip]
    if {"idle", "slowdown"} & set(todo):
        perfsuite_run(args.scenario, out / "idle-a")
    if "idle" in todo:
        lap = machine.CpuUse()
        perfsuite_run(args.scenario, out / "idle-b")
        counts = outcomes(out / "idle-a", out / "idle-b")
        record(
            "idle: run twice, compare --fail-on 5%: no case slower",
            f"{counts.get('slower', 0)} slower of {counts['timed']} ({_summary(counts)}; other cores "
            f"{lap.overall():.2f})",
            counts.get("slower", 0) == 0,
        )
    if "loaded" in todo:
        with BusyCore():
            lap = machine.CpuUse()
            perfsuite_run(args.scenario, out / "loaded-a")
            perfsuite_run(args.scenario, out / "loaded-b")
            other = lap.overall()
        counts = outcomes(out / "loaded-a", out / "loaded-b")
        slower = counts.get("slower", 0)
        record(
            "one core busy: run twice: at most 2 % of cases slower",
            f"{slower} slower of {counts['timed']} ({_summary(counts)}; other cores {other:.2f})",
            slower <= LOADED_SHARE * counts["timed"],
        )
    if "slowdown" in todo:
        slowed_run(args.scenario, out / "slowed")
        result = compare(load_side(out / "idle-a" / "results.csv"), load_side(out / "slowed" / "results.csv"))
        table = result.table[result.table["outcome"] != "not comparable"]
        mine = table[(table["variant"] == SLOWED) & (table["path"] == "eager")]
        others = table[table["variant"] != SLOWED]
        flagged, missed = mine["outcome"].eq("slower"), mine["outcome"].isin(["same", "faster"])
        record(
            f"{SLOWED} 2x slower: flagged (its cases slower, noisy where unstable; no other slower)",
            f"{int(flagged.sum())} of {len(mine)} slower, {int(mine['outcome'].eq('noisy').sum())} noisy, "
            f"{int(missed.sum())} same or faster (median ratio {mine['ratio'].median():.2f}x); other "
            f"variants: {int(others['outcome'].eq('slower').sum())} slower of {len(others)}",
            flagged.any() and not missed.any() and not others["outcome"].eq("slower").any(),
        )
    if "reference" in todo:
        ratios = reference_ratios()
        low, high = REFERENCE_BAND
        median = statistics.median(ratios)
        record(
            f"full_softmax fp32 B5 V32000 k3 / torch.utils.benchmark within {low}-{high}",
            f"{median:.3f} (rounds: {', '.join(f'{r:.3f}' for r in ratios)})",
            low <= median <= high,
        )
    lines += [
        "",
        f"Other processes kept {usage.overall():.2f} cores busy on average over the whole check; "
        f"load average {usage.load_start:.1f} at the start, {machine.load_average():.1f} at the end.",
    ]
    (out / "targets.md").write_text("\n".join(lines) + "\n", encoding="utf-8")
    print(f"written: {out / 'targets.md'}")
    return 0 if met_all else 1


def _summary(counts: dict[str, int]) -> str:
    return ", ".join(f"{n} {o}" for o, n in counts.items() if o != "timed")


if __name__ == "__main__":
    os.environ.setdefault("PYTHONUNBUFFERED", "1")
    sys.exit(main())
