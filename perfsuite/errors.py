"""How an error is said in one line: in a result row's reason, a log line, a verdict's detail."""

from __future__ import annotations


def first_line(exc: BaseException, limit: int | None = None) -> str:
    """`Type: the first line of its message`, cut to `limit` characters when given."""
    lines = str(exc).strip().splitlines()
    return f"{type(exc).__name__}: {lines[0] if lines else ''}"[:limit]
