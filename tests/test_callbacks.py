"""The results table printed when a run or a sweep ends."""

from __future__ import annotations

import json
import shutil

import pytest
from rich.console import Console

from spu.callbacks import (
    results_table,
    run_warnings,
    summary_table,
    table_title,
    warning_lines,
)
from spu.launch.results import config_summaries
from tests.conftest import EXAMPLE_TASK, EXAMPLE_TWO_GROUPS, run_module


def _row(harness: str, config: str) -> dict:
    return {"task": "example-coupling-conditions", "model": "scripted", "effort": "none",
            "harness": harness, "config": config, "repeat": 0, "outcome": "valid",
            "score": 0.214, "threshold": 0.643, "runtime_s": 12.0, "status": "ran"}


def test_results_table_tells_harnesses_apart_by_column_and_config_label() -> None:
    """Issue 14 item 7: scripted Claude Code and Codex runs must not look identical."""
    rows = [_row("claude_code", "scripted-none"), _row("codex", "scripted-none-codex")]
    console = Console(width=200, record=True)
    console.print(results_table(rows, "sweep"))
    text = console.export_text()
    header = next(line for line in text.splitlines() if "task" in line and "outcome" in line)
    assert "harness" in header and "config" in header
    lines = [line for line in text.splitlines() if "example-coupling-conditions" in line]
    assert len(lines) == 2 and lines[0] != lines[1]
    assert any("claude_code" in line and "scripted-none " in line for line in lines)
    assert any("codex" in line and "scripted-none-codex" in line for line in lines)


def test_rows_without_a_config_label_fall_back_to_model_and_effort() -> None:
    row = _row("baseline", "")
    del row["config"]
    console = Console(width=200, record=True)
    console.print(results_table([row], "run"))
    assert "scripted-none" in console.export_text()


# ---------------------------------------------------------------- issue 40: the closing summary


def test_the_summary_gives_each_mean_its_bootstrap_interval_over_tasks() -> None:
    """The mean over tasks with its 95% percentile bootstrap interval resampling the tasks,
    checked against scipy.stats.bootstrap (percentile method) on the same scores, to 0.02
    (two generators of 10,000 resamples each)."""
    import numpy as np
    from scipy.stats import bootstrap

    scores = [0.62, -0.04, 0.21, 0.35, -0.30, 0.48, 0.05, 0.90]
    rows = [{"task": f"t{k}", "config": "c", "status": "ran", "scored": True, "score": s,
             "threshold": 0.5, "cost_usd": 0.0} for k, s in enumerate(scores)]
    (summary,) = config_summaries(rows)
    reference = bootstrap((np.array(scores),), np.mean, n_resamples=10_000,
                          method="percentile", random_state=np.random.default_rng(1))
    assert summary.mean_score == pytest.approx(np.mean(scores), abs=1e-12)
    assert summary.ci_low == pytest.approx(reference.confidence_interval.low, abs=0.02)
    assert summary.ci_high == pytest.approx(reference.confidence_interval.high, abs=0.02)
    assert (summary.tasks, summary.above_chance) == (8, 2)
    # Seeded: the same rows give the same interval.
    assert config_summaries(rows)[0] == summary
    console = Console(width=200, record=True)
    console.print(summary_table(rows))
    assert f"{summary.mean_score:.3f} [{summary.ci_low:.3f}, {summary.ci_high:.3f}]" in \
        console.export_text()


def test_a_task_with_repeats_counts_once_in_the_mean() -> None:
    rows = [{"task": "a", "config": "c", "scored": True, "score": s} for s in (0.0, 0.2)]
    rows.append({"task": "b", "config": "c", "scored": True, "score": 1.0})
    (summary,) = config_summaries(rows)
    assert summary.mean_score == pytest.approx((0.1 + 1.0) / 2)


def test_a_single_run_is_titled_for_what_ran() -> None:
    row = _row("baseline", "random-none")
    assert table_title([row], "default") == \
        "SPU run · random-none on example-coupling-conditions (repeat 0)"


def test_warnings_are_said_once_with_their_count(tmp_path) -> None:
    """Before: "asked for 8 CPUs, this machine gives 2", the cost disagreement and "no GPU"
    reached only an MLflow tag, never the console."""
    notes = ["asked for 8 CPUs, this machine gives 2: using all",
             "asked for 1 GPU(s), this machine has none: running without a GPU"]
    rows = []
    for key in ("k1", "k2", "k3"):
        (tmp_path / "runs" / key).mkdir(parents=True)
        said = notes if key != "k3" else notes[:1] + ["\x1b[2Jnote with an escape"]
        (tmp_path / "runs" / key / "run.json").write_text(json.dumps({"notes": said}))
        rows.append({**_row("baseline", "random-none"), "run_key": key})
    rows.append({**_row("baseline", "random-none"), "run_key": "k1", "status": "skipped"})
    lines = warning_lines(run_warnings(rows, tmp_path), 3)
    assert lines == ["warnings of the runs (each run.json's notes):",
                     f"  3 of 3 runs: {notes[0]}", f"  2 of 3 runs: {notes[1]}",
                     "  1 of 3 runs: \\x1b[2Jnote with an escape"]


@pytest.mark.slow
def test_a_sweep_ends_with_keys_intervals_where_the_runs_are_and_its_warnings(tmp_path) -> None:
    """Issue 40 items 3 and 7, through the command line: each run's line names its run key,
    which ``spu show`` takes; the closing tables give the interval and the run keys; the
    lines under them say where the runs are and how to open one; each warning is said once;
    ``transcript.html`` is in each run folder."""
    tasks = tmp_path / "tasks"
    for task in (EXAMPLE_TASK, EXAMPLE_TWO_GROUPS):
        shutil.copytree(task, tasks / task.name)
    out = tmp_path / "outputs"
    proc = run_module(["spu.main", f"task_root={tasks}", f"output_root={out}",
                       "sandbox=subprocess", "sandbox.allow_unisolated=true",
                       "limits.cpus=4096"], cwd=tmp_path, env={"COLUMNS": "250"})
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    text = proc.stdout + proc.stderr
    keys = sorted(p.name for p in (out / "runs").iterdir())
    assert len(keys) == 6
    lines = [line for line in text.splitlines() if " · valid · score " in line]
    assert sorted(line.rsplit(" · run ", 1)[1] for line in lines) == [k[:12] for k in keys]
    assert "SPU sweep · default · 6 runs: 3 configurations x 2 tasks" in text
    results = [json.loads(p.read_text()) for p in (out / "multirun").glob("*/*/result.json")]
    for s in config_summaries(results):
        assert f"{s.mean_score:.3f} [{s.ci_low:.3f}, {s.ci_high:.3f}]" in text
    assert f"runs: {out / 'runs'}" in text and f"compare in MLflow: spu ui {out}" in text
    assert text.count("asked for 4096 CPUs") == 1 and "6 of 6 runs: asked for 4096 CPUs" in text
    assert "6 of 6 runs: NO SANDBOX: the agent runs as a plain process" in text
    assert all((out / "runs" / k / "transcript.html").is_file() for k in keys)
    shown = run_module(["spu", "show", keys[0][:12], "--output-root", str(out)])
    assert shown.returncode == 0 and f"run {keys[0]}:" in shown.stdout


def test_a_row_carries_no_control_sequence_and_no_markup() -> None:
    """Invariant (issue 41, V3): a cell of the results table (a task folder's name, a
    note of why a run failed) prints as text: control characters escaped, markup shown."""
    from spu.callbacks import summary_table

    row = _row("baseline", "cfg[link=http://127.0.0.1:8765/x]")
    row.update(task="t\x1b[2J\x1b]0;pwned\x07", status="not_launched",
               note="lost: \x1b[32mvalid · score 0.991\x9b2J")
    console = Console(width=400, record=True, force_terminal=True)
    console.print(results_table([row], "run"))
    console.print(summary_table([row]))
    styled = console.export_text(styles=True, clear=False)
    assert "\x1b[2J" not in styled and "\x1b]" not in styled and "\x9b" not in styled
    text = console.export_text()
    assert "t\\x1b[2J\\x1b]0;pwned\\x07" in text and "\\x1b[32mvalid" in text
    assert "cfg[link=http://127.0.0.1:8765/x]" in text
