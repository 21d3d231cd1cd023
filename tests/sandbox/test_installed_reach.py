"""An installed spu keeps answer keys in places of its own: none of them is in an agent's reach.

SPEC 16 put answer keys in new places on the host: every pulled dataset under
``$SPU_DATA_DIR/datasets/`` (each version of each, and a pull under way in its
``.partial-*`` folder), the built-in dataset ``examples`` inside the installed package
(``site-packages/spu/datasets/examples``), and the project folder's ``tasks/``. An
operator who puts them under ``/opt`` (a virtual environment ``/opt/spu``, a shared
``SPU_DATA_DIR=/opt/spu-data``) puts them in a folder ``sandbox=local`` shows the agent.

Here all of them lie under a folder of ``/opt``: the package's copy of the examples
(``BUILTIN_FOLDER`` pointed at a copy laid out as the wheel installs it, links resolved),
two pulled versions of a dataset of two real tasks, a pull's partial folder, and the
project's ``tasks/``. Every answer key there holds a canary. The agent
(``agents/key_finder.py``) walks the whole file system, archives included, and submits
from any key of its own task it finds.
"""

from __future__ import annotations

import dataclasses
import json
import os
import shutil
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from spu.schema import Outcome
from tests.conftest import TASKS
from tests.sandbox.conftest import AGENTS, ISOLATING, require_backend

FINDER = AGENTS / "key_finder.py"
LAB_TASKS = ("spu-20he", "spu-2q2w")

pytestmark = [pytest.mark.slow,
              pytest.mark.skipif(os.geteuid() != 0, reason="writing under /opt needs root")]


def _plant(task_dir: Path, canary: str) -> None:
    """Put ``canary`` in the task's answer key (a field the grader does not read)."""
    path = task_dir / "hidden" / "answers.json"
    answers = json.loads(path.read_text())
    answers.setdefault("source", {})["note"] = canary
    path.write_text(json.dumps(answers))


@dataclasses.dataclass(frozen=True)
class Installed:
    """Where an operator put spu, its data and the lab's project: all under ``/opt``."""

    root: Path
    canary: str
    data: Path


@pytest.fixture
def installed_under_opt(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Installed]:
    from spu.datasets import parse_ref, store
    from spu.datasets.pack import pack_dataset

    canary = f"spu-canary-{uuid.uuid4().hex}"
    root = Path("/opt") / f"spu-reach-{uuid.uuid4().hex[:8]}"
    root.mkdir()
    try:
        package = root / "venv" / "lib" / "python3" / "site-packages" / "spu"
        examples = package / "datasets" / "examples"
        shutil.copytree(store.BUILTIN_FOLDER, examples, symlinks=False)
        for task in examples.iterdir():
            _plant(task, canary)
        monkeypatch.setattr(store, "BUILTIN_FOLDER", examples)
        data = root / "data"
        monkeypatch.setenv("SPU_DATA_DIR", str(data))
        lab = root / "lab"
        for name in LAB_TASKS:
            shutil.copytree(TASKS / name, lab / "tasks" / name)
            _plant(lab / "tasks" / name, canary)
        monkeypatch.chdir(lab)
        registry = tmp_path / "registry"
        for version in ("1.0", "1.1"):
            pack_dataset(lab / "tasks", parse_ref(f"lab-set@{version}"), registry)
            store.pull(parse_ref(f"lab-set@{version}"), str(registry))
        partial = data / "datasets" / ".partial-lab-set@2.0-x1" / "tree" / "tasks"
        shutil.copytree(lab / "tasks", partial)
        # what `spu tasks build` downloads into the project by default (.cache/spu-tasks)
        downloaded = lab / ".cache" / "spu-tasks" / "source-package" / "hidden"
        downloaded.mkdir(parents=True)
        (downloaded / "answers.json").write_text(json.dumps({"canary": canary}))
        yield Installed(root, canary, data)
    finally:
        shutil.rmtree(root, ignore_errors=True)


@pytest.mark.parametrize("backend", ISOLATING)
@pytest.mark.parametrize("dataset", ["lab-set@1.1", "examples"])
def test_no_answer_key_of_an_installed_spu_is_in_reach(backend, dataset, request, compose,
                                                       installed_under_opt) -> None:
    """Invariant: an agent that searches every file it can see, archives included, finds no
    answer key: not another version's, another dataset's, the package's, a pull's under
    way or the project's; its own task's run is scored on what it worked out."""
    from spu.datasets import parse_ref
    from spu.datasets.store import find_pulled
    from spu.main import spec_from_config
    from spu.runner import run_one

    options = require_backend(request, backend)
    found = find_pulled(parse_ref(dataset))
    task = "spu-20he" if dataset != "examples" else "example-coupling-conditions"
    request.getfixturevalue("monkeypatch").setenv("SPU_TASK_ROOT", str(found.tasks))
    cfg = compose("harness=command", f"harness.entrypoint={FINDER}", f"sandbox={backend}",
                  f"task_root={found.tasks}", f"task={task}", f"dataset={found.ref}",
                  "limits.cpus=1", "limits.gpus=0", "limits.grace_s=1", "limits.memory_gb=1",
                  "limits.time_s=300", "limits.disk_gb=1", "tracking.enabled=false")
    spec = spec_from_config(cfg)
    if backend == "docker":
        spec = dataclasses.replace(spec, sandbox=dataclasses.replace(
            spec.sandbox, image=options["image"]))
    record = run_one(spec)
    output = spec.output_root / "runs" / record.run_key / "output"
    assert record.outcome is Outcome.valid, record.notes
    assert (found.tasks / task / "hidden" / "answers.json").is_file(), "the host still has it"
    read = json.loads((output / "found.json").read_text())
    assert spec.task_dir == found.tasks / task
    assert sorted(read) == []
    assert installed_under_opt.canary not in (output / "found.json").read_text()


@pytest.mark.parametrize("backend", ISOLATING)
def test_masked_paths_a_harness_bind_shows_are_hidden(backend, open_sandbox, tmp_path) -> None:
    """Invariant: a masked path under a harness's read-only bind (a tools folder set to
    the data folder, ``SPU_TOOLS_DIR=~/.cache/spu``) is hidden under every backend, a
    folder and a file alike, and a masked path that does not exist breaks nothing."""
    canary = f"spu-canary-{uuid.uuid4().hex}"
    tools = tmp_path / "tools"
    key = tools / "datasets" / "lab-set" / "1.1" / "tasks" / "t" / "hidden" / "answers.json"
    key.parent.mkdir(parents=True)
    key.write_text(canary)
    (tools / "keys.json").write_text(canary)
    (tools / "cli.js").write_text("// a tool")
    for folder in [tools, *tools.rglob("*")]:
        folder.chmod(0o755 if folder.is_dir() else 0o644)  # readable, as a deployment's
    box = open_sandbox(backend, extra_ro_binds={str(tools): "/spu-tools"},
                       masked_paths=[tools / "datasets", tools / "keys.json",
                                     tools / "never-pulled"])
    inside = [f"/spu-tools/{key.relative_to(tools)}", "/spu-tools/keys.json", "/spu-tools/cli.js"]
    script = ("import json, os, sys; print(json.dumps({p: open(p).read() if os.path.isfile(p)"
              " else None for p in sys.argv[1:]}))")
    box.sandbox.write_file(f"{box.paths.workspace}/look.py", script.encode(), mode=0o755)
    logs = box.run_dir / "logs"
    evidence = box.sandbox.exec(["python3", f"{box.paths.workspace}/look.py", *inside],
                                {"PATH": "/usr/bin:/bin"}, stdout=logs / "look.out",
                                stderr=logs / "look.err")
    assert evidence.exit_code == 0, (logs / "look.err").read_text()
    seen = json.loads((logs / "look.out").read_text())
    assert seen == {inside[0]: None, inside[1]: None, inside[2]: "// a tool"}  # /dev/null
