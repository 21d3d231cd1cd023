"""``spu grade-bundle``: a lab's sealed runs verified, graded with the local key, recorded.

The bundle is unpacked under ``<output_root>/bundles/<name>-<sha>/`` (an output root of
its own: its ledger, the lab's public key and its run folders). A bundle whose chain or
key does not hold is refused whole. Each run is then given the outcome its manifest
sealed (the lab's ``run.json`` is not sealed, so its outcome is not trusted), graded by
:func:`spu.tracking.regrade.regrade_run` with the isolated grader, and logged to the
local tracking with tags naming the bundle and the ledger head. A run whose sealed
files changed ends ``seal_broken``: recorded, never scored.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from pathlib import Path

from spu.schema import Outcome, RunRecord, SealManifest
from spu.seal.bundle import BundleError, manifest_of, unpack_bundle
from spu.seal.verify import verify_root
from spu.tracking.regrade import RegradeError, _write_json_atomic, find_task, regrade_run


@dataclass(frozen=True)
class BundleRun:
    """One run of a graded bundle."""

    run_key: str
    """The run's key."""
    outcome: str
    """Its outcome after grading here (``seal_broken`` when a sealed file changed)."""
    score: float | None
    """Its recovered score, None when it is not scored."""
    note: str = ""
    """Why it is broken or could not be graded."""


@dataclass(frozen=True)
class GradedBundle:
    """What ``spu grade-bundle`` did."""

    root: Path
    """Where the bundle was unpacked."""
    head: str | None
    """The bundle's ledger head (compare it with the one the lab published)."""
    runs: list[BundleRun]
    """Every run, in ledger order."""


def grade_bundle(bundle: Path, task_root: Path, output_root: Path,
                 answers_root: Path | None = None, public_key: Path | None = None,
                 isolation: str = "auto", tracking_uri: str | None = None,
                 experiment: str = "spu-bundles") -> GradedBundle:
    """Verify, grade and record a bundle's runs.

    Raises:
        BundleError: The bundle is unsafe, or its chain or key does not hold.
    """
    bundle = Path(bundle)
    digest = hashlib.sha256(bundle.read_bytes()).hexdigest()
    root = unpack_bundle(bundle, Path(output_root) / "bundles"
                         / f"{bundle.stem}-{digest[:12]}")
    checked = verify_root(root, public_key)
    if checked.chain_faults or checked.unlisted:
        raise BundleError(f"{bundle}: {checked.faults[0]}")
    runs: list[BundleRun] = []
    records: list[tuple[RunRecord, Path]] = []
    for run in checked.runs:
        key = run.entry.run_key
        try:
            record = RunRecord.model_validate_json((run.run_dir / "run.json").read_bytes())
        except (OSError, ValueError):
            runs.append(BundleRun(key, Outcome.seal_broken.value, None,
                                  "run.json missing or unreadable"))
            continue
        if run.faults or run.manifest is None:
            record = record.model_copy(update={
                "outcome": Outcome.seal_broken, "scored": False,
                "notes": [*record.notes, f"seal broken: {run.faults[0]}"]})
            _write_json_atomic(run.run_dir / "run.json", record.model_dump_json(indent=1))
            runs.append(BundleRun(key, record.outcome.value, None, run.faults[0]))
            records.append((record, run.run_dir))
            continue
        # The signed manifest, not the lab's run.json, says what ran and how it ended.
        manifest = manifest_of(run.run_dir)
        trusted = _sealed_facts(record, manifest)
        other = _task_differs(manifest, task_root)
        if other and other not in trusted.notes:
            trusted = trusted.model_copy(update={"notes": [*trusted.notes, other]})
        if trusted != record:
            record = trusted
            _write_json_atomic(run.run_dir / "run.json", record.model_dump_json(indent=1))
        try:
            _, new = regrade_run(run.run_dir, task_root, answers_root, isolation=isolation,
                                 reason=f"bundle {bundle.name}")
        except RegradeError as exc:
            runs.append(BundleRun(key, record.outcome.value, None, str(exc)))
            continue
        final = new or record
        runs.append(BundleRun(key, final.outcome.value,
                              final.score_recovered if final.scored else None))
        records.append((final, run.run_dir))
    if tracking_uri is not None:
        _track(records, tracking_uri, Path(output_root), experiment, bundle.name, checked.head)
    return GradedBundle(root, checked.head, runs)


def _sealed_facts(record: RunRecord, manifest: SealManifest) -> RunRecord:
    """``record`` with the outcome and the identity's fields taken from the signed manifest."""
    update: dict[str, object] = {"outcome": manifest.outcome}
    identity = manifest.identity
    if identity is not None:
        update.update(task_id=identity.task.id, task_version=identity.task.version,
                      repeat=identity.repeat, model=identity.config.model,
                      effort=identity.config.effort, harness=identity.config.harness)
    return record.model_copy(update=update)


def _task_differs(manifest: SealManifest, task_root: Path) -> str | None:
    """A note when the run saw other public files than the local task's, else None.

    Not a refusal: the ``answers: pending`` mark of the lab's copy changes the digest
    too; the grader checks the submission against the local contract either way.
    """
    from spu.tasks.digest import task_digest
    from spu.tasks.package import TaskLoadError

    identity = manifest.identity
    if identity is None:
        return None
    try:
        local = task_digest(find_task(task_root, identity.task.id))
    except (TaskLoadError, OSError):
        return None  # the regrade names a missing task
    if local != identity.task.task_digest:
        return (f"task {identity.task.id}: the run saw other public files than the local "
                "task's (task_digest differs)")
    return None


def _track(records: list[tuple[RunRecord, Path]], uri: str, output_root: Path, experiment: str,
           bundle: str, head: str | None) -> None:
    from spu.tracking.store import TrackingTarget, client_for, log_run

    target = TrackingTarget(uri=uri, experiment=experiment,
                            artifact_root=(output_root.resolve() / "mlartifacts").as_uri())
    client = client_for(target)
    for record, run_dir in records:
        run_id = log_run(record, run_dir, target)
        client.set_tag(run_id, "spu.bundle", bundle)
        client.set_tag(run_id, "spu.ledger_head", head or "")
