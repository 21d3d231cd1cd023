"""Each run's trace and transcript built in a process of their own, beside its record.

Building a run's views (:func:`spu.tracking.traces.build_views`: reading its trajectory,
gateway record and audit log, labelling each call, rendering ``transcript.html``) is pure
Python and takes about as long as MLflow's own writes of the run's record. In one
process the two take turns at the interpreter; a builder process does the first on
another core while this one writes the record, and hands back the finished text
(issue 25: a sweep's tracking time with traces).

A sweep opens a builder (:func:`open_builder`, from the Hydra callback that frames every
multirun); :func:`spu.tracking.store.log_run` asks :func:`views_of` for each run's views
as it starts the record and collects them once the record is written. Outside a sweep,
or until the builder process is up, the views are built inline as before. The process
starts at a sweep's second recorded run (a one-run sweep never starts it), and only
where this process has two cores or more. One that dies, stalls or answers nonsense
costs the run it was building its trace (never built again in the driver: its folder may
be what ended it), is said in one line, and is replaced at the next run, a few times.

The builder process is ``python -m spu.tracking.builder``, not a ``multiprocessing``
child: it never imports the caller's main module (a script without a ``__main__`` guard
would run again, or fail). It takes requests on its standard input and answers on its
standard output, each a length-prefixed pickle, in order; it reads the run folder as the
inline build does, and writes nothing.
"""

from __future__ import annotations

import functools
import logging
import os
import pickle
import struct
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from concurrent.futures import Future
from contextlib import contextmanager
from pathlib import Path
from typing import IO, TYPE_CHECKING, Any

from spu.config import TracesConfig

if TYPE_CHECKING:
    from spu.schema import RunRecord
    from spu.tracking.traces import TraceViews

log = logging.getLogger(__name__)

BUILD_TIMEOUT_S = 300.0
"""Seconds a run's views may take in the builder before they are built inline instead
(a paper-dense run takes about 0.1 s)."""

MAX_STARTS = 3
"""Builder processes a sweep starts at most (the first, and two after one has ended)."""

START_AT_RUN = 2
"""The builder process starts when a sweep records its second traced run: a one-run
sweep does not pay for a process it would not use."""

_HEADER = struct.Struct(">Q")
"""Each message's length, before its pickle."""

MAX_MESSAGE_BYTES = 1 << 30
"""A longer message is nonsense: the stream is out of step (the builder is given up)."""


class BuilderGone(RuntimeError):
    """The builder process ended while it built this run's views.

    Killed, out of memory, stalled and stopped, or out of step: the run is recorded
    without its trace (``spu runs log-traces`` adds it later), never built again here in
    the driver.
    """


class _Requeued(Exception):
    """The builder process ended before it came to this run: build it inline."""


def _send(stream: IO[bytes], message: Any) -> None:
    data = pickle.dumps(message, protocol=pickle.HIGHEST_PROTOCOL)
    stream.write(_HEADER.pack(len(data)) + data)
    stream.flush()


def _receive(stream: IO[bytes]) -> Any:
    head = stream.read(_HEADER.size)
    if len(head) < _HEADER.size:
        raise EOFError("the stream ended")
    (size,) = _HEADER.unpack(head)
    if size > MAX_MESSAGE_BYTES:
        raise BuilderGone(f"a message of {size} bytes")
    data = stream.read(size)
    if len(data) < size:
        raise EOFError("the stream ended inside a message")
    return pickle.loads(data)


def _build(record: RunRecord, run_dir: str, settings: TracesConfig,
           otel_id: int) -> tuple[TraceViews, float]:
    """In the builder process: the run's views and the CPU seconds they took."""
    from spu.tracking.traces import build_views

    started = time.process_time()
    views = build_views(record, Path(run_dir), settings, otel_id)
    return views, time.process_time() - started


def serve(requests: IO[bytes], answers: IO[bytes]) -> int:
    """The builder process: answer each request in order until the requests end.

    Each request is ``(record, run_dir, settings, otel_id)``; each answer ``("ok",
    (views, cpu_s))`` or ``("error", exception)`` (a run whose views cannot be built, its
    exception as the inline build raises it). The first answer, ``("ready", pid)``, says
    that the process has imported what a build needs.
    """
    import spu.tracking.traces  # noqa: F401
    import spu.tracking.transcript as transcript

    transcript._template()
    _send(answers, ("ready", os.getpid()))
    while True:
        try:
            record, run_dir, settings, otel_id = _receive(requests)
        except EOFError:
            return 0
        try:
            answer: tuple[str, Any] = ("ok", _build(record, run_dir, settings, otel_id))
        except Exception as exc:  # noqa: BLE001 (the caller says it in one line)
            answer = ("error", _portable(exc))
        _send(answers, answer)


def _portable(exc: Exception) -> Exception:
    """``exc`` as it can be sent back.

    Itself where its pickle reads back, else a ``RuntimeError`` naming it (an exception
    whose constructor takes other arguments).
    """
    try:
        pickle.loads(pickle.dumps(exc))
    except Exception:  # noqa: BLE001
        return RuntimeError(f"{type(exc).__name__}: {exc}")
    return exc


class ViewBuilder:
    """One builder process at a time, started at the sweep's second traced run.

    A builder that ends (killed, out of memory, stalled past :data:`BUILD_TIMEOUT_S` and
    stopped, or answering out of step) costs the run it was building its trace, said in
    that run's one line, and is never tried again in the driver (the run's folder may be
    what ended it); the runs queued behind it are built inline, and the next run starts a
    new builder, up to :data:`MAX_STARTS` in all.
    """

    def __init__(self, start_at: int = START_AT_RUN,
                 command: list[str] | None = None) -> None:
        self._start_at = start_at
        self._command = command or [sys.executable, "-m", "spu.tracking.builder"]
        """The builder process's command line (another for a test's stand-in)."""
        self._lock = threading.Lock()
        self._sending = threading.Lock()
        """Held while a request is written (never with ``_lock``: the reader thread
        takes ``_lock`` only, so a full pipe cannot stop it from reading)."""
        self._process: subprocess.Popen[bytes] | None = None
        self._ready: Future[int] = Future()
        self._waiting: list[Future[tuple[TraceViews, float]]] = []
        """Futures of the requests sent to the process and not answered, in order."""
        self._stopped: dict[int, str] = {}
        """Why the driver stopped a process, by its id (read by its reader thread)."""
        self._recorded = 0
        self._starts = 0
        self._closed = False
        self.cpu_s = 0.0
        """CPU seconds the builder processes spent on builds (the benchmark reports them)."""
        self.built = 0
        """Views built in a builder process."""

    def _start(self) -> None:
        """Start a builder process (called with ``_lock`` held)."""
        import spu

        root = str(Path(spu.__file__).resolve().parents[1])
        env = dict(os.environ)
        env["PYTHONPATH"] = os.pathsep.join(p for p in (root, env.get("PYTHONPATH")) if p)
        self._starts += 1
        self._ready = Future()
        self._waiting = []
        self._process = subprocess.Popen(
            self._command, stdin=subprocess.PIPE,
            stdout=subprocess.PIPE, env=env, close_fds=True,
            # a session of its own: Ctrl-C is the driver's to handle (no traceback of the
            # builder's on the terminal); it ends when its requests end, the driver
            # closing them or dying
            start_new_session=True)
        threading.Thread(target=self._read_answers,
                         args=(self._process, self._ready, self._waiting),
                         name="spu-trace-builder", daemon=True).start()

    def _read_answers(self, process: subprocess.Popen[bytes], ready: Future[int],
                      waiting: list[Future[tuple[TraceViews, float]]]) -> None:
        """The reader thread of one process: each answer settles the oldest request."""
        assert process.stdout is not None
        try:
            kind, value = _receive(process.stdout)
            if kind != "ready":
                raise BuilderGone(f"it first said {kind!r}")
            ready.set_result(int(value))
            while True:
                kind, value = _receive(process.stdout)
                with self._lock:
                    if not waiting:
                        raise BuilderGone("an answer to no request")
                    future = waiting.pop(0)
                if kind == "ok":
                    future.set_result(value)
                elif kind == "error" and isinstance(value, BaseException):
                    future.set_exception(value)
                else:
                    raise BuilderGone(f"an answer of kind {kind!r}")
        except Exception as exc:  # noqa: BLE001 (EOF, a torn or foreign message)
            self._ended(process, ready, waiting, exc)

    def _ended(self, process: subprocess.Popen[bytes], ready: Future[int],
               waiting: list[Future[tuple[TraceViews, float]]], exc: Exception) -> None:
        """A process ended: the run it was building fails, those behind it go inline."""
        _end(process)
        with self._lock:
            why = self._stopped.pop(process.pid, None) or (
                str(exc) if isinstance(exc, BuilderGone) else
                f"exit status {process.returncode}")
            pending, waiting[:] = list(waiting), []
            if self._process is process:
                self._process = None
            closed, again = self._closed, self._starts < MAX_STARTS
        gone = BuilderGone(f"the trace builder process ended building it ({why})")
        if not ready.done():
            ready.set_exception(gone)
        for n, future in enumerate(pending):
            future.set_exception(gone if n == 0 else _Requeued())
        if not closed:
            log.warning("trace builder process ended (%s)%s; %s", why,
                        ", with a run's views unfinished" if pending else "",
                        "a new one starts at the next run" if again else
                        "traces are built in this process from now on")

    def _usable(self) -> bool:
        """Whether builds go to a process now (started, warm and well)."""
        with self._lock:
            self._recorded += 1
            if self._closed:
                return False
            if self._process is None:
                if (self._recorded >= self._start_at and self._starts < MAX_STARTS
                        and spare_core()):
                    self._start()
                return False
            ready = self._ready
        return ready.done() and ready.exception() is None

    def _stop(self, process: subprocess.Popen[bytes], why: str) -> None:
        """Kill a stalled process; its reader thread settles what it held."""
        with self._lock:
            self._stopped[process.pid] = why
        try:
            process.kill()
        except OSError:
            pass

    def submit(self, record: RunRecord, run_dir: Path, settings: TracesConfig,
               otel_id: int) -> Callable[[], TraceViews]:
        """The run's views, to collect once its record is written."""
        from spu.tracking.traces import build_views

        inline = functools.partial(build_views, record, run_dir, settings, otel_id)
        if not self._usable():
            return inline
        future: Future[tuple[TraceViews, float]] = Future()
        with self._sending:
            with self._lock:  # the futures in the order the requests are sent
                process = self._process
                if process is None or process.stdin is None:
                    return inline
                self._waiting.append(future)
            try:
                _send(process.stdin, (record, str(run_dir), settings, otel_id))
            except (OSError, ValueError):  # it has ended: its reader thread says so
                with self._lock:
                    if future in self._waiting:
                        self._waiting.remove(future)
                return inline

        def collect() -> TraceViews:
            from concurrent.futures import TimeoutError as FutureTimeout

            try:
                try:
                    views, cpu = future.result(timeout=BUILD_TIMEOUT_S)
                except FutureTimeout:
                    self._stop(process, f"a run's views took over {BUILD_TIMEOUT_S:g} s")
                    views, cpu = future.result(timeout=60)
            except _Requeued:
                return inline()
            with self._lock:
                self.cpu_s += cpu
                self.built += 1
            return views

        return collect

    def wait_started(self, timeout: float) -> bool:
        """Wait until the builder process is up and warm (or failed); whether it is up."""
        from concurrent.futures import wait

        with self._lock:
            if self._process is None:
                return False
            ready = self._ready
        wait([ready], timeout=timeout)
        return ready.done() and ready.exception() is None

    @property
    def pid(self) -> int | None:
        """The builder process's id, once it is up."""
        with self._lock:
            ready = self._ready if self._process is not None else None
        if ready is None or not ready.done() or ready.exception() is not None:
            return None
        return ready.result()

    def close(self) -> None:
        """End the builder process (builds not collected are dropped)."""
        with self._lock:
            process, self._process, self._closed = self._process, None, True
        if process is not None:
            _end(process)
        log.debug("trace builder: %d of %d traced runs built in its process (%d started)",
                  self.built, self._recorded, self._starts)


def spare_core() -> bool:
    """Whether this process may run on two cores or more.

    On one, the builder would only take turns with the record: the views are built inline.
    """
    try:
        return len(os.sched_getaffinity(0)) >= 2
    except (AttributeError, OSError):  # not Linux
        return (os.cpu_count() or 1) >= 2


def _end(process: subprocess.Popen[bytes]) -> None:
    """Close the process's requests (it ends at their end) and reap it; killed if slow."""
    try:
        if process.stdin is not None:
            process.stdin.close()
    except OSError:
        pass
    try:
        process.wait(timeout=5)
    except subprocess.TimeoutExpired:
        process.kill()
        process.wait()


_current: ViewBuilder | None = None


@contextmanager
def building_views(start_at: int = START_AT_RUN) -> Iterator[ViewBuilder]:
    """Build the views of the runs recorded in this block in a builder process.

    The process starts at the ``start_at``-th traced run. Nested blocks share the outer
    one's builder.
    """
    if _current is not None:
        yield _current
        return
    builder = open_builder(start_at)
    try:
        yield builder
    finally:
        close_builder()


def open_builder(start_at: int = START_AT_RUN,
                 command: list[str] | None = None) -> ViewBuilder:
    """Open a builder until :func:`close_builder` (for callbacks that frame a sweep).

    Returns the one open already, if any.
    """
    global _current
    if _current is None:
        _current = ViewBuilder(start_at, command)
    return _current


def close_builder() -> None:
    """Close the builder :func:`open_builder` opened, if any."""
    global _current
    builder, _current = _current, None
    if builder is not None:
        builder.close()


def views_of(record: RunRecord, run_dir: Path,
             settings: Any) -> Callable[[], TraceViews] | None:
    """The run's views, being built where a builder is open: call the result to have them.

    None when ``tracking.traces.enabled`` is false.
    """
    from spu.tracking.traces import build_views, new_trace_id, settings_of

    plain = settings_of(settings)
    if not plain.enabled:
        return None
    otel_id = new_trace_id()
    builder = _current
    if builder is None:
        return functools.partial(build_views, record, Path(run_dir), plain, otel_id)
    return builder.submit(record, Path(run_dir), plain, otel_id)


def main() -> int:
    """``python -m spu.tracking.builder``: serve on standard input and output.

    The answers go out on a copy of the standard output taken first; the standard output
    itself then writes to the standard error, so nothing printed while a run is built (a
    library's message, the text of a run) can fall between two answers.
    """
    answers = os.fdopen(os.dup(1), "wb")
    os.dup2(2, 1)
    return serve(sys.stdin.buffer, answers)


if __name__ == "__main__":
    sys.exit(main())
