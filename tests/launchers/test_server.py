"""The sweep's MLflow server: many writers at once, nothing lost, nothing left running,
nothing served without the sweep's credential."""

from __future__ import annotations

import os
import subprocess
import sys
import urllib.error
import urllib.request

import pytest

from spu.launch.server import TrackingServer
from tests.conftest import REPO
from tests.launchers.conftest import processes_mentioning, tracked_runs

WRITER = """
import sys
from pathlib import Path
from spu.schema import Outcome, RunRecord, SandboxInfo
from spu.tracking.store import TrackingTarget, log_run

uri, artifacts, worker, runs, folder = sys.argv[1:6]
target = TrackingTarget(uri=uri, artifact_root=artifacts, experiment="spu-default")
for i in range(int(runs)):
    key = f"{int(worker):08x}{i:08x}"
    record = RunRecord(run_key=key, task_id="t", task_version="1", model="random",
                       harness="baseline", effort="none", repeat=i, outcome=Outcome.valid,
                       scored=True, score_strict=0.1, score_recovered=0.1,
                       sandbox=SandboxInfo(backend="local"))
    run_dir = Path(folder) / key
    run_dir.mkdir(parents=True)
    (run_dir / "run.json").write_text(record.model_dump_json())
    log_run(record, run_dir, target)
"""


@pytest.mark.slow
def test_parallel_writers_through_the_server_lose_no_record(tmp_path) -> None:
    out = tmp_path / "outputs"
    backend = f"sqlite:///{out / 'mlflow.db'}"
    artifacts = (out / "mlartifacts").as_uri()
    server = TrackingServer(backend, artifacts, tmp_path / "server.log")
    with server:
        assert server.uri.startswith("http://127.0.0.1:")
        # Without the sweep's token the server answers nothing but its health.
        with pytest.raises(urllib.error.HTTPError) as refused:
            urllib.request.urlopen(f"{server.uri}/api/2.0/mlflow/experiments/search"
                                   "?max_results=1", timeout=30)
        assert refused.value.code == 401
        wrong = urllib.request.Request(f"{server.uri}/api/2.0/mlflow/experiments/search"
                                       "?max_results=1",
                                       headers={"Authorization": "Bearer not-the-token-at-all"})
        with pytest.raises(urllib.error.HTTPError) as refused:
            urllib.request.urlopen(wrong, timeout=30)
        assert refused.value.code == 401
        # The store's URI is not on the server's command line (it may hold a password).
        assert all(str(out / "mlflow.db") not in open(f"/proc/{pid}/cmdline").read()
                   for pid in processes_mentioning(str(out / "mlflow.db")))
        env = {**os.environ, **server.client_env()}
        writers = [subprocess.Popen([sys.executable, "-c", WRITER, server.uri, artifacts,
                                     str(w), "3", str(tmp_path / "runs")], cwd=REPO, env=env,
                                    stderr=subprocess.PIPE, text=True) for w in range(3)]
        for writer in writers:
            _, err = writer.communicate(timeout=300)
            assert writer.returncode == 0, err[-2000:]
        uri = server.uri
    records = tracked_runs(out)
    assert len(records) == 9 and len({r.run_key for r in records}) == 9
    assert {r.status for r in records} == {"FINISHED"}
    # Stopped: nothing of it runs and its port is closed.
    assert processes_mentioning(str(out / "mlflow.db")) == []
    with pytest.raises((urllib.error.URLError, OSError)):
        urllib.request.urlopen(f"{uri}/health", timeout=2)


def test_stopping_the_server_signals_its_group_only_while_its_id_is_held(tmp_path) -> None:
    """The last SIGKILL to the server's group comes before it is reaped: a process id
    reused by then (a new session leader, such as a daemon started meanwhile) is never hit."""
    import os
    import signal

    from spu.launch.server import TrackingServer

    server = TrackingServer(f"sqlite:///{tmp_path / 'mlflow.db'}", (tmp_path / "a").as_uri(),
                            tmp_path / "server.log")
    server.start()
    proc = server._proc
    assert proc is not None
    sent: list[tuple[int, int, bool]] = []
    real_killpg = os.killpg

    def watch(pgid: int, sig: int) -> None:
        zombie_or_alive = os.path.exists(f"/proc/{pgid}")  # unreaped: the id is held
        sent.append((pgid, sig, zombie_or_alive))
        real_killpg(pgid, sig)

    os.killpg = watch  # type: ignore[assignment]
    try:
        server.stop()
    finally:
        os.killpg = real_killpg  # type: ignore[assignment]
    assert sent and sent[0][1] == signal.SIGTERM
    assert all(held for _, _, held in sent), sent
    assert proc.returncode is not None
