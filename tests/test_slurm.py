"""The shipped Slurm recipe (scripts/slurm/) run by a real scheduler: a controller and one node on this
machine (munge, slurmctld, slurmd as background processes with their own ports and folders), the array of
shards and the merge job, and a shard cancelled mid-run, resubmitted as sweep.sbatch says, merged whole."""

from __future__ import annotations

import os
import shutil
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from perfsuite.results.run import load_run
from perfsuite.scenario.load import expand, load

ROOT = Path(__file__).parents[1]
SLURM = ROOT / "scripts" / "slurm"
LABEL = "slurm-test"
DAEMONS = ("munged", "slurmctld", "slurmd", "sbatch", "squeue", "scancel", "sinfo")
needs_slurm = pytest.mark.skipif(
    any(shutil.which(d) is None for d in DAEMONS),
    reason="Slurm is not installed (apt-get install slurm-wlm munge: `make slurm`, which .ci/run tries)",
)

SCENARIO = """
name = "slurm"
device = "cpu"
[sweep]
variants = ["full_softmax", "identity"]
dtypes = ["float32"]
vocab = [300, 301, 302]
batch = [2]
topk = [2]
logits = ["gaussian"]
[timing]
warmup = 1
reps = 400
max_seconds = 1.5
"""
"""Three shapes, one unit each: three shards of about 4 s of sampling (enough to cancel one mid-run)."""


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _config(folder: Path, host: str) -> str:
    ctld, d = _free_port(), _free_port()
    return f"""ClusterName=perfsuite-test
SlurmctldHost={host}
SlurmUser=root
SlurmdUser=root
AuthType=auth/munge
AuthInfo=socket={folder}/munge.sock
CredType=cred/munge
StateSaveLocation={folder}/state
SlurmdSpoolDir={folder}/spool
SlurmctldPidFile={folder}/slurmctld.pid
SlurmdPidFile={folder}/slurmd.pid
SlurmctldLogFile={folder}/slurmctld.log
SlurmdLogFile={folder}/slurmd.log
SlurmctldPort={ctld}
SlurmdPort={d}
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
MpiDefault=none
ReturnToService=2
SchedulerType=sched/backfill
SelectType=select/cons_tres
SelectTypeParameters=CR_Core
JobAcctGatherType=jobacct_gather/none
AccountingStorageType=accounting_storage/none
NodeName={host} CPUs={os.cpu_count() or 1} State=UNKNOWN
PartitionName=local Nodes={host} Default=YES MaxTime=INFINITE State=UP OverSubscribe=YES
"""


def _pids(folder: Path) -> list[int]:
    """The daemons' pids; a pid file removed as its daemon exits (between the glob and the read) is none."""
    texts = []
    for path in folder.glob("*.pid"):
        try:
            texts.append(path.read_text().strip())
        except FileNotFoundError:
            continue
    return [int(t) for t in texts if t.isdigit()]


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    state = Path(f"/proc/{pid}/stat")
    return not (state.exists() and state.read_text().split(") ")[-1].startswith("Z"))


@pytest.fixture
def cluster(tmp_path: Path) -> Iterator[dict[str, str]]:
    """A one-node Slurm cluster on this machine; its environment (SLURM_CONF, PATH to this venv)."""
    folder = tmp_path / "slurm"
    for sub in ("state", "spool"):
        (folder / sub).mkdir(parents=True)
    key = folder / "munge.key"
    key.write_bytes(os.urandom(1024))
    key.chmod(0o400)
    host = socket.gethostname().split(".")[0]
    conf = folder / "slurm.conf"
    conf.write_text(_config(folder, host))
    env = {
        **os.environ,
        "SLURM_CONF": str(conf),
        "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}",
        "PYTHONPATH": str(ROOT),
        "PERFSUITE": f"{sys.executable} -m perfsuite",  # the recipe's command, from this checkout
    }
    munge = [
        "munged", "--force", f"--key-file={key}", f"--socket={folder}/munge.sock",
        f"--pid-file={folder}/munged.pid", f"--log-file={folder}/munged.log", f"--seed-file={folder}/seed",
    ]  # fmt: skip
    subprocess.run(munge, check=True, env=env, timeout=30)
    started = [subprocess.Popen([d, "-D", "-f", str(conf)], env=env) for d in ("slurmctld", "slurmd")]
    try:
        deadline = time.monotonic() + 60
        while (
            "idle"
            not in subprocess.run(["sinfo", "-h", "-o", "%T"], env=env, capture_output=True, text=True).stdout
        ):
            assert time.monotonic() < deadline, (folder / "slurmctld.log").read_text()[-2000:]
            time.sleep(0.5)
        yield env
    finally:
        subprocess.run(["scancel", "--user=root"], env=env, capture_output=True, timeout=30)
        for proc in started:
            proc.send_signal(signal.SIGTERM)
        for proc in started:
            proc.wait(timeout=30)
        for pid in _pids(folder):
            if _alive(pid):
                os.kill(pid, signal.SIGTERM)
        deadline = time.monotonic() + 10
        while any(_alive(pid) for pid in _pids(folder)) and time.monotonic() < deadline:
            time.sleep(0.2)
        assert not any(_alive(pid) for pid in _pids(folder)), "a Slurm process outlived the test"


def _state(job: str, env: dict[str, str]) -> str:
    """A job's state letters in squeue ('' once it has left the queue)."""
    done = subprocess.run(["squeue", "-h", "-j", job, "-o", "%t"], env=env, capture_output=True, text=True)
    return done.stdout.strip()


def _wait_gone(job: str, env: dict[str, str], timeout: float = 240) -> None:
    deadline = time.monotonic() + timeout
    while _state(job, env):
        assert time.monotonic() < deadline, f"job {job} still queued: {_state(job, env)}"
        time.sleep(0.5)


def _merged_ids(out: Path) -> list[str]:
    merged = load_run([out])
    assert merged is not None
    return list(merged.frame["case_id"])


def test_the_docs_show_the_shipped_scripts_word_for_word():
    page = (ROOT / "docs" / "sharding.md").read_text()
    for script in ("submit.sh", "sweep.sbatch", "merge.sbatch"):
        text = (SLURM / script).read_text()
        shown = "".join(f"    {line}" if line.strip() else "\n" for line in text.splitlines(True))
        assert shown in page, script


@needs_slurm
def test_the_recipe_runs_and_a_cancelled_shard_resubmitted_completes_the_run(cluster, tmp_path):
    scenario = tmp_path / "slurm.toml"
    scenario.write_text(SCENARIO)
    wanted = sorted(c.case_id for c in expand(load(scenario)))
    out = tmp_path / "runs"
    submitted = subprocess.run(
        ["bash", str(SLURM / "submit.sh"), str(scenario), str(out), "3", LABEL],
        env=cluster, capture_output=True, text=True, cwd=tmp_path, check=True,
    )  # fmt: skip
    array, merge = submitted.stdout.split()
    # cancel task 1 once it is running and has begun its shard
    lost = out / "shard-1-of-3" / "run.json"
    deadline = time.monotonic() + 120
    while not lost.exists():
        assert time.monotonic() < deadline and _state(merge, cluster), "task 1 never started"
        time.sleep(0.2)
    subprocess.run(["scancel", f"{array}_1"], env=cluster, check=True)
    _wait_gone(merge, cluster)  # afterany: the merge runs once every task ended, the cancelled one too
    first = _merged_ids(out)
    assert len(set(first)) == len(first) and set(first) < set(wanted)  # shard 1 missing, none twice
    assert (out / "report.html").exists()
    # resubmitted as sweep.sbatch says: SHARDS=N sbatch --array=I; then merged again
    again = subprocess.run(
        ["sbatch", "--parsable", "--array=1", str(SLURM / "sweep.sbatch"), str(scenario), str(out), LABEL],
        env={**cluster, "SHARDS": "3"}, capture_output=True, text=True, cwd=tmp_path, check=True,
    ).stdout.strip()  # fmt: skip
    final = subprocess.run(
        ["sbatch", "--parsable", f"--dependency=afterany:{again}", str(SLURM / "merge.sbatch"), str(out)],
        env=cluster, capture_output=True, text=True, cwd=tmp_path, check=True,
    ).stdout.strip()  # fmt: skip
    _wait_gone(final, cluster)
    ids = _merged_ids(out)
    assert sorted(ids) == wanted  # every case once: nothing lost, nothing twice
    resumed = (out / "shard-1-of-3" / "results.jsonl").read_text().splitlines()
    assert len(resumed) == len({line for line in resumed})
