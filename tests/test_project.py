"""A project folder (SPEC 16): its conf/ adds options to the packaged groups, or shadows them.

Runs go through the real command line in a fresh process whose current folder is the
project, as a lab runs ``spu``; ``dry_run=true`` composes every job without running one.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from spu.project import PACKAGED_CONF, option_file, project_conf, shadowed_options
from spu.project_init import FILES, init_project
from tests.conftest import REPO, TASKS


def spu(project: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "spu", *args], cwd=project,
                          capture_output=True, text=True, timeout=300)


@pytest.fixture
def project(tmp_path: Path) -> Path:
    folder = tmp_path / "lab"
    init_project(folder)
    return folder


def test_the_checkout_is_a_project_whose_conf_is_the_packaged_one() -> None:
    """The root ``conf`` is the package's config groups: nothing is added, nothing shadowed."""
    assert (REPO / "conf").resolve() == PACKAGED_CONF == REPO / "spu" / "conf"
    assert project_conf(REPO) is None
    assert option_file("model", "opus5", REPO) == PACKAGED_CONF / "model" / "opus5.yaml"


def test_init_writes_a_project_and_never_over_one(tmp_path: Path,
                                                  capsys: pytest.CaptureFixture[str]) -> None:
    from spu.cli import main

    folder = tmp_path / "lab"
    assert main(["init", str(folder)]) == 0
    out = capsys.readouterr().out
    assert "next: cd" in out and "experiment=my-sweep dataset=examples" in out
    for rel in FILES:
        assert (folder / rel).is_file()
    assert (folder / "tasks").is_dir() and (folder / "conf" / "harness").is_dir()
    assert "/outputs/" in (folder / ".gitignore").read_text()
    (folder / "conf" / "model" / "my-model.yaml").write_text("name: mine\n")
    assert main(["init", str(folder)]) == 2
    err = capsys.readouterr().err
    assert err.startswith("spu init: ") and err.count("\n") == 1 and "exists" in err
    assert (folder / "conf" / "model" / "my-model.yaml").read_text() == "name: mine\n"


def test_project_options_compose_with_the_packaged_ones(project: Path) -> None:
    """``model=my-model experiment=my-sweep`` from the project folder; a packaged model too."""
    done = spu(project, "run", "model=my-model", "experiment=my-sweep", f"task_root={TASKS}",
               "dry_run=true")
    assert done.returncode == 0, done.stderr
    assert "my-model" in done.stdout and "shadows" not in done.stderr
    done = spu(project, "run", "experiment=my-sweep", "model=opus5", f"task_root={TASKS}",
               "task=example-coupling-conditions", "dry_run=true")
    assert done.returncode == 0, done.stderr
    assert "opus5" in done.stdout


def test_a_project_option_shadows_the_packaged_one_and_says_so_once(project: Path) -> None:
    packaged = (PACKAGED_CONF / "model" / "opus5.yaml").read_text()
    (project / "conf" / "model" / "opus5.yaml").write_text(
        packaged.replace("label: Opus 5", "label: Our Opus"))
    done = spu(project, "list", "models", "--json")
    assert done.returncode == 0, done.stderr
    assert done.stderr.splitlines() == [
        "spu: conf/model/opus5.yaml of this project shadows the packaged model=opus5"]
    labels = {row["option"]: row["label"] for row in json.loads(done.stdout)}
    assert labels["opus5"] == "Our Opus" and labels["my-model"] == "My model"
    assert labels["sonnet55"] == "Sonnet 5.5"
    (shadow,) = shadowed_options(project / "conf")
    assert (shadow.group, shadow.name) == ("model", "opus5")


def test_a_project_config_yaml_is_not_read(project: Path) -> None:
    """Only group files are options: a conf/config.yaml would replace every packaged default."""
    (project / "conf" / "config.yaml").write_text("defaults: []\nmodel: broken\n")
    done = spu(project, "run", "model=random", f"task_root={TASKS}",
               "task=example-coupling-conditions", "--cfg", "job")
    assert done.returncode == 0, done.stderr
    assert "name: random" in done.stdout


def test_cost_estimate_reads_the_project_catalogue(project: Path,
                                                   monkeypatch: pytest.MonkeyPatch,
                                                   capsys: pytest.CaptureFixture[str]) -> None:
    """What composition reads, the catalogue reads: ``spu cost estimate --model my-model``."""
    from spu.cli import main

    monkeypatch.chdir(project)
    assert main(["cost", "estimate", "--model", "my-model", "--input", "1000000",
                 "--cache-read", "0", "--cache-write", "0", "--output", "0", "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["cost_usd"] == pytest.approx(2.0)


def test_version_is_the_package_metadata(capsys: pytest.CaptureFixture[str]) -> None:
    from importlib.metadata import version

    from spu.cli import main

    assert main(["--version"]) == 0
    assert capsys.readouterr().out == f"spu {version('spu')}\n"
