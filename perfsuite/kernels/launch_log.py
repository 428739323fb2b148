"""A record of the Triton kernels a run launches, to prove a compile plan without a GPU: with
`PERFSUITE_LAUNCH_LOG` naming a file, every `topk_softmax.Launch` appends one JSON line (one short `write`
to a file opened for appending: processes running at once do not interleave within it)."""

from __future__ import annotations

import json
import os
from dataclasses import dataclass
from pathlib import Path

WARMED_ENV = "PERFSUITE_LAUNCH_WARMED"  # set (to 1) in the warm workers
LOG_PATH = os.environ.get("PERFSUITE_LAUNCH_LOG") or None  # read once: it is set before a stage starts


def key_text(key: tuple, aligned: bool = True) -> str:
    """A compile key (and its pointers' alignment) as one canonical JSON text: equal keys, equal texts."""
    return json.dumps([key, aligned], separators=(",", ":"))


def record(key: tuple, aligned: bool) -> None:
    """Append a launch to the log (if any): its key, whether every pointer is 16-byte aligned (Triton
    specialises on that too), the stage (`PERFSUITE_STAGE`, from `scripts/gpu_check.sh`), if warm made it."""
    if LOG_PATH is not None:
        stage, warmed = os.environ.get("PERFSUITE_STAGE", ""), os.environ.get(WARMED_ENV) == "1"
        line = {"stage": stage, "warmed": warmed, "key": key_text(key, aligned)}
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
    lines = path.read_text(encoding="utf-8").splitlines() if path.exists() else []
    return [LoggedLaunch(**json.loads(line)) for line in lines if line.strip()]
