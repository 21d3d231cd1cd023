"""Bundles: sealed runs made on one output root, graded on another that alone holds the keys."""

from __future__ import annotations

import io
import tarfile
from pathlib import Path

import pytest

from spu.grading.rules import grade_submission
from spu.runner import run_one
from spu.schema import Outcome, RunRecord
from spu.seal.bundle import BundleError, export_bundle, unpack_bundle
from spu.seal.verify import verify_path
from spu.tasks import load_answers, load_task
from spu.tracking.bundles import grade_bundle
from tests.seal.conftest import seal_spec as _spec


@pytest.fixture
def lab_bundle(keyless: tuple[Path, Path], tmp_path: Path) -> tuple[Path, Path, Path]:
    """Two sealed runs on the lab's root (no key there), exported: (bundle, task, keys)."""
    task, keys = keyless
    lab = tmp_path / "lab"
    for model in ("presented_order", "random"):
        record = run_one(_spec(task, lab, model=model))
        assert record.outcome is Outcome.sealed
    bundle = tmp_path / "bundle.tar"
    assert export_bundle(lab, bundle) == 2
    return bundle, task, keys


def _members(bundle: Path) -> list[str]:
    with tarfile.open(bundle) as tar:
        return tar.getnames()


def _rewrite(bundle: Path, out: Path, change: dict[str, bytes | None],
             extra: list[tarfile.TarInfo] | None = None) -> Path:
    """A copy of ``bundle`` with members replaced (None: dropped) and ``extra`` added."""
    with tarfile.open(bundle) as src, tarfile.open(out, "w") as dst:
        for member in src:
            data = src.extractfile(member).read()  # type: ignore[union-attr]
            if member.name in change:
                if change[member.name] is None:
                    continue
                data = change[member.name]  # type: ignore[assignment]
                member.size = len(data)
            dst.addfile(member, io.BytesIO(data))
        for info in extra or []:
            dst.addfile(info, io.BytesIO(b"x" * info.size) if info.isfile() else None)
    return out


def test_a_bundle_holds_no_key_and_verifies(lab_bundle: tuple[Path, Path, Path]) -> None:
    bundle, _, _ = lab_bundle
    names = _members(bundle)
    assert "seal/public_key.pem" in names and "ledger.jsonl" in names
    assert not any("private" in n for n in names)
    assert verify_path(bundle).ok


def test_graded_elsewhere_the_scores_are_spu_grades(lab_bundle: tuple[Path, Path, Path],
                                                     tmp_path: Path) -> None:
    """The key holder's root grades each run as ``spu grade`` grades its file."""
    bundle, task, keys = lab_bundle
    holder = tmp_path / "holder"
    graded = grade_bundle(bundle, task.parent, holder, answers_root=keys,
                          tracking_uri=f"sqlite:///{holder / 'mlflow.db'}")
    assert [r.outcome for r in graded.runs] == ["valid", "valid"]
    contract = load_task(task).contract
    answers = load_answers(keys / task.name / "answers.json")
    for run in graded.runs:
        run_dir = graded.root / "runs" / run.run_key
        direct = grade_submission(contract, answers,
                                  (run_dir / "output" / "rankings.json").read_bytes())
        assert run.score == pytest.approx(direct.score, abs=1e-12)
        record = RunRecord.model_validate_json((run_dir / "run.json").read_bytes())
        assert record.scored and record.identity is not None
    from mlflow import MlflowClient

    client = MlflowClient(f"sqlite:///{holder / 'mlflow.db'}")
    exp = client.get_experiment_by_name("spu-bundles")
    assert exp is not None
    found = client.search_runs([exp.experiment_id])
    assert {r.data.tags["spu.ledger_head"] for r in found} == {graded.head}
    assert {r.data.tags["run_key"] for r in found} == {r.run_key for r in graded.runs}


def test_a_submission_changed_in_the_bundle_ends_seal_broken(
        lab_bundle: tuple[Path, Path, Path], tmp_path: Path) -> None:
    bundle, task, keys = lab_bundle
    target = next(n for n in _members(bundle) if n.endswith("output/rankings.json"))
    with tarfile.open(bundle) as tar:
        data = tar.extractfile(target).read()  # type: ignore[union-attr]
    changed = _rewrite(bundle, tmp_path / "changed.tar", {target: data + b" "})
    graded = grade_bundle(changed, task.parent, tmp_path / "holder", answers_root=keys)
    broken = [r for r in graded.runs if r.outcome == "seal_broken"]
    assert len(broken) == 1 and broken[0].score is None
    assert "output/rankings.json: changed after sealing" in broken[0].note
    assert not verify_path(changed).ok


def _link(name: str) -> tarfile.TarInfo:
    info = tarfile.TarInfo(name)
    info.type, info.linkname = tarfile.SYMTYPE, "/etc/passwd"
    return info


def _file(name: str) -> tarfile.TarInfo:
    info = tarfile.TarInfo(name)
    info.size = 3
    return info


@pytest.mark.parametrize(("extra", "why"), [
    (_link("runs/x/output/report.md"), "is a link or a device"),
    (_file("seal/private_key.pem"), "only the public key"),
    (_file("../outside.txt"), "a path outside the bundle's root"),
    (_file("/etc/cron.d/x"), "a path outside the bundle's root"),
])
def test_an_unsafe_bundle_is_refused(lab_bundle: tuple[Path, Path, Path], tmp_path: Path,
                                     extra: tarfile.TarInfo, why: str) -> None:
    bundle, task, keys = lab_bundle
    bad = _rewrite(bundle, tmp_path / "bad.tar", {}, [extra])
    with pytest.raises(BundleError, match=why):
        unpack_bundle(bad, tmp_path / "dest")
    with pytest.raises(BundleError, match=why):
        grade_bundle(bad, task.parent, tmp_path / "holder", answers_root=keys)
    assert not (tmp_path / "outside.txt").exists()


def test_a_dropped_ledger_line_refuses_the_whole_bundle(
        lab_bundle: tuple[Path, Path, Path], tmp_path: Path) -> None:
    bundle, task, keys = lab_bundle
    with tarfile.open(bundle) as tar:
        ledger = tar.extractfile("ledger.jsonl")
        assert ledger is not None
        lines = ledger.read().splitlines(keepends=True)
    cut = _rewrite(bundle, tmp_path / "cut.tar", {"ledger.jsonl": lines[0]})
    with pytest.raises(BundleError, match="not in the ledger"):
        grade_bundle(cut, task.parent, tmp_path / "holder", answers_root=keys)


def test_the_labs_run_json_cannot_change_the_sealed_facts(
        lab_bundle: tuple[Path, Path, Path], tmp_path: Path) -> None:
    """run.json is not sealed: its outcome and task fields are taken from the manifest."""
    import json

    bundle, task, keys = lab_bundle
    target = next(n for n in _members(bundle) if n.endswith("/run.json"))
    with tarfile.open(bundle) as tar:
        member = tar.extractfile(target)
        assert member is not None
        record = json.loads(member.read())
    record.update(outcome="refusal", repeat=3)
    edited = _rewrite(bundle, tmp_path / "edited.tar", {target: json.dumps(record).encode()})
    graded = grade_bundle(edited, task.parent, tmp_path / "holder", answers_root=keys)
    assert [r.outcome for r in graded.runs] == ["valid", "valid"]
    run_dir = graded.root / target.rsplit("/run.json", 1)[0]
    assert RunRecord.model_validate_json((run_dir / "run.json").read_bytes()).repeat == 0
