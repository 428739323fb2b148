"""Blocks to HTML: a self-contained page of sections (`render_page`), or one section's body
(`render_fragment`), both from the templates in `templates/` (`blocks.html` holds the blocks' markup).
A page's warnings (a shared machine, unstable cases) open it in a banner above its navigation."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime, timezone
from functools import cache
from pathlib import Path

import jinja2
from markupsafe import Markup

from perfsuite.report.blocks import Section
from perfsuite.report.plots import missing_plots_banner, plots_available

TEMPLATES = Path(__file__).parent / "templates"


@cache
def _environment() -> jinja2.Environment:
    return jinja2.Environment(
        loader=jinja2.FileSystemLoader(TEMPLATES),
        autoescape=True,
        undefined=jinja2.StrictUndefined,
        trim_blocks=True,
        lstrip_blocks=True,
    )


WARNINGS_ID = "warnings"


def render_page(
    title: str, subtitle: str, sections: list[Section], report_again: str, warnings: Sequence[str] = ()
) -> str:
    """A self-contained page of sections in the report's template and style, plotly.js inlined once.

    Without plotly the page has no script at all and opens with a note: why the plots are missing and
    `report_again`, the command that draws them once plotly is installed. `warnings` open the page in a
    banner (id `warnings`) between the title and the navigation.
    """
    missing = plots_available() is not None
    if missing:
        plotly_js = Markup("")
    else:
        import plotly.offline

        plotly_js = Markup(plotly.offline.get_plotlyjs())
    page = (
        _environment()
        .get_template("report.html")
        .render(
            title=title,
            subtitle=subtitle,
            generated=datetime.now(timezone.utc).strftime("%Y-%m-%d %H:%M UTC"),
            sections=sections,
            plotly_js=plotly_js,
            banner=missing_plots_banner(report_again) if missing else "",
            warnings=warnings_banner(warnings),
        )
    )
    return page


def warnings_banner(warnings: Sequence[str]) -> Markup:
    """The warnings as a banner in the page's style (escaped); empty without warnings."""
    if not warnings:
        return Markup("")
    items = Markup("").join(Markup("<li>{}</li>").format(text) for text in warnings)
    return Markup(
        '<div class="banner" id="{}" role="alert"><strong>Warnings: read these before the figures</strong>'
        "<ul>{}</ul></div>"
    ).format(WARNINGS_ID, items)


def render_fragment(section: Section) -> str:
    """The body of one section (its introduction and blocks) without the page, heading or plotly.js."""
    return str(_environment().get_template("blocks.html").module.section_body(section))
