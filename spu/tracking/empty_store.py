"""A new SQLite tracking store starts as a copy of an empty one, not by MLflow's migrations.

MLflow makes a new SQLite store by creating its first tables and then running every
schema migration since (about fifty); that takes 4-8 s of CPU each time. Every sweep
into a new ``output_root``, every tracking server on SQLite and every test pays it.
The schema of one MLflow version never changes, so the first store made with a version
is kept, emptied, as a template under the user's cache (``~/.cache/spu/``, or
``$XDG_CACHE_HOME/spu/``), and later stores are copies of it.

The template holds the schema and nothing else: MLflow's ``Default`` experiment is
removed from it, because its artifact location names the folder it was made in; MLflow
creates it again, with the new store's own artifact root, when it first opens the copy.
A template that cannot be made or read (no writable cache, a damaged file) is never an
error: the store is then made the usual way.
"""

from __future__ import annotations

import logging
import os
import shutil
import sqlite3
import tempfile
from contextlib import closing
from pathlib import Path

log = logging.getLogger(__name__)

CACHE_ENV = "SPU_CACHE_DIR"
"""Overrides the cache folder (default ``$XDG_CACHE_HOME/spu`` or ``~/.cache/spu``)."""


def cache_dir() -> Path:
    """The folder of SPU's per-user caches."""
    if os.environ.get(CACHE_ENV):
        return Path(os.environ[CACHE_ENV])
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "spu"


def template_path() -> Path:
    """Where the empty store of the installed MLflow version is kept."""
    import mlflow

    return cache_dir() / f"mlflow-{mlflow.__version__}-empty.db"


def _schema_ok(db: Path) -> bool:
    """Whether ``db`` is a readable MLflow store with a schema version and no experiment."""
    if not db.is_file():
        return False
    try:
        with closing(sqlite3.connect(f"file:{db}?mode=ro", uri=True)) as conn:
            version = conn.execute("SELECT version_num FROM alembic_version").fetchone()
            experiments = conn.execute("SELECT count(*) FROM experiments").fetchone()
    except sqlite3.Error:
        return False
    return bool(version and version[0]) and experiments == (0,)


def _make_template(path: Path) -> None:
    """Create the empty store with MLflow and keep it at ``path`` (atomically)."""
    from mlflow.store.tracking.sqlalchemy_store import SqlAlchemyStore

    path.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=path.parent, prefix=".template-") as tmp:
        db = Path(tmp) / "mlflow.db"
        store = SqlAlchemyStore(f"sqlite:///{db}", Path(tmp).as_uri())
        store.engine.dispose()
        with closing(sqlite3.connect(db)) as conn:
            with conn:
                conn.execute("DELETE FROM experiment_tags")
                conn.execute("DELETE FROM experiments")
            conn.execute("VACUUM")
        if not _schema_ok(db):
            raise sqlite3.DatabaseError("the new template has no schema version")
        os.replace(db, path)


def seed_sqlite_store(db: Path) -> bool:
    """Make ``db`` a copy of the empty store when it does not exist yet.

    Returns whether it did; False leaves ``db`` absent (MLflow then creates it). The
    caller holds the store's lock (:func:`spu.tracking.store.store_lock`), so no other
    SPU process creates ``db`` meanwhile.
    """
    db = Path(db)
    if db.exists():
        return False
    try:
        template = template_path()
        if not _schema_ok(template):
            _make_template(template)
        db.parent.mkdir(parents=True, exist_ok=True)
        partial = db.with_name(f".{db.name}.seeding")
        shutil.copyfile(template, partial)
        os.replace(partial, db)
    except Exception as exc:  # noqa: BLE001 - a cache is never a reason to fail
        log.debug("tracking store %s made without the cached schema: %s", db, exc)
        return False
    return True
