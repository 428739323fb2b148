"""Commands: `perfsuite list | run | report | summary | compare | profile | call | kernels | tune | warm |
check | variants | tp-page` (one module each in perfsuite/commands).

Exit status: the one table of `perfsuite.core.exits` (`perfsuite --help` lists it).
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import traceback
from datetime import datetime

from perfsuite.commands import (
    UsageError,
    call,
    check,
    compare,
    kernels,
    list_cases,
    profile,
    report,
    run,
    summary,
    tp_page,
    tune,
    variants,
    warm,
)
from perfsuite.core.console import first_line, interruptible
from perfsuite.core.exits import EXIT_INTERNAL, EXIT_INTERRUPTED, EXIT_OK, EXIT_USAGE, table
from perfsuite.scenario.load import ScenarioError

COMMANDS = (list_cases, run, report, summary, compare, profile, call, kernels, tune, warm, check, variants,
            tp_page)  # fmt: skip
"""The commands, in the order `perfsuite --help` lists them."""
DEBUG_ENV = "PERFSUITE_DEBUG"
__all__ = ["main", "parser"]


def parser() -> argparse.ArgumentParser:
    """`perfsuite`'s parser: one subcommand per module of `COMMANDS`, its options its module's."""
    p = argparse.ArgumentParser(
        prog="perfsuite",
        description=__doc__[: __doc__.index("\n\n")],
        epilog=table(),
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    sub = p.add_subparsers(dest="command", required=True)
    for command in COMMANDS:
        s = sub.add_parser(command.NAME, help=command.HELP, description=" ".join(command.__doc__.split()))
        command.add_arguments(s)
        s.set_defaults(func=command.run)
    return p


def main(argv: list[str] | None = None) -> int:
    """Run one command; its exit status (the module docstring's table)."""
    args = parser().parse_args(argv)
    try:
        with interruptible():
            return args.func(args)
    except (ScenarioError, UsageError) as exc:
        print(f"perfsuite: {exc}", file=sys.stderr)
        return EXIT_USAGE
    except BrokenPipeError:  # `perfsuite list ... | head`
        sys.stderr.close()
        return EXIT_OK
    except KeyboardInterrupt:  # a command that had nothing measured to write, or a second interruption
        print("perfsuite: interrupted", file=sys.stderr)
        return EXIT_INTERRUPTED
    except Exception as exc:
        print(
            f"perfsuite: internal error: {first_line(exc, 300, whole=True)} ({_file_traceback()})",
            file=sys.stderr,
        )
        return EXIT_INTERNAL


def _file_traceback() -> str:
    """Where the current exception's traceback went: stderr with PERFSUITE_DEBUG=1, else a file."""
    text = traceback.format_exc()
    if os.environ.get(DEBUG_ENV, "") not in ("", "0"):
        sys.stderr.write(text)
        return "traceback above"
    stamp = datetime.now().strftime("%Y%m%d-%H%M%S")
    try:
        handle, name = tempfile.mkstemp(prefix=f"perfsuite-error-{stamp}-", suffix=".txt", text=True)
        with os.fdopen(handle, "w") as file:
            file.write(text)
    except OSError as error:
        return f"the traceback could not be written: {error}; {DEBUG_ENV}=1 prints it"
    return f"traceback in {name}; {DEBUG_ENV}=1 prints it"


if __name__ == "__main__":
    sys.exit(main())
