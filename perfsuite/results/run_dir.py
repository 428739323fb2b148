"""A run's output folder: one run writes into it at a time (a lock), it says which run and settings wrote
it (`run.json`: label, settings and their fingerprint), and a new run never deletes an earlier run's files
(they move to `earlier/<label>/`) nor shows them in its report.

    DIR/run.json          format_version, label, fingerprint, settings, started, machine facts
    DIR/results.jsonl     kernel and tensor-parallel rows as they finish (`settings` column: fingerprint)
    DIR/draft.jsonl       draft-loop rows
    DIR/samples.jsonl     every case's raw samples (seconds, in the order taken)
    DIR/results.csv ...   tables and report, rebuilt from the logs at the end of every run
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import os
import shutil
import socket
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import datetime
from pathlib import Path

import filelock

from perfsuite.core import kinds, strict_json
from perfsuite.core.console import utc_now
from perfsuite.results.columns import FORMAT_COLUMN, FORMAT_VERSION
from perfsuite.results.read import MANIFEST_FILE, SAMPLES_FILE, FormatTooNew, format_of, read_manifest
from perfsuite.results.sweep_shards import Shard, shard_of
from perfsuite.scenario.load import Scenario


def logs() -> tuple[str, ...]:
    """The logs a run appends to: each case kind's rows (`core.kinds`: results.jsonl, draft.jsonl), then
    the samples."""
    return (*kinds.logs(), SAMPLES_FILE)


def derived() -> tuple[str, ...]:
    """The files a run rebuilds from its logs: tables (each kind's), the edge cases, the report."""
    return ("results.json", *kinds.table_files(), "report.html", "machine.json")


FOLDERS = ("counters", "tp")
LOCK = ".perfsuite.lock"
EARLIER = "earlier"


class RunRefused(Exception):
    """The folder cannot take this run (another run holds it, or `--resume` of other settings)."""


def settings_of(scenario: Scenario, device: str) -> dict[str, object]:
    """Everything that decides what a run's figures mean: the scenario's sweeps, timing, inputs and
    extra tables, and the device they were measured on."""
    return {
        "scenario": scenario.name,
        "device": device,
        "sweeps": [dataclasses.asdict(s) for s in scenario.sweeps],
        "timing": dataclasses.asdict(scenario.timing),
        "inputs": dataclasses.asdict(scenario.inputs),
        "extra": scenario.extra,
    }


def fingerprint(settings: dict[str, object]) -> str:
    """A short stable hash of the settings (12 hex digits)."""
    text = json.dumps(settings, sort_keys=True, default=str)
    return hashlib.sha256(text.encode()).hexdigest()[:12]


def new_label(device: str) -> str:
    """A run's default label: start time and host, e.g. '20261130-203012-host'."""
    return f"{datetime.now().strftime('%Y%m%d-%H%M%S')}-{socket.gethostname().split('.')[0]}"


def differences(old: dict[str, object], new: dict[str, object], prefix: str = "") -> list[str]:
    """The settings that differ, as 'timing.l2: cold -> hot'."""
    out = []
    for key in sorted(set(old) | set(new)):
        a, b = old.get(key), new.get(key)
        if isinstance(a, dict) and isinstance(b, dict):
            out += differences(a, b, f"{prefix}{key}.")
        elif a != b:
            out.append(f"{prefix}{key}: {json.dumps(a, default=str)} -> {json.dumps(b, default=str)}")
    return out


@contextmanager
def claimed(out_dir: Path) -> Iterator[None]:
    """Hold the folder's lock for a run; `RunRefused` when another process holds it."""
    out_dir.mkdir(parents=True, exist_ok=True)
    lock = filelock.FileLock(str(out_dir / LOCK), timeout=0)
    holder = out_dir / f"{LOCK}.holder"
    try:
        lock.acquire()
    except filelock.Timeout:
        who = holder.read_text().strip() if holder.exists() else "another process"
        raise RunRefused(
            f"{out_dir}: another perfsuite run is writing here ({who}); wait for it or pick another --out"
        ) from None
    try:
        holder.write_text(f"pid {os.getpid()} on {socket.gethostname()}, since {utc_now()}")
        yield
    finally:
        holder.unlink(missing_ok=True)
        lock.release()


def write_manifest(out_dir: Path, manifest: dict[str, object]) -> None:
    """`run.json`, atomically, its first key this perfsuite's result format (`schema.FORMAT_VERSION`)."""
    path = out_dir / MANIFEST_FILE
    tmp = path.with_suffix(".tmp")
    stamped = {FORMAT_COLUMN: FORMAT_VERSION, **{k: v for k, v in manifest.items() if k != FORMAT_COLUMN}}
    tmp.write_text(strict_json.dumps(stamped, indent=1), encoding="utf-8")
    tmp.replace(path)


def run_files(out_dir: Path) -> list[Path]:
    """The files and folders of a run present in `out_dir`."""
    names = (*logs(), *derived(), *FOLDERS, MANIFEST_FILE)
    return [out_dir / n for n in names if (out_dir / n).exists()]


def put_aside(out_dir: Path) -> Path | None:
    """Move an earlier run's files to `earlier/<its label>/`; returns that folder (None: nothing there)."""
    files = run_files(out_dir)
    if not files:
        return None
    manifest = read_manifest(out_dir, check=False) or {}
    stamp = datetime.fromtimestamp(files[0].stat().st_mtime).strftime("%Y%m%d-%H%M%S")
    label = str(manifest.get("label") or stamp)
    target = out_dir / EARLIER / label
    n = 1
    while target.exists():
        n += 1
        target = out_dir / EARLIER / f"{label}-{n}"
    target.mkdir(parents=True)
    for path in files:
        shutil.move(str(path), target / path.name)
    return target


def check_resume(
    out_dir: Path, manifest: dict[str, object] | None, settings: dict[str, object], logged: set[str]
) -> None:
    """Refuse to resume a log written with other settings (`logged`: the fingerprints its rows carry) or
    by a perfsuite of a newer result format (`run.json`); an older format resumes, its rows kept as they
    are (format 1: no `format_version`), the new rows in this format."""
    value = (manifest or {}).get(FORMAT_COLUMN)
    try:
        format_of(value, MANIFEST_FILE)
        what = fix = ""
    except FormatTooNew:
        what = (
            f"{MANIFEST_FILE} is result format {value}, newer than this perfsuite writes ({FORMAT_VERSION})"
        )
        fix = "upgrade perfsuite, or run without --resume"
    except ValueError as exc:
        what, fix = str(exc), "run without --resume"
    if what:
        raise RunRefused(
            f"{out_dir}: cannot --resume: its {what}; {fix} (the earlier run moves to earlier/) "
            "or pick another --out"
        )
    other = logged - {fingerprint(settings)}
    if not other:
        return
    what = "rows without a settings fingerprint (an older perfsuite)" if other == {""} else "other settings"
    detail = ""
    if manifest and isinstance(manifest.get("settings"), dict):
        changed = differences(manifest["settings"], settings)  # type: ignore[arg-type]
        detail = f": {'; '.join(changed[:4])}{' ...' if len(changed) > 4 else ''}" if changed else ""
    raise RunRefused(
        f"{out_dir}: cannot --resume: its log holds {what}{detail}; "
        "run without --resume (the earlier run moves to earlier/) or pick another --out"
    )


def check_resume_shard(out_dir: Path, manifest: dict[str, object] | None, shard: Shard | None) -> None:
    """Refuse to resume a folder that holds another shard of the run (or an unsharded run, or the reverse);
    an empty folder (no `run.json`) resumes as a fresh run."""
    if manifest is None:
        return
    before = shard_of(manifest)
    if before != shard:
        was = f"shard {before}" if before else "an unsharded run"
        now = f"shard {shard}" if shard else "an unsharded run"
        raise RunRefused(f"{out_dir}: cannot --resume {now}: the folder holds {was}")
