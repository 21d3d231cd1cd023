"""The launcher, resume and experiment configs compose; the plugin stays light to import."""

from __future__ import annotations

import subprocess
import sys

import pytest
from hydra.errors import ConfigCompositionException

from tests.conftest import REPO

PAPER_CONFIGURATIONS = {
    # (model, harness, effort) of the paper's thirteen configurations (section 3.1)
    "opus55_max": ("opus55", "claude_code", "max"),
    "opus5_max": ("opus5", "claude_code", "max"),
    "sonnet55_max": ("sonnet55", "claude_code", "max"),
    "fable51_max": ("fable51", "claude_code", "max"),
    "deepseek_max": ("deepseek", "claude_code", "max"),
    "qwen38_max": ("qwen38", "claude_code", "max"),
    "glm53_max": ("glm53", "claude_code", "max"),
    "doubao_max": ("doubao", "claude_code", "max"),
    "hy4_max": ("hy4", "claude_code", "max"),
    "kimi31_max": ("kimi31", "claude_code", "max"),
    "astra_medium": ("astra", "codex", "medium"),
    "astra_max": ("astra", "codex", "max"),
    "sol61_max": ("sol61", "codex", "max"),
}


@pytest.mark.parametrize("launcher", ["ray", "ray_local", "ray_cluster"])
def test_launcher_configs_compose_into_the_typed_schema(compose, launcher) -> None:
    cfg = compose(f"hydra/launcher={launcher}", return_hydra_config=True)
    node = cfg.hydra.launcher
    assert node._target_ == "hydra_plugins.spu_ray_launcher.ray_launcher.SPURayLauncher"
    assert node.resources.sandbox_slots == 1
    expected = {"ray": None, "ray_local": None, "ray_cluster": "auto"}[launcher]
    assert node.init.address == expected
    if launcher == "ray_local":
        assert (node.init.num_cpus, node.init.num_gpus, node.resources.cpus,
                node.resources.gpus, node.resources.memory_gb) == (2, 0, 1, 0, 1)


def test_a_misspelt_launcher_key_fails_at_composition_naming_it(compose) -> None:
    with pytest.raises(ConfigCompositionException) as err:
        compose("hydra/launcher=ray_local", "hydra.launcher.max_concurent=2",
                return_hydra_config=True)
    assert "max_concurent" in str(err.value.__cause__ or err.value)


@pytest.mark.parametrize(("option", "mode"), [("retry_unscored", "retry_unscored"),
                                              ("skip_finished", "skip_finished"),
                                              ("off", "off")])
def test_resume_options_set_the_sweep_mode(compose, option, mode) -> None:
    assert compose(f"+resume={option}").sweep.resume == mode


def test_the_paper_design_names_thirteen_configurations() -> None:
    folder = REPO / "conf" / "experiment" / "configuration"
    assert {p.stem for p in folder.glob("*.yaml")} == set(PAPER_CONFIGURATIONS)
    for model, _, _ in PAPER_CONFIGURATIONS.values():
        assert (REPO / "conf" / "model" / f"{model}.yaml").is_file()


@pytest.mark.parametrize("name", sorted(PAPER_CONFIGURATIONS))
def test_each_paper_configuration_composes(compose, name) -> None:
    model, harness, effort = PAPER_CONFIGURATIONS[name]
    missing = [f"conf/{group}/{option}.yaml" for group, option in
               (("harness", harness), ("effort", effort))
               if not (REPO / "conf" / group / f"{option}.yaml").is_file()]
    if missing:
        pytest.skip(f"{', '.join(missing)} not in this checkout yet (agent harnesses, issue 6)")
    cfg = compose(f"+experiment/configuration={name}", "task=example-coupling-conditions")
    assert (cfg.model.name, cfg.harness.name, cfg.effort.name) == (model, harness, effort)


def test_paper_experiments_sweep_the_configurations_and_the_repeats(compose) -> None:
    paper = compose("experiment=paper", return_hydra_config=True)
    assert dict(paper.hydra.sweeper.params) == {"+experiment/configuration": "glob(*)",
                                                "task": "glob(*)"}
    assert (paper.experiment.name, paper.repeat) == ("paper", 0)
    repeats = compose("experiment=paper_repeats", return_hydra_config=True)
    assert dict(repeats.hydra.sweeper.params) == {"+experiment/configuration": "astra_max",
                                                  "repeat": "range(1,6)", "task": "glob(*)"}
    assert repeats.experiment.name == "paper"  # repeats pair with the official runs


def test_hydra_startup_does_not_import_ray() -> None:
    """Invariant: the plugin scan imports the launcher's public modules without Ray."""
    code = ("import sys\n"
            "from hydra.core.plugins import Plugins\n"
            "from hydra.plugins.launcher import Launcher\n"
            "names = [p.__name__ for p in Plugins.instance().discover(Launcher)]\n"
            "assert 'SPURayLauncher' in names, names\n"
            "print(','.join(m for m in ('ray', 'mlflow') if m in sys.modules))\n")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         cwd=REPO, check=True)
    assert out.stdout.strip() == ""


@pytest.mark.slow
def test_the_paper_design_expands_to_every_configuration_on_every_task(task_root,
                                                                       tmp_path) -> None:
    """A zero budget launches nothing: the sweep lists its jobs (13 x 2 tasks, 5 x 2)."""
    from tests.launchers.conftest import run_sweep

    missing = sorted({f"conf/{g}/{o}.yaml" for _, h, e in PAPER_CONFIGURATIONS.values()
                      for g, o in (("harness", h), ("effort", e))
                      if not (REPO / "conf" / g / f"{o}.yaml").is_file()})
    if missing:
        pytest.skip(f"{', '.join(missing)} not in this checkout yet (agent harnesses, issue 6)")
    common = ["hydra/launcher=ray_local", f"task_root={task_root}",
              f"output_root={tmp_path / 'outputs'}", "budget.max_cost_usd=0"]
    paper = run_sweep("experiment=paper", *common)
    assert paper.returncode == 0, paper.stdout[-3000:] + paper.stderr[-3000:]
    assert "SPU sweep: 26 jobs, none to launch on Ray (0 skipped, 26 not launched)" in \
        paper.stdout
    rows = [line for line in paper.stdout.splitlines() if "not launched (budget)" in line]
    assert len(rows) == 26
    assert sum(" astra-medium " in r and " codex " in r for r in rows) == 2
    repeats = run_sweep("experiment=paper_repeats", "task=example-coupling-conditions",
                        *common)
    assert repeats.returncode == 0, repeats.stdout[-3000:] + repeats.stderr[-3000:]
    assert "SPU sweep: 5 jobs, none to launch on Ray (0 skipped, 5 not launched)" in \
        repeats.stdout
    repeat_rows = [line.split("│") for line in repeats.stdout.splitlines()
                   if "not launched (budget)" in line]
    assert sorted(int(cells[4]) for cells in repeat_rows) == [1, 2, 3, 4, 5]
