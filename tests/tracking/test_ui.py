"""MLflow opens on the scores (issue 40, item 2).

Every SPU experiment is a run-tracking experiment with a saved view ``SPU`` of its runs
table; ``spu ui OUTPUT_ROOT`` serves the real MLflow UI on the store and prints that view's
address. The browser test drives the real UI in headless Chromium (Debian's
``chromium-headless-shell``, background networking off) and reads the page as laid out.
"""

from __future__ import annotations

import json
import re
import shutil
import signal
import subprocess
import sys
import time
from html.parser import HTMLParser
from pathlib import Path

import pytest

from spu.tracking.store import client_for, experiment_id, log_run, run_name
from spu.tracking.ui import (
    EXPERIMENT_KIND_TAG,
    RUN_TRACKING_KIND,
    SAVED_VIEW_TAG_PREFIX,
    SPU_VIEW_COLUMNS,
    SPU_VIEW_ID,
    column_id,
    text_width,
)
from tests.conftest import EXAMPLE_TASK, EXAMPLE_TWO_GROUPS, REPO, run_module
from tests.tracking.conftest import make_record

BROWSERS = ("chromium-headless-shell", "chromium")
BROWSER_FLAGS = ("--headless", "--no-sandbox", "--disable-gpu", "--no-first-run",
                 "--disable-background-networking", "--disable-component-update",
                 "--disable-sync", "--metrics-recording-only", "--hide-scrollbars")
"""No update checks, sync or reports: the browser talks to the UI on 127.0.0.1 only."""


def test_an_experiment_is_made_run_tracking_with_the_spu_view(tmp_path, target) -> None:
    """Before: MLflow 3.17 opened an experiment with traces on a GenAI "Overview" of trace
    charts, and the runs table showed no score or cost until columns were picked by hand."""
    (tmp_path / "run").mkdir()
    log_run(make_record(), tmp_path / "run", target)
    client = client_for(target)
    experiment = client.get_experiment(experiment_id(client, target))
    assert experiment.tags[EXPERIMENT_KIND_TAG] == RUN_TRACKING_KIND
    view = json.loads(experiment.tags[SAVED_VIEW_TAG_PREFIX + SPU_VIEW_ID])
    assert view["name"] == "SPU"
    state = json.loads(view["state"])
    assert state["selectedColumns"] == [column_id(k, n) for k, n in SPU_VIEW_COLUMNS]
    assert [n for _, n in SPU_VIEW_COLUMNS] == ["config", "task", "repeat", "outcome",
                                                "score_strict", "score_recovered",
                                                "cost_usd", "runtime_s"]


def test_run_names_read_config_task_repeat() -> None:
    record = make_record(config="presented_order-none", task_id="spu-2q2w", repeat=3)
    assert run_name(record) == "presented_order-none · spu-2q2w · r3"


def test_spu_ui_without_a_store_is_one_line_and_makes_none(tmp_path) -> None:
    proc = run_module(["spu", "ui", str(tmp_path / "outputs")], cwd=tmp_path)
    assert proc.returncode == 1, proc.stdout + proc.stderr
    (line,) = proc.stderr.splitlines()
    assert line.startswith("spu ui: no tracking store at ")
    assert not (tmp_path / "outputs").exists()


def find_browser() -> str:
    for name in BROWSERS:
        if shutil.which(name):
            return str(shutil.which(name))
    pytest.skip("no headless Chromium here (neither chromium-headless-shell nor chromium)")


def browse(browser: str, url: str, tmp_path: Path, shot: str, width: int = 2400) -> str:
    """The page's DOM after its scripts ran; a screenshot of it kept as ``shot``."""
    common = [browser, *BROWSER_FLAGS, f"--user-data-dir={tmp_path / 'profile'}",
              "--virtual-time-budget=20000", f"--window-size={width},1000"]
    dom = subprocess.run([*common, "--dump-dom", url], capture_output=True, text=True,
                         timeout=180).stdout
    subprocess.run([*common, f"--screenshot={tmp_path / shot}", url], capture_output=True,
                   timeout=180, check=False)
    return dom


VOID = {"area", "base", "br", "col", "embed", "hr", "img", "input", "link", "meta", "source",
        "track", "wbr"}


class GridCells(HTMLParser):
    """The texts of the runs table's cells (``role="gridcell"``), by column id."""

    def __init__(self) -> None:
        super().__init__()
        self.cells: dict[str, list[str]] = {}
        self._open: list[tuple[str, int]] = []  # (column id, depth) of the cells being read
        self._depth = 0
        self._texts: list[list[str]] = []

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        if tag in VOID:
            return
        self._depth += 1
        found = dict(attrs)
        if found.get("role") == "gridcell" and found.get("col-id"):
            self._open.append((str(found["col-id"]), self._depth))
            self._texts.append([])

    def handle_endtag(self, tag: str) -> None:
        if tag in VOID:
            return
        if self._open and self._open[-1][1] == self._depth:
            column, _ = self._open.pop()
            self.cells.setdefault(column, []).append(
                "|".join(t for t in self._texts.pop() if t.strip()))
        self._depth -= 1

    def handle_data(self, data: str) -> None:
        if self._texts:
            self._texts[-1].append(data.strip())


def cells(dom: str) -> dict[str, list[str]]:
    """Column id -> the texts of that column's cells, top to bottom (headers excluded)."""
    parser = GridCells()
    parser.feed(dom)
    return parser.cells


def start_ui(output_root: Path, cwd: Path) -> tuple[subprocess.Popen[str], str]:
    """``spu ui OUTPUT_ROOT`` started as a user starts it; the address it prints."""
    proc = subprocess.Popen([sys.executable, "-m", "spu", "ui", str(output_root)], cwd=cwd,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    assert proc.stdout is not None
    line = proc.stdout.readline()
    found = re.search(r"(http://127\.0\.0\.1:\d+/\S+)", line)
    if found is None:
        proc.kill()
        said = proc.stderr.read() if proc.stderr else ""
        pytest.fail(f"spu ui printed no address: {line!r} {said}")
    return proc, found.group(1)


@pytest.mark.slow
def test_spu_ui_opens_the_runs_table_with_scores_and_a_runs_trace(tmp_path) -> None:
    """A small default sweep, then ``spu ui``: the page it names shows the runs table with
    the SPU view's columns and a value in each; a run's trace opens; Ctrl-C stops it."""
    browser = find_browser()
    tasks = tmp_path / "tasks"
    for task in (EXAMPLE_TASK, EXAMPLE_TWO_GROUPS):
        shutil.copytree(task, tasks / task.name)
    out = tmp_path / "outputs"
    sweep = run_module(["spu.main", f"task_root={tasks}", f"output_root={out}",
                        "sandbox=subprocess", "sandbox.allow_unisolated=true"], cwd=tmp_path)
    assert sweep.returncode == 0, sweep.stdout[-3000:] + sweep.stderr[-3000:]
    ui, url = start_ui(out, tmp_path)
    try:
        assert "workflowType=machine_learning" in url and "viewStateShareKey=spu" in url
        dom = browse(browser, url, tmp_path, "mlflow-runs-table.png")
        table = cells(dom)
        names = [n.rsplit("|", 1)[-1] for n in table.get("attributes.`Run Name`", [])]
        assert len(names) == 6 and names == sorted(names), names
        assert all(re.fullmatch(r"\S+-none · example-[a-z-]+ · r0", n) for n in names), names
        # The name column is as wide as the view made it for the longest name: uncut.
        width = re.search(r'col-id="attributes\.`Run Name`"[^>]*?width: (\d+)px', dom)
        assert width and int(width.group(1)) >= text_width(max(map(len, names)), low=240)
        for kind, key in SPU_VIEW_COLUMNS:
            values = table.get(column_id(kind, key), [])
            assert len(values) == 6 and all(values), (key, values)
        assert set(table[column_id("tags", "outcome")]) == {"valid"}
        assert all(-1 <= float(v) <= 1 for v in table[column_id("metrics", "score_strict")])
        trace_page = trace_url(url, out)
        dom = browse(browser, trace_page, tmp_path, "mlflow-run-trace.png", width=1600)
        assert "agent run" in dom and "score_recovered" in dom
    finally:
        ui.send_signal(signal.SIGINT)
        stdout, stderr = ui.communicate(timeout=60)
    assert ui.returncode == 0, stderr
    assert "spu ui: stopped" in stdout
    port = int(re.search(r":(\d+)/", url).group(1))  # type: ignore[union-attr]
    assert not port_answers(port)


def trace_url(view_url: str, out: Path) -> str:
    """The address of one run's trace, opened on that run's page."""
    client = client_for(f"sqlite:///{out / 'mlflow.db'}")
    experiment = re.search(r"/experiments/(\d+)/", view_url).group(1)  # type: ignore[union-attr]
    run = client.search_runs([experiment], max_results=1)[0]
    (trace,) = client.search_traces(locations=[experiment],
                                    filter_string=f"metadata.mlflow.sourceRun = "
                                                  f"'{run.info.run_id}'")
    base = view_url.split("#", 1)[0]
    return (f"{base}#/experiments/{experiment}/runs/{run.info.run_id}/traces?"
            f"workflowType=machine_learning&selectedEvaluationId={trace.info.trace_id}")


def port_answers(port: int) -> bool:
    import socket

    deadline = time.monotonic() + 5
    while time.monotonic() < deadline:
        with socket.socket() as sock:
            sock.settimeout(1)
            if sock.connect_ex(("127.0.0.1", port)) != 0:
                return False
        time.sleep(0.5)
    return True


def test_repo_readme_step_four_is_spu_ui() -> None:
    readme = (REPO / "README.md").read_text()
    step = readme.split("**4.", 1)[1].split("**5.", 1)[0]
    assert "spu ui" in step and "mlflow ui" not in step
