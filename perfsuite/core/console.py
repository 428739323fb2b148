"""What a perfsuite command shows and how it is stopped: an error in one line, the number types of its
options, a progress bar on stderr, and SIGINT / SIGTERM raising KeyboardInterrupt so a command writes
what it measured and exits 130.

SIGTERM is what `timeout`, a batch scheduler, `docker stop` or `kill` send. SIGINT is honoured even where
the process inherited it as ignored: a non-interactive shell starts its background jobs (`cmd &`) that way,
and a script that later stops such a job with `kill -INT` expects it to stop.
"""

from __future__ import annotations

import argparse
import signal
import sys
import threading
from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager
from datetime import datetime, timezone
from typing import TypeVar

T = TypeVar("T")


def first_line(
    error: BaseException | str, limit: int | None = None, *, typed: bool = True, whole: bool = False
) -> str:
    """The first line of an error's message (`whole`: every line, joined by spaces), after its type's
    name (`typed`, for an exception), cut to `limit` characters: a result row's reason, a log line, a
    verdict's detail, a console message. An exception with no message gives its type's name."""
    lines = str(error).strip().splitlines()
    line = " ".join(" ".join(lines).split()) if whole else (lines[0] if lines else "")
    if isinstance(error, BaseException) and (typed or not line):
        line = f"{type(error).__name__}: {line}" if line else type(error).__name__
    return line[:limit]


def utc_now() -> str:
    """The time stamp runs and manifests carry: UTC, to the second, ISO 8601."""
    return datetime.now(timezone.utc).isoformat(timespec="seconds")


def number_at_least(minimum: float, kind: type = int, *, strict: bool = False) -> Callable[[str], float]:
    """An argparse `type`: a number of `kind` (int or float) of at least `minimum` (above it, `strict`),
    refused in argparse's one line ("expected an integer >= 1, got '0'")."""
    what = "an integer" if kind is int else "a number"
    bound = f"> {minimum:g}" if strict else f">= {minimum:g}"

    def parse(text: str) -> float:
        try:
            value = kind(text)
        except ValueError:
            value = None
        if value is None or value < minimum or (strict and value == minimum):
            raise argparse.ArgumentTypeError(f"expected {what} {bound}, got {text!r}")
        return value

    return parse


def progress_bar(
    items: Iterable[T], enabled: bool, label: str | None = None, unit: str = "case"
) -> Iterable[T]:
    """`items` behind a progress bar on stderr when enabled (the long loops of a run: cases,
    tensor-parallel launches, draft cases)."""
    if not enabled or (isinstance(items, list) and not items):
        return items
    from tqdm import tqdm

    return tqdm(items, unit=unit, desc=label, file=sys.stderr, dynamic_ncols=True)


def _raise_interrupt(signum: int, frame: object) -> None:
    raise KeyboardInterrupt(signal.Signals(signum).name)


@contextmanager
def interruptible() -> Iterator[None]:
    """Within the block, SIGTERM and SIGINT raise KeyboardInterrupt; the previous handlers come back after.
    Off the main thread (where handlers cannot be set) it changes nothing."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    previous_term = signal.signal(signal.SIGTERM, _raise_interrupt)
    previous_int = signal.getsignal(signal.SIGINT)
    if previous_int == signal.SIG_IGN:
        signal.signal(signal.SIGINT, signal.default_int_handler)
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, previous_term)
        if previous_int == signal.SIG_IGN:
            signal.signal(signal.SIGINT, previous_int)
