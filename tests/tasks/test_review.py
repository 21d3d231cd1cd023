"""The review before freezing (paper 2.3, step 3; SPEC 15): ``review.yaml``, ``spu task review``
and what ``spu task validate --strict`` makes of it."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest
import yaml

from spu.cli import main
from spu.tasks.digest import task_digest
from spu.tasks.review import CHECKLIST, REVIEW_FILE, load_review
from spu.tasks.validate import Severity, validate_task
from tests.conftest import TASKS
from tests.tasks.conftest import GROUPS, SETTINGS

ALL_OK = [f"--check={name}=ok" for name in CHECKLIST]


def _review(task: Path, *extra: str, verdict: str = "accept") -> int:
    return main(["task", "review", str(task), "--no-input", "--reviewer", "A. Reviewer",
                 "--date", "2026-11-30", "--verdict", verdict, *ALL_OK, *extra])


def _codes(report) -> set[str]:
    return {f.code for f in report.errors}


def test_a_shipped_task_carries_an_accepted_review_of_its_files() -> None:
    """Every public task of the checkout has an accepted review of its current digest."""
    for folder in sorted(p for p in TASKS.iterdir() if (p / "task.yaml").is_file()):
        record = load_review(folder)
        assert record is not None, folder
        assert record.verdict == "accept" and record.reviewer == "spu maintainers"
        assert record.task_digest == task_digest(folder), folder
        assert set(record.checks) == set(CHECKLIST)


def test_a_reviewed_task_validates_strictly_and_an_edit_makes_the_review_stale(tmp_path) -> None:
    task = tmp_path / "spu-bhpt"
    shutil.copytree(TASKS / "spu-bhpt", task)
    assert validate_task(task, strict=True).ok
    with open(task / "instruction.md", "a", encoding="utf-8") as f:
        f.write("\nOne more sentence.\n")
    report = validate_task(task, strict=True)
    stale = [f for f in report.errors if f.code == "review-stale"]
    assert len(stale) == 1 and stale[0].file == REVIEW_FILE
    assert "by spu maintainers is stale: the task's files changed after it" in stale[0].message
    assert validate_task(task).ok  # not strict: the review is not consulted
    # A fresh review of the edited files makes it current again.
    assert _review(task) == 0
    assert validate_task(task, strict=True).ok


def test_a_public_task_without_a_review_fails_strictly_a_private_one_does_not(make_task,
                                                                              tmp_path) -> None:
    task = make_task()
    report = validate_task(task, strict=True)
    assert _codes(report) == {"review-missing"}
    assert "spu task review" in report.errors[0].message
    private = make_task(meta={"id": "spu-test", "version": "1.0", "title": "Ranking tests",
                              "discipline": "chemistry", "subfield": "testing",
                              "visibility": "private"})
    assert validate_task(private, strict=True).ok


def test_a_rejected_review_fails_strictly(make_task) -> None:
    task = make_task()
    assert _review(task, "--issue", "values of G2 are in the wrong unit", verdict="reject") == 0
    assert _codes(validate_task(task, strict=True)) == {"review-rejected"}
    # Accepting with a blocking issue and no fix is refused; with its fix it is written.
    assert _review(task, "--issue", "values of G2 are in the wrong unit") == 1
    assert _review(task, "--issue", "values of G2 in the wrong unit", "--fix",
                   "converted to %") == 0
    assert load_review(task).issues[0].fix == "converted to %"  # type: ignore[union-attr]
    assert validate_task(task, strict=True).ok


def _monotone_task(make_task) -> Path:
    values = GROUPS["G1"]["values"]
    cells = {e: str(10 + rank) for rank, e in enumerate(sorted(values, key=values.get))}
    cells.update({e: SETTINGS[e][1] for e in GROUPS["G2"]["values"]})
    group_of = {e: gid for gid, g in GROUPS.items() for e in g["values"]}
    rows = [{"experiment_id": e, "group_id": group_of[e], "solvent": SETTINGS[e][0],
             "concentration_mm": cells[e]} for e in SETTINGS]
    return make_task(rows=rows)


def test_a_waived_screen_needs_its_reason_and_then_stays_a_warning(make_task, capsys) -> None:
    task = _monotone_task(make_task)
    assert {f.code for f in validate_task(task).warnings} == {"strictly-monotone"}
    # Accepting while a screen fires unwaived is refused, naming the screen.
    assert _review(task) == 1
    assert "screen strictly-monotone fires" in capsys.readouterr().err
    assert _review(task, "--waive", "strictly-monotone=") == 1
    assert "a waiver needs its reason" in capsys.readouterr().err
    assert _review(task, "--waive", "leak-values=because") == 1
    assert "not a construction screen" in capsys.readouterr().err
    assert not (task / REVIEW_FILE).exists()
    reason = "the series spans the solubility limit; the order is not the extension"
    assert _review(task, "--waive", f"strictly-monotone={reason}") == 0
    report = validate_task(task, strict=True)
    assert report.ok
    (waived,) = report.findings
    assert waived.severity is Severity.warning and reason in waived.message


def test_a_hand_edited_waiver_without_reason_is_one_line_naming_the_key(make_task) -> None:
    task = _monotone_task(make_task)
    assert _review(task, "--waive", "strictly-monotone=kept on purpose") == 0
    data = yaml.safe_load((task / REVIEW_FILE).read_text())
    data["waivers"]["strictly-monotone"] = "  "
    (task / REVIEW_FILE).write_text(yaml.safe_dump(data))
    report = validate_task(task, strict=True)
    bad = [f for f in report.errors if f.file == REVIEW_FILE]
    assert bad and bad[0].code == "malformed" and "waivers.strictly-monotone" in bad[0].message
    assert "\n" not in bad[0].message
    assert "strictly-monotone" in _codes(report)  # no current review: the screen is an error


@pytest.mark.parametrize(("key", "value", "expected"), [
    ("verdict", "maybe", "verdict: Input should be 'accept' or 'reject'"),
    ("reviewr", "x", "reviewr: Extra inputs are not permitted"),
    ("task_digest", "abc", "task_digest: String should match pattern"),
])
def test_a_malformed_review_is_one_line_naming_file_and_key(make_task, key, value,
                                                             expected) -> None:
    task = make_task()
    assert _review(task) == 0
    data = yaml.safe_load((task / REVIEW_FILE).read_text())
    data[key] = value
    (task / REVIEW_FILE).write_text(yaml.safe_dump(data))
    report = validate_task(task, strict=True)
    (finding,) = report.errors
    assert finding.file == REVIEW_FILE and expected in finding.message, finding.message


def test_a_missing_answer_without_a_terminal_names_its_option(make_task, capsys) -> None:
    task = make_task()
    code = main(["task", "review", str(task), "--no-input", "--reviewer", "A", "--verdict",
                 "accept", *ALL_OK[:-1]])
    assert code == 1
    assert "--check screens: no answer given" in capsys.readouterr().err


def test_the_first_review_format_still_loads() -> None:
    """``tests/golden/review_v1/review.yaml`` (schema 1, as shipped) keeps loading."""
    golden = Path(__file__).resolve().parents[1] / "golden" / "review_v1"
    record = load_review(golden)
    assert record is not None and record.schema_version == "1"
    assert record.task_id == "spu-bhpt" and record.verdict == "accept"
    assert record.checks["values-match-source"].result == "not-checked"


def test_spu_task_review_asks_on_a_terminal_for_what_no_option_gave(make_task, monkeypatch,
                                                                    capsys) -> None:
    import io

    task = make_task()
    answers = ["ok", "compared table 2", *["ok", ""] * (len(CHECKLIST) - 1), "accept"]
    stdin = io.StringIO("".join(a + "\n" for a in ["Q. Reviewer", *answers]))
    stdin.isatty = lambda: True  # type: ignore[method-assign]
    monkeypatch.setattr("sys.stdin", stdin)
    assert main(["task", "review", str(task)]) == 0, capsys.readouterr().err
    record = load_review(task)
    assert record is not None and record.reviewer == "Q. Reviewer"
    assert record.checks["source-identified"].note == "compared table 2"
    assert validate_task(task, strict=True).ok
