"""Looking a run key up costs the same in a store of any size (the resume check stays flat)."""

from __future__ import annotations

import sqlite3
from pathlib import Path

import pytest

from spu.tracking import query
from spu.tracking.query import key_records
from spu.tracking.store import TrackingTarget, client_for, experiment_id, log_run, sqlite_path
from tests.tracking.conftest import make_record


def fill(target: TrackingTarget, tmp_path: Path, keys: list[str]) -> None:
    """One recorded run per key (a hand-made record, its folder empty)."""
    run_dir = tmp_path / "run"
    run_dir.mkdir(exist_ok=True)
    for key in keys:
        log_run(make_record(run_key=key), run_dir, target)


def test_a_sqlite_store_is_indexed_by_run_key_and_a_lookup_uses_the_index(
        target: TrackingTarget, tmp_path: Path) -> None:
    """Invariant: after the first lookup the store's tags are indexed by value, and a
    search for one run key reads that index, not every run's ``run_key`` tag (MLflow's
    own index starts with the tag's name: 110 ms per key at 100,000 runs, 10 ms now)."""
    fill(target, tmp_path, ["00000000000000a1"])
    found = key_records(target, ["00000000000000a1"])
    assert set(found.latest) == {"00000000000000a1"}
    db = sqlite_path(target.uri)
    assert db is not None
    con = sqlite3.connect(db)
    try:
        plan = " ".join(str(row) for row in con.execute(
            "EXPLAIN QUERY PLAN SELECT run_uuid FROM tags WHERE key = 'run_key' "
            "AND value = '00000000000000a1'"))
    finally:
        con.close()
    assert "spu_tags_key_value" in plan, plan


def test_a_sweep_in_a_large_store_looks_its_keys_up_one_by_one(
        target: TrackingTarget, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A sweep of 25 keys in a store holding more than twice as many runs reads its keys
    one search each (each read through the index) instead of every run of the store once;
    it finds the same records."""
    stored = [f"{n:016x}" for n in range(1, 61)]
    fill(target, tmp_path, stored)
    experiment_id(client_for(target), target)
    wanted = stored[:25]
    whole = query._key_records(client_for(target), wanted)  # the whole store, once
    searches: list[str] = []
    real = query.search_runs

    def counted(client, experiments, filter_string=""):  # type: ignore[no-untyped-def]
        searches.append(filter_string)
        return real(client, experiments, filter_string)

    monkeypatch.setattr(query, "search_runs", counted)
    found = key_records(target, wanted)
    assert len(searches) == 25 and all(s.startswith("tags.run_key = ") for s in searches)
    assert {k: r.run_key for k, r in found.latest.items()} == {
        k: r.run_key for k, r in whole.latest.items()}
    assert set(found.latest) == set(wanted)


def test_the_store_size_is_read_from_its_highest_row_not_counted(
        target: TrackingTarget, tmp_path: Path) -> None:
    """The runs a store holds, which chooses between a search per key and one of the whole
    store, is its highest row id: read in constant time (``COUNT(*)`` walked every run,
    6 ms of each resume check at 100,000 runs) and never below the runs held."""
    keys = [f"{n:016x}" for n in range(1, 4)]
    fill(target, tmp_path, keys)
    assert query.run_key_index(target.uri) == 3
    db = sqlite_path(target.uri)
    assert db is not None
    con = sqlite3.connect(db)
    try:
        plan = " ".join(str(row) for row in con.execute(
            "EXPLAIN QUERY PLAN SELECT MAX(rowid) FROM runs"))
        con.execute("DELETE FROM tags WHERE run_uuid IN (SELECT run_uuid FROM runs LIMIT 1)")
        con.execute("DELETE FROM runs WHERE rowid = (SELECT MIN(rowid) FROM runs)")
        con.commit()
    finally:
        con.close()
    assert "SCAN" not in plan, plan  # a search of the rowid's b-tree, not a walk
    assert query.run_key_index(target.uri) == 3  # an upper bound: 2 runs held now
