"""The trajectory file: gzip JSON lines written and read one step at a time."""

from __future__ import annotations

import gzip
import hashlib
import json
import types
from pathlib import Path

import pytest

from spu.schema import ToolCall, Trajectory, TrajectoryStep, Usage
from spu.tracking.trajectories import (
    TRAJECTORY_FILE,
    TrajectoryFileError,
    find_trajectory,
    iter_steps,
    read_header,
    read_trajectory,
    write_trajectory,
)


def _trajectory(n: int = 3) -> Trajectory:
    steps = [TrajectoryStep(index=i, message_id=f"m{i}", text=f"step {i}",
                            tool_calls=[ToolCall(name="Bash", arguments={"command": "ls"},
                                                 output="x" * 1000)],
                            usage=Usage(input=i, output=2 * i))
             for i in range(n)]
    return Trajectory(harness="claude_code", cli_version="2.1.197", steps=steps,
                      usage=Usage(input=sum(range(n)), output=2 * sum(range(n))))


def test_round_trip_and_compression(tmp_path) -> None:
    t = _trajectory(50)
    path = write_trajectory(tmp_path / TRAJECTORY_FILE, t)
    assert read_trajectory(path) == t
    assert path.stat().st_size < len(t.model_dump_json()) / 10
    assert find_trajectory(tmp_path) == path
    header = read_header(path)
    assert (header.harness, header.cli_version, header.usage) == ("claude_code", "2.1.197",
                                                                    t.usage)


def test_same_trajectory_same_bytes(tmp_path) -> None:
    a = write_trajectory(tmp_path / "a.jsonl.gz", _trajectory())
    b = write_trajectory(tmp_path / "b.jsonl.gz", _trajectory())
    assert a.read_bytes() == b.read_bytes()


def test_steps_are_streamed_one_line_at_a_time(tmp_path) -> None:
    """A file cut in the middle still yields its first steps before the error: the steps
    are read as the caller asks for them, not all parsed up front."""
    steps = [TrajectoryStep(index=i, text=hashlib.sha256(str(i).encode()).hexdigest() * 8)
             for i in range(200)]
    path = write_trajectory(tmp_path / TRAJECTORY_FILE, Trajectory(harness="x", steps=steps))
    with gzip.open(path, "rt") as f:
        assert len(f.readlines()) == 201  # header + 200 steps
    cut = tmp_path / "cut.jsonl.gz"
    cut.write_bytes(path.read_bytes()[: path.stat().st_size // 2])
    stream = iter_steps(cut)
    assert isinstance(stream, types.GeneratorType)
    seen: list[int] = []
    with pytest.raises(TrajectoryFileError, match=r"cut\.jsonl\.gz: not a readable gzip file"):
        for step in stream:
            seen.append(step.index)
    assert 20 < len(seen) < 200
    assert seen == list(range(len(seen)))


def test_legacy_single_document_still_loads(tmp_path) -> None:
    t = _trajectory()
    legacy = tmp_path / "trajectory.json"
    legacy.write_text(t.model_dump_json())
    assert find_trajectory(tmp_path) == legacy
    assert read_trajectory(legacy) == t
    assert [s.index for s in iter_steps(legacy)] == [0, 1, 2]


def test_bad_line_names_file_and_line(tmp_path) -> None:
    path = tmp_path / TRAJECTORY_FILE
    with gzip.open(path, "wt") as f:
        f.write(json.dumps({"harness": "codex", "usage": {}}) + "\n")
        f.write(json.dumps({"index": 0}) + "\n")
        f.write(json.dumps({"index": "not a number"}) + "\n")
    with pytest.raises(TrajectoryFileError, match=r"trajectory\.jsonl\.gz: line 3: index"):
        list(iter_steps(path))
    headless = tmp_path / "h.jsonl.gz"
    with gzip.open(headless, "wt") as f:
        f.write(json.dumps({"usage": {}}) + "\n")
    with pytest.raises(TrajectoryFileError, match="line 1: header lacks key 'harness'"):
        read_header(headless)
    (tmp_path / "plain.jsonl.gz").write_text("not gzip")
    with pytest.raises(TrajectoryFileError, match="not a readable gzip file"):
        list(iter_steps(tmp_path / "plain.jsonl.gz"))


def test_header_of_a_file_that_is_not_gzip_is_a_trajectory_error(tmp_path) -> None:
    plain = tmp_path / "plain.jsonl.gz"
    plain.write_text('{"harness": "codex"}\n')
    with pytest.raises(TrajectoryFileError, match=r"plain\.jsonl\.gz: not a readable gzip file"):
        read_header(plain)
    whole = write_trajectory(tmp_path / TRAJECTORY_FILE, _trajectory())
    cut = tmp_path / "cut.jsonl.gz"
    cut.write_bytes(whole.read_bytes()[:12])  # the gzip header, cut before any data
    with pytest.raises(TrajectoryFileError, match=r"cut\.jsonl\.gz: not a readable gzip file"):
        read_header(cut)
    with pytest.raises(TrajectoryFileError, match="not a readable gzip file"):
        read_trajectory(plain)


GOLDEN = Path(__file__).parent / "golden"


@pytest.mark.parametrize("name", ["trajectory-v1.jsonl.gz", "trajectory-v1.json"])
def test_golden_files_of_format_1_still_load(name: str) -> None:
    """Saved trajectories of format 1, in both layouts, keep loading unchanged."""
    t = read_trajectory(GOLDEN / name)
    assert (t.schema_version, t.harness, t.cli_version) == ("1", "claude_code", "2.1.197")
    assert [s.index for s in t.steps] == [0, 1, 2]
    assert t.steps[1].tool_calls[0].output == "contract.json\ntargets.csv"
    # 101 + 111 = 212 uncached input; 2003 + 2103 = 4106 cache reads; 305 + 325 = 630 writes
    assert t.usage == Usage(input=212, cache_read=4106, cache_write=630, cache_write_1h=84,
                            output=121)


def test_step_views_have_the_schema_fields_and_defaults() -> None:
    """StepView, ToolCallView and UsageView mirror the pydantic models field for field."""
    import msgspec

    from spu.schema import ToolCall as ToolCallModel
    from spu.tracking.trajectories import StepView, ToolCallView, UsageView

    for view, model in ((StepView, TrajectoryStep), (ToolCallView, ToolCallModel),
                        (UsageView, Usage)):
        fields = {f.name: f for f in msgspec.structs.fields(view)}
        assert set(fields) == set(model.model_fields), view.__name__
        for name, info in model.model_fields.items():
            default = (info.default_factory() if info.default_factory is not None
                       else info.default)
            ours = fields[name]
            ours_default = (ours.default_factory() if ours.default_factory is not msgspec.NODEFAULT
                            else ours.default)
            if info.is_required():
                assert ours.required, (view.__name__, name)
            else:
                assert ours_default == default, (view.__name__, name)


def _views_and_models(path: Path) -> tuple[list, list]:
    """The fast reader's steps, and iter_steps' models converted to views (same fields)."""
    import msgspec

    from spu.tracking.trajectories import StepView, iter_step_views

    return (list(iter_step_views(path)),
            [msgspec.convert(s.model_dump(), StepView) for s in iter_steps(path)])


def test_step_views_read_what_iter_steps_reads(tmp_path) -> None:
    """The fast reader gives every step iter_steps gives, with the same values: steps of
    both recorded CLIs, and lines only pydantic accepts (a number as a string, a float
    index, true as "true"), which go through the model."""
    from spu.harness.trajectory.claude_code import read_claude_code_sessions
    from spu.harness.trajectory.codex import read_codex_sessions
    from spu.tracking.trajectories import _STEP_VIEW
    from tests.harness.golden import scenario

    recorded = [read_claude_code_sessions(scenario("claude_code", "subagent") / "projects"),
                read_codex_sessions(scenario("codex", "presented_order") / "sessions")]
    for k, reading in enumerate(recorded):
        path = write_trajectory(tmp_path / f"{k}.jsonl.gz", reading.trajectory)
        views, models = _views_and_models(path)
        assert len(views) == len(reading.trajectory.steps) > 3
        assert views == models
        with gzip.open(path, "rb") as f:  # ...and read by msgspec, not the fallback
            assert all(_STEP_VIEW.decode(line) for line in f.readlines()[1:])
    path = tmp_path / "coerced.jsonl.gz"
    with gzip.open(path, "wt") as f:
        f.write(json.dumps({"harness": "codex"}) + "\n")
        f.write(json.dumps({"index": "7", "text": "t"}) + "\n")
        f.write(json.dumps({"index": 8.0, "tool_calls": [
            {"name": "Bash", "is_error": "true", "arguments": {"command": "ls"}}]}) + "\n")
        f.write(json.dumps({"index": 9, "usage": {"input": 3.0}}) + "\n")
    views, models = _views_and_models(path)
    assert [v.index for v in views] == [7, 8, 9]
    assert views[1].tool_calls[0].is_error is True and views[2].usage.input == 3
    assert views == models


def test_step_views_refuse_what_iter_steps_refuses(tmp_path) -> None:
    """A line neither reader accepts fails with the same message, naming file and line."""
    from spu.tracking.trajectories import iter_step_views

    path = tmp_path / TRAJECTORY_FILE
    with gzip.open(path, "wt") as f:
        f.write(json.dumps({"harness": "codex", "usage": {}}) + "\n")
        f.write(json.dumps({"index": 0}) + "\n")
        f.write(json.dumps({"index": 1, "unknown": 2}) + "\n")
    errors = []
    for reader in (iter_steps, iter_step_views):
        with pytest.raises(TrajectoryFileError, match=r"line 3") as info:
            list(reader(path))
        errors.append(str(info.value))
    assert errors[0] == errors[1]
    legacy = tmp_path / "trajectory.json"
    legacy.write_text(_trajectory().model_dump_json())
    assert [s.index for s in iter_step_views(legacy)] == [0, 1, 2]


def test_step_views_name_the_line_of_bytes_that_are_not_utf8(tmp_path) -> None:
    """A step line that is not UTF-8 stops the fast reader at that line, with the file and
    line named and the earlier steps read (iter_steps decodes text and fails before)."""
    from spu.tracking.trajectories import iter_step_views

    path = tmp_path / TRAJECTORY_FILE
    with gzip.open(path, "wb") as f:
        f.write(json.dumps({"harness": "codex"}).encode() + b"\n")
        f.write(json.dumps({"index": 0, "text": "ok"}).encode() + b"\n")
        f.write(b'{"index": 1, "text": "bad \xff byte"}\n')
    seen = []
    with pytest.raises(TrajectoryFileError, match=r"trajectory\.jsonl\.gz: line 3: .*JSON"):
        for step in iter_step_views(path):
            seen.append(step.index)
    assert seen == [0]
