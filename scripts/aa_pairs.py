"""Pairs of runs of one scenario with one core kept busy: how `perfsuite compare` judges unchanged code
(A/A pairs) and code changed on purpose in several ways (issues 24, 31 and 39's measurements).

    .venv/bin/python scripts/aa_pairs.py --rounds 10 --out reports/pairs \\
        --change '*:copy' --change '*:copy-topk' --change '*:x1.1'     # 20 A/A pairs, 10 per change
    .venv/bin/python scripts/aa_pairs.py --judge reports/pairs --old-code /tmp/old   # re-judge saved pairs
    .venv/bin/python scripts/aa_pairs.py --rounds 2 --cost                           # the reference's cost

A round runs the scenario twice unchanged (OUT/rN-a, OUT/rN-b) and once per `--change` (OUT/rN-KIND); the
pairs (OUT/pairs.json) are the round's A/A pair (a, b), an A/A pair across rounds (the last round's b,
this round's a) and, per change, one unchanged run of the round (a and b in turn) against the changed
one. Each pair is judged by `perfsuite compare BASE NEW --fail-on 5% --csv OUT/PAIR.csv` (and with
`--old-code DIR` by another checkout's compare on the same runs): per pair the exit code, the changed
selector's cases and groups called slower, and every other case or group called slower (false alarms);
then a summary per kind of change and per rule.

A change is VARIANT:KIND (`*` for VARIANT: the four torch selectors in turn, one a round). Kinds, each a
change of the selector's code as the harness binds it (`execution.prepare`; nothing of it ships in
perfsuite): `xF`, every call F times slower (after each call it spins for (F - 1) x the call's own time,
on the clock a CPU sample is read on: host-timed runs only); `copy`, an extra pass over the logits (a copy
before it selects: costs more on some shapes than others); `copy-topk`, the same on the k > 1 cases only
(half the selector's cases); `upcast`, the selector run on float32 logits (bfloat16 cases only pay);
`reduce`, a second reduction over the logits (a row max computed and dropped) before it selects.

A background busy loop (`python -c "while True: pass"`, started here and killed by its pid at the end)
keeps one core busy unless `--no-busy`. `--cost`: the scenario with and without the in-turn reference
(`KernelRunner.reference = False`), alternating: each run's wall and CPU time.
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
TORCH_SELECTORS = ("full_softmax", "argmax_ones", "identity", "identity_engine_order")
KINDS: dict[str, Callable[[Callable], Callable]] = {
    "copy": lambda select: lambda logits, k: select(logits.clone(), k),
    "copy-topk": lambda select: lambda logits, k: select(logits.clone() if k > 1 else logits, k),
    "upcast": lambda select: lambda logits, k: select(logits.float(), k),
    "reduce": lambda select: lambda logits, k: (logits.amax(dim=-1), select(logits, k))[1],
}


def parse_change(spec: str) -> tuple[str, str]:
    """'identity:copy' -> ('identity', 'copy'); the kind checked (xF or one of `KINDS`)."""
    variant, _, kind = spec.partition(":")
    if not variant or not (kind in KINDS or (kind.startswith("x") and float(kind[1:]) > 0)):
        raise argparse.ArgumentTypeError(f"{spec!r}: expected VARIANT:KIND, KIND xF or one of {list(KINDS)}")
    return variant, kind


def harness_run(argv: list[str]) -> int:
    """`perfsuite run` in this process, with the harness's changes (`--change V:K`, `--no-reference`)."""
    parser = argparse.ArgumentParser(prog="aa_pairs.py _run")
    parser.add_argument("--change", type=parse_change)
    parser.add_argument("--no-reference", action="store_true")
    known, rest = parser.parse_known_args(argv)
    from perfsuite import cli

    if known.no_reference:
        from perfsuite.cases.kernel.kernel_runner import KernelRunner

        KernelRunner.reference = False
    if known.change:
        change_selector(*known.change)
    return cli.main(["run", *rest])


def change_selector(name: str, kind: str) -> None:
    """Change the calls `execution.prepare` binds for the selector `name` by `kind` (see the docstring)."""
    import torch

    from perfsuite import variants
    from perfsuite.measure import execution

    target, original = variants.get(name).select, execution.prepare

    def slowed(call: Callable[[], object], factor: float) -> Callable[[], object]:
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
        if select is not target:
            return original(path, select, logits, k)  # type: ignore[arg-type]
        if kind in KINDS:
            return original(path, KINDS[kind](select), logits, k)  # type: ignore[arg-type]
        prepared, factor = original(path, select, logits, k), float(kind[1:])  # type: ignore[arg-type]
        run, body = slowed(prepared.run, factor), slowed(prepared.body, factor)
        return execution.PreparedCall(path, run, body, prepared.graphed)

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
    paths = [str(p.resolve()) for p in (base, new)]
    command = [sys.executable, "-m", "perfsuite", "compare", *paths, "--fail-on", fail_on]
    env = {**os.environ, "PYTHONPATH": str(code)}
    done = subprocess.run(
        [*command, "--csv", str(table.resolve())], cwd=code, env=env, capture_output=True, text=True
    )
    if done.returncode not in (0, 1):
        sys.exit(f"compare failed ({code}):\n{done.stderr[-2000:]}")
    drift = [line for line in done.stdout.splitlines() if line.startswith(("drift:", "all "))]
    return done.returncode, drift[0] if drift else ""


def figures(table: Path, target: str = "") -> dict[str, int]:
    """From a compare table (this rule's, whose `level` column holds case and group rows, or an older
    one's, cases only): the cases, the changed selector's (`target`) cases and groups called slower, and
    every other case or group called slower or faster."""
    with table.open(encoding="utf-8") as f:
        rows = list(csv.DictReader(f))
    cases = [r for r in rows if r.get("level", "case") == "case"]
    mine = [(r["outcome"] == "slower", r in cases) for r in rows if r["variant"] == target]
    others = [r for r in rows if r["variant"] != target]
    return {
        "cases": len(cases),
        "target_cases": sum(case for _, case in mine),
        "target_cases_slower": sum(slower and case for slower, case in mine),
        "target_groups_slower": sum(slower and not case for slower, case in mine),
        "others_slower": sum(r["outcome"] == "slower" for r in others),
        "faster": sum(r["outcome"] == "faster" for r in rows),
        "cannot_tell": sum(r["outcome"] == "cannot tell" for r in cases),
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
    parser.add_argument("--rounds", type=int, default=10, help="rounds to run (two A/A pairs each)")
    parser.add_argument("--change", action="append", default=[], type=parse_change, metavar="VARIANT:KIND")
    parser.add_argument("--scenario", default="scenarios/quick.toml")
    parser.add_argument("--only", help="a glob on case ids (perfsuite run --only)")
    parser.add_argument("--fail-on", default="5%")
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
        return cost(args, out) if args.cost else run_rounds(args, out, rules)
    finally:
        if busy is not None:
            busy.kill()  # only the loop this script started, by its pid
            busy.wait()


def run_rounds(args: argparse.Namespace, out: Path, rules: dict[str, Path]) -> int:
    """`--rounds` rounds (see the docstring), each pair judged once its runs exist and added to
    OUT/pairs.json."""
    listed = out / "pairs.json"
    saved = json.loads(listed.read_text(encoding="utf-8")) if listed.exists() else []
    first = 1 + sum(p["name"].endswith("-aa") for p in saved)
    print(f"runs in {out}; busy loop: {'no' if args.no_busy else 'one core'}")
    judged = []
    for n in range(first, first + args.rounds):
        runs = {side: f"r{n}-{side}" for side in ("a", "b")}
        for side in runs.values():
            perfsuite_run(args.scenario, out / side, args.only)
        pairs = [{"name": f"r{n}-aa", "base": runs["a"], "new": runs["b"], "change": ""}]
        if (out / f"r{n - 1}-b").exists():
            pairs.append({"name": f"r{n}-across", "base": f"r{n - 1}-b", "new": runs["a"], "change": ""})
        for i, (variant, kind) in enumerate(args.change):
            variant = TORCH_SELECTORS[(n + i) % len(TORCH_SELECTORS)] if variant == "*" else variant
            changed = f"r{n}-{variant}-{kind}"
            perfsuite_run(args.scenario, out / changed, args.only, "--change", f"{variant}:{kind}")
            base = runs["ab"[i % 2]]
            pairs.append({"name": changed, "base": base, "new": changed, "change": f"{variant}:{kind}"})
        for pair in pairs:
            saved.append(pair)
            listed.write_text(json.dumps(saved, indent=1), encoding="utf-8")
            judged.append(judge(out, pair, args.fail_on, rules))
    return summary(judged, rules)


def judge(out: Path, pair: dict, fail_on: str, rules: dict[str, Path]) -> dict:
    """One saved pair judged by each rule, one line each."""
    name, change = pair["name"], pair["change"]
    target, _, kind = change.partition(":")
    result = {"kind": kind or "A/A", "target": target}
    for rule, code in rules.items():
        table = out / f"{name}{'' if rule == 'new' else '-' + rule}.csv"
        code_exit, drift = compare(out / pair["base"], out / pair["new"], fail_on, table, code)
        got = result[rule] = {"exit": code_exit, **figures(table, target)}
        mine = (
            f"; {target} {got['target_cases_slower']} of {got['target_cases']} cases slower, "
            f"{got['target_groups_slower']} groups"
        )
        print(
            f"{name} ({change or 'unchanged'}) {rule} rule: exit {code_exit}{mine if target else ''}; "
            f"others slower {got['others_slower']}, faster {got['faster']}, cannot tell {got['cannot_tell']}"
        )
        print(f"  {drift}")
    return result


def summary(judged: list[dict], rules: dict[str, Path]) -> int:
    """Per rule and kind of change: the pairs exiting 1 (a changed selector flagged at any level), and
    the false alarms (another selector's cases or groups called slower)."""
    for kind in dict.fromkeys(j["kind"] for j in judged):
        pairs = [j for j in judged if j["kind"] == kind]
        for rule in rules:
            got = [p[rule] for p in pairs]
            exits = sum(g["exit"] for g in got)
            line = f"{kind}, {rule} rule, {len(pairs)} pairs: {exits} exit 1"
            if kind != "A/A":
                flagged = sum(g["target_cases_slower"] + g["target_groups_slower"] > 0 for g in got)
                cases = sum(g["target_cases_slower"] for g in got), sum(g["target_cases"] for g in got)
                line += (
                    f"; the changed selector flagged in {flagged}, its cases slower {cases[0]} of {cases[1]}"
                )
            others = sum(g["others_slower"] for g in got)
            print(f"{line}; other selectors' cases or groups slower: {others}")
    return 0


def cost(args: argparse.Namespace, out: Path) -> int:
    """Wall and CPU time of the scenario with and without the reference, alternating (`--rounds` times
    each); the CPU time is the steadier figure on a shared machine."""
    times: dict[str, list[tuple[float, float]]] = {"with": [], "without": []}
    for i in range(1, args.rounds + 1):
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
