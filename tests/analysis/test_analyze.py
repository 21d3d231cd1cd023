"""``spu analyze`` end to end on a corpus built from recorded sessions of both CLIs."""

from __future__ import annotations

import json
from pathlib import Path

import pandas as pd
import pytest

from spu.cli import main
from spu.schema import ACTIVITY_CLASSES, Activity
from spu.testing.corpus import make_corpus

SPEC_FILES = {
    "calls.csv": ["run_key", "step", "call_index", "tool", "activity", "activity_class",
                  "time_s", "t_norm"],
    "runs_features.csv": ["run_key", "config", "task_id", "score", "n_calls", "runtime_s",
                          "web_share", "compute_share", "first_web_t", "method_families",
                          "first_complete_step", "first_complete_t", "first_draft_score",
                          "revisions", "pairs_flipped", "used_gpu", "gpu_seconds",
                          "stated_expected_rho"],
    "associations.csv": ["feature", "estimate", "ci_low", "ci_high", "p_value", "p_holm"],
}
pytestmark = pytest.mark.slow

TASKS = Path(__file__).resolve().parents[2] / "tasks"


@pytest.fixture(scope="module")
def corpus(tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("corpus")
    make_corpus(out, n_runs=36, task_root=TASKS, calls=20, seed=3)
    return out


@pytest.fixture(scope="module")
def analysis(corpus, tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("analysis")
    assert main(["analyze", str(corpus), "--out", str(out), "--tasks", str(TASKS),
                 "--resamples", "200", "--trees", "50"]) == 0
    return out


def test_spec_files_and_columns(analysis) -> None:
    for name, columns in SPEC_FILES.items():
        table = pd.read_csv(analysis / name)
        assert list(table.columns[:len(columns)]) == columns, name
        assert len(table), name


def test_calls_are_labelled_and_timed(analysis) -> None:
    calls = pd.read_csv(analysis / "calls.csv")
    assert set(calls["activity"]) <= {a.value for a in Activity}
    for activity, cls in zip(calls["activity"], calls["activity_class"], strict=True):
        assert ACTIVITY_CLASSES[Activity(activity)] == cls
    assert calls["t_norm"].between(0, 1).all() and (calls["time_s"] >= 0).all()
    # each call spans its step to the next step (E.7), ending before the next call starts
    assert (calls["t_end_norm"] >= calls["t_norm"]).all()
    for _, run in calls.groupby("run_key"):
        starts = run.groupby("step")["t_norm"].first().to_numpy()
        ends = run.groupby("step")["t_end_norm"].first().to_numpy()
        assert (ends[:-1] <= starts[1:]).all() and (ends[:-1] > starts[:-1]).any()
    # both CLIs' vocabularies were read: Claude Code's Bash and MCP, Codex's exec_command
    assert {"Bash", "exec_command", "mcp__spu__search", "spu__fetch"} <= set(calls["tool"])


def test_features_follow_the_corpus(analysis, corpus) -> None:
    f = pd.read_csv(analysis / "runs_features.csv")
    assert len(f) == 36
    assert f["first_complete_source"].isin(["model_text", "tool_call", "tool_output"]).all()
    assert f["first_draft_score"].notna().all()  # answer keys from --tasks
    assert (f["web_source"] == "audit_log").all()
    # the score of the submission is the run's; the draft is graded by the same key
    revised = f[f["revisions"] > 0]
    assert (revised["pairs_flipped"] > 0).all()
    # 4.3: the revisions are the runs whose submission differs from the draft
    rev = pd.read_csv(analysis / "revisions.csv")
    assert rev["submission_differs"].dtype == bool and rev["submission_differs"].any()
    summary = pd.read_csv(analysis / "summary.csv").set_index("statistic")["value"]
    assert float(summary["revision_runs_differing"]) == rev["submission_differs"].sum()
    outputs = json.loads((analysis / "manifest.json").read_text())["outputs"]
    assert "differ from their first draft" in outputs["revision_intervals.csv"]["rule"]


def test_the_corpus_exercises_the_paper_26_outputs(analysis) -> None:
    """Detectors, GPU (22b, 22e) and the audited service (3.7, 4.1), each with its rule."""
    f = pd.read_csv(analysis / "runs_features.csv")
    for name in ("typed_table", "disclosed_recollection"):
        assert 0 < f[name].sum() < len(f), name
    assert (f["used_audited_tools"] == (f["audited_calls"] > 0)).all()  # every run has a log
    audited = pd.read_csv(analysis / "audited_tools.csv").set_index("config")
    assert audited.loc["all", "share_never_audited"] == pytest.approx(
        (f["audited_calls"] == 0).mean())
    assert audited.loc["all", "n_with_log"] == 36 and audited.loc["all", "audited_errors"] > 0
    assert audited.loc["all", "audited_refused"] == 0  # the paper's: no policy block
    assert len(pd.read_csv(analysis / "gpu_workloads.csv"))
    within = pd.read_csv(analysis / "gpu_within_config.csv")
    assert set(within["marker"]) == {"used_gpu", "gpu_confirmed"}
    outputs = json.loads((analysis / "manifest.json").read_text())["outputs"]
    for name in ("gpu.csv", "gpu_workloads.csv", "gpu_within_config.csv", "audited_tools.csv",
                 "associations.csv", "runs_features.csv"):
        assert outputs[name]["rule"], name
    assert "16 method" in outputs["associations.csv"]["rule"]


def test_every_file_of_spu_analyze_names_its_rule(analysis) -> None:
    """Issue 43: each output file's manifest entry gives its rule, population, basis (the
    paper's rule, a reading, an option or the framework's) and the paper's sentence; 4.8's
    comparison is over the tasks with runs on both sides, as the paper writes."""
    from spu.stats.rules import BASES

    outputs = json.loads((analysis / "manifest.json").read_text())["outputs"]
    written = {p.name for p in analysis.glob("*.csv")}
    assert written <= set(outputs)
    for name in written:
        entry = outputs[name]
        assert entry["rule"] and entry["population"] and entry["sentence"], name
        assert entry["basis"] in BASES, name
    assert "both sides" in outputs["gpu_within_config.csv"]["rule"]
    assert "63 tasks" in outputs["gpu_within_config.csv"]["sentence"]
    within = pd.read_csv(analysis / "gpu_within_config.csv")
    assert within["n_tasks"].nunique() == 1


def test_figures_written_and_missing_ones_listed(analysis, capsys) -> None:
    pngs = {p.stem for p in (analysis / "figures").glob("*.png")}
    assert {"fig14a_activity_time", "fig15a_families", "fig16a_first_appearance",
            "fig17a_associations", "fig23b_confusion", "fig22b_gpu_workloads",
            "fig22e_gpu_within", "fig24d_effort_drafts"} <= pngs


def test_sample_and_audit(corpus, tmp_path, capsys) -> None:
    sample = tmp_path / "sample.jsonl"
    assert main(["analyze", "sample", str(corpus), "--n", "12", "--seed", "5",
                 "--out", str(sample)]) == 0
    printed = capsys.readouterr().out
    lines = [json.loads(x) for x in sample.read_text().splitlines()]
    assert len(lines) == 12 and "[12] run" in printed
    again = tmp_path / "again.jsonl"
    main(["analyze", "sample", str(corpus), "--n", "12", "--seed", "5", "--out", str(again)])
    assert again.read_text() == sample.read_text()  # seeded
    for i, line in enumerate(lines):
        line["correct"] = i != 0
        if i == 0:
            line["correct_activity"] = "other"
    sample.write_text("".join(json.dumps(x) + "\n" for x in lines))
    assert main(["analyze", "audit", str(sample), "--out", str(tmp_path)]) == 0
    assert "11 of 12 labels correct" in capsys.readouterr().out
    assert len(pd.read_csv(tmp_path / "audit.csv")) == 12


def test_audit_names_the_bad_line(tmp_path, capsys) -> None:
    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"run_key": "r", "step": 1, "call_index": 0, "activity": "nope"}\n')
    assert main(["analyze", "audit", str(bad)]) == 2
    err = capsys.readouterr().err
    assert "bad.jsonl: line 1" in err and "activity" in err


def test_missing_runs_dir_is_a_clear_error(tmp_path, capsys) -> None:
    assert main(["analyze", str(tmp_path / "nope"), "--out", str(tmp_path / "o")]) == 2
    assert "runs folder does not exist" in capsys.readouterr().err


def test_report_includes_the_trajectory_figures(analysis, tmp_path) -> None:
    from spu.report.build import build_report
    from spu.stats.analysis import StatsOptions, analyze
    from spu.stats.runs_table import check_runs_table
    from spu.stats.simulate import simulate_runs

    result = analyze(check_runs_table(simulate_runs(seed=2)),
                     StatsOptions(resamples=50, simulations=50))
    build_report(result, tmp_path, analysis=analysis)
    page = (tmp_path / "report.html").read_text()
    assert 'id="fig-fig14a_activity_time"' in page and "(Figure 14a)" in page
    md = (tmp_path / "report.md").read_text()
    assert "figures/fig17a_associations.png" in md
    assert "figure fig18_fig19ab_fig20 not drawn" in md


def test_a_sample_prints_the_agents_commands_as_text(tmp_path, capsys) -> None:
    """Issue 41 (V2): ``spu analyze sample`` prints the agents' commands and outputs for a
    person to label; their control characters reach the terminal escaped."""
    from spu.schema import ToolCall, Trajectory, TrajectoryStep
    from spu.tracking.trajectories import read_trajectory, write_trajectory
    from tests.conftest import REPO

    (folder,) = make_corpus(tmp_path / "outputs", 1, task_root=REPO / "tasks", calls=3)
    old = read_trajectory(folder / "trajectory.jsonl.gz")
    seq = "\x1b]52;c;cm0gLXJmIH4=\x07\x1b[2J"
    steps = [TrajectoryStep(index=0, timestamp="2026-11-01T00:00:00+00:00", tool_calls=[
        ToolCall(name="Bash", arguments={"command": "ls " + seq}, output="out " + seq)])]
    write_trajectory(folder / "trajectory.jsonl.gz",
                     Trajectory(harness=old.harness, steps=steps, usage=old.usage))
    assert main(["analyze", "sample", str(tmp_path / "outputs" / "runs"), "--n", "1",
                 "--out", str(tmp_path / "s.jsonl")]) == 0
    printed = capsys.readouterr().out
    assert "\x1b" not in printed and "\x07" not in printed
    assert "ls \\x1b]52;c;cm0gLXJmIH4=\\x07" in printed
