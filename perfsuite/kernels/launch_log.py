"""A record of the Triton kernels a run launches, to prove a compile plan without a GPU.

With `PERFSUITE_LAUNCH_LOG` naming a file, every `topk_softmax.Launch` appends one JSON line: its compile
key with whether every pointer is 16-byte aligned (Triton specialises on that too), the stage
(`PERFSUITE_STAGE`, set by `scripts/gpu_check.sh`) and whether a warm worker made it. Each line is one
short `write` to a file opened for appending, so processes running at once do not interleave within it.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass
from pathlib import Path

LOG_ENV = "PERFSUITE_LAUNCH_LOG"
STAGE_ENV = "PERFSUITE_STAGE"
WARMED_ENV = "PERFSUITE_LAUNCH_WARMED"  # set (to 1) in the warm workers
LOG_PATH = os.environ.get(LOG_ENV) or None  # read once: the variable is set before a stage starts


def key_text(key: tuple, aligned: bool = True) -> str:
    """A compile key (and its pointers' alignment) as one canonical JSON text: equal keys, equal texts."""
    return json.dumps([key, aligned], separators=(",", ":"))


def record(key: tuple, aligned: bool) -> None:
    """Append a launch of `key` to the log named by `PERFSUITE_LAUNCH_LOG` (nothing without it)."""
    if LOG_PATH is not None:
        warmed = os.environ.get(WARMED_ENV) == "1"
        line = {"stage": os.environ.get(STAGE_ENV, ""), "warmed": warmed, "key": key_text(key, aligned)}
        with open(LOG_PATH, "a", encoding="utf-8") as log:
            log.write(json.dumps(line) + "\n")


@dataclass(frozen=True)
class LoggedLaunch:
    """One recorded launch."""

    stage: str
    warmed: bool
    key: str  # key_text


def read(path: Path) -> list[LoggedLaunch]:
    """The launches recorded in `path`, in order (none for a missing file)."""
    if not path.exists():
        return []
    lines = [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines() if line.strip()]
    return [LoggedLaunch(line["stage"], bool(line["warmed"]), line["key"]) for line in lines]
