"""A/A pairs of one scenario from the same commit, with one core kept busy (issue 24's measurement).

    .venv/bin/python scripts/aa_pairs.py --pairs 10                     # ten A/A pairs of quick.toml
    .venv/bin/python scripts/aa_pairs.py --pairs 3 --slow-full-softmax 1.2  # new runs: full_softmax 1.2x
    .venv/bin/python scripts/aa_pairs.py --pairs 2 --cost               # sweep time, reference or not

Each pair: two `perfsuite run SCENARIO` into fresh folders, then `perfsuite compare A B --fail-on 5%`; per
pair it prints the exit code, how many cases were "slower" (and how many of them full_softmax), the
median absolute new/base ratio over all timed cases and the reference's own new/base (the machine's drift).
A background busy loop (`python -c "while True: pass"`, started here and killed by its pid at the end)
keeps one core busy unless `--no-busy`.

`--slow-full-softmax F`: the second run of each pair is made by this script's harness with full_softmax's
timed call F times slower in its code path: the harness wraps the call `execution.prepare` binds for
full_softmax so that after each call it spins for (F - 1) x the call's own duration (on the
clock the sampler reads: the thread's CPU time at one thread). Nothing of it ships
in perfsuite (no setting, no environment variable): it lives in this script, and holds only where the
call is timed on the host (a CPU run; on a GPU the call is asynchronous). It reports the share of
full_softmax's stable cases (stable in both runs) called slower.

`--cost`: runs the scenario with and without the in-turn reference (the harness sets
`KernelRunner.reference = False`), alternating, and prints each run's wall and CPU time.
"""

from __future__ import annotations

import argparse
import csv
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def harness_run(argv: list[str]) -> int:
    """`perfsuite run` in this process, with the harness's changes (`--slow F`, `--no-reference`)."""
    parser = argparse.ArgumentParser(prog="aa_pairs.py _run")
    parser.add_argument("--slow", type=float, default=1.0)
    parser.add_argument("--no-reference", action="store_true")
    known, rest = parser.parse_known_args(argv)
    from perfsuite import cli

    if known.no_reference:
        from perfsuite.cases.kernel.kernel_runner import KernelRunner

        KernelRunner.reference = False
    if known.slow != 1.0:
        slow_full_softmax(known.slow)
    return cli.main(["run", *rest])


def slow_full_softmax(factor: float) -> None:
    """Make full_softmax's bound calls `factor` times slower (host-timed runs only; see the docstring)."""
    import torch

    from perfsuite import variants
    from perfsuite.measure import execution

    target, original = variants.get("full_softmax").select, execution.prepare

    def slowed(call: Callable[[], object]) -> Callable[[], object]:
        def run() -> object:  # on the clock a CPU sample is read on (the thread's CPU time at 1 thread)
            clock = time.thread_time if torch.get_num_threads() == 1 else time.perf_counter
            start = clock()
            out = call()
            until = clock() + (factor - 1) * (clock() - start)
            while clock() < until:
                pass
            return out

        return run

    def prepare(path: str, select: object, logits: object, k: int) -> execution.PreparedCall:
        prepared = original(path, select, logits, k)  # type: ignore[arg-type]
        if select is not target:
            return prepared
        return execution.PreparedCall(path, slowed(prepared.run), slowed(prepared.body), prepared.graphed)

    execution.prepare = prepare  # type: ignore[assignment]


def perfsuite_run(scenario: str, out: Path, only: str | None, *harness: str) -> tuple[float, float]:
    """One run through the harness in a fresh process; its wall time and its CPU time (user + system, the
    process's own: what other work on the machine takes is not in it), in seconds."""
    command = [sys.executable, __file__, "_run", *harness, scenario, "--out", str(out), "--no-progress"]
    if only:
        command += ["--only", only]
    start, used = time.perf_counter(), resource.getrusage(resource.RUSAGE_CHILDREN)
    done = subprocess.run(command, cwd=ROOT, capture_output=True, text=True)
    if done.returncode not in (0, 1):  # 1: a parity failure, still a run to compare
        sys.exit(f"run into {out} failed ({done.returncode}):\n{done.stderr[-2000:]}")
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = (after.ru_utime - used.ru_utime) + (after.ru_stime - used.ru_stime)
    return time.perf_counter() - start, cpu


def compare(base: Path, new: Path, fail_on: str, table: Path) -> tuple[int, str]:
    """`perfsuite compare BASE NEW --fail-on X --csv TABLE`: its exit code and its drift line."""
    command = [sys.executable, "-m", "perfsuite", "compare", str(base), str(new), "--fail-on", fail_on]
    done = subprocess.run([*command, "--csv", str(table)], cwd=ROOT, capture_output=True, text=True)
    if done.returncode == 2:
        sys.exit(f"compare failed:\n{done.stderr[-2000:]}")
    drift = next((line for line in done.stdout.splitlines() if line.startswith("all ")), "")
    return done.returncode, drift


def figures(table: Path) -> dict[str, float]:
    """From a compare table: slower cases (all, full_softmax), full_softmax's stable cases, the drifts."""
    with table.open(encoding="utf-8") as f:
        rows = list(csv.DictReader(f))
    timed = [r for r in rows if r["base_status"] == "ok" and r["new_status"] == "ok" and r["ratio"]]
    full = [r for r in timed if r["variant"] == "full_softmax"]
    stable = [r for r in full if r["base_unstable"] == "False" and r["new_unstable"] == "False"]
    refs = [float(r["ref_ratio"]) for r in timed if r.get("by_reference") == "True" and r["ref_ratio"]]
    slower = [r for r in rows if r["outcome"] == "slower"]
    return {
        "cases": len(rows),
        "slower": len(slower),
        "faster": sum(r["outcome"] == "faster" for r in rows),
        "full_slower": sum(r["outcome"] == "slower" for r in full),
        "full_stable": len(stable),
        "full_stable_slower": sum(r["outcome"] == "slower" for r in stable),
        **{
            f"by {by}": sum(r.get("confirmed_by") == by for r in slower)
            for by in ("run", "reference", "run and reference")
        },
        "drift": statistics.median(float(r["ratio"]) for r in timed) if timed else float("nan"),
        "ref_drift": statistics.median(refs) if refs else float("nan"),
    }


def busy_loop() -> subprocess.Popen:
    """One core kept busy until killed."""
    return subprocess.Popen([sys.executable, "-c", "while True: pass"])


def main() -> int:
    if len(sys.argv) > 1 and sys.argv[1] == "_run":
        return harness_run(sys.argv[2:])
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--pairs", type=int, default=10)
    parser.add_argument("--scenario", default="scenarios/quick.toml")
    parser.add_argument("--only", help="a glob on case ids (perfsuite run --only)")
    parser.add_argument("--fail-on", default="5%")
    parser.add_argument("--slow-full-softmax", type=float, default=1.0, metavar="F")
    parser.add_argument("--cost", action="store_true", help="sweep time with and without the reference")
    parser.add_argument("--no-busy", action="store_true", help="no background busy loop")
    parser.add_argument("--out", type=Path, help="folder for the runs (default: a temporary one)")
    args = parser.parse_args()
    out = args.out or Path(tempfile.mkdtemp(prefix="aa_pairs_"))
    busy = None if args.no_busy else busy_loop()
    try:
        if args.cost:
            return cost(args, out)
        return pairs(args, out)
    finally:
        if busy is not None:
            busy.kill()  # only the loop this script started, by its pid
            busy.wait()


def pairs(args: argparse.Namespace, out: Path) -> int:
    """The A/A (or A/slowed-A) pairs, one line each, then a summary."""
    slow = args.slow_full_softmax
    exits, flagged, stable = [], 0, 0
    print(f"runs in {out}; busy loop: {'no' if args.no_busy else 'one core'}; new runs' full_softmax x{slow}")
    for i in range(1, args.pairs + 1):
        base, new = out / f"pair{i}-a", out / f"pair{i}-b"
        perfsuite_run(args.scenario, base, args.only)
        perfsuite_run(args.scenario, new, args.only, *(["--slow", str(slow)] if slow != 1.0 else []))
        code, drift = compare(base, new, args.fail_on, out / f"pair{i}.csv")
        got = figures(out / f"pair{i}.csv")
        exits.append(code)
        flagged, stable = flagged + got["full_stable_slower"], stable + got["full_stable"]
        by = ", ".join(f"{key} {got[key]}" for key in got if key.startswith("by ") and got[key])
        print(
            f"pair {i}: exit {code}, {got['slower']} of {got['cases']} slower "
            f"({got['full_slower']} full_softmax{'; confirmed ' + by if by else ''}), {got['faster']} "
            f"faster; drift: all cases {got['drift']:.3f}x, reference {got['ref_drift']:.3f}x; "
            f"full_softmax stable cases slower {got['full_stable_slower']} of {got['full_stable']}"
        )
        print(f"  {drift}")
    print(f"exits: {exits} ({sum(c == 0 for c in exits)} of {len(exits)} exit 0)")
    if slow != 1.0:
        share = 100 * flagged / stable if stable else float("nan")
        print(f"full_softmax x{slow}: {flagged} of {stable} stable cases flagged slower ({share:.0f} %)")
    return 0


def cost(args: argparse.Namespace, out: Path) -> int:
    """Wall and CPU time of the scenario with and without the reference, alternating (`--pairs` times
    each); the CPU time is the steadier figure on a shared machine."""
    times: dict[str, list[tuple[float, float]]] = {"with": [], "without": []}
    for i in range(1, args.pairs + 1):
        times["with"].append(perfsuite_run(args.scenario, out / f"cost{i}-with", args.only))
        times["without"].append(
            perfsuite_run(args.scenario, out / f"cost{i}-without", args.only, "--no-reference")
        )
        (wall, cpu), (wall_0, cpu_0) = times["with"][-1], times["without"][-1]
        print(
            f"run {i}: with the reference {wall:.1f} s ({cpu:.1f} s CPU), "
            f"without {wall_0:.1f} s ({cpu_0:.1f} s CPU)"
        )
    for at, what in ((0, "wall"), (1, "CPU")):
        with_ = statistics.median(t[at] for t in times["with"])
        without = statistics.median(t[at] for t in times["without"])
        print(f"median {what}: with {with_:.1f} s, without {without:.1f} s: the reference costs "
              f"{100 * (with_ / without - 1):+.1f} %")  # fmt: skip
    return 0


if __name__ == "__main__":
    sys.exit(main())
