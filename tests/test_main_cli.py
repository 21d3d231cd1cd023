"""The command line of ``python -m spu.main`` as a new user types it (issue 14).

Each test runs the real entry point in a subprocess and checks what the user sees:
``-m`` anywhere (item 1), one-line errors with exit 2 (item 4), typo suggestions that
never advise ``+`` for a schema key (item 5), and the dry run of a large sweep (item 9).
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from spu.overrides import normalize_argv
from tests.conftest import EXAMPLE_TASK, REPO, run_module

HEADLINE = ["model=opus5", "harness=claude_code", "effort=max", "-m", "task=glob(*)"]
"""The README's headline command, in its documented argument order."""


@pytest.fixture
def one_task_root(tmp_path: Path) -> Path:
    root = tmp_path / "tasks"
    shutil.copytree(EXAMPLE_TASK, root / EXAMPLE_TASK.name)
    return root


def one_line_error(proc: subprocess.CompletedProcess[str]) -> str:
    """The single ``spu: ...`` line a refused command prints (asserting there is one)."""
    assert proc.returncode == 2, (proc.returncode, proc.stdout[-2000:], proc.stderr[-2000:])
    assert "Traceback" not in proc.stderr and "HYDRA_FULL_ERROR" not in proc.stderr
    lines = [line for line in proc.stderr.splitlines() if line.strip()]
    assert len(lines) == 1, proc.stderr
    assert lines[0].startswith("spu")
    return lines[0]


# ---------------------------------------------------------------- item 1: -m anywhere


def test_multirun_flag_moves_first_and_leaves_hydra_flags_alone() -> None:
    assert normalize_argv(HEADLINE) == ["-m", *HEADLINE[:3], HEADLINE[4]]
    assert normalize_argv(["task=x", "--multirun", "repeat=0,1"]) == \
        ["--multirun", "task=x", "repeat=0,1"]
    assert normalize_argv(["--cfg", "job", "-p", "model", "task=x"]) == \
        ["--cfg", "job", "-p", "model", "task=x"]
    assert normalize_argv(["harness.args=[-m,x]", "-m"]) == ["-m", "harness.args=[-m,x]"]


@pytest.mark.parametrize("entry", [["spu.main"], ["spu", "run"]], ids=["spu.main", "spu-run"])
def test_headline_command_parses_in_its_documented_order(entry, one_task_root,
                                                         tmp_path) -> None:
    """``python -m spu.main model=opus5 harness=claude_code effort=max -m task='glob(*)'``.

    Hydra's parser rejected it ("unrecognized arguments: task=glob(*)"); the dry run
    shows that it now parses in exactly that order, under both entry points, without
    an API key (nothing starts).
    """
    out = tmp_path / "outputs"
    proc = run_module([*entry, *HEADLINE, f"task_root={one_task_root}", f"output_root={out}",
                       "dry_run=true"], timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "unrecognized arguments" not in proc.stderr
    assert "1 of 1 jobs would run" in proc.stdout and "opus5-max" in proc.stdout
    assert not out.exists()  # nothing started, nothing written


def test_repeats_after_the_multirun_flag_expand(one_task_root, tmp_path) -> None:
    proc = run_module(["spu.main", "model=astra", "harness=codex", "effort=max", "-m",
                       "task=glob(*)", "repeat=1,2,3,4,5", f"task_root={one_task_root}",
                       "dry_run=true"], timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "5 of 5 jobs would run" in proc.stdout


def test_hydra_flags_still_work(tmp_path) -> None:
    proc = run_module(["spu.main", "experiment=single", f"task={EXAMPLE_TASK.name}",
                       "--cfg", "job", "-p", "repeat"], timeout=300)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip() == "0"


@pytest.mark.slow
@pytest.mark.cli
def test_headline_command_runs_in_its_documented_order(one_task_root, tmp_path) -> None:
    """The headline command itself, with ``model=scripted`` where an API key is needed."""
    from tests.harness.test_cli_runs import PAPER_VERSION, cli_installed

    cli_installed("claude_code", PAPER_VERSION["claude_code"])
    out = tmp_path / "outputs"
    args = [a.replace("model=opus5", "model=scripted") for a in HEADLINE]
    proc = run_module(["spu.main", *args, f"task_root={one_task_root}",
                       f"output_root={out}"], timeout=900)
    assert proc.returncode == 0, proc.stderr[-3000:]
    (run_dir,) = (out / "runs").iterdir()
    record = json.loads((run_dir / "run.json").read_text())
    assert (record["model"], record["harness"], record["effort"]) == \
        ("scripted", "claude_code", "max")
    assert record["outcome"] == "valid"


# ---------------------------------------------------------------- item 4: one line, exit 2


def test_output_root_under_a_file_is_one_line(tmp_path) -> None:
    (tmp_path / "afile").write_text("")
    bad = tmp_path / "afile" / "out"
    for mode in (["experiment=single", f"task={EXAMPLE_TASK.name}"], ["-m", "repeat=0,1"]):
        line = one_line_error(run_module(["spu.main", *mode, f"task={EXAMPLE_TASK.name}",
                                          f"output_root={bad}"]))
        assert f"output_root={bad}" in line and "is a file, not a folder" in line


def test_stats_out_under_a_file_is_one_line(tmp_path) -> None:
    from spu.stats.simulate import main as simulate

    runs = tmp_path / "runs.csv"
    assert simulate([str(runs), "--seed", "1"]) == 0
    (tmp_path / "afile").write_text("")
    for command in ("stats", "report"):
        proc = subprocess.run([sys.executable, "-m", "spu", command, str(runs), "--out",
                               str(tmp_path / "afile" / "out"), "--resamples", "20"],
                              capture_output=True, text=True, cwd=REPO, timeout=300)
        line = one_line_error(proc)
        assert "afile" in line and "not a folder" in line, line


def test_a_glob_that_matches_no_task_is_an_error(tmp_path) -> None:
    line = one_line_error(run_module(["spu.main", "-m", "task=glob(zzz*)",
                                      f"output_root={tmp_path}"]))
    assert "task='glob(zzz*)' matches no task package under task_root=" in line


def test_a_task_outside_the_repository_names_task_root(tmp_path) -> None:
    line = one_line_error(run_module(["spu.main", "experiment=single", "task=spu-bhpt"],
                                     cwd=tmp_path))
    assert f"task_root={tmp_path / 'tasks'} does not exist" in line
    assert "pass task_root=PATH" in line


@pytest.mark.parametrize(("override", "expected"), [
    ("repeat=-1", "repeat=-1: must be 0 (the official run) or more"),
    ("limits.time_s=-5", "limits.time_s=-5: must be more than 0 (seconds)"),
])
def test_impossible_values_are_refused(override, expected, tmp_path) -> None:
    line = one_line_error(run_module(["spu.main", "experiment=single",
                                      f"task={EXAMPLE_TASK.name}", override, "tracking=none",
                                      f"output_root={tmp_path}"]))
    assert expected in line
    assert not (tmp_path / "runs").exists()


# ---------------------------------------------------------------- item 5: typos


@pytest.mark.parametrize(("override", "expected"), [
    ("modle=random", "did you mean model=random?"),
    ("+modle=random", "did you mean model=random?"),
    ("model=radnom", "model=radnom: no such option of model; did you mean model=random?"),
    ("model.nmae=x", "did you mean model.name=x?"),
    ("limits.time=60", "did you mean limits.time_s=60?"),
    ("task=spu-bhtp", "did you mean task=spu-bhpt?"),
    ("hydra/launcher=ray_locl", "did you mean hydra/launcher=ray_local?"),
])
def test_typos_get_the_nearest_spelling_and_never_the_plus_form(override, expected,
                                                                 tmp_path) -> None:
    args = ["spu.main", "experiment=single", override, f"output_root={tmp_path}"]
    if not override.startswith("task="):
        args.insert(2, f"task={EXAMPLE_TASK.name}")
    line = one_line_error(run_module(args))
    assert expected in line
    key = override.lstrip("+").partition("=")[0]
    assert f"+{key}" not in line.replace(override, "")


@pytest.mark.parametrize(("override", "allowed"), [
    ("tools.policy=stopp", "[record, stop]"),
    ("sweep.resume=skip", "[skip_finished, retry_unscored, off]"),
    ("cost.cache_write_rate=five_minutes", "[five_minute, actual]"),
    ("sandbox.grader_isolation=bwrapp", "[auto, bwrap, netns, none]"),
])
def test_a_choice_typo_fails_at_composition_naming_the_key(override, allowed, tmp_path) -> None:
    """A fixed set of choices is an Enum of the schema: one line naming the key and the set."""
    line = one_line_error(run_module(["spu.main", "experiment=single", f"task={EXAMPLE_TASK.name}",
                                      override, "tracking=none", f"output_root={tmp_path}"]))
    assert override.partition("=")[0] in line and allowed in line
    assert not (tmp_path / "runs").exists()


def test_plus_on_a_schema_key_sets_it(tmp_path) -> None:
    """``+dry_run=true``: the + form of a key the schema has means the key."""
    proc = run_module(["spu.main", "experiment=single", f"task={EXAMPLE_TASK.name}",
                       "+dry_run=true", f"output_root={tmp_path / 'out'}"])
    assert proc.returncode == 0, proc.stderr
    assert "1 of 1 jobs would run" in proc.stdout


# ---------------------------------------------------------------- item 9: dry run


@pytest.mark.slow
def test_dry_run_lists_a_thousand_jobs_composing_once_per_configuration(tmp_path) -> None:
    """77 tasks x the paper's 13 configurations = 1,001 jobs, listed without starting
    anything, each with its expected cost; Hydra composed 13 configs, not 1,001."""
    from spu.plan import plan_command

    root = tmp_path / "tasks"
    source = EXAMPLE_TASK
    for i in range(77):
        dest = root / f"t{i:03d}"
        shutil.copytree(source, dest)
        meta = (dest / "task.yaml").read_text().replace(source.name, dest.name)
        (dest / "task.yaml").write_text(meta)
    import os

    os.environ["SPU_TASK_ROOT"] = str(root)
    try:
        plan = plan_command(["experiment=paper", f"task_root={root}",
                             f"output_root={tmp_path / 'out'}", "dry_run=true"])
    finally:
        del os.environ["SPU_TASK_ROOT"]
    assert len(plan.jobs) == 1001 and plan.composed == 13
    assert len({j.run_key for j in plan.jobs}) == 1001
    assert {j.config for j in plan.jobs} >= {"opus5-max", "astra-medium", "sol61-max"}
    assert all(j.cost_usd is not None and j.cost_usd > 0 for j in plan.jobs)
    assert not (tmp_path / "out").exists()


def test_plus_still_adds_keys_to_free_mappings(tmp_path) -> None:
    """``harness.env`` and ``extra`` have no schema: their new keys take ``+``, and only
    there does the error advise it."""
    ok = run_module(["spu.main", "experiment=single", f"task={EXAMPLE_TASK.name}",
                     "+harness.env.MY_VAR=1", "dry_run=true"])
    assert ok.returncode == 0, ok.stderr
    line = one_line_error(run_module(["spu.main", "experiment=single",
                                      f"task={EXAMPLE_TASK.name}", "harness.env.MY_VAR=1",
                                      f"output_root={tmp_path}"]))
    assert "add it with +harness.env.MY_VAR=1" in line
