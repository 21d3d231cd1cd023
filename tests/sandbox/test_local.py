"""What only the bubblewrap backend does: masking, dropping root, refusing what it cannot start."""

from __future__ import annotations

import os
import shutil
import tempfile
from pathlib import Path

import pytest

from spu.sandbox import RunLimits, SandboxError
from spu.sandbox.local import SYSTEM_DIRS, agent_uid_for

pytestmark = pytest.mark.slow

SMALL = RunLimits(time_s=60, memory_gb=0.5, cpus=1, gpus=0, grace_s=1)
EXISTS = "import os, sys; print(' '.join(str(os.path.exists(p)) for p in sys.argv[1:]))"


@pytest.fixture
def under_opt() -> Path:
    """A folder under /opt, which the sandbox mounts read-only for the agent's programs."""
    if not os.access("/opt", os.W_OK) or "/opt" not in SYSTEM_DIRS:
        pytest.skip("/opt is not writable here")
    folder = Path(tempfile.mkdtemp(prefix="spu-test-", dir="/opt"))
    folder.chmod(0o755)  # as readable as a deployment would be
    yield folder
    shutil.rmtree(folder)


def test_answers_and_other_runs_under_a_system_folder_are_masked(under_opt, open_sandbox):
    """Invariant: a deployment under /opt shows the agent neither its answers nor other runs."""
    hidden = under_opt / "tasks" / "t" / "hidden"
    hidden.mkdir(parents=True)
    (hidden / "answers.json").write_text("{}")
    other = under_opt / "outputs" / "runs" / "other" / "workspace"
    other.mkdir(parents=True)
    (other / "notes.txt").write_text("secret")
    visible = under_opt / "elsewhere.txt"
    visible.write_text("a system file")
    box = open_sandbox("local", SMALL, runs=other.parent.parent,
                       masked_paths=[under_opt / "tasks" / "t"])
    logs = box.run_dir / "logs"
    box.sandbox.exec(["python3", "-c", EXISTS, str(hidden / "answers.json"),
                      str(other / "notes.txt"), str(visible)],
                     {"PATH": "/usr/bin:/bin"}, stdout=logs / "m.out", stderr=logs / "m.err")
    assert (logs / "m.out").read_text().split() == ["False", "False", "True"]


def test_root_is_dropped_to_an_unprivileged_user(open_sandbox):
    if os.geteuid() != 0:
        pytest.skip("only a root framework drops privileges")
    box = open_sandbox("local", SMALL)
    logs = box.run_dir / "logs"
    script = ("import os; s = open('/proc/self/status').read();"
              "print(os.getuid(), [l.split()[1] for l in s.splitlines()"
              " if l.startswith(('CapEff', 'CapBnd', 'NoNewPrivs'))])")
    box.sandbox.exec(["python3", "-c", script], {"PATH": "/usr/bin:/bin"},
                     stdout=logs / "u.out", stderr=logs / "u.err")
    uid, caps = (logs / "u.out").read_text().strip().split(" ", 1)
    assert int(uid) == agent_uid_for(box.run_dir), "a user id of its own, drawn for the run"
    assert caps == "['0000000000000000', '0000000000000000', '1']"
    assert "unprivileged-user" in box.sandbox.info().isolation


def test_bind_target_inside_a_read_only_system_folder_is_refused(open_sandbox, tmp_path):
    """bwrap cannot create a mount point in a read-only folder: say so before starting."""
    with pytest.raises(SandboxError, match="/opt/spu-no-such-tools.*read-only system folder /opt"):
        open_sandbox("local", SMALL, extra_ro_binds={str(tmp_path): "/opt/spu-no-such-tools"})


def test_default_run_uses_bubblewrap(compose):
    """The composed default (conf/config.yaml) runs the agent under bubblewrap."""
    from spu.main import spec_from_config
    from spu.runner import run_one
    from tests.conftest import EXAMPLE_TASK

    cfg = compose(f"task={EXAMPLE_TASK.name}")
    assert cfg.sandbox.name == "local"
    record = run_one(spec_from_config(cfg))
    assert record.sandbox.backend == "local"
    assert {"mount-namespace", "pid-namespace", "read-only-system"} <= set(
        record.sandbox.isolation)
    assert record.outcome.value == "valid"
