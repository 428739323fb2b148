"""The suite's exit statuses, one table: every command (`perfsuite ...`), tool and worker (the tensor-parallel
worker, `perfsuite call` under the counters) returns one of these, and `perfsuite --help` lists `MEANINGS`."""

from __future__ import annotations

EXIT_OK = 0
EXIT_FINDING = 1  # every finding is status 1: parity, a regression, a kernel problem, a failed launch
EXIT_USAGE = 2
EXIT_SKIPPED = 3
EXIT_INTERNAL = 4
EXIT_BUDGET = 124  # the exit status of `timeout`: a command stopped at its budget
EXIT_INTERRUPTED = 130  # 128 + SIGINT, as a shell reports it

MEANINGS: dict[int, str] = {
    EXIT_OK: "done",
    EXIT_FINDING: "a finding: a case failed parity (`run`, after writing everything: a wrong index, or an "
    "exact variant's probability off), a regression (`compare`), a kernel that does not compile or spills "
    "registers (`kernels`), a selector failing the conformance battery (`check`), a launch that failed "
    "(`warm`)",
    EXIT_USAGE: "bad input: a malformed scenario or results file, an unknown key, variant or target (one "
    "message)",
    EXIT_SKIPPED: "`call` on a case that cannot run here",
    EXIT_INTERNAL: "internal error: one line on stderr naming the file that holds the traceback "
    "(PERFSUITE_DEBUG=1: the traceback on stderr)",
    EXIT_BUDGET: "`warm` stopped at its --budget with launches left",
    EXIT_INTERRUPTED: "interrupted by SIGINT or SIGTERM: what was measured so far is written first",
}


def table(width: int = 110) -> str:
    """`MEANINGS` as the help's "Exit status" lines: the status, then its meaning wrapped to `width`."""
    import textwrap

    lines = ["Exit status (the same for every command):"]
    for status, meaning in MEANINGS.items():
        wrapped = textwrap.wrap(meaning, width - 7)
        lines += [f"  {status:<4} {wrapped[0]}", *(f"       {line}" for line in wrapped[1:])]
    return "\n".join(lines) + "\n"
