"""Saved records are strict when written and tolerant of the versions before strictness."""

from __future__ import annotations

import json

import pytest
from pydantic import ValidationError

from spu.schema import AUDIT_VERSION, RUN_RECORD_VERSION, AuditEntry, RunRecord
from tests.tracking.conftest import make_record


def test_a_misspelt_field_of_a_run_record_is_refused() -> None:
    """Invariant: ``flaged_exposure=True`` fails; it never stores silently beside a false flag."""
    with pytest.raises(ValidationError, match="flaged_exposure"):
        make_record(flaged_exposure=True)


def test_a_current_run_json_with_an_unknown_field_does_not_load() -> None:
    """A record of the current version with a field outside the schema is an error."""
    data = json.loads(make_record().model_dump_json())
    assert data["schema_version"] == RUN_RECORD_VERSION
    data["flaged_exposure"] = True
    with pytest.raises(ValidationError, match="Extra inputs are not permitted"):
        RunRecord.model_validate_json(json.dumps(data))


def test_a_version_1_run_json_with_unknown_fields_still_loads() -> None:
    """Records written before strictness (version 1, unknown fields allowed) keep loading."""
    data = json.loads(make_record(flagged_exposure=True).model_dump_json())
    data.update(schema_version="1", flaged_exposure=False, some_old_note="x")
    record = RunRecord.model_validate_json(json.dumps(data))
    assert record.schema_version == "1" and record.flagged_exposure is True
    assert "flaged_exposure" not in record.model_dump()
    # Written again, it is still a version 1 record, and round-trips.
    assert RunRecord.model_validate_json(record.model_dump_json()) == record


def test_audit_lines_are_strict_too() -> None:
    """An audit line with a misspelt field fails; an old line with one loads."""
    line = {"time": "2026-10-20T10:00:00+00:00", "tool": "search", "args": {"query": "q"},
            "status": "ok", "latency_s": 0.1, "text_sha256": "0" * 64, "chars": 0}
    assert AuditEntry.model_validate(line).schema_version == AUDIT_VERSION
    with pytest.raises(ValidationError, match="exposures"):
        AuditEntry.model_validate({**line, "exposures": ["doi"]})
    assert AuditEntry.model_validate({**line, "schema_version": "1", "exposures": ["doi"]})
