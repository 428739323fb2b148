"""Blocks to HTML: a self-contained page of sections (`render_page`), or one section's body
(`render_fragment`), both from the templates in `templates/` (`blocks.html` holds the blocks' markup)."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime, timezone
from functools import cache
from pathlib import Path

import jinja2
from markupsafe import Markup

from perfsuite.report.blocks import Section, plots_available


@cache
def _environment() -> jinja2.Environment:
    loader = jinja2.FileSystemLoader(Path(__file__).parent / "templates")
    options = {"autoescape": True, "trim_blocks": True, "lstrip_blocks": True}
    return jinja2.Environment(loader=loader, undefined=jinja2.StrictUndefined, **options)


def render_page(
    title: str, subtitle: str, sections: list[Section], report_again: str, warnings: Sequence[str] = ()
) -> str:
    """A self-contained page of sections, plotly.js inlined once; without plotly, no script and a note on why
    and `report_again`, the command that redraws it. `warnings` open it in a banner (id `warnings`)."""
    missing, plotly_js = plots_available(), Markup("")
    if not missing:
        import plotly.offline

        plotly_js = Markup(plotly.offline.get_plotlyjs())
    banner = f"The plots are missing. {missing}; then re-render with {report_again}." if missing else ""
    generated = datetime.now(timezone.utc).strftime("%Y-%m-%d %H:%M UTC")
    return _environment().get_template("report.html").render(
        title=title, subtitle=subtitle, generated=generated, sections=sections, plotly_js=plotly_js,
        banner=banner, warnings=list(warnings),
    )  # fmt: skip


def render_fragment(section: Section) -> str:
    """The body of one section (its introduction and blocks) without the page, heading or plotly.js."""
    return str(_environment().get_template("blocks.html").module.section_body(section))
