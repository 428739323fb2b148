"""How a perfsuite process is stopped: SIGINT and SIGTERM both raise KeyboardInterrupt in the main thread,
so a command writes what it measured and exits 130.

SIGTERM is what `timeout`, a batch scheduler, `docker stop` or `kill` send. SIGINT is honoured even where
the process inherited it as ignored: a non-interactive shell starts its background jobs (`cmd &`) that way,
and a script that later stops such a job with `kill -INT` expects it to stop.
"""

from __future__ import annotations

import signal
import threading
from collections.abc import Iterator
from contextlib import contextmanager


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
