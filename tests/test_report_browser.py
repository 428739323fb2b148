"""Reports end to end: several machines in one report, and the pages rendered by headless Chromium.

The browser checks load a copy of the page with a few lines of JS that record uncaught errors and
console.error / console.warn calls, let scripts and timers run (`--virtual-time-budget`), dump the DOM and
count what Plotly drew: every figure div must have become a `.js-plotly-plot` with an `svg.main-svg`.
"""

from __future__ import annotations

import html
import json
import re
import shutil
import subprocess
from pathlib import Path

import pandas as pd
import pytest
from test_report import synthetic_rows

from perfsuite import cli
from perfsuite.compare.match import compare
from perfsuite.report import build_report
from perfsuite.report.compare_page import build_compare_page
from perfsuite.results.run import Run
from perfsuite.results.write import to_frame, write_tables

CHROMIUM = next((p for p in map(shutil.which, ("chromium", "chromium-browser", "google-chrome")) if p), None)
needs_chromium = pytest.mark.skipif(
    CHROMIUM is None, reason="chromium is not installed (apt-get install chromium; `make chromium`)"
)
PROBE_HEAD = """<script>
window.__problems = [];
window.addEventListener("error", e => window.__problems.push("error: " + e.message));
window.addEventListener("unhandledrejection", e => window.__problems.push("rejection: " + e.reason));
for (const level of ["error", "warn"]) {
  const original = console[level];
  console[level] = (...args) => { window.__problems.push(level + ": " + args.join(" ")); original(...args); };
}
</script>"""
PROBE_TAIL = """<script>
window.addEventListener("load", () => setTimeout(() => {
  const plots = document.querySelectorAll(".js-plotly-plot");
  const drawn = [...plots].filter(p => p.querySelector("svg.main-svg")).length;
  document.body.setAttribute("data-probe", JSON.stringify(
    {plots: plots.length, drawn: drawn, problems: window.__problems}));
}, 2000));
</script>"""


def render(page: Path, tmp_path: Path) -> tuple[dict, str, str]:
    """Load `page` in headless Chromium; the probe's findings, the dumped DOM and Chromium's console log."""
    text = page.read_text(encoding="utf-8")
    probed = tmp_path / f"probed-{page.name}"
    probed.write_text(
        text.replace("<head>", "<head>" + PROBE_HEAD, 1).replace("</body>", PROBE_TAIL + "</body>")
    )
    command = [
        CHROMIUM,
        "--headless",
        "--no-sandbox",
        "--disable-gpu",
        "--disable-quic",
        "--no-first-run",
        "--disable-background-networking",
        "--disable-component-update",
        "--disable-sync",
        f"--user-data-dir={tmp_path / 'chromium-profile'}",
        "--enable-logging=stderr",
        "--v=0",
        "--virtual-time-budget=30000",
        "--dump-dom",
        probed.as_uri(),
    ]
    result = subprocess.run(command, capture_output=True, text=True, timeout=180)
    assert result.returncode == 0, result.stderr[-2000:]
    found = re.search(r'data-probe="([^"]*)"', result.stdout)
    assert found, f"the probe did not run; console: {_console(result.stderr)}"
    return json.loads(html.unescape(found.group(1))), result.stdout, _console(result.stderr)


def _console(stderr: str) -> str:
    return "\n".join(line for line in stderr.splitlines() if ":CONSOLE" in line)


def figure_divs(text: str) -> int:
    return len(re.findall(r'<div id="fig-[^"]+" class="plotly-graph-div"', text))


@pytest.fixture(scope="module")
def two_machines(tmp_path_factory) -> tuple[Path, Path]:
    """Two runs' results.csv, one per machine (H200 and a CPU), as two `perfsuite run`s would leave them."""
    folder = tmp_path_factory.mktemp("machines")
    frame = to_frame(synthetic_rows())
    paths = []
    for device, part in frame.groupby("device"):
        paths.append(write_tables(part, folder / device.replace(" ", "_"))[0])
    return paths[0], paths[1]


def test_report_of_two_machines_has_the_device_as_a_dimension(two_machines, tmp_path, capsys):
    out = tmp_path / "both.html"
    assert cli.main(["report", *map(str, two_machines), "--out", str(out)]) == 0
    text = out.read_text(encoding="utf-8")
    assert "devices: NVIDIA H200, cpu-x86_64" in text  # subtitle
    summary = text[text.index('<section id="summary">') : text.index('<section id="plots">')]
    assert "<td>NVIDIA H200</td><td>cuda</td>" in summary and "<td>cpu-x86_64</td><td>cpu</td>" in summary
    assert "NVIDIA H200 · bfloat16: fastest variant (any accuracy): triton_fused (exact)" in summary
    assert "cpu-x86_64 · float32: fastest variant (any accuracy): argmax_ones (inexact)" in summary
    assert "Fastest exact variant: identity" in summary
    latency = text[text.index('id="fig-latency-0"') :][:200_000]
    assert '"dash":"dash"' in latency  # line style by device
    assert "not drawn (" not in text


@needs_chromium
def test_report_renders_every_plot_without_console_errors(two_machines, tmp_path):
    page = tmp_path / "report.html"
    frame = pd.concat([pd.read_csv(p) for p in two_machines], ignore_index=True)
    build_report(Run.of(frame), page, environment={"runtime": "CUDA 12.8"})
    expected = figure_divs(page.read_text(encoding="utf-8"))
    probe, dom, console = render(page, tmp_path)
    assert expected >= 8
    assert probe["plots"] == expected and probe["drawn"] == expected, (probe, console)
    assert dom.count('class="main-svg"') >= expected
    assert probe["problems"] == [], probe["problems"]
    assert "Uncaught" not in console, console


@needs_chromium
def test_compare_page_renders(two_machines, tmp_path):
    base = pd.read_csv(two_machines[0])
    new = base.assign(median_us=base["median_us"] * 1.2)
    page = build_compare_page(compare(base, new, 0.05), tmp_path / "compare.html")
    probe, _, console = render(page, tmp_path)
    assert probe == {"plots": 1, "drawn": 1, "problems": []}, (probe, console)
