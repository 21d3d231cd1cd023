"""spu as a lab installs it: the wheel in a fresh virtual environment, used from an empty folder.

The wheel and the sdist are built from this checkout without network (``python -m build
--no-isolation``: the sdist first, the wheel from the sdist, so the sdist is proven
complete too). The virtual environment holds the wheel alone, installed without its
dependencies; a ``.pth`` file lets it see the dependencies already installed for the
tests (never this checkout: ``spu`` is the wheel's, which the first check asserts).
Everything then runs from an empty folder, as in docs/install.md and docs/datasets.md.
"""

from __future__ import annotations

import json
import os
import shutil
import site
import socket
import subprocess
import sys
import time
import zipfile
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from tests.conftest import REPO, TASKS, have_bwrap

pytestmark = pytest.mark.slow

TWO_TASKS = ("spu-20he", "spu-2q2w")
"""The real tasks the lab packs into its registry."""


def _missing_build_tools() -> str | None:
    from importlib.metadata import PackageNotFoundError, version

    try:
        version("build")
        setuptools = version("setuptools")
    except PackageNotFoundError as exc:
        return f"{exc.name} is not installed (the test extra: pip install -e '.[test]')"
    if int(setuptools.split(".")[0]) < 77:
        return f"setuptools {setuptools} is older than 77 (the test extra)"
    return None


@dataclass(frozen=True)
class Built:
    wheel: Path
    sdist: Path


@pytest.fixture(scope="module")
def built(tmp_path_factory: pytest.TempPathFactory) -> Built:
    """The wheel and the sdist of this checkout."""
    missing = _missing_build_tools()
    if missing:
        pytest.skip(f"cannot build the wheel offline: {missing}")
    out = tmp_path_factory.mktemp("dist")
    done = subprocess.run([sys.executable, "-m", "build", "--no-isolation", "--outdir",
                           str(out), str(REPO)], capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    (wheel,) = out.glob("spu-*.whl")
    (sdist,) = out.glob("spu-*.tar.gz")
    return Built(wheel, sdist)


def _ours(entry: str) -> bool:
    """An entry of a site folder that belongs to this checkout's editable installs."""
    return entry.lower().startswith(("spu", "_spu", "__editable__")) or entry.endswith(".pth")


def _dependency_paths(views: Path) -> list[str]:
    """The site folders this interpreter reads its packages from, without this checkout.

    A folder holding the editable installs of spu and of the example plugin (the test
    environment's own) is replaced by a view of links to everything else in it: a lab's
    fresh install has neither.
    """
    found = [*site.getsitepackages(), site.getusersitepackages()]
    found += [p for p in sys.path if p.rstrip("/").endswith(("site-packages", "dist-packages"))]
    out = []
    for index, folder in enumerate(dict.fromkeys(found)):
        if not Path(folder).is_dir():
            continue
        entries = os.listdir(folder)
        if not any(_ours(e) for e in entries):
            out.append(folder)
            continue
        view = views / f"site{index}"
        view.mkdir(parents=True)
        for entry in entries:
            if not _ours(entry):
                (view / entry).symlink_to(Path(folder) / entry)
        out.append(str(view))
    return out


@dataclass(frozen=True)
class Installed:
    venv: Path
    lab: Path
    env: dict[str, str]

    def spu(self, *args: str, timeout: float = 600) -> subprocess.CompletedProcess[str]:
        return subprocess.run([str(self.venv / "bin" / "spu"), *args], cwd=self.lab,
                              env=self.env, capture_output=True, text=True, timeout=timeout)

    def python(self, *args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run([str(self.venv / "bin" / "python"), *args], cwd=self.lab,
                              env=self.env, capture_output=True, text=True, timeout=600)


@pytest.fixture(scope="module")
def installed(built: Built, tmp_path_factory: pytest.TempPathFactory) -> Installed:
    """The wheel in a fresh virtual environment, and an empty folder to work in."""
    root = tmp_path_factory.mktemp("installed")
    venv = root / "venv"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True,
                   timeout=300)
    # Installed before the environment sees any other package: pip finds nothing to replace.
    done = subprocess.run([sys.executable, "-m", "pip", "--python", str(venv / "bin" / "python"),
                           "install", "--no-deps", "--no-index", str(built.wheel)],
                          capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr
    purelib = subprocess.run([str(venv / "bin" / "python"), "-c",
                              "import sysconfig; print(sysconfig.get_path('purelib'))"],
                             capture_output=True, text=True, check=True).stdout.strip()
    paths = _dependency_paths(root / "views")
    Path(purelib, "_test_dependencies.pth").write_text("\n".join(paths) + "\n")
    lab = root / "lab"
    lab.mkdir()
    env = {k: v for k, v in os.environ.items()
           if k not in ("PYTHONPATH", "SPU_TASK_ROOT", "SPU_REGISTRY", "VIRTUAL_ENV")}
    env.update(SPU_DATA_DIR=str(root / "data"), HOME=str(root / "home"),
               PATH=f"{venv / 'bin'}{os.pathsep}{os.environ.get('PATH', '')}")
    return Installed(venv, lab, env)


def test_the_wheel_carries_what_runs(built: Built) -> None:
    """The config groups, templates, agents, the scripted model and the built-in dataset."""
    names = set(zipfile.ZipFile(built.wheel).namelist())
    for required in ("spu/conf/config.yaml", "spu/conf/model/opus5.yaml",
                     "spu/conf/experiment/default.yaml", "spu/conf/hydra/launcher/ray.yaml",
                     "spu/tasks/templates/instruction_general.md",
                     "spu/harness/agents/baseline_agent.py", "spu/scripted/script.py",
                     "hydra_plugins/spu_tasks/task_source.py",
                     "hydra_plugins/spu_project/project_source.py",
                     "spu/datasets/examples/example-coupling-conditions/task.yaml",
                     "spu/datasets/examples/example-coupling-conditions/hidden/answers.json"):
        assert required in names, required
    packaged = {n for n in names if n.startswith("spu/conf/") and n.endswith(".yaml")}
    in_checkout = {f"spu/conf/{p.relative_to(REPO / 'spu' / 'conf').as_posix()}"
                   for p in (REPO / "spu" / "conf").rglob("*.yaml")}
    assert packaged == in_checkout
    assert not [n for n in names if n.startswith(("tests/", "tasks/"))]


def test_twine_checks_the_metadata(built: Built) -> None:
    pytest.importorskip("twine", reason="twine is not installed (the test extra)")
    done = subprocess.run([sys.executable, "-m", "twine", "check", "--strict",
                           str(built.wheel), str(built.sdist)], capture_output=True, text=True,
                          timeout=300)
    assert done.returncode == 0, done.stdout + done.stderr
    assert done.stdout.count("PASSED") == 2


def test_spu_is_the_wheel_and_knows_its_version(installed: Installed) -> None:
    done = installed.python("-c", "import spu, hydra_plugins.spu_tasks as t; "
                                  "print(spu.__file__); print(t.__file__)")
    assert done.returncode == 0, done.stderr
    for path in done.stdout.split():
        assert Path(path).is_relative_to(installed.venv), path
    done = installed.spu("--version")
    assert (done.returncode, done.stdout) == (0, "spu 0.1.0\n"), done.stderr
    done = installed.spu("list", "models")
    assert done.returncode == 0, done.stderr
    assert "opus5" in done.stdout and "scripted" in done.stdout


HELP_OF_EVERY_COMMAND = """
import contextlib, io, sys
from spu.cli import build_parser
parser = build_parser()
commands = parser._subparsers._group_actions[0].choices
failed = []
for name, sub in sorted(commands.items()):
    if name == "run":  # python -m spu.main's own command line (Hydra's --help): the sweep runs it
        continue
    nested = [a for a in sub._actions if a.__class__.__name__ == "_SubParsersAction"]
    for words in [[name]] + [[name, n] for a in nested for n in a.choices]:
        with contextlib.redirect_stdout(io.StringIO()):
            try:
                parser.parse_args([*words, "--help"])
            except SystemExit as exc:
                if exc.code:
                    failed.append(" ".join(words))
print(len(commands), failed)
"""


def test_every_command_loads_from_the_wheel(installed: Installed) -> None:
    """Each subcommand's help: every stage's command line imports from the installed package."""
    done = installed.python("-c", HELP_OF_EVERY_COMMAND)
    assert done.returncode == 0, done.stderr
    count, failed = done.stdout.split(" ", 1)
    assert int(count) >= 18 and failed.strip() == "[]", done.stdout


@dataclass(frozen=True)
class Published:
    folder: Path
    """What the server publishes."""
    url: str
    """Its registry.json."""


@pytest.fixture(scope="module")
def registry(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Published]:
    """``python -m http.server`` on 127.0.0.1 serving the lab's registry folder."""
    www = tmp_path_factory.mktemp("www")
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    server = subprocess.Popen([sys.executable, "-m", "http.server", str(port), "--bind",
                               "127.0.0.1", "--directory", str(www)],
                              stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            try:
                socket.create_connection(("127.0.0.1", port), timeout=1).close()
                break
            except OSError:
                time.sleep(0.1)
        yield Published(www, f"http://127.0.0.1:{port}/registry.json")
    finally:
        server.terminate()
        server.wait(timeout=30)


def test_a_lab_from_an_empty_folder(installed: Installed, registry: Published) -> None:
    """init, a baseline sweep of the built-in examples, pack, pull over HTTP, a sweep of the
    pulled dataset, the runs table and the statistics: each exits 0."""
    sandbox = "sandbox=local" if have_bwrap() else "sandbox=subprocess"
    lab = installed.lab

    def ok(*args: str) -> str:
        done = installed.spu(*args)
        assert done.returncode == 0, f"spu {' '.join(args)}:\n{done.stdout[-2000:]}\n" \
                                     f"{done.stderr[-3000:]}"
        return done.stdout

    assert "next: spu run experiment=my-sweep dataset=examples" in ok("init")
    out = ok("run", "dataset=examples", sandbox)
    assert "6 ran now" in out
    for task in TWO_TASKS:
        shutil.copytree(TASKS / task, lab / "tasks" / task)
    assert "packed lab-set@1.0: 2 tasks" in ok("dataset", "pack", "tasks", "--name", "lab-set",
                                                "--version", "1.0", "--out",
                                                str(registry.folder))
    assert "lab-set@1.0 pulled" in ok("dataset", "pull", "lab-set@1.0", "--registry",
                                         registry.url)
    out = ok("run", "dataset=lab-set@1.0", "model=random", sandbox)
    assert "2 ran now" in out
    records = [json.loads(p.read_text()) for p in (lab / "outputs" / "runs").glob("*/run.json")]
    assert sorted(r["dataset"] for r in records) == ["examples@0.1.0"] * 6 + ["lab-set@1.0"] * 2
    ok("runs", "export", "--out", "outputs/runs.csv")
    ok("stats", "outputs/runs.csv", "--out", "outputs/stats/")
    assert (lab / "outputs" / "stats" / "configs.csv").is_file()
    done = installed.python("-m", "spu.main", "model=my-model", "experiment=my-sweep",
                            "dataset=examples", "dry_run=true")
    assert done.returncode == 0 and "my-model" in done.stdout, done.stderr
    ok("task", "new", "our-task")  # the task templates come with the package
    ok("task", "validate", "tasks/our-task")
