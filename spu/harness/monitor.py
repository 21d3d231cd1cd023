"""Watch a running agent: its latest event, its API errors, a status file and status lines.

While the agent runs, :class:`AgentMonitor` reads the agent's stdout log as it grows
(Claude Code's ``stream-json`` events, Codex's ``--json`` events), keeps the latest
event and counts API errors by HTTP status, and:

- writes ``<run_dir>/status.json`` (:class:`AgentStatus`), which a launcher's driver reads
  to show each running run's elapsed time and latest event on its live line;
- logs a status line every ``every_s`` seconds (elapsed time, latest event), so the
  basic launcher, which runs jobs in its own process, shows them too;
- logs an API error as soon as it repeats (401, 403, 429..., with the message the CLI
  gives), then at most every ``every_s`` seconds; the CLIs retry such errors for minutes
  and say so only in their own logs;
- when the provider rejects the key (401 or 403, twice), asks the sandbox to stop the
  agent and keeps the reason, so the run ends as ``infra_error`` with the provider's
  message instead of after the CLI's ten retries. With a model gateway, its record
  (``model/requests.jsonl``, the provider's answers as the host saw them) says so as the
  second rejection is answered: Claude Code writes its retry events to stdout only
  minutes later, after its last retry.

The traps of the two formats, each pinned by a doctest below:

- Claude Code reports a retry as ``{"type": "system", "subtype": "api_retry",
  "error_status": 401, "error": "authentication_failed"}``: the status, not the
  provider's message, which comes only in the final ``result`` line;
- Codex reports a retry as ``{"type": "error", "message": "Reconnecting... 1/5
  (unexpected status 401 Unauthorized: <provider message>, url: ...)"}``: the status is
  only in the text;
- both print lines that are not JSON (warnings on stdout): they are skipped.
"""

from __future__ import annotations

import json
import logging
import os
import re
import threading
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from spu.gateway.answers import loads
from spu.printable import printable

log = logging.getLogger("spu.monitor")

STATUS_FILE = "status.json"
"""Written in the run folder while the agent runs."""

REJECTED_KEY_STATUSES = frozenset({401, 403})
"""HTTP statuses that mean the provider refuses the credentials."""

REJECTED_KEY_REPEATS = 2
"""A rejection seen this many times ends the run (once could be a provider hiccup)."""

POLL_S = 0.5
TEXT_CHARS = 160
"""Longest event text kept."""


@dataclass(frozen=True)
class LiveEvent:
    """One thing the agent did or met, read from one line of its stdout."""

    text: str
    """What happened, in a few words (``Bash: ls -la /task``)."""
    api_status: int | None = None
    """HTTP status of an API error; None for any other event."""


def _short(text: Any, chars: int = TEXT_CHARS) -> str:
    r"""``text`` on one line, at most ``chars`` characters, every control character escaped.

    The agent writes what its CLI prints (any process in the sandbox can), so an event's
    text is the agent's: it reaches the status line and the log as text, never as a
    terminal's control sequence.

    >>> print(_short("valid\x1b[2J\x1b[32m score 0.991\b\b"))
    valid\x1b[2J\x1b[32m score 0.991\x08\x08
    """
    flat = printable(" ".join(str(text).split()), newlines=False)
    return flat if len(flat) <= chars else flat[: chars - 1] + "…"


def _tool_text(name: str, arguments: Any) -> str:
    if isinstance(arguments, dict):
        for key in ("command", "cmd", "file_path", "path", "url", "query", "description",
                    "prompt"):
            if arguments.get(key):
                value = arguments[key]
                value = " ".join(map(str, value)) if isinstance(value, list) else value
                return _short(f"{name}: {value}")
    return _short(name)


def claude_code_event(entry: dict[str, Any]) -> LiveEvent | None:
    """The live event of one Claude Code ``stream-json`` line.

    Examples:
        >>> claude_code_event({"type": "system", "subtype": "api_retry", "attempt": 2,
        ...     "max_retries": 10, "error_status": 401, "error": "authentication_failed"})
        LiveEvent(text='API error 401 authentication_failed (retry 2 of 10)', api_status=401)
        >>> claude_code_event({"type": "assistant", "message": {"content": [
        ...     {"type": "tool_use", "name": "Bash", "input": {"command": "ls -la /task"}}]}})
        LiveEvent(text='Bash: ls -la /task', api_status=None)
        >>> claude_code_event({"type": "result", "is_error": True, "api_error_status": 401,
        ...     "result": "Failed to authenticate. API Error: 401 invalid x-api-key"})
        LiveEvent(text='Failed to authenticate. API Error: 401 invalid x-api-key', api_status=401)
    """
    kind = entry.get("type")
    if kind == "system":
        if entry.get("subtype") == "api_retry":
            status = entry.get("error_status")
            retry = f" (retry {entry.get('attempt')} of {entry.get('max_retries')})"
            return LiveEvent(_short(f"API error {status} {entry.get('error') or ''}".strip()
                                    + retry), status if isinstance(status, int) else None)
        if entry.get("subtype") == "init":
            return LiveEvent(_short(f"session started (Claude Code "
                                    f"{entry.get('claude_code_version')})"))
        return None
    if kind == "assistant":
        content = (entry.get("message") or {}).get("content") or []
        if entry.get("is_api_error_message") or entry.get("error"):
            text = " ".join(b.get("text", "") for b in content if isinstance(b, dict))
            status = _status_in(text)
            return LiveEvent(_short(text or str(entry.get("error"))), status)
        for block in reversed(content):
            if not isinstance(block, dict):
                continue
            if block.get("type") == "tool_use":
                return _tool_event(str(block.get("name")), block.get("input"))
            if block.get("type") == "text" and block.get("text"):
                return LiveEvent(_short(f"says: {block['text']}"))
            if block.get("type") == "thinking":
                return LiveEvent("thinking")
        return None
    if kind == "user":
        return LiveEvent("tool result received")
    if kind == "result":
        if entry.get("is_error"):
            status = entry.get("api_error_status")
            return LiveEvent(_short(str(entry.get("result") or entry.get("subtype"))),
                             status if isinstance(status, int) else None)
        return LiveEvent(_short(f"finished ({entry.get('subtype')})"))
    return None


def _tool_event(name: str, arguments: Any) -> LiveEvent:
    return LiveEvent(_tool_text(name, arguments))


STATUS_IN_TEXT = re.compile(r"(?:status|API Error:|HTTP)\s*(\d{3})\b", re.IGNORECASE)


def _status_in(text: str) -> int | None:
    found = STATUS_IN_TEXT.search(text)
    return int(found.group(1)) if found else None


def codex_event(entry: dict[str, Any]) -> LiveEvent | None:
    """The live event of one Codex ``exec --json`` line.

    Examples:
        >>> codex_event({"type": "error", "message": "Reconnecting... 1/5 (unexpected status "
        ...     "401 Unauthorized: Incorrect API key provided, url: http://x/v1/responses)"})
        ... # doctest: +NORMALIZE_WHITESPACE
        LiveEvent(text='Reconnecting... 1/5 (unexpected status 401 Unauthorized: Incorrect API
        key provided, url: http://x/v1/responses)', api_status=401)
        >>> codex_event({"type": "item.started", "item": {"type": "command_execution",
        ...     "command": "bash -lc 'ls -la /task'"}})
        LiveEvent(text="exec: bash -lc 'ls -la /task'", api_status=None)
    """
    kind = entry.get("type")
    if kind == "error":
        message = str(entry.get("message") or "")
        return LiveEvent(_short(message), _status_in(message))
    if kind == "turn.failed":
        message = str((entry.get("error") or {}).get("message") or "turn failed")
        return LiveEvent(_short(message), _status_in(message))
    if kind == "thread.started":
        return LiveEvent("session started (Codex)")
    if kind in ("item.started", "item.completed"):
        item = entry.get("item") or {}
        item_type = item.get("type")
        if item_type == "command_execution":
            return LiveEvent(_short(f"exec: {item.get('command')}"))
        if item_type == "agent_message" and item.get("text"):
            return LiveEvent(_short(f"says: {item['text']}"))
        if item_type == "reasoning":
            return LiveEvent("thinking")
        if item_type == "mcp_tool_call":
            return _tool_event(str(item.get("tool")), item.get("arguments"))
        if item_type == "error":
            return None  # model metadata warnings and the like: not the agent's work
        return LiveEvent(_short(str(item_type)))
    if kind == "turn.completed":
        return LiveEvent("turn completed")
    return None


@dataclass
class AgentStatus:
    """What ``status.json`` holds about a running agent."""

    run_key: str
    label: str
    """``task · config``, as the status line shows it."""
    started: float
    """Start time (seconds since the epoch)."""
    updated: float
    """Time of the last change."""
    last_event: str = "starting"
    """The agent's latest event."""
    api_errors: dict[str, int] = field(default_factory=dict)
    """API errors seen, by HTTP status."""
    last_api_error: str | None = None
    """The latest API error, as the CLI reported it."""
    stopping: str | None = None
    """Why the monitor asked the sandbox to stop the agent, if it did."""

    def line(self, now: float | None = None) -> str:
        """One status line: label, elapsed time, latest event.

        Examples:
            >>> AgentStatus("k", "spu-bhpt · opus5-max", started=0.0, updated=0.0,
            ...             last_event="Bash: ls").line(now=75.0)
            'spu-bhpt · opus5-max · 0:01:15 · Bash: ls'
        """
        elapsed = int((time.time() if now is None else now) - self.started)
        clock = f"{elapsed // 3600}:{elapsed % 3600 // 60:02d}:{elapsed % 60:02d}"
        return f"{self.label} · {clock} · {self.last_event}"


RunStatus = AgentStatus
"""The former name of :class:`AgentStatus`, kept for code written against it."""


def read_status(run_dir: Path) -> AgentStatus | None:
    """The status a running agent's monitor wrote, or None (none yet, or unreadable)."""
    try:
        data = json.loads((Path(run_dir) / STATUS_FILE).read_text(encoding="utf-8"))
        return AgentStatus(**data)
    except (OSError, ValueError, TypeError):
        return None


class AgentMonitor:
    """A thread that follows the agent's stdout while it runs (see the module docstring).

    Args:
        run_dir: the run folder (``status.json`` goes there).
        stdout: the agent's stdout log, as the sandbox writes it.
        status: the initial status (key, label, start time).
        parse: the harness's line parser (None: elapsed time only).
        on_rejected_key: called once, with what the output said, when it shows the key
            rejected: the provider's own words when it confirms (the agent is stopped),
            None when the provider accepts the key (the agent goes on).
        every_s: seconds between status lines and repeated error lines (0: no lines).
    """

    def __init__(self, run_dir: Path, stdout: Path, status: AgentStatus,
                 parse: Callable[[dict[str, Any]], LiveEvent | None] | None = None,
                 on_rejected_key: Callable[[str], str | None] | None = None,
                 every_s: float = 30.0, record: Path | None = None,
                 on_stop: Callable[[], None] | None = None) -> None:
        self.run_dir = Path(run_dir)
        self.stdout = Path(stdout)
        self.status = status
        self.parse = parse
        self.on_rejected_key = on_rejected_key
        self.every_s = every_s
        self.on_stop = on_stop
        self.rejected: str | None = None
        """Why the run was stopped for a rejected key (None: it was not)."""
        self._key_confirmed = False
        self._out = _Tail(self.stdout)
        self._record = None if record is None else _Tail(Path(record))
        self._refused_in_a_row = 0
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._last_line = time.monotonic()
        self._last_error_said: dict[int, float] = {}
        self._dirty = True

    def __enter__(self) -> AgentMonitor:
        self._thread = threading.Thread(target=self._run, name="spu-agent-monitor",
                                        daemon=True)
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=10)
        try:
            self.poll()  # the last lines the agent wrote
        except Exception as exc:  # the agent wrote them: they never cost the run its record
            log.debug("agent monitor: %s", exc)
        (self.run_dir / STATUS_FILE).unlink(missing_ok=True)

    def _run(self) -> None:
        while not self._stop.wait(POLL_S):
            try:
                self.poll()
            except Exception as exc:  # a monitor never breaks the run it watches
                log.debug("agent monitor: %s", exc)

    def poll(self) -> None:
        """Read what the agent wrote since the last poll; write status and lines."""
        for entry in self._out.entries():
            if self.parse is None:
                continue
            try:
                event = self.parse(entry)
            except Exception as exc:  # a line the agent shaped to break the parser
                log.debug("agent monitor: a line not read (%s)", exc)
                continue
            if event is not None:
                self._event(event)
        for answer in self._record.entries() if self._record is not None else ():
            self._answered(answer)
        now = time.monotonic()
        if self.every_s and now - self._last_line >= self.every_s:
            self._last_line = now
            log.info("running: %s", self.status.line())
        if self._dirty:
            self._write()

    def _answered(self, entry: dict[str, Any]) -> None:
        """One line of the gateway's record: the provider's answer to a generation."""
        from spu.gateway.verdict import key_rejected, provider_answered
        from spu.schema import GatewayRequest

        try:
            answer = GatewayRequest.model_validate(entry)
        except ValueError:
            return
        if not provider_answered(answer):
            return  # not a generation, or the gateway's own answer (a bad token, a policy)
        reason = key_rejected([answer])
        self._refused_in_a_row = 0 if reason is None else self._refused_in_a_row + 1
        if reason is not None and self._refused_in_a_row >= REJECTED_KEY_REPEATS \
                and self.rejected is None:
            log.warning("run %s (%s): API error %d, %d times so far (the gateway's record)",
                        self.status.run_key, self.status.label, answer.status,
                        self._refused_in_a_row)
            self._stop_for(reason)

    def _stop_for(self, reason: str) -> None:
        self.rejected = reason
        self.status.stopping = reason
        self._dirty = True
        log.error("run %s (%s): %s; stopping the agent", self.status.run_key,
                  self.status.label, reason)
        if self.on_stop is not None:
            self.on_stop()

    def _event(self, event: LiveEvent) -> None:
        event = LiveEvent(_short(event.text), event.api_status)  # a harness's own parser too
        self.status.last_event = event.text
        self.status.updated = time.time()
        self._dirty = True
        status = event.api_status
        if status is None or status < 400:
            return
        key = str(status)
        self.status.api_errors[key] = self.status.api_errors.get(key, 0) + 1
        self.status.last_api_error = event.text
        count = self.status.api_errors[key]
        now = time.monotonic()
        said = self._last_error_said.get(status)
        if count >= 2 and (said is None or now - said >= (self.every_s or 30.0)):
            self._last_error_said[status] = now
            log.warning("run %s (%s): API error %d, %d times so far: %s", self.status.run_key,
                        self.status.label, status, count, event.text)
        if status in REJECTED_KEY_STATUSES and count >= REJECTED_KEY_REPEATS \
                and self.rejected is None and not self._key_confirmed:
            seen = f"the provider rejected the API key (HTTP {status}): {event.text}"
            reason = self.on_rejected_key(seen) if self.on_rejected_key is not None else seen
            if reason is None:
                # The provider accepts the key: the lines were not its words (anything in
                # the sandbox can write the CLI's stdout). Asked once; the agent goes on.
                self._key_confirmed = True
                log.warning("run %s (%s): the agent's output claims a rejected key, which "
                            "the provider does not confirm; not stopping",
                            self.status.run_key, self.status.label)
                return
            self._stop_for(reason)

    def _write(self) -> None:
        self._dirty = False
        path = self.run_dir / STATUS_FILE
        partial = path.with_name(f"{STATUS_FILE}.partial")
        try:
            partial.write_text(json.dumps(asdict(self.status)), encoding="utf-8")
            os.replace(partial, path)
        except OSError as exc:
            log.debug("status file not written: %s", exc)


class _Tail:
    """The JSON objects appended to a file since the last read (a torn last line waits)."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self._offset = 0
        self._partial = b""

    def entries(self) -> list[dict[str, Any]]:
        try:
            with open(self.path, "rb") as f:
                f.seek(self._offset)
                chunk = f.read()
        except OSError:
            return []
        self._offset += len(chunk)
        data = self._partial + chunk
        *lines, self._partial = data.split(b"\n")
        entries = []
        for raw in lines:
            entry = loads(raw)  # None for warnings the CLI prints; any depth read
            if isinstance(entry, dict):
                entries.append(entry)
        return entries
