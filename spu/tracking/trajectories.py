"""The normalized trajectory on disk: gzip-compressed JSON lines, written and read as a stream.

``trajectory.jsonl.gz`` holds one JSON object per line: first a header (schema
version, harness, CLI version, total usage), then one :class:`~spu.schema.TrajectoryStep`
per line in time order. A long run's trajectory can reach hundreds of megabytes of
tool output; this layout lets the runner write it, tracking log it and the analyses
scan it one step at a time, never holding the whole text in memory.

Files of the first layout (``trajectory.json``, one JSON document) still load.

A tool call's arguments are the agent's JSON, of any depth; pydantic writes JSON only
about 255 levels deep and reads it back only about 128 deep. Arguments nested past 64
levels are written with their deeper parts as JSON text, as the session readers read them
(:func:`spu.gateway.answers.loads`), so every trajectory written can be read back.
"""

from __future__ import annotations

import gzip
import io
import json
import re
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

import msgspec
from pydantic import ValidationError

from spu.gateway.answers import loads, nested_within
from spu.schema import TRAJECTORY_VERSION, Record, ToolCall, Trajectory, TrajectoryStep, Usage
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
    try:
        # mtime=0: the same trajectory gives the same bytes.
        with open(tmp, "wb") as raw, \
                gzip.GzipFile(filename="", fileobj=raw, mode="wb", mtime=0) as gz:
            gz.write(json.dumps(header).encode() + b"\n")
            for step in trajectory.steps:
                gz.write(record_json(_bounded(step), exclude_defaults=True) + b"\n")
        tmp.replace(path)
    except BaseException:
        tmp.unlink(missing_ok=True)  # no half-written file left beside the run's record
        raise
    return path


_SURROGATE = re.compile("[\ud800-\udfff]")


def record_json(record: Record, *, indent: int | None = None,
                exclude_defaults: bool = False) -> bytes:
    r"""``record`` as JSON in UTF-8 (a trajectory's line, a run record).

    A lone surrogate (what a JSON escape such as ``\ud800`` in an agent's session file
    reads as) has no UTF-8 and stops pydantic's writer: such a record is written with
    each one replaced by U+FFFD, the rest as it was.
    """
    try:
        return record.model_dump_json(indent=indent, exclude_defaults=exclude_defaults).encode()
    except ValueError:
        data = record.model_dump(mode="json", exclude_defaults=exclude_defaults)
        return json.dumps(_without_surrogates(data), indent=indent, ensure_ascii=False).encode()


def _without_surrogates(value: Any) -> Any:
    if isinstance(value, str):
        return _SURROGATE.sub("\ufffd", value)
    if isinstance(value, dict):
        return {_without_surrogates(k): _without_surrogates(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_without_surrogates(v) for v in value]
    return value


DEEP_ARGUMENTS = "[arguments nested too deep to keep]"
"""What stands for arguments Python itself cannot write as JSON (nested past its stack)."""


def _bounded(step: TrajectoryStep) -> TrajectoryStep:
    """``step`` with each tool call's arguments nested at most 64 deep (deeper: as text)."""
    if all(nested_within(call.arguments) for call in step.tool_calls):
        return step
    return step.model_copy(update={"tool_calls": [_bounded_call(c) for c in step.tool_calls]})


def _bounded_call(call: ToolCall) -> ToolCall:
    if nested_within(call.arguments):
        return call
    try:
        text = json.dumps(call.arguments, default=str)
    except (RecursionError, ValueError):
        return call.model_copy(update={"arguments": DEEP_ARGUMENTS})
    cut = loads(text, deep_as_text=True)
    return call.model_copy(update={"arguments": text if cut is None else cut})


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


class UsageView(msgspec.Struct, forbid_unknown_fields=True):
    """:class:`~spu.schema.Usage` as :func:`iter_step_views` decodes it."""

    input: int = 0
    cache_read: int = 0
    cache_write: int = 0
    cache_write_1h: int = 0
    output: int = 0


class ToolCallView(msgspec.Struct, forbid_unknown_fields=True):
    """:class:`~spu.schema.ToolCall` as :func:`iter_step_views` decodes it."""

    name: str
    id: str | None = None
    arguments: Any = None
    output: str | None = None
    is_error: bool = False


class StepView(msgspec.Struct, forbid_unknown_fields=True):
    """:class:`~spu.schema.TrajectoryStep` as :func:`iter_step_views` decodes it.

    The same fields, types and defaults (a test compares them), read without building
    pydantic models: what an analysis reading millions of steps needs.
    """

    index: int
    timestamp: str | None = None
    role: Literal["user", "assistant", "system", "tool"] = "assistant"
    message_id: str | None = None
    text: str | None = None
    reasoning: str | None = None
    tool_calls: list[ToolCallView] = msgspec.field(default_factory=list)
    usage: UsageView | None = None
    agent: str | None = None


_STEP_VIEW = msgspec.json.Decoder(StepView)


def iter_step_views(path: Path) -> Iterator[StepView]:
    """The steps of a trajectory file as :class:`StepView`, read one line at a time.

    Every step :func:`iter_steps` reads, with the same values, about five times faster: a
    line that is exactly of the schema's types is decoded by msgspec; any other line
    (a value pydantic would coerce, or an invalid one) goes through
    :class:`~spu.schema.TrajectoryStep` as in :func:`iter_steps`, so it is read, or
    refused with the same message, as there.

    Raises:
        TrajectoryFileError: as :func:`iter_steps`.
    """
    path = Path(path)
    if path.name.endswith(".json"):
        for step in _read_legacy(path).steps:
            yield _view(step)
        return
    try:
        # Lines through a C buffered reader: GzipFile's own readline is Python code.
        with gzip.open(path, "rb") as gz, io.BufferedReader(gz, 1 << 16) as f:
            _parse_header(path, f.readline().decode("utf-8"))
            for number, line in enumerate(f, start=2):
                if not line.strip():
                    continue
                try:
                    yield _STEP_VIEW.decode(line)
                except msgspec.MsgspecError:
                    try:
                        step = TrajectoryStep.model_validate_json(line)
                    except ValidationError as exc:
                        raise TrajectoryFileError(
                            validation_message(f"{path}: line {number}", exc)) from None
                    yield _view(step)
    except (OSError, EOFError) as exc:
        raise _not_gzip(path, exc) from None


def _view(step: TrajectoryStep) -> StepView:
    return msgspec.convert(step.model_dump(), StepView)


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
