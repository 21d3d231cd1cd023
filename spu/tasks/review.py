"""The review before freezing (paper section 2.3, step 3; SPEC section 15).

A task carries its review in ``review.yaml`` beside ``task.yaml``: who reviewed it, when,
the checklist of source checks and what each found, the verdict, the blocking issues with
their fixes, the construction screens waived (each with its reason) and the
:func:`~spu.tasks.digest.task_digest` of the public files reviewed. ``review.yaml`` is not
one of :data:`~spu.tasks.package.PUBLIC_PATHS`: it is never staged for an agent, and
writing it does not change the digest it records.

``spu task validate --strict`` requires, of a public task that is not retired, an
accepted review of the task's current digest (:func:`review_findings`); a change to any
public file after the review makes it stale.
"""

from __future__ import annotations

import datetime
import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

import yaml
from pydantic import ValidationError

from spu.schema import ReviewCheck, ReviewIssue, ReviewRecord, TaskMeta, Visibility
from spu.tasks.digest import task_digest
from spu.tasks.package import TaskLoadError, load_meta, load_yaml_model, validation_message

REVIEW_FILE = "review.yaml"
"""The review record's name in the task folder."""

CHECKLIST: dict[str, str] = {
    "source-identified": "the key's source names the study (DOI, title or a full citation) "
                         "and the data's origin (package and file, or table)",
    "values-match-source": "every measured value in hidden/answers.json equals the source's "
                           "value for that experiment (units converted as the protocol says)",
    "endpoints-and-units": "protocol.json's endpoint, unit and fixed conditions of each group "
                           "match the source's methods",
    "groups-comparable": "within each group the experiments differ only in the varied "
                         "settings of targets.csv (same assay, same conditions)",
    "neutral-wording": "title, instruction.md and experiment.md give no hint of the source "
                       "(no author, journal, data-set name or distinctive phrase)",
    "no-leak": "no public file holds a measured value, a source identifier or an order hint "
               "(spu task validate finds no leak)",
    "screens": "the construction screens of step 2 pass, or each one that fires is waived "
               "with a reason (trend in a setting, narrow spread, ids, presented order)",
}
"""The checklist of a review: item name -> what the reviewer checks."""

CHECK_RESULTS: tuple[str, ...] = ("ok", "fail", "na", "not-checked")
"""What a check can find (see :class:`~spu.schema.ReviewCheck`)."""

SCREEN_CODES: tuple[str, ...] = ("strictly-monotone", "monotone-rho", "narrow",
                                 "not-anonymized", "presented-order")
"""Finding codes of the step 2 screens (:mod:`spu.tasks.validate`): the warnings a review
may waive; ``--strict`` makes every other warning an error whatever the review says."""


class ReviewError(ValueError):
    """A review cannot be written as asked; the message says which answer is wrong."""


@dataclass(frozen=True)
class ReviewState:
    """What a task's review means for strict validation."""

    problems: tuple[tuple[str, str], ...]
    """``(code, message)`` of each error strict validation reports (``review-missing``,
    ``review-stale``, ``review-rejected``, ``malformed``)."""
    waivers: Mapping[str, str]
    """Screens waived by a current accepted review: finding code -> reason."""


def load_review(task_dir: str | Path) -> ReviewRecord | None:
    """The task's ``review.yaml``, or None when there is none.

    Raises
    ------
    TaskLoadError
        When the file is not a regular file, not YAML, or does not match
        :class:`~spu.schema.ReviewRecord` (one line naming the file and the key).
    """
    path = Path(task_dir) / REVIEW_FILE
    if not os.path.lexists(path):
        return None
    record = load_yaml_model(path, ReviewRecord)
    unknown = sorted(set(record.waivers) - set(SCREEN_CODES))
    if unknown:
        raise TaskLoadError(f"{path}: waivers.{unknown[0]}: not a construction screen "
                            f"(one of {', '.join(SCREEN_CODES)})")
    return record


def review_state(task_dir: str | Path, meta: TaskMeta) -> ReviewState:
    """The review's standing for ``spu task validate --strict`` (SPEC section 15).

    A public task that is not retired needs an accepted review of its current digest; a
    private task (unpublished data, no public source to check) or a retired one (out of
    the benchmark; retiring edits ``task.yaml``, so its review is stale by design) does
    not, though a review it has still waives screens while current.
    """
    task_dir = Path(task_dir)
    required = meta.visibility is Visibility.public and meta.retired is None
    try:
        record = load_review(task_dir)
    except TaskLoadError as exc:
        where = f"{task_dir.resolve() / REVIEW_FILE}: "
        return ReviewState((("malformed", str(exc).replace(where, "")),), {})
    if record is None:
        problems = ((("review-missing", "no review before freezing (paper 2.3, step 3): a "
                      "public task needs an accepted review; write one with spu task review "
                      f"{task_dir}"),) if required else ())
        return ReviewState(problems, {})
    digest = task_digest(task_dir)
    stale = record.task_digest != digest
    problems_: list[tuple[str, str]] = []
    if stale:
        problems_.append(("review-stale", f"the review of {record.date.isoformat()} by "
                          f"{record.reviewer} is stale: the task's files changed after it "
                          f"(reviewed digest {record.task_digest[:12]}, now {digest[:12]}); "
                          f"review the task again"))
    elif record.task_id != meta.id or record.task_version != meta.version:
        stale = True
        problems_.append(("review-stale", f"the review is of {record.task_id} "
                          f"{record.task_version}, not of {meta.id} {meta.version}"))
    if record.verdict != "accept":
        problems_.append(("review-rejected", f"the review of {record.date.isoformat()} by "
                          f"{record.reviewer} rejected the task; fix its issues and review "
                          f"it again"))
    if not required:
        problems_ = []
    waivers = {} if stale or record.verdict != "accept" else dict(record.waivers)
    return ReviewState(tuple(problems_), waivers)


def parse_assignments(values: Sequence[str], option: str) -> dict[str, str]:
    """``NAME=VALUE`` options into a mapping; a malformed or repeated one is a ReviewError.

    Examples
    --------
    >>> parse_assignments(["screens=ok", "no-leak=na"], "--check")
    {'screens': 'ok', 'no-leak': 'na'}
    """
    found: dict[str, str] = {}
    for value in values:
        name, sep, rest = value.partition("=")
        name = name.strip()
        if not sep or not name:
            raise ReviewError(f"{option} {value!r}: expected NAME=VALUE")
        if name in found:
            raise ReviewError(f"{option} {name}: given twice")
        found[name] = rest.strip()
    return found


def make_review(
    task_dir: str | Path,
    *,
    reviewer: str,
    verdict: str,
    checks: Mapping[str, str],
    check_notes: Mapping[str, str] | None = None,
    issues: Sequence[tuple[str, str]] = (),
    waivers: Mapping[str, str] | None = None,
    date: datetime.date | None = None,
) -> ReviewRecord:
    """A review record of the task as its files are now.

    Parameters
    ----------
    task_dir
        The task folder (its ``task.yaml`` must load).
    reviewer, verdict
        Who reviewed it; ``accept`` or ``reject``.
    checks
        A result (:data:`CHECK_RESULTS`) for every item of :data:`CHECKLIST`.
    check_notes
        Optional note per checklist item.
    issues
        Blocking issues as ``(issue, fix)``; an accepted review needs every fix.
    waivers
        Screens waived (:data:`SCREEN_CODES`) -> reason.
    date
        Day of the review (default today, UTC).

    Raises
    ------
    ReviewError
        An answer is missing or not allowed: the message names it.
    TaskLoadError
        When ``task.yaml`` does not load.
    """
    task_dir = Path(task_dir)
    meta = load_meta(task_dir)
    notes = dict(check_notes or {})
    waivers = dict(waivers or {})
    for name in [*checks, *notes]:
        if name not in CHECKLIST:
            raise ReviewError(f"--check {name}: not an item of the checklist "
                              f"({', '.join(CHECKLIST)})")
    missing = [name for name in CHECKLIST if name not in checks]
    if missing:
        raise ReviewError(f"--check {missing[0]}: no answer (every item of the checklist "
                          f"needs one of {', '.join(CHECK_RESULTS)})")
    for name, result in checks.items():
        if result not in CHECK_RESULTS:
            raise ReviewError(f"--check {name}={result}: expected one of "
                              f"{', '.join(CHECK_RESULTS)}")
    for code, reason in waivers.items():
        if code not in SCREEN_CODES:
            raise ReviewError(f"--waive {code}: not a construction screen "
                              f"({', '.join(SCREEN_CODES)})")
        if not reason.strip():
            raise ReviewError(f"--waive {code}: a waiver needs its reason (--waive {code}=WHY)")
    data = {
        "task_id": meta.id, "task_version": meta.version, "reviewer": reviewer,
        "date": date or datetime.datetime.now(datetime.UTC).date(),
        "task_digest": task_digest(task_dir),
        "checks": {name: ReviewCheck(result=checks[name], note=notes.get(name, ""))  # type: ignore[arg-type]
                   for name in CHECKLIST},
        "verdict": verdict,
        "issues": [ReviewIssue(issue=i, fix=f) for i, f in issues],
        "waivers": waivers,
    }
    try:
        return ReviewRecord.model_validate(data)
    except ValidationError as exc:
        raise ReviewError(validation_message(REVIEW_FILE, exc)) from None


def review_yaml(record: ReviewRecord) -> str:
    """The record as ``review.yaml`` text (keys in schema order, dates as ``YYYY-MM-DD``)."""
    data = record.model_dump(mode="json")
    return yaml.safe_dump(data, sort_keys=False, allow_unicode=True, width=96)


def write_review(task_dir: str | Path, record: ReviewRecord) -> Path:
    """Write ``review.yaml`` into the task folder (replacing one that is there)."""
    path = Path(task_dir) / REVIEW_FILE
    partial = path.with_name(f".{REVIEW_FILE}.{os.getpid()}")
    partial.write_text(review_yaml(record), encoding="utf-8")
    os.replace(partial, path)
    return path


def retire_task(task_dir: str | Path, reason: str,
                date: datetime.date | None = None) -> TaskMeta:
    """Add ``retired: {date, reason}`` to the task's ``task.yaml`` (SPEC section 15).

    The block is appended as text, so the file's other lines and comments stay as written.

    Raises
    ------
    ReviewError
        When the reason is empty or the task is retired already.
    TaskLoadError
        When ``task.yaml`` does not load, before or after.
    """
    from spu.tasks.package import MAX_YAML_BYTES, read_task_text

    task_dir = Path(task_dir)
    meta = load_meta(task_dir)
    if meta.retired is not None:
        raise ReviewError(f"{task_dir / 'task.yaml'}: retired already on "
                          f"{meta.retired.date.isoformat()} ({meta.retired.reason})")
    if not reason.strip():
        raise ReviewError("--reason: a retirement needs its reason")
    day = date or datetime.datetime.now(datetime.UTC).date()
    path = task_dir / "task.yaml"
    text = read_task_text(path, MAX_YAML_BYTES)
    block = yaml.safe_dump({"retired": {"date": day.isoformat(), "reason": " ".join(
        reason.split())}}, sort_keys=False, allow_unicode=True, width=1000)
    partial = path.with_name(f".task.yaml.{os.getpid()}")
    partial.write_text(text + ("" if text.endswith("\n") or not text else "\n") + block,
                       encoding="utf-8")
    os.replace(partial, path)
    return load_meta(task_dir)
