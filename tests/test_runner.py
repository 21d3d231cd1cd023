"""run_one: run keys, the baseline agents' submissions, outcomes and the run record."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from scipy.stats import spearmanr

from spu.config import EffortConfig, HarnessConfig, ModelConfig, SandboxConfig
from spu.identity import legacy_run_key
from spu.runner import RunSpec, run_one
from spu.schema import Outcome
from spu.tasks import load_answers, load_task
from tests.conftest import have_bwrap


def _spec(task: Path, model: str, tmp_path: Path, sandbox: str = "local", **kw) -> RunSpec:
    return RunSpec(
        model=ModelConfig(name=model, provider="baseline"),
        harness=HarnessConfig(name="baseline"),
        effort=EffortConfig(name="none"),
        task_dir=task,
        output_root=tmp_path / "outputs",
        sandbox=SandboxConfig(name=sandbox),
        **kw,
    )


def test_first_scheme_run_key_is_stable_and_separates_each_component() -> None:
    """The first scheme's key (:func:`spu.identity.legacy_run_key`), which older stores hold."""
    base = ("random", "baseline", "none", "t", "1.0", 0)
    key = legacy_run_key(*base)
    assert key == legacy_run_key(*base)
    assert len(key) == 16 and int(key, 16) >= 0
    variants = [
        ("opus5", "baseline", "none", "t", "1.0", 0),
        ("random", "command", "none", "t", "1.0", 0),
        ("random", "baseline", "max", "t", "1.0", 0),
        ("random", "baseline", "none", "u", "1.0", 0),
        ("random", "baseline", "none", "t", "1.1", 0),
        ("random", "baseline", "none", "t", "1.0", 1),
    ]
    keys = {legacy_run_key(*v) for v in variants}
    assert key not in keys and len(keys) == len(variants)


@pytest.mark.parametrize("model", ["random", "presented_order", "monotone_prior"])
@pytest.mark.parametrize("sandbox", [pytest.param("local", marks=pytest.mark.slow),  # bwrap
                                     "subprocess"])
def test_baselines_write_valid_submissions(model, sandbox, two_group_task, tmp_path) -> None:
    if sandbox == "local" and not have_bwrap():
        pytest.skip("bubblewrap is not installed (Debian package bubblewrap)")
    record = run_one(_spec(two_group_task, model, tmp_path, sandbox=sandbox))
    assert record.outcome is Outcome.valid
    assert record.scored
    assert record.grade is not None and all(g.error is None for g in record.grade.groups)
    assert record.sandbox.backend == sandbox
    run_dir = tmp_path / "outputs" / "runs" / record.run_key
    saved = json.loads((run_dir / "run.json").read_text())
    for key in ("run_key", "task_id", "task_version", "model", "harness", "effort", "repeat",
                "outcome", "score_strict", "score_recovered", "usage", "cost_usd",
                "runtime_s", "sandbox"):
        assert key in saved
    assert set(saved["usage"]) >= {"input", "cache_read", "cache_write", "output"}
    assert (run_dir / "output" / "report.md").is_file()
    assert not (run_dir / "task" / "hidden").exists(), "answers must not be staged"


def test_presented_order_score_equals_scipy_on_targets_order(two_group_task, tmp_path) -> None:
    """The presented-order baseline's score is the weighted Spearman of the targets.csv order."""
    record = run_one(_spec(two_group_task, "presented_order", tmp_path, sandbox="subprocess"))
    task = load_task(two_group_task)
    answers = load_answers(task.answers_path())
    rows = [r["experiment_id"] for r in task.targets_rows()]
    expected = 0.0
    for g in task.contract.groups:
        order = [i for i in rows if i in set(g.items)]
        rho = spearmanr(range(len(order)), [answers.groups[g.group_id][i] for i in order])[0]
        expected += g.weight * rho
    assert record.score_strict == pytest.approx(expected, abs=1e-12)


def test_random_baseline_is_seeded_by_the_run_key(example_task, tmp_path) -> None:
    a = run_one(_spec(example_task, "random", tmp_path / "a", sandbox="subprocess"))
    b = run_one(_spec(example_task, "random", tmp_path / "b", sandbox="subprocess"))
    c = run_one(_spec(example_task, "random", tmp_path / "c", sandbox="subprocess", repeat=1))

    def read(root: Path, record) -> str:
        return (root / "outputs" / "runs" / record.run_key / "output" / "rankings.json").read_text()

    assert read(tmp_path / "a", a) == read(tmp_path / "b", b)
    assert read(tmp_path / "a", a) != read(tmp_path / "c", c)


def test_rerun_keeps_the_earlier_attempt(example_task, tmp_path) -> None:
    first = run_one(_spec(example_task, "random", tmp_path, sandbox="subprocess"))
    second = run_one(_spec(example_task, "random", tmp_path, sandbox="subprocess", attempt=2))
    run_dir = tmp_path / "outputs" / "runs" / first.run_key
    assert second.attempt == 2
    assert json.loads((run_dir / "attempts" / "1" / "run.json").read_text())["attempt"] == 1


def test_gpu_use_is_measured_on_the_gpus_handed_to_the_run(example_task, tmp_path,
                                                           monkeypatch) -> None:
    """run.json's used_gpu and gpu_seconds come from sampling the run's devices (fake NVML)."""
    import spu.runner
    from spu.sandbox.gpu_usage import GpuSampler, fake_nvml

    seen: list[list[str]] = []

    def sampler(ids, **kw):
        seen.append(list(ids))
        return GpuSampler(ids, interval_s=0.02, nvml=fake_nvml({"0": [60.0]}))

    monkeypatch.setattr(spu.runner, "GpuSampler", sampler)
    record = run_one(_spec(example_task, "random", tmp_path, sandbox="subprocess",
                           gpu_ids=("0",)))
    assert seen == [["0"]]
    assert record.used_gpu and record.gpu_usage is not None
    assert record.gpu_usage.method == "nvml" and record.gpu_seconds is not None
    assert record.gpu_seconds > 0
    stored = json.loads((tmp_path / "outputs" / "runs" / record.run_key / "run.json").read_text())
    assert stored["used_gpu"] is True and stored["gpu_seconds"] == record.gpu_seconds


def test_run_without_gpu_records_nothing_measured(example_task, tmp_path) -> None:
    record = run_one(_spec(example_task, "random", tmp_path, sandbox="subprocess"))
    assert record.gpu_usage is None and record.gpu_seconds is None and not record.used_gpu


def test_staging_finds_its_folder_by_name_among_many(example_task, tmp_path,
                                                    monkeypatch) -> None:
    """Invariant: staging a run never lists ``runs/``, however many folders it holds (a
    glob of it cost 68 ms at 100,000 run folders); what a killed process left in this
    key's scratch folder is removed, every other folder is left as it was."""
    import os

    from spu.runner import prepare_run, stage

    run = prepare_run(_spec(example_task, "random", tmp_path, sandbox="subprocess"))
    runs = run.run_dir.parent
    others = [runs / f"{n:016x}" for n in range(300)]
    for folder in others:
        folder.mkdir(parents=True)
    stale = runs / f".{run.key}.staging"
    (stale / "task").mkdir(parents=True)
    (stale / "task" / "half-copied").write_text("left by a killed process")
    listed: list[Path] = []
    real_scandir, real_listdir = os.scandir, os.listdir
    real_iterdir, real_glob = Path.iterdir, Path.glob

    def scandir(path=".", *a, **k):  # type: ignore[no-untyped-def]
        if not isinstance(path, int):  # shutil.rmtree lists by descriptor, inside a tree
            listed.append(Path(path))
        return real_scandir(path, *a, **k)

    def listdir(path=".", *a, **k):  # type: ignore[no-untyped-def]
        if not isinstance(path, int):
            listed.append(Path(path))
        return real_listdir(path, *a, **k)

    def iterdir(self):  # type: ignore[no-untyped-def]
        listed.append(self)
        return real_iterdir(self)

    def glob(self, pattern, *a, **k):  # type: ignore[no-untyped-def]
        listed.append(self)
        return real_glob(self, pattern, *a, **k)

    monkeypatch.setattr(os, "scandir", scandir)
    monkeypatch.setattr(os, "listdir", listdir)
    monkeypatch.setattr(Path, "iterdir", iterdir)
    monkeypatch.setattr(Path, "glob", glob)
    staged = stage(run)
    monkeypatch.undo()
    assert runs not in [p.resolve() for p in listed], listed
    assert (staged / "contract.json").is_file()
    assert not stale.exists()
    assert sorted(p for p in runs.iterdir() if p != run.run_dir) == others
