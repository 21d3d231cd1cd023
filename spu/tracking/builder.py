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
import itertools
import logging
import os
import pickle
import queue
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

PARENT_VARIABLE = "SPU_TRACE_BUILDER_PARENT"
"""The driver's process id, given to the builder process (which ends with it)."""

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


def _frame(message: Any) -> bytes:
    """``message`` as it goes on the stream: its length, then its pickle."""
    data = pickle.dumps(message, protocol=pickle.HIGHEST_PROTOCOL)
    return _HEADER.pack(len(data)) + data


def _send(stream: IO[bytes], message: Any) -> None:
    stream.write(_frame(message))
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

    Each request is ``(number, record, run_dir, settings, otel_id)``; each answer
    ``(number, "ok", (views, cpu_s))`` or ``(number, "error", exception)`` (a run whose
    views cannot be built, its exception as the inline build raises it), the request's
    number first. The first answer, ``(0, "ready", pid)``, says that the process has
    imported what a build needs.
    """
    import spu.tracking.traces  # noqa: F401
    import spu.tracking.transcript as transcript

    transcript._template()
    _send(answers, (0, "ready", os.getpid()))
    while True:
        try:
            number, record, run_dir, settings, otel_id = _receive(requests)
        except EOFError:
            return 0
        try:
            answer: tuple[int, str, Any] = (
                number, "ok", _build(record, run_dir, settings, otel_id))
        except Exception as exc:  # noqa: BLE001 (the caller says it in one line)
            answer = (number, "error", _portable(exc))
        _send(answers, answer)


def _die_with_parent(parent: int) -> None:
    """End this process when the driver that started it ends, even mid-build.

    Linux's ``PR_SET_PDEATHSIG`` (SIGKILL when the thread that started it ends; a sweep's
    builder is closed before that thread does); a driver gone already ends it now. A
    watchdog thread would not do: a build holds the interpreter lock for long stretches.
    """
    import ctypes
    import ctypes.util
    import signal

    try:
        libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6", use_errno=True)
        libc.prctl(1, int(signal.SIGKILL), 0, 0, 0)  # PR_SET_PDEATHSIG
    except (OSError, AttributeError):  # not Linux: its requests' end still ends it
        pass
    if os.getppid() != parent:
        os._exit(0)


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
        # -P: no module of the current folder (where the sweep was started) shadows one
        # of the standard library or SPU's in the builder; spu itself from PYTHONPATH
        self._command = command or [sys.executable, "-P", "-m", "spu.tracking.builder"]
        """The builder process's command line (another for a test's stand-in)."""
        self._lock = threading.Lock()
        self._sending = threading.Lock()
        """Held while a request is written (never with ``_lock``: the reader thread
        takes ``_lock`` only, so a full pipe cannot stop it from reading)."""
        self._process: subprocess.Popen[bytes] | None = None
        self._ready: Future[int] = Future()
        self._waiting: dict[int, Future[tuple[TraceViews, float]]] = {}
        """Futures of the requests sent to the process and not answered, by number."""
        self._sent_at: dict[int, float] = {}
        """When each waiting request was sent (``time.monotonic``), by number."""
        self._numbers = itertools.count(1)
        """Each request's number, which its answer names."""
        self._stopped: dict[int, str] = {}
        """Why the driver stopped a process, by its id (read by its reader thread)."""
        self._recorded = 0
        self._starts = 0
        self._closed = False
        self.cpu_s = 0.0
        """CPU seconds the builder processes spent on builds (the benchmark reports them)."""
        self.built = 0
        """Views built in a builder process."""
        self._starter = _Starter()

    def _start(self) -> None:
        """Start a builder process (called with ``_lock`` held).

        From the builder's own thread (:class:`_Starter`), which lives until
        :meth:`close`: Linux ends the process when the thread that started it ends
        (``PR_SET_PDEATHSIG``), and the thread that asks first is often one of a sweep's
        settling threads, which end before the sweep does (the settle pool's shutdown
        killed the builder, and its end read as a failure: "exit status -9").
        """
        import spu

        root = str(Path(spu.__file__).resolve().parents[1])
        env = dict(os.environ)
        env["PYTHONPATH"] = os.pathsep.join(p for p in (root, env.get("PYTHONPATH")) if p)
        env[PARENT_VARIABLE] = str(os.getpid())
        self._starts += 1
        self._ready = Future()
        self._waiting = {}
        self._process = self._starter.run(functools.partial(
            subprocess.Popen, self._command, stdin=subprocess.PIPE,
            stdout=subprocess.PIPE, env=env, close_fds=True,
            # a session of its own: Ctrl-C is the driver's to handle (no traceback of the
            # builder's on the terminal); it ends when its requests end, the driver
            # closing them or dying
            start_new_session=True))
        threading.Thread(target=self._read_answers,
                         args=(self._process, self._ready, self._waiting),
                         name="spu-trace-builder", daemon=True).start()

    def _read_answers(self, process: subprocess.Popen[bytes], ready: Future[int],
                      waiting: dict[int, Future[tuple[TraceViews, float]]]) -> None:
        """The reader thread of one process: each answer settles the request it names.

        An answer that names no request waiting, or is not one of the two kinds, is the
        stream out of step: the process is ended (the request it names, if any, fails).
        """
        assert process.stdout is not None
        try:
            answer = _receive(process.stdout)
            if not (isinstance(answer, tuple) and len(answer) == 3 and answer[:2] == (
                    0, "ready") and isinstance(answer[2], int)):
                raise BuilderGone("its first answer was not its ready line")
            ready.set_result(answer[2])
            while True:
                answer = _receive(process.stdout)
                number = answer[0] if isinstance(answer, tuple) and answer else None
                with self._lock:
                    future = None
                    if isinstance(number, int):
                        future = waiting.pop(number, None)
                        self._sent_at.pop(number, None)
                if future is None:
                    raise BuilderGone("an answer to no request waiting")
                kind, value = answer[1:] if len(answer) == 3 else (None, None)
                if kind == "ok" and isinstance(value, tuple) and len(value) == 2:
                    future.set_result(value)
                elif kind == "error" and isinstance(value, Exception):
                    future.set_exception(value)
                else:
                    bad = BuilderGone(f"the trace builder answered out of step ({kind!r})")
                    future.set_exception(bad)
                    raise bad
        except Exception as exc:  # noqa: BLE001 (EOF, a torn or foreign message)
            self._ended(process, ready, waiting, exc)

    def _ended(self, process: subprocess.Popen[bytes], ready: Future[int],
               waiting: dict[int, Future[tuple[TraceViews, float]]],
               exc: Exception) -> None:
        """A process ended: the run it was building fails, those behind it go inline.

        The builder answers in the order asked, so the run it was building is the
        lowest-numbered request waiting.
        """
        _end(process)
        with self._lock:
            why = self._stopped.pop(process.pid, None) or (
                str(exc) if isinstance(exc, BuilderGone) else
                f"exit status {process.returncode}")
            pending = [waiting[n] for n in sorted(waiting)]
            for n in waiting:
                self._sent_at.pop(n, None)
            waiting.clear()
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
            ready, process = self._ready, self._process
            oldest = min(self._sent_at.values(), default=None)
        if oldest is not None and time.monotonic() - oldest > BUILD_TIMEOUT_S:
            # a request no one collects (its run failed before it did) stalled the process:
            # stopped here, before a write could wait on its full pipe for ever
            self._stop(process, f"a run's views took over {BUILD_TIMEOUT_S:g} s")
            return False
        return ready.done() and ready.exception() is None

    def _give_up(self, why: str) -> None:
        """No builder process for the rest of the sweep (one cannot be started).

        Said once.
        """
        with self._lock:
            said = self._closed
            self._closed = True
            process, self._process = self._process, None
        if process is not None:
            _end(process)
        if not said:
            log.warning("trace builder process: %s; traces are built in this process from "
                        "now on", why)

    def _stop(self, process: subprocess.Popen[bytes] | None, why: str) -> None:
        """Kill a stalled process; its reader thread settles what it held."""
        if process is None or process.poll() is not None:  # gone: its reader says why
            return
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
        try:
            if not self._usable():
                return inline
        except Exception as exc:  # noqa: BLE001 (no process to be had: the run goes on)
            self._give_up(f"it did not start ({type(exc).__name__}: {exc})")
            return inline
        number = next(self._numbers)
        try:
            # pickled before anything is sent or waited for: a request that cannot be
            # pickled is built inline, and leaves the stream as it was
            frame = _frame((number, record, str(run_dir), settings, otel_id))
        except Exception:  # noqa: BLE001
            return inline
        future: Future[tuple[TraceViews, float]] = Future()
        with self._sending:
            with self._lock:
                process = self._process
                if process is None or process.stdin is None:
                    return inline
                self._waiting[number] = future
                self._sent_at[number] = time.monotonic()
            try:
                process.stdin.write(frame)
                process.stdin.flush()
            except BaseException as exc:
                # part of a request may have gone: the stream is out of step, so this
                # process is ended (its reader settles the others) and this run inline
                with self._lock:
                    self._waiting.pop(number, None)
                    self._sent_at.pop(number, None)
                self._stop(process, f"a request was cut short ({type(exc).__name__})")
                if not isinstance(exc, Exception):
                    raise
                return inline
        expected = (f"tr-{otel_id:032x}", record.run_key)

        def collect() -> TraceViews:
            from concurrent.futures import TimeoutError as FutureTimeout

            try:
                try:
                    views, cpu = future.result(timeout=BUILD_TIMEOUT_S)
                except FutureTimeout:
                    self._stop(process, f"a run's views took over {BUILD_TIMEOUT_S:g} s")
                    views, cpu = future.result(timeout=10)
            except _Requeued:
                return inline()
            except FutureTimeout:  # the process ended, yet its reader never said so
                raise BuilderGone("the trace builder process was stopped and never "
                                  "answered") from None
            if (views.trace_id, views.tags.get("run_key")) != expected:  # never a run's
                raise BuilderGone("the trace builder answered with another run's views")
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
            busy = bool(self._waiting)
        if process is not None:
            if busy:  # a thread may be writing to it: ended first, so no write waits
                process.kill()
            _end(process)
        self._starter.stop()
        log.debug("trace builder: %d of %d traced runs built in its process (%d started)",
                  self.built, self._recorded, self._starts)


class _Starter:
    """A thread that starts the builder processes and lives until :meth:`stop`.

    A process started with ``PR_SET_PDEATHSIG`` ends when the thread that started it
    does; this thread ends only when the builder is closed (or the driver ends).
    """

    def __init__(self) -> None:
        self._requests: queue.SimpleQueue[tuple[Callable[[], Any], Future[Any]] | None] = (
            queue.SimpleQueue())
        self._thread: threading.Thread | None = None

    def run(self, start: Callable[[], Any]) -> Any:
        """``start()`` called in this thread; its value (or its exception, raised here)."""
        if self._thread is None:
            self._thread = threading.Thread(target=self._serve, name="spu-trace-builder-start",
                                            daemon=True)
            self._thread.start()
        done: Future[Any] = Future()
        self._requests.put((start, done))
        return done.result()

    def _serve(self) -> None:
        while (request := self._requests.get()) is not None:
            start, done = request
            try:
                done.set_result(start())
            except BaseException as exc:  # noqa: BLE001 - raised in the caller's thread
                done.set_exception(exc)

    def stop(self) -> None:
        """End the thread (once what it started has ended)."""
        if self._thread is not None:
            self._requests.put(None)
            self._thread.join()
            self._thread = None


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
    parent = os.environ.get(PARENT_VARIABLE)
    if parent is not None and parent.isdigit():
        _die_with_parent(int(parent))
    answers = os.fdopen(os.dup(1), "wb")
    os.dup2(2, 1)
    return serve(sys.stdin.buffer, answers)


if __name__ == "__main__":
    sys.exit(main())
