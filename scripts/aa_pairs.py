"""A/A pairs of one scenario from the same commit, with one core kept busy: how `perfsuite compare` judges
unchanged code, and a full_softmax made slower on purpose (issues 24 and 31's measurement).

    .venv/bin/python scripts/aa_pairs.py --pairs 10 --out reports/aa                  # ten A/A pairs
    .venv/bin/python scripts/aa_pairs.py --pairs 4 --slow-full-softmax 1.2 1.1 1.05 --out reports/slowed
    .venv/bin/python scripts/aa_pairs.py --judge reports/aa --old-code /tmp/old       # re-judge saved pairs
    .venv/bin/python scripts/aa_pairs.py --pairs 2 --cost                             # the reference's cost

Each pair: two `perfsuite run SCENARIO` into OUT/pairN-a and OUT/pairN-b, kept (OUT/pairs.json lists them
with the new run's slow-down factor), then `perfsuite compare A B --fail-on 5% --csv OUT/pairN.csv`. Per
pair it prints the exit code, the cases slower and faster (full_softmax's among them), for a slowed pair
the share of full_softmax's stable cases (stable in both runs' results) called slower, and compare's drift
line; then a summary per factor. `--old-code DIR` judges the same runs with the code at DIR as well (a
checkout of another commit: `python -m perfsuite compare` run there, OUT/pairN-old.csv), so two rules are
measured on the same runs. `--judge OUT` only re-judges the pairs saved in OUT.

A background busy loop (`python -c "while True: pass"`, started here and killed by its pid at the end)
keeps one core busy unless `--no-busy`.

`--slow-full-softmax F ...`: the second run of each pair is made by this script's harness with
full_softmax's timed call F times slower in its code path: the harness wraps the call `execution.prepare`
binds for full_softmax so that after each call it spins for (F - 1) x the call's own duration (on the clock
the sampler reads: the thread's CPU time at one thread). Nothing of it ships in perfsuite (no setting, no
environment variable): it lives in this script, and holds only where the call is timed on the host (a CPU
run; on a GPU the call is asynchronous). `--pairs` pairs are run for each factor.

`--cost`: runs the scenario with and without the in-turn reference (the harness sets
`KernelRunner.reference = False`), alternating, and prints each run's wall and CPU time.
"""

from __future__ import annotations

import argparse
import csv
import json
import os
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
    env = {**os.environ, "PYTHONPATH": str(ROOT)}  # this checkout's perfsuite
    done = subprocess.run(command, cwd=ROOT, env=env, capture_output=True, text=True)
    if done.returncode not in (0, 1):  # 1: a parity failure, still a run to compare
        sys.exit(f"run into {out} failed ({done.returncode}):\n{done.stderr[-2000:]}")
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = (after.ru_utime - used.ru_utime) + (after.ru_stime - used.ru_stime)
    return time.perf_counter() - start, cpu


def compare(base: Path, new: Path, fail_on: str, table: Path, code: Path = ROOT) -> tuple[int, str]:
    """`perfsuite compare BASE NEW --fail-on X --csv TABLE` with the code at `code` (run there, so that its
    package is the one imported): its exit code and its drift line."""
    runs = (base, new) if code == ROOT else (as_format3(base), as_format3(new))
    paths = [str(p.resolve()) for p in runs]
    command = [sys.executable, "-m", "perfsuite", "compare", *paths, "--fail-on", fail_on]
    env = {**os.environ, "PYTHONPATH": str(code)}
    done = subprocess.run(
        [*command, "--csv", str(table.resolve())], cwd=code, env=env, capture_output=True, text=True
    )
    if done.returncode not in (0, 1):
        sys.exit(f"compare failed ({code}):\n{done.stderr[-2000:]}")
    drift = [line for line in done.stdout.splitlines() if line.startswith(("drift:", "all "))]
    return done.returncode, drift[0] if drift else ""


def as_format3(run: Path) -> Path:
    """A copy of a run folder in result format 3, for a checkout from before format 4 (`--old-code`): its
    rows with the run constants of `run.json` joined back and the float64 columns under their old names,
    beside its samples (RUN-format3, made once)."""
    from perfsuite.results import columns
    from perfsuite.results.run import load_run

    copy = run.with_name(f"{run.name}-format3")
    if not copy.exists():
        copy.mkdir()
        old_names = {new: old for old, new in columns.RENAMED.items()}
        frame = load_run([run]).frame.rename(columns=old_names).assign(format_version=3)
        frame.to_csv(copy / "results.csv", index=False)
        (copy / "samples.jsonl").write_bytes((run / "samples.jsonl").read_bytes())
    return copy


def stable(run: Path) -> set[str]:
    """The case ids a run's results mark stable (its `unstable` column False)."""
    with (run / "results.csv").open(encoding="utf-8") as f:
        return {r["case_id"] for r in csv.DictReader(f) if r.get("unstable") in ("False", "false", "0")}


def figures(table: Path, base: Path, new: Path) -> dict[str, int]:
    """From a compare table (this rule's or another's: both have `variant`, `base_case_id` and `outcome`)
    and the pair's runs: cases, slower and faster ones, full_softmax's slower, stable and stable slower."""
    with table.open(encoding="utf-8") as f:
        rows = list(csv.DictReader(f))
    full = [r for r in rows if r["variant"] == "full_softmax"]
    both = stable(base) & stable(new)
    full_stable = [r for r in full if r["base_case_id"] in both]
    return {
        "cases": len(rows),
        "slower": sum(r["outcome"] == "slower" for r in rows),
        "faster": sum(r["outcome"] == "faster" for r in rows),
        "full_slower": sum(r["outcome"] == "slower" for r in full),
        "full_stable": len(full_stable),
        "full_stable_slower": sum(r["outcome"] == "slower" for r in full_stable),
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
    parser.add_argument("--pairs", type=int, default=10, help="pairs to run (for each factor)")
    parser.add_argument("--scenario", default="scenarios/quick.toml")
    parser.add_argument("--only", help="a glob on case ids (perfsuite run --only)")
    parser.add_argument("--fail-on", default="5%")
    parser.add_argument("--slow-full-softmax", type=float, nargs="+", default=[1.0], metavar="F")
    parser.add_argument("--old-code", type=Path, help="judge each pair with the code at this folder too")
    parser.add_argument("--judge", type=Path, metavar="OUT", help="only re-judge the pairs saved in OUT")
    parser.add_argument("--cost", action="store_true", help="sweep time with and without the reference")
    parser.add_argument("--no-busy", action="store_true", help="no background busy loop")
    parser.add_argument("--out", type=Path, help="folder for the runs (default: a new temporary one)")
    args = parser.parse_args()
    rules = {"new": ROOT, **({"old": args.old_code.resolve()} if args.old_code else {})}
    if args.judge:
        saved = json.loads((args.judge / "pairs.json").read_text(encoding="utf-8"))
        return summary([judge(args.judge, pair, args.fail_on, rules) for pair in saved], rules)
    out = args.out or Path(tempfile.mkdtemp(prefix="aa_pairs_"))
    out.mkdir(parents=True, exist_ok=True)
    busy = None if args.no_busy else busy_loop()
    try:
        return cost(args, out) if args.cost else run_pairs(args, out, rules)
    finally:
        if busy is not None:
            busy.kill()  # only the loop this script started, by its pid
            busy.wait()


def run_pairs(args: argparse.Namespace, out: Path, rules: dict[str, Path]) -> int:
    """`--pairs` pairs for each factor, each judged as soon as it is run and added to OUT/pairs.json."""
    listed = out / "pairs.json"
    saved = json.loads(listed.read_text(encoding="utf-8")) if listed.exists() else []
    print(f"runs in {out}; busy loop: {'no' if args.no_busy else 'one core'}")
    judged = []
    for factor in args.slow_full_softmax:
        for _ in range(args.pairs):
            pair = {"name": f"pair{len(saved) + 1}", "slow": factor}
            perfsuite_run(args.scenario, out / f"{pair['name']}-a", args.only)
            harness = ["--slow", str(factor)] if factor != 1.0 else []
            perfsuite_run(args.scenario, out / f"{pair['name']}-b", args.only, *harness)
            saved.append(pair)
            listed.write_text(json.dumps(saved, indent=1), encoding="utf-8")
            judged.append(judge(out, pair, args.fail_on, rules))
    return summary(judged, rules)


def judge(out: Path, pair: dict, fail_on: str, rules: dict[str, Path]) -> dict:
    """One saved pair judged by each rule, one line each."""
    name, factor = pair["name"], pair["slow"]
    base, new = out / f"{name}-a", out / f"{name}-b"
    result = {"slow": factor}
    for rule, code in rules.items():
        table = out / f"{name}{'' if rule == 'new' else '-' + rule}.csv"
        code_exit, drift = compare(base, new, fail_on, table, code)
        got = {"exit": code_exit, **figures(table, base, new)}
        result[rule] = got
        flagged = f"; full_softmax stable cases slower {got['full_stable_slower']} of {got['full_stable']}"
        counts = f"{got['slower']} of {got['cases']} slower ({got['full_slower']} full_softmax)"
        tail = f", {got['faster']} faster{flagged if factor != 1 else ''}"
        print(f"{name} (full_softmax x{factor:g}) {rule} rule: exit {code_exit}, {counts}{tail}")
        print(f"  {drift}")
    return result


def summary(judged: list[dict], rules: dict[str, Path]) -> int:
    """Per rule and factor: the exit codes, the cases slower and faster, full_softmax's stable share."""
    for factor in sorted({j["slow"] for j in judged}):
        pairs = [j for j in judged if j["slow"] == factor]
        for rule in rules:
            got = [p[rule] for p in pairs]
            exits = [g["exit"] for g in got]
            slower, full, faster = (sum(g[k] for g in got) for k in ("slower", "full_slower", "faster"))
            line = (
                f"x{factor:g}, {rule} rule, {len(pairs)} pairs: exits {exits} ({exits.count(0)} exit 0); "
                f"{slower} slower ({full} full_softmax), {faster} faster"
            )
            if factor != 1.0:
                flagged, stable_cases = (
                    sum(g[k] for g in got) for k in ("full_stable_slower", "full_stable")
                )
                share = 100 * flagged / stable_cases if stable_cases else float("nan")
                line += f"; full_softmax's stable cases slower: {flagged} of {stable_cases} ({share:.0f} %)"
            print(line)
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
