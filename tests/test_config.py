"""Config composition: defaults, typed schema errors that name the key, task discovery."""

from __future__ import annotations

import pytest
from hydra.errors import ConfigCompositionException
from omegaconf.errors import ConfigKeyError, ValidationError

from tests.conftest import EXAMPLE_TASK, run_module


def test_default_config_composes_with_commented_defaults(compose, repo_root) -> None:
    cfg = compose("task=example-coupling-conditions")
    assert cfg.model.name == "random"
    assert cfg.harness.name == "baseline"
    assert cfg.sandbox.name == "local"
    assert cfg.repeat == 0
    assert cfg.task.path == str(EXAMPLE_TASK)
    # Every default in config.yaml carries a comment.
    lines = (repo_root / "conf" / "config.yaml").read_text().splitlines()
    in_defaults = False
    for line in lines:
        if line.startswith("defaults:"):
            in_defaults = True
            continue
        if in_defaults and line.startswith("  - "):
            assert "#" in line, f"default without a comment: {line!r}"
        elif in_defaults:
            in_defaults = False
        if line and not line.startswith((" ", "#", "defaults", "hydra", "limits", "budget",
                                         "sweep")) and ":" in line:
            assert "#" in line, f"top-level default without a comment: {line!r}"


def test_typo_in_a_group_key_fails_naming_the_key(compose) -> None:
    with pytest.raises((ConfigCompositionException, ConfigKeyError)) as err:
        compose("task=example-coupling-conditions", "model.nmae=x")
    assert "nmae" in str(err.value) + str(err.value.__cause__)


def test_unknown_top_level_key_fails(compose) -> None:
    with pytest.raises((ConfigCompositionException, ConfigKeyError)) as err:
        compose("task=example-coupling-conditions", "repaet=1")
    assert "repaet" in str(err.value) + str(err.value.__cause__)


def test_wrong_type_fails_naming_the_key(compose) -> None:
    with pytest.raises((ConfigCompositionException, ValidationError)) as err:
        compose("task=example-coupling-conditions", "repeat=abc")
    text = str(err.value) + str(err.value.__cause__)
    assert "repeat" in text


def test_unknown_model_option_fails(compose) -> None:
    with pytest.raises(ConfigCompositionException) as err:
        compose("task=example-coupling-conditions", "model=does_not_exist")
    assert "does_not_exist" in str(err.value)


def test_every_task_folder_is_a_task_option(compose) -> None:
    cfg = compose("task=example-electrolytes-and-films")
    assert cfg.task.id == "example-electrolytes-and-films"
    assert cfg.task.discipline == "materials science"


def test_command_line_typo_exits_with_message(tmp_path) -> None:
    out = run_module(["spu.main", "experiment=single", "task=example-coupling-conditions",
                      "model.nmae=x", f"output_root={tmp_path}"])
    assert out.returncode != 0
    assert "nmae" in out.stderr


def test_task_root_override_selects_other_packages(tmp_path, repo_root) -> None:
    import shutil

    root = tmp_path / "private"
    shutil.copytree(EXAMPLE_TASK, root / "my-private-task")
    (root / "my-private-task" / "task.yaml").write_text(
        (EXAMPLE_TASK / "task.yaml").read_text().replace(
            "example-coupling-conditions", "my-private-task"))
    out = run_module(["spu.main", f"task_root={root}", "task=my-private-task",
                      "experiment=single", "--cfg", "job"])
    assert out.returncode == 0, out.stderr
    assert f"path: {root / 'my-private-task'}" in out.stdout


@pytest.mark.parametrize(
    ("overrides", "message"),
    [
        (["experiment=single"], "no task selected"),
        (["experiment=single", "task=spu-vq5t", "model=opus5", "harness=baseline"],
         "harness=baseline runs model=random"),
    ],
)
def test_a_configuration_that_cannot_run_says_why_without_a_traceback(
        tmp_path, overrides, message) -> None:
    out = run_module(["spu.main", *overrides, f"output_root={tmp_path}", "tracking=none"])
    assert out.returncode == 2
    assert message in out.stderr
    assert "Traceback" not in out.stderr
