"""A sweep's traces built in the builder process beside each run's record (issue 25).

The real builder process (``python -m spu.tracking.builder``) and the real corpus runs;
MLflow on SQLite under ``tmp_path``.
"""

from __future__ import annotations

import logging
import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from spu.config import TracesConfig
from spu.schema import RunRecord
from spu.testing.corpus import make_corpus
from spu.tracking import builder as builder_module
from spu.tracking.builder import ViewBuilder, building_views
from spu.tracking.store import TrackingTarget, log_run
from spu.tracking.traces import build_views
from tests.conftest import REPO
from tests.processes import running


def _folders(tmp_path: Path, runs: int = 4) -> list[Path]:
    return make_corpus(tmp_path / "outputs", runs, task_root=REPO / "tasks", calls=12, seed=3,
                       run_files=True)


def _record(folder: Path) -> RunRecord:
    return RunRecord.model_validate_json((folder / "run.json").read_text())


def _trace_of(target: TrackingTarget, run_id: str):  # noqa: ANN202 (an MLflow Trace)
    from mlflow.tracking import MlflowClient

    client = MlflowClient(tracking_uri=target.uri)
    exp = client.get_experiment_by_name(target.experiment).experiment_id
    (trace,) = client.search_traces(locations=[exp], run_id=run_id)
    return trace


def _started(b: ViewBuilder) -> ViewBuilder:
    assert b.wait_started(timeout=60), "the builder process did not start in 60 s"
    return b


def test_views_built_aside_are_the_views_built_inline(tmp_path) -> None:
    """The builder process gives, run by run, exactly what the inline build gives (the
    trace's spans, tags, previews, token usage and the transcript page)."""
    settings = TracesConfig()
    b = ViewBuilder(start_at=1)
    try:
        folders = _folders(tmp_path)
        b.submit(_record(folders[0]), folders[0], settings, 7)  # starts it (built inline)
        _started(b)
        for n, folder in enumerate(folders, start=100):
            record = _record(folder)
            aside = b.submit(record, folder, settings, n)()
            assert aside == build_views(record, folder, settings, n)
        assert b.built == len(folders) and b.cpu_s > 0
    finally:
        b.close()


def test_a_sweep_records_every_trace_and_builds_from_its_second_run_aside(
        tmp_path, target) -> None:
    """In a sweep (a builder open), the first run is built inline and starts nothing; the
    second starts the process; from then on every run's views come from it, and every
    run has its trace and transcript."""
    from mlflow.tracking import MlflowClient

    folders = _folders(tmp_path, 5)
    with building_views() as b:
        run_ids = [log_run(_record(folders[0]), folders[0], target)]
        assert b.pid is None and not b.wait_started(timeout=0)  # one run: no process
        run_ids.append(log_run(_record(folders[1]), folders[1], target))
        pid = _started(b).pid
        run_ids += [log_run(_record(f), f, target) for f in folders[2:]]
        assert b.built == 3
    assert pid is not None and not running(pid)  # ended with the sweep
    client = MlflowClient(tracking_uri=target.uri)
    for folder, run_id in zip(folders, run_ids, strict=True):
        trace = _trace_of(target, run_id)
        assert trace.info.tags["run_key"] == _record(folder).run_key
        calls = sum(len(s.tool_calls) for s in _steps(folder))
        assert len([s for s in trace.data.spans if s.span_type == "TOOL"]) == calls
        assert "transcript.html" in [a.path for a in client.list_artifacts(run_id)]


def _steps(folder: Path) -> list:
    from spu.tracking.trajectories import iter_steps

    return list(iter_steps(folder / "trajectory.jsonl.gz"))


def test_a_builder_killed_mid_sweep_is_said_once_and_replaced(tmp_path, target,
                                                               caplog) -> None:
    """A builder process killed between runs (out of memory, an operator) is said in one
    line; the next run is built inline and starts a new builder, which builds the runs
    after it. Every run has its trace."""
    folders = _folders(tmp_path, 4)
    with building_views(start_at=1) as b:
        log_run(_record(folders[0]), folders[0], target)
        first = _started(b).pid
        assert first is not None
        with caplog.at_level(logging.WARNING, logger="spu.tracking"):
            os.kill(first, signal.SIGKILL)
            deadline = time.monotonic() + 30
            while b.pid is not None and time.monotonic() < deadline:
                time.sleep(0.05)
            run_ids = [log_run(_record(folders[1]), folders[1], target)]  # inline; starts one
            second = _started(b).pid
            run_ids += [log_run(_record(f), f, target) for f in folders[2:]]
        assert second not in (None, first) and b.built == 2
    (line,) = [r.getMessage() for r in caplog.records if "builder process" in r.getMessage()]
    assert "\n" not in line and "a new one starts at the next run" in line, line
    assert not [r for r in caplog.records if "trace was not logged" in r.getMessage()]
    for run_id in run_ids:
        assert any(s.span_type == "TOOL" for s in _trace_of(target, run_id).data.spans)


STALLS_ONCE = """
import os, runpy, sys, time
from pathlib import Path
from spu.tracking.builder import _receive, _send

marker = Path(sys.argv[1])
if marker.exists():  # the second builder: the real one
    sys.argv = sys.argv[:1]
    runpy.run_module("spu.tracking.builder", run_name="__main__")
else:  # the first: up, takes a request, never answers
    marker.touch()
    _send(sys.stdout.buffer, (0, "ready", os.getpid()))
    _receive(sys.stdin.buffer)
    time.sleep(600)
"""
"""A builder process that stalls on its first run, then (started again) the real one."""


def test_a_run_that_stalls_the_builder_loses_its_trace_not_the_sweep(
        tmp_path, target, caplog, monkeypatch) -> None:
    """A builder that never answers a run is stopped after ``BUILD_TIMEOUT_S``: that run
    is recorded without its trace, in one line, and not built again in the driver (its
    folder may be what stalled it); a new builder builds the runs after."""
    monkeypatch.setattr(builder_module, "BUILD_TIMEOUT_S", 3.0)
    folders = _folders(tmp_path, 4)
    script = tmp_path / "stalls_once.py"
    script.write_text(STALLS_ONCE)
    command = [sys.executable, str(script), str(tmp_path / "stalled-once")]
    b = builder_module.open_builder(start_at=1, command=command)
    try:
        log_run(_record(folders[0]), folders[0], target)  # starts the stand-in
        first = _started(b).pid
        with caplog.at_level(logging.WARNING, logger="spu.tracking"):
            started = time.monotonic()
            run_id = log_run(_record(folders[1]), folders[1], target)
            waited = time.monotonic() - started
            later = [log_run(_record(folders[2]), folders[2], target)]  # inline; starts one
            second = _started(b).pid
            later.append(log_run(_record(folders[3]), folders[3], target))
        assert second not in (None, first) and b.built == 1
    finally:
        builder_module.close_builder()
    assert waited >= 3.0
    (failed,) = [r.getMessage() for r in caplog.records if "trace was not logged" in
                 r.getMessage()]
    assert _record(folders[1]).run_key in failed and "took over 3 s" in failed
    assert "BuilderGone" in failed and "\n" not in failed
    from mlflow.tracking import MlflowClient

    client = MlflowClient(tracking_uri=target.uri)
    assert client.get_run(run_id).info.status == "FINISHED"
    exp = client.get_experiment_by_name(target.experiment).experiment_id
    assert client.search_traces(locations=[exp], run_id=run_id) == []
    for later_id in later:
        assert any(s.span_type == "TOOL" for s in _trace_of(target, later_id).data.spans)


def _stalls_once(tmp_path: Path) -> ViewBuilder:
    """A builder whose process stalls on its second request, once (``STALLS_ONCE``)."""
    script = tmp_path / "stalls_once.py"
    script.write_text(STALLS_ONCE)
    return ViewBuilder(start_at=1, command=[sys.executable, str(script),
                                            str(tmp_path / "stalled-once")])


def test_runs_queued_behind_a_stalled_run_are_built_inline(tmp_path, monkeypatch) -> None:
    """Settling threads queue several runs at one builder: when it is stopped for the run
    it stalls on, that run fails and the runs behind it are built inline, none lost."""
    monkeypatch.setattr(builder_module, "BUILD_TIMEOUT_S", 3.0)
    folders = _folders(tmp_path, 3)
    b = _stalls_once(tmp_path)
    try:
        settings = TracesConfig()
        b.submit(_record(folders[0]), folders[0], settings, 1)()
        _started(b)
        stalled, *queued = [b.submit(_record(f), f, settings, n)
                            for n, f in enumerate(folders, start=10)]
        with pytest.raises(builder_module.BuilderGone, match="took over 3 s"):
            stalled()
        for (n, folder), collect in zip(enumerate(folders[1:], start=11), queued,
                                        strict=True):
            assert collect() == build_views(_record(folder), folder, settings, n)
        assert b.built == 0
    finally:
        b.close()


def test_a_run_whose_views_fail_in_the_builder_is_one_line_and_the_builder_goes_on(
        tmp_path, target, caplog) -> None:
    """A trajectory cut short fails that run's trace in the builder (the same line as
    inline: the run recorded, the error named); the next run is built aside as before."""
    folders = _folders(tmp_path, 3)
    data = (folders[1] / "trajectory.jsonl.gz").read_bytes()
    (folders[1] / "trajectory.jsonl.gz").write_bytes(data[: len(data) // 2])
    with building_views(start_at=1) as b:
        log_run(_record(folders[0]), folders[0], target)
        _started(b)
        with caplog.at_level(logging.WARNING, logger="spu.tracking"):
            log_run(_record(folders[1]), folders[1], target)
        (line,) = [r.getMessage() for r in caplog.records if "trace was not logged" in
                   r.getMessage()]
        assert _record(folders[1]).run_key in line and "TrajectoryFileError" in line
        run_id = log_run(_record(folders[2]), folders[2], target)
        assert b.built == 1 and b.pid is not None
    assert any(s.span_type == "TOOL" for s in _trace_of(target, run_id).data.spans)


def test_a_script_without_a_main_guard_records_a_sweep_with_a_builder(tmp_path) -> None:
    """The builder process never imports the caller's main module: a user's script with
    no ``if __name__ == "__main__"`` runs once, and its runs have their traces."""
    script = tmp_path / "record.py"
    script.write_text(textwrap.dedent(f"""
        from pathlib import Path
        from spu.schema import RunRecord
        from spu.testing.corpus import make_corpus
        from spu.tracking.builder import building_views
        from spu.tracking.store import TrackingTarget, log_run

        print("script body ran")
        out = Path({str(tmp_path)!r}) / "outputs"
        folders = make_corpus(out, 3, task_root=Path({str(REPO / "tasks")!r}), calls=6,
                              seed=1)
        target = TrackingTarget(uri=f"sqlite:///{{out / 'mlflow.db'}}",
                                artifact_root=(out / "mlartifacts").as_uri(),
                                experiment="script")
        with building_views(start_at=1) as b:
            for f in folders:
                log_run(RunRecord.model_validate_json((f / "run.json").read_text()), f,
                        target)
                b.wait_started(timeout=60)
            print("built aside", b.built)
    """))
    done = subprocess.run([sys.executable, str(script)], capture_output=True, text=True,
                          timeout=300, cwd=tmp_path)
    assert done.returncode == 0, done.stderr[-3000:]
    assert done.stdout.count("script body ran") == 1
    assert "built aside 2" in done.stdout, done.stdout


def test_a_multirun_opens_the_builder_for_its_sweep_and_closes_it(compose) -> None:
    """The Hydra callback that frames every multirun opens the builder at the sweep's
    start and closes it at its end; ``tracking.traces.enabled=false`` opens none."""
    from spu.callbacks import ResultsTable

    callback = ResultsTable()
    cfg = compose("hydra.sweep.dir=" + str(Path(str(compose().output_root)) / "sweep"),
                  return_hydra_config=True)
    callback.on_multirun_start(cfg)
    try:
        assert builder_module._current is not None
    finally:
        callback.on_multirun_end(cfg)
    assert builder_module._current is None
    off = compose("tracking.traces.enabled=false", return_hydra_config=True)
    callback.on_multirun_start(off)
    assert builder_module._current is None


@pytest.mark.parametrize("answer", [b"\x00" * 8, b"\xff" * 8 + b"junk"],
                         ids=["empty_message", "oversized_length"])
def test_a_builder_that_answers_nonsense_is_given_up(tmp_path, answer: bytes,
                                                     caplog) -> None:
    """A stream out of step (a foreign message in place of ``ready``) ends the builder:
    one line, inline builds from then on, nothing hangs."""
    folder = _folders(tmp_path, 1)[0]
    stand_in = [sys.executable, "-c", f"import sys; sys.stdout.buffer.write({answer!r}); "
                "sys.stdout.flush(); sys.stdin.read()"]
    b = ViewBuilder(start_at=1, command=stand_in)
    with caplog.at_level(logging.WARNING, logger="spu.tracking"):
        views = b.submit(_record(folder), folder, TracesConfig(), 1)()  # starts it; inline
        assert not b.wait_started(timeout=30)
        deadline = time.monotonic() + 30
        while not caplog.records and time.monotonic() < deadline:
            time.sleep(0.05)
    assert views.transcript and b.pid is None and b.built == 0
    (line,) = [r.getMessage() for r in caplog.records if "builder process" in r.getMessage()]
    assert "trace builder process ended" in line and "\n" not in line, line
    b.close()


def test_on_one_core_no_builder_process_starts(tmp_path) -> None:
    """A driver held to one core (``sched_setaffinity``) builds inline: a builder process
    would only take turns with the record."""
    folder = _folders(tmp_path, 1)[0]
    script = textwrap.dedent(f"""
        import os
        from pathlib import Path
        from spu.config import TracesConfig
        from spu.schema import RunRecord
        from spu.tracking.builder import ViewBuilder, spare_core

        os.sched_setaffinity(0, {{min(os.sched_getaffinity(0))}})
        folder = Path({str(folder)!r})
        record = RunRecord.model_validate_json((folder / "run.json").read_text())
        b = ViewBuilder(start_at=1)
        views = [b.submit(record, folder, TracesConfig(), n)() for n in (1, 2, 3)]
        print(spare_core(), b._process is None, b.built, len(views[2].transcript) > 0)
    """)
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True,
                          timeout=120)
    assert done.returncode == 0, done.stderr[-3000:]
    assert done.stdout.split() == ["False", "True", "0", "True"]


def _kill_driver_with_builder(command: str = "") -> int:
    """Start a builder (``ViewBuilder(start_at=1{command})``) in a driver that then kills
    itself with SIGKILL, so no cleanup runs; the builder's pid."""
    script = textwrap.dedent(f"""
        import os, signal, sys
        from spu.tracking.builder import ViewBuilder

        b = ViewBuilder(start_at=1{command})
        b._start()
        assert b.wait_started(timeout=60)
        print(b.pid, flush=True)
        os.kill(os.getpid(), signal.SIGKILL)
    """)
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True,
                          timeout=120)
    assert done.returncode == -signal.SIGKILL, done.stderr[-3000:]
    return int(done.stdout.split()[0])


def _ends_within(pid: int, seconds: float) -> bool:
    deadline = time.monotonic() + seconds
    while running(pid) and time.monotonic() < deadline:
        time.sleep(0.05)
    return not running(pid)


def test_the_builder_ends_with_a_driver_killed_outright() -> None:
    """A driver killed by SIGKILL (no cleanup runs) leaves no builder behind: its requests
    end, and so does it."""
    import psutil

    pid = _kill_driver_with_builder()
    assert _ends_within(pid, 30), psutil.Process(pid).cmdline()


@pytest.mark.slow  # a real sandbox (spu.main, sandbox=local)
def test_a_sweep_from_the_command_line_builds_its_traces_in_the_builder(tmp_path) -> None:
    """``python -m spu.main -m ...``: the sweep's runs all have their trace, and the
    builder built some of them (its closing line, at DEBUG through ``hydra.verbose``)."""
    from mlflow.tracking import MlflowClient

    from tests.conftest import EXAMPLE_TASK, EXAMPLE_TWO_GROUPS, run_module

    out = tmp_path / "outputs"
    done = run_module(["spu.main", "-m", "model=random,presented_order,monotone_prior",
                       f"task={EXAMPLE_TASK.name},{EXAMPLE_TWO_GROUPS.name}", "repeat=0,1",
                       f"output_root={out}", "hydra.verbose=spu.tracking.builder"],
                      timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    (line,) = [line for line in (done.stdout + done.stderr).splitlines()
               if "trace builder:" in line]
    built, traced = (int(n) for n in line.split("trace builder: ")[1].split()[:3:2])
    assert traced == 12 and 1 <= built <= 10, line
    client = MlflowClient(tracking_uri=f"sqlite:///{out / 'mlflow.db'}")
    runs = client.search_runs([e.experiment_id for e in client.search_experiments()])
    assert len(runs) == 12
    for run in runs:
        (trace,) = client.search_traces(locations=[run.info.experiment_id],
                                        run_id=run.info.run_id)
        assert trace.info.tags["run_key"] == run.data.tags["run_key"]


# -- found by a red-team helper against the first version (2026-12-05) -------------------


class _Unpicklable(str):
    """A note that reads as text and cannot be pickled."""

    def __reduce_ex__(self, protocol: object) -> None:  # type: ignore[override]
        raise TypeError("cannot pickle this")


def test_a_request_that_cannot_be_sent_is_built_inline_and_no_run_gets_anothers_views(
        tmp_path, target) -> None:
    """Attack (F2): a request whose pickle fails left its answer slot waiting, so each
    later answer settled the run before it: run B's MLflow run showed run C's trace. Now
    the request is pickled before it is waited for (that run built inline), answers name
    their request, and a view is checked to be the run's own before it is written."""
    folders = _folders(tmp_path, 4)
    with building_views(start_at=1) as b:
        log_run(_record(folders[0]), folders[0], target)
        _started(b)
        bad = _record(folders[1]).model_copy(update={"notes": [_Unpicklable("note")]})
        bad_id = log_run(bad, folders[1], target)  # built inline
        run_ids = {f: log_run(_record(f), f, target) for f in folders[2:]}
        assert b.built == 2
    assert _trace_of(target, bad_id).info.tags["run_key"] == bad.run_key
    for folder, run_id in run_ids.items():
        trace = _trace_of(target, run_id)
        assert trace.info.tags["run_key"] == _record(folder).run_key


def test_a_builder_that_cannot_start_leaves_the_run_recorded(tmp_path, target,
                                                             caplog) -> None:
    """Attack (F3): a builder that could not start (no such program here; out of file
    descriptors there) raised out of ``log_run`` before the run was created: the run had
    no record at all. Now one line, and the run and its trace are recorded inline."""
    from mlflow.tracking import MlflowClient

    folders = _folders(tmp_path, 2)
    with caplog.at_level(logging.WARNING, logger="spu.tracking"):
        with building_views(start_at=1) as b:
            b._command = [str(tmp_path / "no-such-builder")]  # noqa: SLF001
            run_ids = [log_run(_record(f), f, target) for f in folders]
    (line,) = [r.getMessage() for r in caplog.records if "builder process" in r.getMessage()]
    assert "did not start" in line and "built in this process" in line
    client = MlflowClient(tracking_uri=target.uri)
    for run_id in run_ids:
        assert client.get_run(run_id).info.status == "FINISHED"
        assert _trace_of(target, run_id).info.tags["run_key"]


BUSY = """
import os, sys
from spu.tracking.builder import _die_with_parent, _send

_die_with_parent(int(os.environ["SPU_TRACE_BUILDER_PARENT"]))
_send(sys.stdout.buffer, (0, "ready", os.getpid()))
while True:  # a build that holds the interpreter for ever
    pass
"""


def test_a_builder_busy_when_the_driver_is_killed_ends_with_it(tmp_path) -> None:
    """Attack (F4): a builder mid-build when the driver was SIGKILLed ran on, its
    requests' end unread, reparented to init. Now it dies with the driver (Linux's parent
    death signal), busy or not."""
    (tmp_path / "busy.py").write_text(BUSY)
    pid = _kill_driver_with_builder(
        f", command=[sys.executable, {str(tmp_path / 'busy.py')!r}]")
    assert _ends_within(pid, 10)


def test_a_module_in_the_sweeps_folder_does_not_run_in_the_builder(tmp_path) -> None:
    """Attack (F5): ``python -m`` put the current folder first on the builder's path, so a
    ``struct.py`` where the sweep was started ran in the builder. Now ``-P``."""
    cwd = tmp_path / "started-here"
    cwd.mkdir()
    marker = tmp_path / "shadow-ran"
    (cwd / "struct.py").write_text(f"open({str(marker)!r}, 'w').write('ran')\n"
                                   "raise ImportError('a shadow')\n")
    folders = _folders(tmp_path, 2)
    script = tmp_path / "record.py"
    script.write_text(textwrap.dedent(f"""
        from pathlib import Path
        from spu.schema import RunRecord
        from spu.tracking.builder import building_views
        from spu.tracking.store import TrackingTarget, log_run

        out = Path({str(tmp_path)!r}) / "store"
        target = TrackingTarget(uri=f"sqlite:///{{out / 'mlflow.db'}}",
                                artifact_root=(out / "mlartifacts").as_uri(), experiment="x")
        with building_views(start_at=1) as b:
            for f in {[str(f) for f in folders]!r}:
                log_run(RunRecord.model_validate_json((Path(f) / "run.json").read_text()),
                        Path(f), target)
                b.wait_started(timeout=60)
            print("built aside", b.built)
    """))
    done = subprocess.run([sys.executable, str(script)], capture_output=True, text=True,
                          timeout=300, cwd=cwd)
    assert done.returncode == 0, done.stderr[-3000:]
    assert "built aside 1" in done.stdout and not marker.exists()


OUT_OF_STEP = """
import os, sys
from spu.tracking.builder import _receive, _send

_send(sys.stdout.buffer, (0, "ready", os.getpid()))
number = _receive(sys.stdin.buffer)[0]
_send(sys.stdout.buffer, (number, "bogus", None))
sys.stdin.buffer.read()
"""


def test_an_answer_out_of_step_fails_its_run_at_once(tmp_path, monkeypatch) -> None:
    """Attack (F6): an answer of another kind was taken from its run's slot and the run
    left waiting for ``BUILD_TIMEOUT_S`` and a minute more, then a ``TimeoutError``. Now
    the run it names fails at once (``BuilderGone``)."""
    monkeypatch.setattr(builder_module, "BUILD_TIMEOUT_S", 120.0)
    (tmp_path / "out_of_step.py").write_text(OUT_OF_STEP)
    folder = _folders(tmp_path, 1)[0]
    b = ViewBuilder(start_at=1, command=[sys.executable, str(tmp_path / "out_of_step.py")])
    try:
        b.submit(_record(folder), folder, TracesConfig(), 1)()
        _started(b)
        collect = b.submit(_record(folder), folder, TracesConfig(), 2)
        started = time.monotonic()
        with pytest.raises(builder_module.BuilderGone, match="out of step"):
            collect()
        assert time.monotonic() - started < 30
    finally:
        b.close()


def test_a_deeply_nested_submission_is_the_same_trace_at_any_stack_depth(tmp_path) -> None:
    """Attack (F7): a ``rankings.json`` nested some 900 deep parsed in the builder's
    shallow stack and fell back to text in a deep one, so the two builds differed. Past
    ``MAX_RANKINGS_NESTING`` it is text wherever it is built."""
    from spu.tracking.traces import MAX_RANKINGS_NESTING, submitted_rankings

    folder = _folders(tmp_path, 1)[0]
    (folder / "output" / "rankings.json").write_text("[" * 900 + "]" * 900)

    def deep(n: int) -> object:
        return deep(n - 1) if n else submitted_rankings(folder, 4000)

    shallow = submitted_rankings(folder, 4000)
    assert shallow == deep(sys.getrecursionlimit() - 200) == "[" * 900 + "]" * 900
    (folder / "output" / "rankings.json").write_text(
        "[" * MAX_RANKINGS_NESTING + "]" * MAX_RANKINGS_NESTING)
    assert isinstance(submitted_rankings(folder, 4000), list)


def test_a_stalled_request_no_one_collects_is_stopped_at_the_next_run(
        tmp_path, monkeypatch) -> None:
    """The helper's note: a builder stalled on a run whose record then failed (so no one
    waits for its views) would take requests until its pipe was full, and a write would
    wait for ever. The next run past ``BUILD_TIMEOUT_S`` stops it and is built inline;
    the run after starts a new builder."""
    monkeypatch.setattr(builder_module, "BUILD_TIMEOUT_S", 2.0)
    folders = _folders(tmp_path, 3)
    b = _stalls_once(tmp_path)
    settings = TracesConfig()
    try:
        b.submit(_record(folders[0]), folders[0], settings, 1)()
        first = _started(b).pid
        abandoned = b.submit(_record(folders[1]), folders[1], settings, 2)  # never collected
        time.sleep(2.5)
        assert b.submit(_record(folders[2]), folders[2], settings, 3)() == build_views(
            _record(folders[2]), folders[2], settings, 3)
        with pytest.raises(builder_module.BuilderGone, match="took over 2 s"):
            abandoned()
        assert first is not None and not running(first)
        b.submit(_record(folders[2]), folders[2], settings, 4)  # starts a new one
        assert _started(b).pid not in (None, first)
    finally:
        b.close()


def test_a_builder_started_by_a_thread_that_ends_outlives_it_and_closes_without_a_warning(
        caplog: pytest.LogCaptureFixture) -> None:
    """Invariant: the builder lives as long as the sweep, whichever thread asked for it.

    A ``ray_local`` sweep's first traced run is settled in a thread of its settle pool,
    which ends before the sweep does; the builder, ended by Linux with the thread that
    started it (``PR_SET_PDEATHSIG``), was reported as "trace builder process ended (exit
    status -9)" at every sweep's close. Now it is started from a thread of its own.
    """
    import threading

    b = ViewBuilder(start_at=1)
    try:
        with caplog.at_level(logging.WARNING, logger="spu.tracking.builder"):
            def settle() -> None:  # asks for the builder, and ends once it is up
                b._usable()
                _started(b)

            asker = threading.Thread(target=settle, name="spu-settle_0")
            asker.start()
            asker.join()  # the thread that asked has ended
            pid = b.pid
            assert pid is not None
            time.sleep(0.5)  # a SIGKILL sent at the thread's end lands within this
            assert running(pid)
    finally:
        b.close()
    assert not running(pid)
    assert "trace builder process ended" not in caplog.text, caplog.text
