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


def render_page(title: str, meta: Sequence[str], tables: Sequence[Table],
                figures: dict[str, str], notes: Sequence[str],
                rules: Mapping[str, str] | None = None) -> str:
    """The HTML text: title, inputs, figures (``<svg>`` elements inline), tables, notes.

    ``rules``: the rule block (:func:`spu.report.rules.rules_html`) shown under each figure
    and table, by figure name or table name.
    """
    rules = rules or {}
    parts = [f"<!DOCTYPE html><html lang=\"en\"><head><meta charset=\"utf-8\">"
             f"<title>{html.escape(title)}</title><style>{STYLE}</style></head><body>",
             f"<h1>{html.escape(title)}</h1>"]
    parts += [f'<p class="meta">{html.escape(m)}</p>' for m in meta]
    for name, svg in figures.items():
        caption = html.escape(CAPTIONS.get(name, name))
        parts.append(f'<figure id="fig-{name}">{svg}<figcaption>{caption}</figcaption>'
                     f"{rules.get(name, '')}</figure>")
    parts += [t.to_html(rules.get(t.name, "")) for t in tables]
    if notes:
        items = "".join(f"<li>{html.escape(n)}</li>" for n in notes)
        parts.append(f"<section id=\"notes\"><h2>Notes</h2><ul>{items}</ul></section>")
    parts.append("</body></html>\n")
    return "\n".join(parts)
