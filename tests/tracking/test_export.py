"""The runs table (SPEC section 5) exported from MLflow after real runs."""

from __future__ import annotations

import dataclasses
import itertools
import json
import math
import shutil
import sqlite3
import stat
import time
from pathlib import Path

import pandas as pd
import pytest

from spu.cli import main
from spu.config import EffortConfig, HarnessConfig, LimitsConfig, ModelConfig, SandboxConfig
from spu.runner import RunSpec, run_one
from spu.schema import Outcome, RunRecord, Usage
from spu.tracking.export import (
    SPEC_COLUMNS,
    RunsExportError,
    load_record,
    runs_table,
    runs_table_from_records,
    write_runs_table,
)
from spu.tracking.store import client_for, log_run
from spu.tracking.trajectories import TRAJECTORY_FILE, iter_steps
from tests.conftest import EXAMPLE_TASK, EXAMPLE_TWO_GROUPS, REPO, run_module
from tests.tracking.conftest import (
    SESSION_COST_USD,
    SESSION_FULL_INPUT_COST_USD,
    SESSION_REQUESTS,
    SOURCE,
    sandbox_name,
    session_spec,
)

README_SEARCHES = {
    # The three searches the README shows for `mlflow ui`, with what they find here.
    "scored_chemistry": "params.config = 'random-none' and tags.scored = 'true' "
                        "and params.discipline = 'chemistry'",
    "doi_exposure": "tags.flagged_exposure = 'true' and tags.exposure_kinds LIKE '%doi%'",
    "long_context": "params.model = 'sol61' and metrics.long_context_requests > 0",
}


def assert_row_is_record(row: dict, record: RunRecord) -> None:
    """Every SPEC column of ``row`` carries the value of ``record`` (floats exactly)."""
    expected = {
        "config": record.config, "model": record.model, "harness": record.harness,
        "effort": record.effort, "task_id": record.task_id, "discipline": record.discipline,
        "subfield": record.subfield, "visibility": record.visibility, "repeat": record.repeat,
        "outcome": record.outcome.value, "score_strict": record.score_strict,
        "score_recovered": record.score_recovered, "scored": record.scored,
        "threshold": record.threshold, "n_items": record.n_items,
        "input_tokens": record.usage.input, "cache_read_tokens": record.usage.cache_read,
        "cache_write_tokens": record.usage.cache_write, "output_tokens": record.usage.output,
        "cost_usd": record.cost_usd, "runtime_s": record.runtime_s,
        "tool_calls": record.tool_calls, "web_fetches": record.web_fetches,
        "used_gpu": record.used_gpu, "flagged_exposure": record.flagged_exposure,
    }
    got = {k: row[k] for k in expected}
    assert got == expected


# ---------------------------------------------------------------- a sweep of the baselines


@pytest.fixture(scope="module")
def sweep(tmp_path_factory) -> Path:
    """The default job (3 baselines x the 2 example tasks) run by ``python -m spu.main``."""
    root = tmp_path_factory.mktemp("sweep")
    for task in (EXAMPLE_TASK, EXAMPLE_TWO_GROUPS):
        shutil.copytree(task, root / "tasks" / task.name)
    out_root = root / "outputs"
    out = run_module(["spu.main", f"task_root={root / 'tasks'}", f"output_root={out_root}",
                      f"sandbox={sandbox_name()}"], timeout=600)
    assert out.returncode == 0, out.stderr[-3000:]
    return out_root


@pytest.mark.slow
def test_export_of_a_sweep_gives_the_spec_columns_and_run_json_values(sweep, tmp_path,
                                                                       capsys) -> None:
    out = tmp_path / "runs.csv"
    assert main(["runs", "export", "--output-root", str(sweep), "--experiment", "default",
                 "--out", str(out)]) == 0
    assert "wrote 6 rows (6 official)" in capsys.readouterr().out
    df = pd.read_csv(out, keep_default_na=True)
    assert tuple(df.columns[:len(SPEC_COLUMNS)]) == SPEC_COLUMNS
    records = {load_record(p).run_key: load_record(p) for p in sweep.glob("runs/*/run.json")}
    assert len(df) == len(records) == 6
    client = client_for(f"sqlite:///{sweep / 'mlflow.db'}")
    for row in df.to_dict("records"):
        record = records[row["run_key"]]
        assert_row_is_record(row, record)
        assert client.get_run(row["run_id"]).data.tags["run_key"] == row["run_key"]
        assert row["official"] and row["attempt"] == row["n_attempts"] == 1
        assert row["experiment"] == "spu-default"


@pytest.mark.slow
def test_parquet_mlflow_and_run_json_tables_agree(sweep, tmp_path) -> None:
    uri = f"sqlite:///{sweep / 'mlflow.db'}"
    table = runs_table(uri)
    parquet = write_runs_table(table, tmp_path / "runs.parquet")
    pd.testing.assert_frame_equal(pd.read_parquet(parquet), table)
    from_files = runs_table_from_records(sweep / "runs")
    keyed = ["run_key"]
    drop = ["run_id", "experiment"]
    pd.testing.assert_frame_equal(
        table.drop(columns=drop).sort_values(keyed).reset_index(drop=True),
        from_files.drop(columns=drop).sort_values(keyed).reset_index(drop=True),
    )
    csv = write_runs_table(table, tmp_path / "runs.csv")
    back = pd.read_csv(csv)
    for col in ("score_strict", "score_recovered", "threshold", "runtime_s"):
        assert back[col].tolist() == table[col].tolist(), f"{col} lost precision in CSV"


@pytest.mark.slow
def test_runs_table_feeds_the_statistics_module(sweep, tmp_path) -> None:
    """``spu runs export`` output is read by ``spu stats`` as it is."""
    from spu.stats.runs_table import read_runs_table

    for suffix in (".csv", ".parquet"):
        out = tmp_path / f"runs{suffix}"
        assert main(["runs", "export", "--output-root", str(sweep), "--out", str(out)]) == 0
        checked = read_runs_table(out)
        assert len(checked) == 6 and checked["scored"].all()
    stats = run_module(["spu", "stats", str(tmp_path / "runs.csv"), "--out",
                        str(tmp_path / "stats"), "--resamples", "200"])
    assert stats.returncode == 0, stats.stderr[-3000:]
    configs = pd.read_csv(tmp_path / "stats" / "configs.csv")
    assert set(configs["config"]) == {"random-none", "presented_order-none",
                                      "monotone_prior-none"}


@pytest.mark.slow
def test_readme_search_finds_one_configurations_scored_chemistry_runs(sweep) -> None:
    client = client_for(f"sqlite:///{sweep / 'mlflow.db'}")
    exp = client.get_experiment_by_name("spu-default").experiment_id
    found = client.search_runs([exp], README_SEARCHES["scored_chemistry"])
    assert [(r.data.params["model"], r.data.params["task"]) for r in found] == [
        ("random", "example-coupling-conditions")]


# ---------------------------------------------------------------- runs that report usage


PAGE = ('<html><a href="https://doi.org/10.1038/s41586-099-01234-5">Ligand-controlled '
        'selectivity in nickel-catalysed Suzuki coupling</a> (PMID: 39123456)</html>')


@pytest.mark.slow
def test_usage_cost_and_exposure_of_runs_with_per_request_usage(tmp_path, answers_root,
                                                                target) -> None:
    """Tokens per bucket equal the trajectory's; cost is Table 7 worked by hand."""
    ids = {}
    for repeat, cli_cost in ((0, 0.4693), (1, 0.5)):  # within 1% of 0.467, and 7% off
        record = run_one(session_spec(tmp_path, answers_root, cli_cost=cli_cost, page=PAGE,
                                      repeat=repeat))
        assert record.outcome.value == "valid"
        ids[repeat] = log_run(record, tmp_path / "outputs" / "runs" / record.run_key, target)
    df = runs_table(target.uri, "test")
    assert len(df) == 2
    client = client_for(target)
    expected = Usage(**{k: sum(r[k] for r in SESSION_REQUESTS) for k in SESSION_REQUESTS[0]})
    for row in df.to_dict("records"):
        # The trajectory as MLflow keeps it, streamed back step by step.
        local = client.download_artifacts(row["run_id"], TRAJECTORY_FILE, str(tmp_path))
        summed = Usage()
        for step in iter_steps(Path(local)):
            summed = summed + (step.usage or Usage())
        assert summed == expected
        assert (row["input_tokens"], row["cache_read_tokens"], row["cache_write_tokens"],
                row["output_tokens"]) == (summed.input, summed.cache_read, summed.cache_write,
                                          summed.output) == (31_500, 710_000, 32_000, 8_800)
        assert row["cost_usd"] == pytest.approx(SESSION_COST_USD, rel=1e-12)
        assert row["cost_full_input_usd"] == pytest.approx(SESSION_FULL_INPUT_COST_USD,
                                                           rel=1e-12)
        assert row["long_context_requests"] == 1
        assert row["cost_disagreement"] is (row["repeat"] == 1)
        assert row["cli_cost_usd"] == (0.4693 if row["repeat"] == 0 else 0.5)
        assert row["flagged_exposure"] and row["exposure_kinds"] == "doi,partial_title,pmid"
        assert (row["tool_calls"], row["web_fetches"]) == (3, 1)
        assert row["cli_version"] == "session-agent 1.0"
        assert row["run_id"] == ids[row["repeat"]]
        record = load_record(tmp_path / "outputs" / "runs" / row["run_key"] / "run.json")
        assert_row_is_record(row, record)
        assert [h.kind for h in record.exposure_hits] == ["doi", "pmid", "partial_title"]
        assert record.exposure_hits[0].identifier == SOURCE["doi"]

    run = client.get_run(ids[1])
    assert {"model", "harness", "effort", "task", "task_version", "discipline", "subfield",
            "visibility", "repeat", "run_key", "grader_version", "cli_version",
            "spu_version"} <= set(run.data.params)
    assert {"score_strict", "score_recovered", "rho/G1", "chance_threshold", "input_tokens",
            "cache_read_tokens", "cache_write_tokens", "output_tokens", "cost_usd",
            "runtime_s", "tool_calls", "web_fetches"} <= set(run.data.metrics)
    assert {"outcome", "scored", "flagged_exposure", "used_gpu", "cost_disagreement",
            "attempt"} <= set(run.data.tags)
    assert "differs from the CLI" in run.data.tags["warnings"]
    artifacts = _artifact_paths(client, ids[1])
    assert {"run.json", "grade.json", TRAJECTORY_FILE, "output/rankings.json",
            "output/report.md", "output/scripts/rank.py", "logs/agent.stdout",
            "logs/agent.stderr"} <= artifacts
    assert not any(a.startswith(("workspace", "task")) for a in artifacts)

    exp = client.get_experiment_by_name("test").experiment_id
    for name in ("doi_exposure", "long_context"):
        assert len(client.search_runs([exp], README_SEARCHES[name])) == 2


def _artifact_paths(client, run_id: str, path: str | None = None) -> set[str]:
    out: set[str] = set()
    for info in client.list_artifacts(run_id, path):
        if info.is_dir:
            out |= _artifact_paths(client, run_id, info.path)
        else:
            out.add(info.path)
    return out


# ---------------------------------------------------------------- retried runs


FAILING_TIME_S = 28799
"""The first attempt's time limit, one second under the default: the flaky agent fails."""


def _flaky_agent(tmp_path: Path) -> Path:
    """``docs/examples/my_agent.py`` (presented order), failing under a time limit of
    :data:`FAILING_TIME_S` seconds (``SPU_TIME_LIMIT_S``).

    One agent for both attempts: a retry is the same run (same entrypoint, same key); the
    limits are not part of a run's identity (``harness.env`` is, since issue 42).
    """
    script = tmp_path / "flaky.py"
    script.write_text("#!/usr/bin/env python3\nimport os, sys\n"
                      f"if os.environ.get('SPU_TIME_LIMIT_S') == '{FAILING_TIME_S}':\n"
                      "    print('API error: overloaded', file=sys.stderr)\n    sys.exit(1)\n"
                      + (REPO / "docs" / "examples" / "my_agent.py").read_text())
    script.chmod(script.stat().st_mode | stat.S_IEXEC)
    return script


def _command_spec(tmp_path: Path, entrypoint: Path, args: list[str],
                  env: dict[str, str] | None = None, **kw) -> RunSpec:
    return RunSpec(
        model=ModelConfig(name="my-agent", provider="command"),
        harness=HarnessConfig(name="command", entrypoint=str(entrypoint), args=args,
                              env=env or {}),
        effort=EffortConfig(name="none"),
        task_dir=EXAMPLE_TASK,
        output_root=tmp_path / "outputs",
        sandbox=SandboxConfig(name=sandbox_name()),
        **kw,
    )


@pytest.mark.slow
def test_retried_run_exports_one_official_row_and_keeps_the_first_visible(
        tmp_path, target, capsys) -> None:
    agent = _flaky_agent(tmp_path)
    first = run_one(_command_spec(tmp_path, agent, [],
                                  limits=LimitsConfig(time_s=FAILING_TIME_S)))
    assert first.outcome.value == "no_file"
    run_dir = tmp_path / "outputs" / "runs" / first.run_key
    first_id = log_run(first, run_dir, target)
    second = run_one(_command_spec(tmp_path, agent, [], attempt=2, retried_from=first_id))
    assert second.run_key == first.run_key and second.outcome.value == "valid"
    assert (run_dir / "attempts" / "1" / "run.json").is_file()
    second_id = log_run(second, run_dir, target)

    official = runs_table(target.uri, "test")
    assert official[["run_id", "attempt", "n_attempts", "official", "outcome",
                     "retried_from"]].to_dict("records") == [
        {"run_id": second_id, "attempt": 2, "n_attempts": 2, "official": True,
         "outcome": "valid", "retried_from": first_id}]
    every = runs_table(target.uri, "test", all_attempts=True)
    assert every[["run_id", "official", "outcome"]].to_dict("records") == [
        {"run_id": first_id, "official": False, "outcome": "no_file"},
        {"run_id": second_id, "official": True, "outcome": "valid"}]
    files = runs_table_from_records(tmp_path / "outputs" / "runs", all_attempts=True)
    assert files[["run_id", "official", "outcome"]].to_dict("records") == [
        {"run_id": f"{first.run_key}/attempts/1", "official": False, "outcome": "no_file"},
        {"run_id": first.run_key, "official": True, "outcome": "valid"},
    ]
    out = tmp_path / "all.csv"
    assert main(["runs", "export", "--tracking-uri", target.uri, "--all-attempts",
                 "--out", str(out)]) == 0
    assert "wrote 2 rows (1 official, 1 earlier attempts)" in capsys.readouterr().out


# ---------------------------------------------------------------- bad input


def test_missing_store_is_named_and_not_created(tmp_path, capsys) -> None:
    db = tmp_path / "nowhere" / "mlflow.db"
    with pytest.raises(RunsExportError, match="no tracking store at .*mlflow.db"):
        runs_table(f"sqlite:///{db}")
    assert main(["runs", "export", "--output-root", str(tmp_path / "nowhere"), "--out",
                 str(tmp_path / "runs.csv")]) == 2
    assert "no tracking store" in capsys.readouterr().err
    assert not db.exists() and not (tmp_path / "runs.csv").exists()


def test_unknown_experiment_lists_the_known_ones(tmp_path, target) -> None:
    from tests.tracking.conftest import make_record

    (tmp_path / "run").mkdir()
    log_run(make_record(), tmp_path / "run", target)
    with pytest.raises(RunsExportError, match=r"no experiment named 'nope' \(experiments: "
                                              r"Default, test\)"):
        runs_table(target.uri, "nope")


def test_incomplete_and_malformed_mlflow_runs(tmp_path, target) -> None:
    from tests.tracking.conftest import make_record

    (tmp_path / "run").mkdir()
    log_run(make_record(), tmp_path / "run", target)
    client = client_for(target)
    exp = client.get_experiment_by_name("test").experiment_id
    client.create_run(exp)  # a logger cut short before its batch: no outcome tag
    assert len(runs_table(target.uri)) == 1
    bad = log_run(make_record(run_key="fedcba9876543210"), tmp_path / "run", target)
    client.set_tag(bad, "scored", "maybe")
    with pytest.raises(RunsExportError, match=f"run {bad}: tag 'scored' is 'maybe'"):
        runs_table(target.uri)


def test_bad_run_json_is_named_with_its_key(tmp_path) -> None:
    from tests.tracking.conftest import make_record

    runs = tmp_path / "runs"
    (runs / "a").mkdir(parents=True)
    data = json.loads(make_record().model_dump_json())
    data["usage"]["input"] = "lots"
    (runs / "a" / "run.json").write_text(json.dumps(data))
    with pytest.raises(RunsExportError, match=r"a/run\.json: usage\.input: "):
        runs_table_from_records(runs)


def test_output_must_be_csv_or_parquet(tmp_path, target) -> None:
    from tests.tracking.conftest import make_record

    (tmp_path / "run").mkdir()
    log_run(make_record(), tmp_path / "run", target)
    with pytest.raises(RunsExportError, match=r"runs\.txt: the output must end in"):
        write_runs_table(runs_table(target.uri), tmp_path / "runs.txt")


def test_logged_trajectory_tokens_equal_the_exported_columns(tmp_path, target) -> None:
    """The trajectory artifact MLflow holds, streamed back step by step, sums to the
    token columns of the exported row, bucket by bucket."""
    from spu.schema import ToolCall, Trajectory, TrajectoryStep
    from spu.tracking.trajectories import write_trajectory
    from tests.tracking.conftest import make_record

    steps = [TrajectoryStep(index=i, tool_calls=[ToolCall(name="Bash", output="ok")],
                            usage=Usage(input=100 * i + 1, cache_read=10_000 * i,
                                        cache_write=500, cache_write_1h=200 * (i % 2),
                                        output=7 * i))
             for i in range(40)]
    total = Usage()
    for s in steps:
        total = total + s.usage
    run_dir = tmp_path / "run"
    run_dir.mkdir()
    write_trajectory(run_dir / TRAJECTORY_FILE, Trajectory(harness="x", steps=steps,
                                                           usage=total))
    run_id = log_run(make_record(usage=total, tool_calls=40), run_dir, target)
    row = runs_table(target.uri).iloc[0]
    assert row.run_id == run_id
    exported = (row.input_tokens, row.cache_read_tokens, row.cache_write_tokens,
                row.cache_write_1h_tokens, row.output_tokens)
    # sum over i of (100 i + 1) = 100 x 780 + 40; 10,000 x 780; 40 x 500; 200 x 20; 7 x 780
    assert exported == (78_040, 7_800_000, 20_000, 4_000, 5_460)
    logged = client_for(target).download_artifacts(run_id, TRAJECTORY_FILE,
                                                   str(tmp_path / "download"))
    summed, n_steps = Usage(), 0
    for step in iter_steps(Path(logged)):
        summed = summed + (step.usage or Usage())
        n_steps += 1
    assert n_steps == 40
    assert (summed.input, summed.cache_read, summed.cache_write, summed.cache_write_1h,
            summed.output) == exported
    assert math.isnan(row.cost_usd)  # the hand-built record has no estimate
    assert sqlite3.connect(target.uri[len("sqlite:///"):]).execute(
        "select count(*) from runs").fetchone()[0] == 1


# ---------------------------------------------------------------- official rows


def test_a_run_key_is_one_official_record_whatever_experiment_holds_it(tmp_path,
                                                                       target) -> None:
    """Invariant (issue 14, item 3): one run key is one run. Logged in two experiments (a
    store from before the lookups searched every experiment), the export holds it once, as
    its latest record, and a sweep of either experiment finds that record."""
    from spu.tracking.query import recorded_runs
    from tests.tracking.conftest import make_record

    other = dataclasses.replace(target, experiment="other")
    (tmp_path / "run").mkdir()
    record = make_record()
    ids = {target.experiment: log_run(record, tmp_path / "run", target)}
    time.sleep(0.01)  # a later start: the record in "other" is the latest
    ids[other.experiment] = log_run(record, tmp_path / "run", other)
    every = runs_table(target.uri, all_attempts=True)
    assert len(every) == 2 and every["official"].sum() == 1
    official = runs_table(target.uri)
    assert official[["experiment", "run_id", "run_key", "n_attempts"]].values.tolist() == [
        ["other", ids["other"], record.run_key, 2]]  # logged last: the latest record
    for t in (target, other):
        assert recorded_runs(t)[record.run_key].tracking_id == ids["other"]
        # One experiment's export holds that experiment's record of the key.
        assert runs_table(target.uri, t.experiment)["run_id"].tolist() == [ids[t.experiment]]


def test_ties_resolve_the_same_in_the_export_and_the_lookups() -> None:
    """Attempts with the same number and start time: the largest run id is official,
    whatever order the store returns them in."""
    from spu.tracking.export import logged_from_record, table_from_logged
    from spu.tracking.query import latest_per_key, recorded_run_from_record
    from tests.tracking.conftest import make_record

    record = make_record()
    ids = ["3f0a", "9b21", "5c77"]
    logged = [dataclasses.replace(logged_from_record(record, run_id, "test"),
                                  start_time_ms=1_000) for run_id in ids]
    recorded = [(recorded_run_from_record(record, run_id), 1_000) for run_id in ids]
    for order in itertools.permutations(range(len(ids))):
        table = table_from_logged([logged[i] for i in order], all_attempts=True)
        assert table.loc[table["official"], "run_id"].tolist() == ["9b21"]
        assert table["n_attempts"].tolist() == [3, 3, 3]
        latest = latest_per_key([recorded[i] for i in order])
        assert latest[record.run_key].tracking_id == "9b21"
    # A later attempt, or a later start, wins before the run id is looked at.
    later = dataclasses.replace(logged[0], start_time_ms=2_000)
    assert table_from_logged([later, *logged[1:]])["run_id"].tolist() == ["3f0a"]
    assert latest_per_key([(recorded[0][0], 2_000), *recorded[1:]])[
        record.run_key].tracking_id == "3f0a"


def test_record_without_a_label_gets_the_runners_label() -> None:
    """An older record without ``config``: the label is :func:`spu.identity.config_label`
    of its model and effort (the model's default harness is not recorded)."""
    from spu.identity import config_label
    from spu.tracking.export import logged_from_record, runs_row
    from tests.tracking.conftest import make_record

    row = runs_row(logged_from_record(make_record(config=None), "r1"))
    assert row["config"] == config_label("opus5", "max") == "opus5-max"
    assert runs_row(logged_from_record(make_record(), "r1"))["config"] == "opus5-max"


def test_recovered_departures_and_groups_reach_the_runs_table() -> None:
    """The departures of appendix E.1 that recovery normalized (from the grade) and the
    number of comparison groups are columns of the runs table (paper Figure 6a, 2.2)."""
    from spu.schema import Grade, GradeStatus, GroupGrade
    from spu.tracking.export import logged_from_record, runs_row
    from tests.tracking.conftest import make_record

    grade = Grade(task_id="t", score=0.5, status=GradeStatus.recovered, score_strict=-1.0,
                  groups=[GroupGrade(group_id="G1", weight=0.5, rho=0.4),
                          GroupGrade(group_id="G2", weight=0.5, rho=0.6)],
                  recovered_departures=["object_keyed_by_group", "renamed_identity"],
                  grader_version="1")
    record = make_record(outcome=Outcome.recovered, score_strict=-1.0, grade=grade)
    row = runs_row(logged_from_record(record, "r1"))
    assert row["departures"] == "object_keyed_by_group;renamed_identity"
    assert row["n_groups"] == 2
    plain = runs_row(logged_from_record(make_record(), "r2"))
    assert plain["departures"] is None and plain["n_groups"] is None


def test_an_export_of_no_run_says_what_is_missing_and_exits_1(tmp_path, capsys) -> None:
    """Issue 40 item 4: ``spu runs export --runs-dir outputs`` (as docs/seals.md wrote it)
    exported 0 rows and exited 0; the runs are in ``outputs/runs``."""
    out = tmp_path / "outputs"
    shutil.copytree(REPO / "tests" / "golden" / "legacy_store" / "outputs", out)
    table = tmp_path / "runs.csv"
    assert main(["runs", "export", "--runs-dir", str(out), "--out", str(table)]) == 1
    (line,) = capsys.readouterr().err.splitlines()
    assert line.startswith("spu runs export: no run.json in the folders under ")
    assert f"--runs-dir {out / 'runs'}" in line and not table.exists()
    assert main(["runs", "export", "--runs-dir", str(out / "runs"), "--out", str(table)]) == 0
    assert len(pd.read_csv(table)) == 2
    empty = tmp_path / "empty"
    client_for(f"sqlite:///{empty / 'mlflow.db'}")  # a store with no run in it
    assert main(["runs", "export", "--output-root", str(empty), "--out",
                 str(tmp_path / "none.csv")]) == 1
    (line,) = capsys.readouterr().err.splitlines()
    assert line.startswith("spu runs export: no recorded run in sqlite:///")
    assert not (tmp_path / "none.csv").exists()
