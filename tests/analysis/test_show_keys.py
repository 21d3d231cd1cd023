"""From the console to a run (issue 40): ``spu show`` takes the twelve characters of a run
key that the console prints (any unique prefix), and ``spu compare`` writes a submitted
order as it reads, lowest first."""

from __future__ import annotations

import json
import re
import shutil
from pathlib import Path

from spu.schema import RunRecord
from spu.testing.corpus import make_corpus
from tests.conftest import REPO, run_module


def _record(folder: Path) -> RunRecord:
    return RunRecord.model_validate_json((folder / "run.json").read_text())


def test_show_takes_a_unique_prefix_and_names_the_runs_a_short_one_fits(tmp_path) -> None:
    folders = make_corpus(tmp_path / "outputs", 3, task_root=REPO / "tasks", calls=4, seed=5)
    record = _record(folders[0])
    out = str(tmp_path / "outputs")
    shown = run_module(["spu", "show", record.run_key[:12], "--output-root", out])
    assert shown.returncode == 0, shown.stderr
    assert shown.stdout.startswith(f"run {record.run_key}: ")
    # A second folder sharing all but the last character: that prefix names two runs.
    prefix = record.run_key[:-1]
    twin = folders[0].parent / (prefix + ("x" if record.run_key[-1] != "x" else "y"))
    shutil.copytree(folders[0], twin)
    both = run_module(["spu", "show", prefix, "--output-root", out])
    assert both.returncode == 2
    (line,) = both.stderr.splitlines()
    assert line.startswith(f"spu show: 2 runs under {tmp_path / 'outputs' / 'runs'} start with")
    assert record.run_key in line and twin.name in line and "give more characters" in line
    none = run_module(["spu", "show", "zzzz", "--output-root", out])
    assert none.returncode == 2 and "no such run" in none.stderr


def test_compare_writes_orders_lowest_first_with_arrows_that_read_so(tmp_path) -> None:
    """Before: "E948 > E410 > ..." for an order submitted lowest first."""
    folders = make_corpus(tmp_path / "outputs", 7, task_root=REPO / "tasks", calls=4, seed=3)
    first = _record(folders[0])
    other = next(_record(f) for f in folders[1:] if _record(f).task_id == first.task_id)
    compared = run_module(["spu", "compare", first.run_key, other.run_key, "--output-root",
                           str(tmp_path / "outputs")])
    assert compared.returncode == 0, compared.stderr
    submitted = json.loads((folders[0] / "output" / "rankings.json").read_text())
    order = submitted["rankings"][0]["order"]
    line = next(x for x in compared.stdout.splitlines() if x.startswith("  A rho "))
    assert re.sub(r"^  A rho \S+  ", "", line) == " < ".join(order)
    assert " > " not in compared.stdout
