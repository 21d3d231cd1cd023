"""``spu stats``: the files and columns of SPEC section 6, seeded, and clear input errors."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pandas as pd
import pytest

from spu.stats.simulate import simulate_runs
from tests.conftest import EXAMPLE_TASK, EXAMPLE_TWO_GROUPS, REPO, TASKS, run_module

SPEC_COLUMNS = {
    "configs.csv": ["config", "n_runs", "n_scored", "raw_mean", "raw_ci_low", "raw_ci_high",
                    "adjusted_mean", "adjusted_ci_low", "adjusted_ci_high", "above_chance",
                    "above_chance_share", "above_chance_ci_low", "above_chance_ci_high"],
    "pairs.csv": ["config_a", "config_b", "n_shared", "mean_diff", "p_value", "p_holm",
                  "significant", "mde", "mde_uncorrected"],
    "outcomes.csv": ["config", "n_runs", "rejected", "refusal", "no_file", "mean_at_minus1",
                     "mean_after_recovery", "scored_mean"],
    "costs.csv": ["config", "n_scored", "cost_mean", "cost_ci_low", "cost_ci_high",
                  "cost_total", "pareto"],
    "disciplines.csv": ["config", "discipline", "n_tasks", "raw_mean"],
}


@pytest.fixture(scope="module")
def runs_csv(tmp_path_factory) -> Path:
    path = tmp_path_factory.mktemp("runs") / "runs.csv"
    simulate_runs(seed=11).to_csv(path, index=False)
    return path


def _stats(runs: Path, out: Path, *extra: str) -> subprocess.CompletedProcess[str]:
    return run_module(["spu", "stats", str(runs), "--out", str(out), "--resamples", "300",
                       "--simulations", "300", *extra])


@pytest.fixture(scope="module")
def default_out(runs_csv, tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("stats") / "out"
    done = _stats(runs_csv, out)
    assert done.returncode == 0, done.stderr
    return out


def test_writes_the_spec_files_with_their_columns(default_out) -> None:
    for name, columns in SPEC_COLUMNS.items():
        table = pd.read_csv(default_out / name)
        missing = [c for c in columns if c not in table.columns]
        assert not missing, f"{name} lacks {missing}"
    for name in ("private.csv", "private_pairs.csv", "repeats.csv", "reliability.csv",
                 "rank_stability.csv", "summary.csv", "manifest.json"):
        assert (default_out / name).is_file(), name
    configs = pd.read_csv(default_out / "configs.csv")
    assert len(configs) == 13 and configs["n_runs"].eq(100).all()
    assert len(pd.read_csv(default_out / "pairs.csv")) == 78
    summary = pd.read_csv(default_out / "summary.csv").set_index("statistic")
    assert round(summary.loc["z_corrected", "value"], 2) == 4.26
    assert round(summary.loc["z_uncorrected", "value"], 2) == 2.80


def test_same_seed_same_files_also_from_parquet(runs_csv, default_out, tmp_path) -> None:
    """Run again from the same table written as parquet: byte-identical results (seed 0)."""
    parquet = tmp_path / "runs.parquet"
    pd.read_csv(runs_csv).to_parquet(parquet, index=False)
    assert _stats(parquet, tmp_path / "again").returncode == 0
    for name in [*SPEC_COLUMNS, "private.csv", "repeats.csv", "rank_stability.csv"]:
        assert (tmp_path / "again" / name).read_bytes() == (default_out / name).read_bytes()


def test_bad_table_is_refused_and_nothing_is_written(runs_csv, tmp_path) -> None:
    table = pd.read_csv(runs_csv)
    table["scored"] = table["scored"].astype(object)
    table.loc[3, "scored"] = "perhaps"
    bad = tmp_path / "bad.csv"
    table.to_csv(bad, index=False)
    done = _stats(bad, tmp_path / "out")
    assert done.returncode == 2
    assert f"{bad}: column 'scored', line 5" in done.stderr
    assert not (tmp_path / "out").exists()


def test_bad_task_root_is_named(runs_csv, tmp_path) -> None:
    done = _stats(runs_csv, tmp_path / "out", "--tasks", str(tmp_path / "missing"))
    assert done.returncode == 2 and "task root is not a folder" in done.stderr


@pytest.mark.slow
def test_end_to_end_from_real_runs(tmp_path) -> None:
    """The three baselines run on the example tasks (subprocess sandbox, real grader), and
    the random baseline twice more; ``spu runs export`` writes the table and ``spu stats``
    reads it with the task packages and the run folders: every analysis runs."""
    from spu.config import EffortConfig, HarnessConfig, ModelConfig, SandboxConfig
    from spu.runner import RunSpec, run_one

    output_root = tmp_path / "outputs"
    for task in (EXAMPLE_TASK, EXAMPLE_TWO_GROUPS):
        for model, repeats in (("random", (0, 1, 2)), ("presented_order", (0,)),
                               ("monotone_prior", (0,))):
            for repeat in repeats:
                record = run_one(RunSpec(
                    model=ModelConfig(name=model, provider="baseline"),
                    harness=HarnessConfig(name="baseline"), effort=EffortConfig(name="none"),
                    task_dir=task, output_root=output_root,
                    sandbox=SandboxConfig(name="subprocess"), repeat=repeat))
                assert record.scored
    export = run_module(["spu", "runs", "export", "--runs-dir", str(output_root / "runs"),
                         "--out", str(tmp_path / "runs.csv")])
    assert export.returncode == 0, export.stderr
    done = _stats(tmp_path / "runs.csv", tmp_path / "stats", "--tasks", str(TASKS),
                  "--runs-dir", str(output_root))
    assert done.returncode == 0, done.stderr
    out = tmp_path / "stats"
    configs = pd.read_csv(out / "configs.csv")
    assert set(configs["config"]) == {"random-none", "presented_order-none",
                                      "monotone_prior-none"}
    assert (configs["n_scored"] == configs["n_runs"]).all()
    agreement = pd.read_csv(out / "agreement_tasks.csv")
    assert len(agreement) == len(set(pd.read_csv(tmp_path / "runs.csv")["task_id"]))
    assert (out / "monotone.csv").is_file()
    repeats = pd.read_csv(out / "repeats.csv")
    assert repeats["config"].tolist() == ["random-none"] and repeats["n_runs"].iloc[0] == 4
    runs = pd.read_csv(tmp_path / "runs.csv")
    official = runs[runs["repeat"] == 0]
    expected = official.groupby("config")["score_recovered"].mean()
    got = configs.set_index("config")["raw_mean"]
    pd.testing.assert_series_equal(got.sort_index(), expected.sort_index(), check_names=False)


def test_help_lists_stats() -> None:
    out = subprocess.run([sys.executable, "-m", "spu", "--help"], capture_output=True,
                         text=True, cwd=REPO, check=True)
    assert "stats" in out.stdout


def test_cli_defaults_are_the_module_constants() -> None:
    """The parser spells its defaults out (``spu --help`` imports no numpy): they must be
    the constants the analyses use."""
    from spu.cli import build_parser
    from spu.stats.private import NULL_DRAWS
    from spu.stats.repeats import DEFAULT_SIMULATIONS
    from spu.stats.resampling import DEFAULT_RESAMPLES

    for command in ("stats", "report"):
        args = build_parser().parse_args([command, "runs.csv", "--out", "out"])
        assert (args.resamples, args.simulations, args.null_draws) == (
            DEFAULT_RESAMPLES, DEFAULT_SIMULATIONS, None)
    # --null-draws unset: every null at the paper's count, spelled out in the help.
    from spu.stats.disciplines import PERMUTATIONS
    from spu.stats.interaction import NULL_DRAWS as SIMULATED

    help_text = " ".join(build_parser()._subparsers._group_actions[0]  # type: ignore[union-attr]
                         .choices["stats"].format_help().split())
    for count in (SIMULATED, PERMUTATIONS, NULL_DRAWS):
        assert f"{count:,}" in help_text
    from spu.stats.cli import DESIGN_DIFFERENCES
    from spu.stats.design import DIFFERENCES

    assert DESIGN_DIFFERENCES == DIFFERENCES


SPEC9_COLUMNS = {
    "tasks.csv": ["task_id", "discipline", "n_items", "n_groups", "threshold", "task_mean",
                  "task_sd"],
    "exposure.csv": ["config", "n_flagged", "n_unflagged", "diff", "ci_low", "ci_high",
                     "p_perm", "p_holm"],
    "variance.csv": ["component", "share", "ci_low", "ci_high"],
    "tests.csv": ["test", "statistic", "df", "p_value", "section"],
    "repeats_orders.csv": ["task_id", "group_id", "n_items", "identical_in_all_repeats"],
}


@pytest.fixture(scope="module")
def study_stats(tmp_path_factory) -> Path:
    """``spu stats`` with ``--tasks`` and ``--runs-dir`` on a paper-sized simulated study
    (``python -m spu.stats.simulate --study``, seed 3: table, task packages, run folders)."""
    root = tmp_path_factory.mktemp("study")
    runs = root / "sim.csv"
    done = run_module(["spu.stats.simulate", str(runs), "--seed", "3", "--study",
                       str(root / "study")])
    assert done.returncode == 0, done.stderr
    out = root / "stats"
    done = _stats(runs, out, "--tasks", str(root / "study" / "tasks"), "--runs-dir",
                  str(root / "study" / "outputs"))
    assert done.returncode == 0, done.stderr
    return out


@pytest.mark.slow  # more than a few seconds
def test_writes_the_spec_section_9_files_on_a_simulated_study(study_stats) -> None:
    """A paper-sized simulated study (table, task packages, run folders): ``spu stats``
    writes every file of SPEC section 9 with its columns, the named tests of E.9 and
    E.10 in tests.csv, and the manifest names each file's paper section."""
    out = study_stats
    for name, columns in SPEC9_COLUMNS.items():
        table = pd.read_csv(out / name)
        assert list(table.columns[:len(columns)]) == columns, name
        assert len(table), name
    tests = pd.read_csv(out / "tests.csv")
    for name in ("kruskal_wallis_task_means", "interaction_by_discipline",
                 "discipline_order_stability", "discipline_gap_range", "stop_clustering",
                 "interaction_F", "widest_spread", "exposure_pooled_difference"):
        assert tests["test"].str.startswith(name).any(), name
    assert set(tests["section"].astype(str)) >= {"3.3", "4.4", "4.6", "E.9", "E.10"}
    variance = pd.read_csv(out / "variance.csv")
    assert variance["share"].sum() == pytest.approx(1.0)
    tasks = pd.read_csv(out / "tasks.csv")
    assert len(tasks) == 116 and tasks["attainable_max"].notna().all()
    import json

    manifest = json.loads((out / "manifest.json").read_text())
    assert manifest["sections"]["variance.csv"].startswith("Figure 26c")
    assert manifest["sections"]["repeats_orders.csv"].startswith("Figure 19a")
    # issue 26: one df across the discipline tests, the 3.6 and 4.2 shares, E.3's log
    by_test = tests.set_index("test")
    for name in ("kruskal_wallis_task_means", "interaction_by_discipline",
                 "discipline_order_stability", "discipline_gap_range"):
        assert str(by_test.loc[name, "df"]) == "3", name
    unrelated = pd.read_csv(out / "monotone_unrelated.csv").set_index("config")
    assert unrelated.loc["all", "n_submitted"] > 0
    assert 0 <= unrelated.loc["all", "share"] <= 1
    for name in ("monotone_unrelated.csv", "repeats_tasks.csv", "effort_correlations.csv"):
        assert manifest["outputs"][name]["written"] and manifest["outputs"][name]["rule"], name
    correlations = pd.read_csv(out / "effort_correlations.csv")
    adjusted = correlations[correlations["config"].str.startswith("(")].set_index("measure")
    assert adjusted.loc["runtime_s", "transform"] == "log"


@pytest.mark.slow  # more than a few seconds (shares the study above)
def test_every_file_written_with_runs_dir_and_tasks_names_its_rule(study_stats) -> None:
    """Issue 43 gap 4: with ``--tasks`` and ``--runs-dir`` ``spu stats`` also writes the
    files that need task packages or run folders (``presented_order.csv``,
    ``pair_order.csv`` and the rest); every file it writes has a manifest entry with its
    rule, population, basis and the paper's sentence, as ``spu.stats.rules`` states them
    (the test plugin's ``example_counts.csv``, an outside analysis, states none)."""
    import json

    from spu.stats.rules import BASES, STATS_RULES

    outputs = json.loads((study_stats / "manifest.json").read_text())["outputs"]
    on_disk = {p.name for p in study_stats.glob("*.csv")}
    assert {"presented_order.csv", "pair_order.csv", "pair_order_runs.csv",
            "agreement_tasks.csv", "monotone.csv", "repeats_orders.csv"} <= on_disk
    assert on_disk <= {name for name, out in outputs.items() if out["written"]}
    # summary.csv and tests.csv gather every analysis' rows: no one source
    builtin = {name for name in on_disk
               if str(outputs[name].get("source", "spu.stats")).startswith("spu.stats")}
    assert on_disk - builtin <= {"example_counts.csv"}, sorted(on_disk - builtin)
    assert builtin <= set(STATS_RULES), sorted(builtin - set(STATS_RULES))
    for name in builtin:
        entry = outputs[name]
        for field in ("rule", "population", "basis", "sentence"):
            assert isinstance(entry[field], str) and entry[field].strip(), (name, field)
        assert entry["basis"] in BASES, name
    presented = outputs["presented_order.csv"]
    assert presented["basis"] == "paper" and "22 official runs" in presented["sentence"]
    assert "--runs-dir" in presented["population"] and "--tasks" in presented["population"]
    pair_order = outputs["pair_order.csv"]
    assert pair_order["basis"] == "paper" and "appendix F" in pair_order["sentence"]
    assert "answer key" in pair_order["population"]


def test_stats_on_deterministic_repeats_warns_nothing(tmp_path) -> None:
    """``spu stats`` prints no numpy RuntimeWarning on a baseline that scores alike every time.

    A deterministic baseline repeated on every task has no spread within a task: its ICC
    is 1 (all the variance is between tasks), and a bootstrap resample that draws one task
    only has no spread at all, an undefined ICC left out of the interval rather than a 0/0
    division reported on the console.
    """
    from tests.stats.conftest import run_row

    rows = []
    for task, score in (("t1", 0.5), ("t2", -0.25), ("t3", 0.1)):
        for repeat in range(3):
            rows.append(run_row("presented_order-none", task, score, repeat=repeat))
            rows.append(run_row("random-none", task, score - 0.1 * repeat, repeat=repeat))
    runs = tmp_path / "runs.csv"
    pd.DataFrame(rows).to_csv(runs, index=False)
    done = subprocess.run([sys.executable, "-W", "error::RuntimeWarning", "-m", "spu", "stats",
                           str(runs), "--out", str(tmp_path / "out"), "--resamples", "200",
                           "--simulations", "200"], capture_output=True, text=True, cwd=REPO,
                          timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    assert "RuntimeWarning" not in done.stderr
    repeats = pd.read_csv(tmp_path / "out" / "repeats.csv").set_index("config")
    assert repeats.loc["presented_order-none", "icc"] == pytest.approx(1.0)


def _two_experiment_table(path: Path) -> Path:
    """Runs of two sweeps: ``spu-default`` (three tasks, finished first) and ``spu-later``."""
    from tests.stats.conftest import run_row

    rows = []
    for i, task in enumerate(("t1", "t2", "t3")):
        for config, score in (("random-none", 0.1 * i), ("presented_order-none", 0.3 - 0.1 * i)):
            rows.append({**run_row(config, task, score), "experiment": "spu-default",
                         "finished_at": f"2026-01-01T00:0{i}:00+00:00"})
    for i, task in enumerate(("t1", "t2", "t3", "t4", "t5", "t6")):
        rows.append({**run_row("mine-none", task, 0.05 * i), "experiment": "spu-later",
                     "run_id": f"later-{task}", "finished_at": f"2026-01-02T00:0{i}:00+00:00"})
    pd.DataFrame(rows).to_csv(path, index=False)
    return path


def test_stats_uses_the_most_recent_sweeps_experiment_and_says_so(tmp_path) -> None:
    """A runs table of two experiments: the default is the sweep that finished last, named
    in the output; ``--experiment`` picks another (``default`` finds ``spu-default``)."""
    runs = _two_experiment_table(tmp_path / "runs.csv")
    latest = _stats(runs, tmp_path / "latest")
    assert latest.returncode == 0, latest.stderr
    assert latest.stdout.splitlines()[0] == (
        "spu stats: experiment spu-later (the most recent sweep; others in the table: "
        "spu-default; choose one with --experiment NAME, or --experiment all)")
    assert list(pd.read_csv(tmp_path / "latest" / "configs.csv")["config"]) == ["mine-none"]
    chosen = _stats(runs, tmp_path / "chosen", "--experiment", "default")
    assert chosen.returncode == 0, chosen.stderr
    assert chosen.stdout.splitlines()[0] == "spu stats: experiment spu-default"
    configs = pd.read_csv(tmp_path / "chosen" / "configs.csv", keep_default_na=False)
    assert set(configs["config"]) == {"random-none", "presented_order-none"}
    # Three tasks each: the row itself says the mean rests on too few tasks.
    assert configs["warning"].str.startswith("scored on 3 tasks (fewer than 5)").all()
    later = pd.read_csv(tmp_path / "latest" / "configs.csv", keep_default_na=False)
    assert later["warning"].tolist() == [""]
    unknown = _stats(runs, tmp_path / "unknown", "--experiment", "nope")
    assert unknown.returncode == 2
    assert "--experiment nope: no such experiment in the table (it has spu-default, " \
           "spu-later; or --experiment all)" in unknown.stderr


@pytest.mark.slow  # ten seconds and more (the quick tier stays under 5 minutes)
def test_report_takes_the_experiment_and_warns_in_table_1(tmp_path) -> None:
    runs = _two_experiment_table(tmp_path / "runs.csv")
    done = run_module(["spu", "report", str(runs), "--out", str(tmp_path / "report"),
                       "--experiment", "spu-default", "--resamples", "200",
                       "--simulations", "200"])
    assert done.returncode == 0, done.stderr
    assert done.stdout.splitlines()[0] == "spu report: experiment spu-default"
    table = (tmp_path / "report" / "tables" / "configs.md").read_text()
    assert "| random-none (warning: 3 tasks scored, fewer than 5)" in table


def test_the_help_says_what_each_rule_option_changes(capsys) -> None:
    """Issue 43: --top-group's help said it set the rank-stability group only, while it also
    sets the discipline comparison's leading group; --discipline-groups' help understated
    the default leading group; each population option names the file it changes."""
    import re

    from spu.cli import main as spu_main

    with pytest.raises(SystemExit):
        spu_main(["stats", "--help"])
    text = re.sub(r"\s+", " ", capsys.readouterr().out).split("options:", 1)[1]
    top = text.split("--top-group K", 1)[1].split("--run-sd", 1)[0]
    assert "rank_stability.csv" in top and "discipline_gap.csv" in top and "reading" in top
    groups = text.split("--discipline-groups A,B;C,D", 1)[1].split("--unrelated-below", 1)[0]
    assert "widest gap" in groups and "Holm-significant" in groups and "--top-group" in groups
    assert "effort.csv repeats_mean" in text and "29" not in groups
    assert "pair_order_runs.csv" in text and "variance.csv" in text
