"""Write the report of a :class:`~spu.stats.analysis.StatsResult` to a folder.

Layout under ``out``: ``tables/<name>.md`` (one per table), ``report.md`` (all tables,
figures linked), ``figures/<name>.png`` and ``.svg``, and ``report.html`` (self-contained).
"""

from __future__ import annotations

from pathlib import Path

from spu.report.figures import inline_svg, report_figures, save_figure
from spu.report.page import CAPTIONS, render_page
from spu.report.paper_figures import (
    PAPER_CAPTIONS,
    PAPER_FIGURE_FILES,
    paper_figure_index,
    paper_figures,
)
from spu.report.rules import (
    ShownRule,
    analysis_outputs,
    rules_html,
    rules_markdown,
    shown_rules,
)
from spu.report.tables import report_tables
from spu.stats.analysis import StatsResult

CAPTIONS.update(PAPER_CAPTIONS)

TITLE = "Science Prediction Universe: results"

REPORT_FIGURE_FILES = {"means": ("configs.csv",), "pareto": ("costs.csv",),
                       "heatmap": ("outcomes.csv", "tasks.csv"), "pairs": ("pairs.csv",)}
"""The ``spu stats`` files each of the report's own figures draws from."""


def figure_rules(name: str, stats: dict, analysis: dict) -> list[ShownRule]:
    """The rules of the files figure ``name`` draws from (stats or analysis manifest)."""
    from spu.report.trajectory_figures import FIGURE_FILES

    if name in FIGURE_FILES:
        return shown_rules(FIGURE_FILES[name], analysis)
    return shown_rules(REPORT_FIGURE_FILES.get(name) or PAPER_FIGURE_FILES.get(name, ()),
                       stats)


def _meta(result: StatsResult) -> list[str]:
    m = result.manifest
    return [f"Runs table: {m.get('runs_table', '(in memory)')}, {m['rows']} rows; seed "
            f"{m['seed']}, {m['resamples']:,} bootstrap resamples, {m['simulations']:,} "
            f"simulated reruns; spu {m['spu_version']}."]


def build_report(result: StatsResult, out: str | Path, analysis: Path | None = None
                 ) -> list[Path]:
    """Write tables, figures, ``report.md`` and ``report.html``; returns the files written.

    ``analysis``: an ``spu analyze`` output folder whose figures 14-24 join the report.
    """
    out = Path(out)
    (out / "tables").mkdir(parents=True, exist_ok=True)
    written: list[Path] = []
    tables = report_tables(result)
    for table in tables:
        path = out / "tables" / f"{table.name}.md"
        path.write_text(table.to_markdown(), encoding="utf-8")
        written.append(path)

    figures = dict(report_figures(result))
    notes = list(result.notes)
    if analysis is not None:
        from spu.report.trajectory_figures import analysis_figures

        drawn, not_drawn = analysis_figures(Path(analysis))
        figures.update(drawn)
        notes += not_drawn
    drawable, missing = paper_figures(result)
    figures.update(drawable)
    pngs: dict[str, Path] = {}
    svgs: dict[str, str] = {}
    captions: dict[str, str] = {}
    for name, draw in figures.items():
        figure = draw()
        said = getattr(figure, "spu_note", "")  # what the figure left out, and why
        if said:
            captions[name] = f"{CAPTIONS.get(name, name)} {said}"
        paths = save_figure(figure, out / "figures", name)
        written += paths
        pngs[name] = paths[0]
        svg = out / "figures" / f"{name}.svg"
        svgs[name] = inline_svg(svg.read_text(encoding="utf-8"), name)
    # Which paper figure each drawn figure reproduces, and what the others need.
    index = paper_figure_index(pngs, missing)
    tables.append(index)
    path = out / "tables" / f"{index.name}.md"
    path.write_text(index.to_markdown(), encoding="utf-8")
    written.append(path)

    stats_outputs = result.manifest.get("outputs", {})
    analysis_rules = analysis_outputs(analysis)
    shown = {name: figure_rules(name, stats_outputs, analysis_rules) for name in pngs}
    shown.update({t.name: shown_rules(t.sources, stats_outputs) for t in tables})
    markdown = [f"# {TITLE}\n", *(f"{m}\n" for m in _meta(result))]
    for name in pngs:
        caption = captions.get(name) or CAPTIONS.get(name, name)
        markdown.append(f"![{name}](figures/{name}.png)\n\n*{caption}*\n\n"
                        f"{rules_markdown(shown[name])}")
    markdown += [t.to_markdown() + (f"\n{rules_markdown(shown[t.name])}"
                                    if shown[t.name] else "") for t in tables]
    if notes:
        markdown.append("## Notes\n\n" + "".join(f"- {n}\n" for n in notes))
    path = out / "report.md"
    path.write_text("\n".join(markdown), encoding="utf-8")
    written.append(path)

    path = out / "report.html"
    path.write_text(render_page(TITLE, _meta(result), tables, svgs, notes,
                                {name: rules_html(r) for name, r in shown.items()},
                                captions),
                    encoding="utf-8")
    written.append(path)
    return written
