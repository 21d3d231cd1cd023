"""The report: the statistics of :mod:`spu.stats` as Markdown tables, figures and one HTML page.

- :mod:`spu.report.tables`: the paper's tables (1, 2, 3, 5, 6 and the rest) as Markdown/HTML.
- :mod:`spu.report.figures`: Figure 1 style bars, the cost-score Pareto plot, the per-task
  score heat map and the paired-difference matrix (matplotlib, Agg), as PNG and SVG.
- :mod:`spu.report.paper_figures`: every paper figure the runs table determines
  (``figure_1``, ``figure_3``, ...), and what each missing one needs.
- :mod:`spu.report.page`: one self-contained HTML page (images embedded).
- :mod:`spu.report.build`: all of it from a :class:`~spu.stats.analysis.StatsResult`.
"""
