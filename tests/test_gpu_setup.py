"""`make gpu-setup` on a box without network: pip pointed at no index (PIP_NO_INDEX=1, no proxy that
answers), run on a copy of the project into a throwaway prefix, with this environment's setuptools and
dependencies standing in for a torch box's. The same pip command with build isolation fails there (it
must download setuptools), so the test checks what it claims."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).parents[1]
OFFLINE = {
    "PIP_NO_INDEX": "1",
    "PIP_CONFIG_FILE": os.devnull,  # no find-links or index from a pip.conf
    "PIP_DISABLE_PIP_VERSION_CHECK": "1",
    "https_proxy": "http://127.0.0.1:9",  # nothing answers there
    "http_proxy": "http://127.0.0.1:9",
}

DIST, COPY_DIST = "perfsuite", "perfsuite-gpu-setup-copy"
pytestmark = pytest.mark.skipif(shutil.which("make") is None, reason="make is not installed")


def _project(tmp_path: Path) -> Path:
    """What `make gpu-setup` installs, copied (the checkout is never written)."""
    copy = tmp_path / "project"
    copy.mkdir()
    for name in ("Makefile", "pyproject.toml", "README.md"):
        shutil.copy(ROOT / name, copy / name)
    # under another distribution name: pip would otherwise uninstall this environment's own perfsuite
    # (its `perfsuite` command and the editable install) before installing the copy into the prefix
    toml = copy / "pyproject.toml"
    toml.write_text(toml.read_text().replace(f'name = "{DIST}"', f'name = "{COPY_DIST}"', 1))
    shutil.copytree(ROOT / "perfsuite", copy / "perfsuite", ignore=shutil.ignore_patterns("__pycache__"))
    return copy


def _offline_env() -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.upper().startswith("PIP_")}
    return {**env, **OFFLINE}


def test_gpu_setup_installs_without_network(tmp_path):
    project, prefix = _project(tmp_path), tmp_path / "prefix"
    command = ["make", "-C", str(project), "gpu-setup", f"PYTHON={sys.executable}"]
    done = subprocess.run(
        [*command, f"GPU_SETUP_ARGS=--prefix {prefix}"],
        capture_output=True, text=True, env=_offline_env(), timeout=600,
    )  # fmt: skip
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    said = [line for line in done.stdout.splitlines() if line.startswith("gpu-setup: ")]
    assert not said, said  # this environment has every dependency: no --no-deps fallback
    installed = list(prefix.glob(f"lib/python*/site-packages/{COPY_DIST.replace('-', '_')}-*.dist-info"))
    assert installed, sorted(str(p.relative_to(prefix)) for p in prefix.rglob("*"))[:20]


def test_with_build_isolation_the_same_pip_fails_offline(tmp_path):
    """The control: pip's default build isolation needs an index for setuptools."""
    project, prefix = _project(tmp_path), tmp_path / "prefix"
    pip = [
        sys.executable,
        "-m",
        "pip",
        "install",
        "--no-index",
        "--no-deps",
        "--prefix",
        str(prefix),
        "-e",
        ".",
    ]
    done = subprocess.run(pip, cwd=project, capture_output=True, text=True, env=_offline_env(), timeout=600)
    assert done.returncode != 0
    assert "setuptools" in done.stdout + done.stderr
