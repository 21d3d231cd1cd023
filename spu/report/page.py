"""One self-contained HTML page: the tables and the figures (SVG inline, text as outlines)."""

from __future__ import annotations

import html
from collections.abc import Mapping, Sequence

from spu.report.tables import Table

STYLE = """
body { font-family: -apple-system, "Segoe UI", Helvetica, Arial, sans-serif; margin: 2em auto;
       max-width: 1100px; color: #222; line-height: 1.4; padding: 0 1em; }
h1 { font-size: 1.5em; } h2 { font-size: 1.15em; margin-top: 2em; }
table { border-collapse: collapse; font-size: 0.85em; margin: 0.5em 0 1em; }
th, td { padding: 0.25em 0.6em; border-bottom: 1px solid #ddd; text-align: right; }
th:first-child, td:first-child { text-align: left; }
thead th { border-bottom: 2px solid #888; }
figure { margin: 1.5em 0; } figure svg { max-width: 100%; height: auto; }
figcaption, p.meta { color: #555; font-size: 0.9em; }
div.rule { color: #444; font-size: 0.8em; border-left: 3px solid #c8d6e8; margin: 0.3em 0 1em;
           padding: 0.1em 0.8em; }
div.rule ul { margin: 0.2em 0; padding-left: 1.2em; }
span.rule-file { font-family: monospace; }
span.basis-reading, span.basis-option { color: #8a4b00; font-weight: bold; }
nav#contents { border: 1px solid #ddd; padding: 0.2em 1em 0.6em; background: #fafafa; }
nav#contents .columns { display: flex; flex-wrap: wrap; gap: 0 2.5em; }
nav#contents h3 { font-size: 0.95em; margin: 0.6em 0 0.2em; }
nav#contents ul { margin: 0; padding-left: 1.1em; font-size: 0.85em; }
"""

CAPTIONS = {
    "means": "Configurations by mean score: solid bars average each configuration's scored "
             "public tasks, hatched bars the tasks every configuration scored; lines are 95% "
             "bootstrap intervals over tasks (Figure 1).",
    "pareto": "Mean API cost per scored run against the task-adjusted mean, with 95% "
              "intervals; filled markers joined by the dashed line form the cost-score "
              "Pareto frontier (Figure 11).",
    "heatmap": "Score of every official public run; tasks grouped by discipline and ordered "
               "by mean score; grey cells are excluded runs (refusals, no usable file).",
    "pairs": "Mean paired difference (row minus column) on shared scored tasks above the "
             "diagonal, difference detectable with 80% power at the Holm level below; "
             "boxed pairs pass the Holm-corrected Wilcoxon test (Figure 25a).",
}


REPORT_FIGURE_TITLES = {"means": "Means on the public tasks (as Figure 1)",
                        "pareto": "Cost and score (Figure 11)",
                        "heatmap": "Score of each official run",
                        "pairs": "Paired differences (Figure 25a)"}
"""Contents entries of the report's own figures."""


def figure_title(name: str) -> str:
    """The contents entry of figure ``name``.

    >>> figure_title("figure_12"), figure_title("fig22e_gpu_within"), figure_title("pairs")
    ('Figure 12', 'Figure 22e: gpu within', 'Paired differences (Figure 25a)')
    """
    if name in REPORT_FIGURE_TITLES:
        return REPORT_FIGURE_TITLES[name]
    if name.startswith("figure_"):
        return f"Figure {name.removeprefix('figure_')}"
    head, _, words = name.partition("_")
    if head.startswith("fig") and words:
        return f"Figure {head.removeprefix('fig')}: {words.replace('_', ' ')}"
    return name


def contents(figures: Sequence[str], tables: Sequence[Table], notes: bool) -> str:
    """The table of contents: a link to every figure, table and the notes."""
    def items(entries: list[tuple[str, str]]) -> str:
        return "".join(f'<li><a href="#{anchor}">{html.escape(text)}</a></li>'
                       for anchor, text in entries)

    figure_entries = [(f"fig-{n}", figure_title(n)) for n in figures]
    table_entries = [(t.name, t.title) for t in tables]
    parts = ['<nav id="contents"><h2>Contents</h2><div class="columns">']
    if figure_entries:
        parts.append(f"<div><h3>Figures</h3><ul>{items(figure_entries)}</ul></div>")
    parts.append(f"<div><h3>Tables</h3><ul>{items(table_entries)}")
    if notes:
        parts.append(items([("notes", "Notes")]))
    parts.append("</ul></div></div></nav>")
    return "".join(parts)


def render_page(title: str, meta: Sequence[str], tables: Sequence[Table],
                figures: dict[str, str], notes: Sequence[str],
                rules: Mapping[str, str] | None = None,
                captions: Mapping[str, str] | None = None) -> str:
    """The HTML text: title, inputs, contents, figures (``<svg>`` inline), tables, notes.

    ``rules``: the rule block (:func:`spu.report.rules.rules_html`) shown under each figure
    and table, by figure name or table name; ``captions``: a figure's caption where it is
    not :data:`CAPTIONS`' (a figure that says what it left out).
    """
    rules = rules or {}
    captions = captions or {}
    parts = [f"<!DOCTYPE html><html lang=\"en\"><head><meta charset=\"utf-8\">"
             f"<title>{html.escape(title)}</title><style>{STYLE}</style></head><body>",
             f"<h1>{html.escape(title)}</h1>"]
    parts += [f'<p class="meta">{html.escape(m)}</p>' for m in meta]
    parts.append(contents(list(figures), tables, bool(notes)))
    for name, svg in figures.items():
        caption = html.escape(captions.get(name) or CAPTIONS.get(name, name))
        parts.append(f'<figure id="fig-{name}">{svg}<figcaption>{caption}</figcaption>'
                     f"{rules.get(name, '')}</figure>")
    parts += [t.to_html(rules.get(t.name, "")) for t in tables]
    if notes:
        items = "".join(f"<li>{html.escape(n)}</li>" for n in notes)
        parts.append(f"<section id=\"notes\"><h2>Notes</h2><ul>{items}</ul></section>")
    parts.append("</body></html>\n")
    return "\n".join(parts)
