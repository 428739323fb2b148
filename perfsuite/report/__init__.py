"""Reports from result rows: load result files back (`load`) and write the HTML report (`html`)."""

from __future__ import annotations

from perfsuite.report.html import build_report
from perfsuite.report.load import coerce, load_many, load_results

__all__ = ["build_report", "coerce", "load_many", "load_results"]
