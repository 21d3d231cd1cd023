"""What log_run records in MLflow: batched values, artifacts streamed, agent links ignored."""

from __future__ import annotations

import gzip
import os

from spu.schema import Grade, GradeStatus, GroupGrade
from spu.tracking import store
from spu.tracking.store import client_for, log_run, metric_name, run_metrics
from tests.tracking.conftest import make_record


def _artifacts(client, run_id: str, path: str | None = None) -> dict[str, int]:
    out: dict[str, int] = {}
    for info in client.list_artifacts(run_id, path):
        if info.is_dir:
            out.update(_artifacts(client, run_id, info.path))
        else:
            out[info.path] = info.file_size
    return out


def test_artifacts_skip_links_compress_large_logs_and_leave_out_huge_files(
        tmp_path, target, monkeypatch) -> None:
    monkeypatch.setattr(store, "COMPRESS_LOGS_ABOVE_BYTES", 1000)
    monkeypatch.setattr(store, "MAX_ARTIFACT_BYTES", 50_000)
    run = tmp_path / "run"
    (run / "output" / "scripts").mkdir(parents=True)
    (run / "logs").mkdir()
    (run / "workspace").mkdir()
    (run / "run.json").write_text(make_record().model_dump_json())
    (run / "grade.json").write_text("{}")
    (run / "output" / "rankings.json").write_text("{}")
    (run / "output" / "scripts" / "fit.py").write_text("print(1)\n")
    secret = tmp_path / "secret.txt"
    secret.write_text("host file the agent must not exfiltrate through tracking")
    os.symlink(secret, run / "output" / "stolen.txt")
    os.symlink(tmp_path, run / "output" / "linked_dir")
    (run / "output" / "huge.bin").write_bytes(b"\0" * 60_000)
    stdout = "".join(f"event {i}\n" for i in range(2000)).encode()
    (run / "logs" / "agent.stdout").write_bytes(stdout)
    (run / "logs" / "agent.stderr").write_text("small\n")
    (run / "workspace" / "big-download.tar").write_bytes(b"x" * 10)

    run_id = log_run(make_record(), run, target)
    client = client_for(target)
    logged = _artifacts(client, run_id)
    assert set(logged) == {"run.json", "grade.json", "output/rankings.json",
                           "output/scripts/fit.py", "logs/agent.stdout.gz",
                           "logs/agent.stderr", "transcript.html"}
    local = client.download_artifacts(run_id, "logs/agent.stdout.gz", str(tmp_path / "dl"))
    with gzip.open(local, "rb") as f:
        assert f.read() == stdout
    assert client.get_run(run_id).data.tags["artifacts_skipped"] == (
        "output/huge.bin (60000 bytes)")


def test_more_metrics_than_one_batch_holds(tmp_path, target) -> None:
    groups = [GroupGrade(group_id=f"G{i:04d}", weight=1 / 1100, rho=i / 1100)
              for i in range(1100)]
    grade = Grade(task_id="t", score=0.5, status=GradeStatus.valid, groups=groups,
                  score_strict=0.5, grader_version="1")
    record = make_record(grade=grade)
    (tmp_path / "run").mkdir()
    run_id = log_run(record, tmp_path / "run", target)
    data = client_for(target).get_run(run_id).data
    assert len(data.metrics) == len(run_metrics(record)) > 1100
    assert data.metrics["rho/G1099"] == 1099 / 1100
    assert data.tags["outcome"] == "valid" and data.params["task"] == "t"


def test_metric_names_keep_to_what_mlflow_accepts(tmp_path, target) -> None:
    assert metric_name("rho/G1 (yield%)") == "rho/G1 _yield__"
    grade = Grade(task_id="t", score=0.5, status=GradeStatus.valid, score_strict=0.5,
                  grader_version="1",
                  groups=[GroupGrade(group_id="G1 (yield%)", weight=1.0, rho=0.5)])
    (tmp_path / "run").mkdir()
    run_id = log_run(make_record(grade=grade), tmp_path / "run", target)
    assert client_for(target).get_run(run_id).data.metrics["rho/G1 _yield__"] == 0.5


def test_run_times_status_and_tags(tmp_path, target) -> None:
    (tmp_path / "run").mkdir()
    record = make_record(outcome="infra_error", scored=False, retried_from="abc",
                         refusal_label=None, attempt=2, notes=["sandbox fell back"])
    run = client_for(target).get_run(log_run(record, tmp_path / "run", target))
    assert run.info.status == "FAILED"
    tags = run.data.tags
    assert (tags["outcome"], tags["scored"], tags["retried_from"], tags["attempt"],
            tags["warnings"], tags["started_at"]) == (
        "infra_error", "false", "abc", "2", "sandbox fell back", "2026-10-20T10:00:00+00:00")
    assert "refusal_label" not in tags


def test_large_artifacts_are_stored_once_by_content_and_referenced(tmp_path, target,
                                                                   monkeypatch) -> None:
    """Issue 12: a 200 MB output was copied again into the artifact store by every run.
    Above the cap a file is stored once under ``blobs/sha256/`` and each run's artifact
    is a reference to it; the same content logged by another run is not copied again."""
    import hashlib
    import json

    monkeypatch.setattr(store, "STORE_ONCE_ABOVE_BYTES", 10_000)
    data = os.urandom(50_000)
    digest = hashlib.sha256(data).hexdigest()
    ids = []
    for name in ("a", "b"):
        run = tmp_path / name
        (run / "output").mkdir(parents=True)
        (run / "output" / "model.bin").write_bytes(data)
        (run / "output" / "rankings.json").write_text("{}")
        ids.append(log_run(make_record(), run, target))
    blobs = sorted((tmp_path / "outputs" / "mlartifacts" / "blobs").rglob("*"))
    files = [p for p in blobs if p.is_file()]
    assert [p.relative_to(tmp_path / "outputs" / "mlartifacts").as_posix() for p in files] == [
        f"blobs/sha256/{digest[:2]}/{digest}"]
    assert files[0].read_bytes() == data
    first_copy = files[0].stat().st_mtime_ns
    client = client_for(target)
    for run_id in ids:
        logged = _artifacts(client, run_id)
        assert "output/model.bin" not in logged and "output/rankings.json" in logged
        ref = json.loads(open(client.download_artifacts(
            run_id, "output/model.bin.blob.json", str(tmp_path / run_id))).read())
        assert ref == {"sha256": digest, "bytes": 50_000, "name": "model.bin",
                       "uri": f"{target.artifact_root}/blobs/sha256/{digest[:2]}/{digest}"}
    assert files[0].stat().st_mtime_ns == first_copy  # the second run did not copy it
