"""Issue 25: ``spu show`` and ``spu compare`` read recorded runs in the terminal."""

from __future__ import annotations

import json
from pathlib import Path

from spu.schema import RunRecord
from spu.testing.corpus import make_corpus
from spu.tracking.trajectories import iter_steps
from tests.conftest import REPO, run_module


def _record(folder: Path) -> RunRecord:
    return RunRecord.model_validate_json((folder / "run.json").read_text())


def test_show_prints_the_summary_then_steps_and_filters_them(tmp_path) -> None:
    """``spu show RUN_KEY``: the summary, then every tool call; ``--step N`` one step,
    ``--grep TEXT`` the steps that mention it; ``spu compare`` two runs of one task."""
    folders = make_corpus(tmp_path / "outputs", 7, task_root=REPO / "tasks", calls=12, seed=3)
    first = folders[0]
    record = _record(first)
    steps = list(iter_steps(first / "trajectory.jsonl.gz"))
    out = str(tmp_path / "outputs")
    shown = run_module(["spu", "show", record.run_key, "--output-root", out])
    assert shown.returncode == 0, shown.stderr
    assert shown.stdout.startswith(f"run {record.run_key}: {record.task_id}")
    for call in (c for s in steps for c in s.tool_calls):
        assert f"-> {call.name}" in shown.stdout
    one = run_module(["spu", "show", record.run_key, "--output-root", out, "--step", "3"])
    assert "#3 " in one.stdout and "#4 " not in one.stdout
    name = steps[-1].tool_calls[0].name if steps[-1].tool_calls else steps[1].tool_calls[0].name
    grep = run_module(["spu", "show", record.run_key, "--output-root", out, "--grep", name])
    assert grep.stdout.count(f"-> {name}") >= 1
    assert grep.stdout.count("\n#") < shown.stdout.count("\n#")
    same_task = [f for f in folders[1:] if _record(f).task_id == record.task_id]
    other = _record(same_task[0])
    compared = run_module(["spu", "compare", record.run_key, other.run_key, "--output-root",
                           out])
    assert compared.returncode == 0, compared.stderr
    assert f"A = {record.run_key}" in compared.stdout and "activity time shares:" in \
        compared.stdout
    for g in json.loads((first / "output" / "rankings.json").read_text())["rankings"]:
        assert f"group {g['group_id']}:" in compared.stdout
    missing = run_module(["spu", "show", "nope", "--output-root", out])
    assert missing.returncode == 2 and "no such run" in missing.stderr
