"""A new SQLite store is a copy of an empty one: the same schema MLflow makes, in milliseconds."""

from __future__ import annotations

import sqlite3
from contextlib import closing
from pathlib import Path

import pytest

from spu.tracking.empty_store import CACHE_ENV, seed_sqlite_store, template_path


def _clauses(sql: str) -> tuple[str, ...]:
    """The top-level clauses of a CREATE statement, sorted.

    MLflow's own migrations write a rebuilt table's constraints in an order that
    changes from one process to the next (they come from a set), so two stores MLflow
    makes can differ in that order and nothing else.
    """
    head, _, body = sql.partition("(")
    clauses, depth, current = [], 0, ""
    for char in body.rstrip().removesuffix(")"):
        depth += (char == "(") - (char == ")")
        if char == "," and depth == 0:
            clauses.append(current.strip())
            current = ""
        else:
            current += char
    clauses.append(current.strip())
    return (head.strip(), *sorted(clauses))


def _schema(db: Path) -> tuple[set[tuple[str, tuple[str, ...]]], str]:
    with closing(sqlite3.connect(db)) as conn:
        tables = {(name, _clauses(sql)) for name, sql in conn.execute(
            "SELECT name, sql FROM sqlite_master WHERE sql IS NOT NULL")}
        (version,) = conn.execute("SELECT version_num FROM alembic_version").fetchone()
    return tables, version


def test_schemas_compare_by_their_clauses_not_their_order() -> None:
    one = "CREATE TABLE t (a INT, b INT, CONSTRAINT x CHECK (a IN (1, 2)), CHECK (b > 0))"
    other = "CREATE TABLE t (a INT, b INT, CHECK (b > 0), CONSTRAINT x CHECK (a IN (1, 2)))"
    assert _clauses(one) == _clauses(other)
    assert _clauses(one)[0] == "CREATE TABLE t"
    assert "CONSTRAINT x CHECK (a IN (1, 2))" in _clauses(one)
    assert _clauses(one) != _clauses(one.replace("b > 0", "b > 1"))


@pytest.mark.slow
def test_a_seeded_store_is_the_store_mlflow_makes(tmp_path: Path,
                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    from mlflow.store.tracking.sqlalchemy_store import SqlAlchemyStore

    monkeypatch.setenv(CACHE_ENV, str(tmp_path / "cache"))
    seeded = tmp_path / "a" / "mlflow.db"
    assert seed_sqlite_store(seeded)          # makes the template, then copies it
    assert template_path().is_file()
    assert not seed_sqlite_store(seeded)      # an existing store is left alone

    made = tmp_path / "b" / "mlflow.db"
    made.parent.mkdir()
    SqlAlchemyStore(f"sqlite:///{made}", (tmp_path / "b-art").as_uri()).engine.dispose()
    assert _schema(seeded) == _schema(made)

    # MLflow opens the copy without migrating it and makes its Default experiment with
    # the new store's own artifact root (the template's is not carried over).
    artifacts = (tmp_path / "a-art").as_uri()
    store = SqlAlchemyStore(f"sqlite:///{seeded}", artifacts)
    default = store.get_experiment("0")
    assert default.name == "Default" and default.artifact_location.startswith(artifacts)
    experiment = store.create_experiment("spu-x")
    run = store.create_run(experiment, user_id="u", start_time=0, tags=[], run_name="r")
    assert store.get_run(run.info.run_id).info.experiment_id == experiment
    store.engine.dispose()


def test_a_damaged_template_is_made_again(tmp_path: Path,
                                          monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(CACHE_ENV, str(tmp_path / "cache"))
    template_path().parent.mkdir(parents=True)
    template_path().write_bytes(b"not a database")
    seeded = tmp_path / "mlflow.db"
    assert seed_sqlite_store(seeded)
    tables, version = _schema(seeded)
    assert version and any(name == "experiments" for name, _ in tables)


def test_without_a_usable_cache_mlflow_makes_the_store(tmp_path: Path,
                                                       monkeypatch: pytest.MonkeyPatch) -> None:
    blocker = tmp_path / "a-file"
    blocker.write_text("")
    monkeypatch.setenv(CACHE_ENV, str(blocker / "cache"))  # under a file: cannot exist
    seeded = tmp_path / "mlflow.db"
    assert not seed_sqlite_store(seeded)
    assert not seeded.exists()
