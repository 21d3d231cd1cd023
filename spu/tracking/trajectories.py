"""The normalized trajectory on disk: gzip-compressed JSON lines, written and read as a stream.

``trajectory.jsonl.gz`` holds one JSON object per line: first a header (schema
version, harness, CLI version, total usage), then one :class:`~spu.schema.TrajectoryStep`
per line in time order. A long run's trajectory can reach hundreds of megabytes of
tool output; this layout lets the runner write it, tracking log it and the analyses
scan it one step at a time, never holding the whole text in memory.

Files of the first layout (``trajectory.json``, one JSON document) still load.
"""

from __future__ import annotations

import gzip
import json
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from pydantic import ValidationError

from spu.schema import TRAJECTORY_VERSION, Trajectory, TrajectoryStep, Usage
from spu.tasks.package import validation_message

TRAJECTORY_FILE = "trajectory.jsonl.gz"
"""Name of the trajectory file in a run folder."""

LEGACY_TRAJECTORY_FILE = "trajectory.json"
"""The earlier single-document layout, still readable."""


class TrajectoryFileError(ValueError):
    """A trajectory file cannot be read; the message names the file and the line."""


@dataclass(frozen=True)
class TrajectoryHeader:
    """The first line of a trajectory file: everything but the steps."""

    schema_version: str
    harness: str
    cli_version: str | None
    usage: Usage


def write_trajectory(path: Path, trajectory: Trajectory) -> Path:
    """Write ``trajectory`` to ``path`` as gzip-compressed JSON lines, one step at a time."""
    path = Path(path)
    header = {
        "schema_version": trajectory.schema_version,
        "harness": trajectory.harness,
        "cli_version": trajectory.cli_version,
        "usage": trajectory.usage.model_dump(),
    }
    tmp = path.with_name(path.name + ".partial")
    # mtime=0: the same trajectory gives the same bytes.
    with open(tmp, "wb") as raw, \
            gzip.GzipFile(filename="", fileobj=raw, mode="wb", mtime=0) as gz:
        gz.write(json.dumps(header).encode() + b"\n")
        for step in trajectory.steps:
            gz.write(step.model_dump_json(exclude_defaults=True).encode() + b"\n")
    tmp.replace(path)
    return path


def find_trajectory(run_dir: Path) -> Path | None:
    """The trajectory file of a run folder, in either layout, or None."""
    for name in (TRAJECTORY_FILE, LEGACY_TRAJECTORY_FILE):
        if (Path(run_dir) / name).is_file():
            return Path(run_dir) / name
    return None


def read_header(path: Path) -> TrajectoryHeader:
    """The header of a trajectory file (the legacy layout is read whole).

    Raises:
        TrajectoryFileError: the file is not gzip, is cut short or has no header.
    """
    path = Path(path)
    if path.name.endswith(".json"):
        t = _read_legacy(path)
        return TrajectoryHeader(t.schema_version, t.harness, t.cli_version, t.usage)
    try:
        with gzip.open(path, "rt", encoding="utf-8") as f:
            line = f.readline()
    except (OSError, EOFError) as exc:
        raise _not_gzip(path, exc) from None
    return _parse_header(path, line)


def iter_steps(path: Path) -> Iterator[TrajectoryStep]:
    """The steps of a trajectory file, read one line at a time."""
    path = Path(path)
    if path.name.endswith(".json"):
        yield from _read_legacy(path).steps
        return
    try:
        with gzip.open(path, "rt", encoding="utf-8") as f:
            _parse_header(path, f.readline())
            for number, line in enumerate(f, start=2):
                if not line.strip():
                    continue
                try:
                    yield TrajectoryStep.model_validate_json(line)
                except ValidationError as exc:
                    raise TrajectoryFileError(
                        validation_message(f"{path}: line {number}", exc)) from None
    except (OSError, EOFError) as exc:
        raise _not_gzip(path, exc) from None


def _not_gzip(path: Path, exc: OSError | EOFError) -> TrajectoryFileError:
    return TrajectoryFileError(f"{path}: not a readable gzip file ({exc})")


def read_trajectory(path: Path) -> Trajectory:
    """The whole trajectory of a file (for small ones; large ones: :func:`iter_steps`)."""
    header = read_header(path)
    return Trajectory(schema_version=header.schema_version, harness=header.harness,
                      cli_version=header.cli_version, steps=list(iter_steps(path)),
                      usage=header.usage)


def _parse_header(path: Path, line: str) -> TrajectoryHeader:
    try:
        data = json.loads(line)
        return TrajectoryHeader(
            schema_version=str(data.get("schema_version", TRAJECTORY_VERSION)),
            harness=str(data["harness"]),
            cli_version=data.get("cli_version"),
            usage=Usage.model_validate(data.get("usage") or {}),
        )
    except (json.JSONDecodeError, AttributeError) as exc:
        raise TrajectoryFileError(f"{path}: line 1: not a trajectory header ({exc})") from None
    except KeyError as exc:
        raise TrajectoryFileError(f"{path}: line 1: header lacks key {exc}") from None
    except ValidationError as exc:
        raise TrajectoryFileError(validation_message(f"{path}: line 1: usage", exc)) from None


def _read_legacy(path: Path) -> Trajectory:
    try:
        return Trajectory.model_validate_json(path.read_bytes())
    except ValidationError as exc:
        raise TrajectoryFileError(validation_message(path, exc)) from None
