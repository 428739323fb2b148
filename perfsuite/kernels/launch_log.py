"""A record of the Triton kernels a run launches, for proving a compile plan without a GPU.

With `PERFSUITE_LAUNCH_LOG` naming a file, every `topk_softmax.Launch` call appends one JSON line to it:
the launch's compile key (`Launch.compile_key`, with whether every pointer is 16-byte aligned, which
Triton also specialises on), the stage it ran in (`PERFSUITE_STAGE`, which `scripts/gpu_check.sh` sets
for each stage) and whether a warm worker made it (`warmed`). Lines are short single `write`s to a file
opened for appending, so processes running at once (the warm pool) do not interleave within a line.
Without the variable nothing is recorded and a launch costs one attribute test more.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass
from pathlib import Path

LOG_ENV = "PERFSUITE_LAUNCH_LOG"
STAGE_ENV = "PERFSUITE_STAGE"
WARMED_ENV = "PERFSUITE_LAUNCH_WARMED"
"""Set (to 1) in the warm workers: their launches are recorded as warmed."""
LOG_PATH = os.environ.get(LOG_ENV) or None
"""The log this process appends to, read once at import (the variable is set before a stage starts)."""


def key_text(key: tuple, aligned: bool = True) -> str:
    """A compile key (and its pointers' alignment) as one canonical JSON text: equal keys, equal texts."""
    return json.dumps([key, aligned], separators=(",", ":"))


def record(key: tuple, aligned: bool) -> None:
    """Append a launch of `key` to the log named by `PERFSUITE_LAUNCH_LOG` (nothing without it)."""
    if LOG_PATH is None:
        return
    line = {
        "stage": os.environ.get(STAGE_ENV, ""),
        "warmed": os.environ.get(WARMED_ENV) == "1",
        "key": key_text(key, aligned),
    }
    with open(LOG_PATH, "a", encoding="utf-8") as log:
        log.write(json.dumps(line) + "\n")


@dataclass(frozen=True)
class LoggedLaunch:
    """One recorded launch."""

    stage: str
    warmed: bool
    key: str  # key_text


def read(path: Path) -> list[LoggedLaunch]:
    """The launches recorded in `path`, in order (an empty list for a missing file)."""
    if not path.exists():
        return []
    entries = []
    for line in path.read_text(encoding="utf-8").splitlines():
        if line.strip():
            data = json.loads(line)
            entries.append(LoggedLaunch(data["stage"], bool(data["warmed"]), data["key"]))
    return entries
