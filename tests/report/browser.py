"""Render a report in headless Chromium and find figure elements that overlap.

The page is loaded in the real browser (``chromium-headless-shell`` or ``chromium``,
Debian packages), with a script appended that reads the box of every element that
matters in each inline ``<svg>`` figure, as laid out on screen
(``getBoundingClientRect``), and writes them into the DOM, which ``--dump-dom`` prints.
The checks are generic over figures, so a figure added later is covered:

- no two texts overlap (tick labels, axis labels, titles, annotations, legend entries);
- no text leaves its figure (clipped);
- no text of one axes lies on the plotting area of another axes (a colour bar over
  tick labels);
- no legend box covers a text outside that legend.

matplotlib writes each text as ``<g id="text_N">`` (after the page's id prefix), each
axes as ``<g id="axes_N">`` whose first ``patch`` group is its plotting area, each
legend as ``<g id="legend_N">``.
"""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import tempfile
from dataclasses import dataclass
from itertools import combinations
from pathlib import Path

BROWSERS = ("chromium-headless-shell", "chromium", "chromium-browser", "google-chrome")

TOLERANCE_PX = 0.75
"""Boxes are shrunk by this much before comparing (antialiasing, rounding)."""

CELL_LABEL_FIGURES = ("heatmap", "pairs")
"""Figures whose values are printed in grid cells: their in-plot texts may not even touch
(issue 40: heat-map scores ran together, "-0.43-0.11", overlapping by about 1 px)."""

COLLECT = r"""
<script>
(function () {
  function box(e) { const r = e.getBoundingClientRect();
                    return [r.left, r.top, r.right, r.bottom]; }
  function label(g) {
    for (const n of g.childNodes) if (n.nodeType === 8) return n.textContent.trim();
    return g.id;
  }
  const out = [];
  for (const svg of document.querySelectorAll('svg[data-figure]')) {
    const p = svg.dataset.figure + '--';
    const sel = (kind) => 'g[id^="' + p + kind + '_"]';
    const owner = (e) => { const a = e.closest(sel('axes')); return a ? a.id : null; };
    const legendOf = (e) => { const l = e.closest(sel('legend')); return l ? l.id : null; };
    const texts = [...svg.querySelectorAll(sel('text'))]
      .filter((g) => !g.parentElement.closest(sel('text')))
      .map((g) => ({id: g.id, label: label(g), box: box(g), axes: owner(g),
                    legend: legendOf(g), tick: !!g.closest(sel('matplotlib.axis'))}))
      .filter((t) => t.box[2] - t.box[0] > 0.5 && t.box[3] - t.box[1] > 0.5);
    const DATA = new RegExp('^(line2d|patch|PathCollection|LineCollection|PolyCollection|' +
                            'QuadMesh|FillBetweenPolyCollection|EventCollection)_\\d+$');
    const axes = [...svg.querySelectorAll(sel('axes'))].map((a) => {
      const patch = [...a.children].find((c) => c.id && c.id.startsWith(p + 'patch_'));
      const outside = (e) => !e.closest(sel('matplotlib.axis')) && !e.closest(sel('legend'));
      // A spine is a patch too, a line along an edge: a patch is data when it has an area.
      const area = (e) => { const b = box(e); return b[2] - b[0] > 1.5 && b[3] - b[1] > 1.5; };
      const data = [...a.querySelectorAll('g[id], image')].filter((e) =>
        e !== patch && outside(e) && e.closest(sel('axes')) === a &&
        (e.tagName.toLowerCase() === 'image' || DATA.test(e.id.slice(p.length))) &&
        (e.tagName.toLowerCase() === 'image' || e.querySelector('path, use, image')) &&
        (!e.id.slice(p.length).startsWith('patch_') || area(e))).length;
      const words = [...a.querySelectorAll(sel('text'))].filter((g) => outside(g) &&
        g.closest(sel('axes')) === a).map(label).filter((t) => t.length > 3);
      return {id: a.id, area: patch ? box(patch) : null, data: data, words: words};
    });
    const legends = [...svg.querySelectorAll(sel('legend'))].map((l) => {
      const frame = [...l.children].find((c) => c.id && c.id.startsWith(p + 'patch_'));
      return {id: l.id, box: box(frame || l)};
    });
    out.push({figure: svg.dataset.figure, svg: box(svg), texts, axes, legends});
  }
  const pre = document.createElement('pre');
  pre.id = 'spu-layout';
  pre.textContent = JSON.stringify(out);
  document.body.appendChild(pre);
})();
</script>
"""


def find_browser() -> str | None:
    """A headless Chromium on PATH, or None."""
    for name in BROWSERS:
        found = shutil.which(name)
        if found:
            return found
    return None


def layout(html_path: Path, browser: str, width: int = 1280) -> list[dict]:
    """The element boxes of every figure of ``html_path`` as Chromium lays them out."""
    page = html_path.read_text(encoding="utf-8")
    with tempfile.TemporaryDirectory(prefix="spu-layout-") as tmp:
        probe = Path(tmp) / "page.html"
        probe.write_text(page.replace("</body>", COLLECT + "</body>"), encoding="utf-8")
        proc = subprocess.run(
            [browser, "--headless", "--no-sandbox", "--disable-gpu", "--hide-scrollbars",
             f"--window-size={width},1000", f"--user-data-dir={tmp}/profile",
             "--dump-dom", probe.as_uri()],
            capture_output=True, text=True, timeout=300)
    if proc.returncode != 0:
        raise RuntimeError(f"{browser} failed ({proc.returncode}): {proc.stderr[-2000:]}")
    found = re.search(r'<pre id="spu-layout">(.*?)</pre>', proc.stdout, re.S)
    if not found:
        raise RuntimeError(f"{browser} printed no layout: {proc.stdout[-1000:]}")
    text = found.group(1).replace("&amp;", "&").replace("&lt;", "<").replace("&gt;", ">")
    return json.loads(text)


@dataclass(frozen=True)
class EmptyPanel:
    """An axes of a figure with nothing drawn in it and no text saying why."""

    figure: str
    axes: str

    def __str__(self) -> str:
        return f"{self.figure}: {self.axes} is empty and says nothing about why"


def empty_panels(figures: list[dict]) -> list[EmptyPanel]:
    """Every axes that draws no data (lines, bars, markers, images) and holds no text of
    more than a panel letter, outside its tick labels and legend."""
    return [EmptyPanel(fig["figure"], axes["id"]) for fig in figures for axes in fig["axes"]
            if not axes["data"] and not axes["words"]]


def screenshot(html_path: Path, browser: str, out: Path, width: int = 1280,
               height: int = 2400) -> Path:
    """A PNG of the top of ``html_path`` as Chromium renders it (the reader's first screens)."""
    with tempfile.TemporaryDirectory(prefix="spu-shot-") as tmp:
        proc = subprocess.run(
            [browser, "--headless", "--no-sandbox", "--disable-gpu", "--hide-scrollbars",
             f"--window-size={width},{height}", f"--user-data-dir={tmp}/profile",
             f"--screenshot={out}", html_path.as_uri()],
            capture_output=True, text=True, timeout=300)
    if proc.returncode != 0 or not out.is_file():
        raise RuntimeError(f"{browser} made no screenshot ({proc.returncode}): "
                           f"{proc.stderr[-2000:]}")
    return out


@dataclass(frozen=True)
class Overlap:
    """Two elements of one figure whose boxes intersect."""

    figure: str
    first: str
    second: str
    area: float

    def __str__(self) -> str:
        return f"{self.figure}: {self.first!r} overlaps {self.second!r} ({self.area:.1f} px²)"


def _intersection(a: list[float], b: list[float], tol: float = TOLERANCE_PX) -> float:
    w = min(a[2] - tol, b[2] - tol) - max(a[0] + tol, b[0] + tol)
    h = min(a[3] - tol, b[3] - tol) - max(a[1] + tol, b[1] + tol)
    return w * h if w > 0 and h > 0 else 0.0


def _inside(inner: list[float], outer: list[float], tol: float = 1.0) -> bool:
    return (inner[0] >= outer[0] - tol and inner[1] >= outer[1] - tol
            and inner[2] <= outer[2] + tol and inner[3] <= outer[3] + tol)


def overlaps(figures: list[dict]) -> list[Overlap]:
    """Every overlap the checks of the module docstring find.

    In :data:`CELL_LABEL_FIGURES` two texts inside the plot (not tick labels) overlap when
    their boxes intersect at all.
    """
    found: list[Overlap] = []
    for fig in figures:
        name, texts = fig["figure"], fig["texts"]
        for a, b in combinations(texts, 2):
            strict = (name in CELL_LABEL_FIGURES and not a.get("tick") and not b.get("tick")
                      and a["axes"] is not None and a["axes"] == b["axes"])
            area = _intersection(a["box"], b["box"], 0.0 if strict else TOLERANCE_PX)
            if area:
                found.append(Overlap(name, a["label"], b["label"], area))
        for t in texts:
            if not _inside(t["box"], fig["svg"]):
                found.append(Overlap(name, t["label"], "the figure's edge (clipped)", 0.0))
            for axes in fig["axes"]:
                if axes["area"] is None or axes["id"] == t["axes"]:
                    continue
                area = _intersection(t["box"], axes["area"])
                if area:
                    found.append(Overlap(name, t["label"], f"plotting area {axes['id']}", area))
            for legend in fig["legends"]:
                if legend["id"] == t["legend"]:
                    continue
                area = _intersection(t["box"], legend["box"])
                if area:
                    found.append(Overlap(name, t["label"], f"legend {legend['id']}", area))
    return found
