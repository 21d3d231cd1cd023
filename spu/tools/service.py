"""The audited tools service: an MCP server (streamable HTTP) for one run (SPEC section 7).

It offers ``search(query, max_results=10)``, ``fetch(url)`` and ``policy_stop(step,
reason)`` through the official ``mcp`` SDK, served by ``uvicorn`` in a thread of the
process that runs the agent, on the host's ``127.0.0.1`` and a free port, outside the
sandbox. Every call is answered through the provider (:mod:`spu.tools.providers`),
screened for the source study's identifiers, and written to the audit log
(:mod:`spu.tools.audit`) before the agent gets the answer.

Traps handled here:

- one run must never call or read another run's service: the endpoint is
  ``/<secret>/mcp`` with a fresh random secret per run, given only to that run's agent
  (``SPU_TOOLS_URL``); every other path answers 404, and the service reaches nothing on
  the host by itself (the web provider refuses local addresses);
- the service is stateless (no MCP session to keep) and answers JSON, so a client with
  nothing but the standard library can call a tool with one ``POST`` of
  ``{"jsonrpc": "2.0", "id": 1, "method": "tools/call", "params": {"name": "search",
  "arguments": {...}}}``;
- a provider that hangs must not hang the agent: each call runs in a worker thread
  under the provider's timeout plus a margin, and the agent gets an error that says so;
- a call with arguments the SDK rejects (a missing ``query``), or of an unknown tool,
  never reaches a tool function: a middleware audits it as an error all the same;
- under ``tools.policy=stop`` the first exposure flag stops the service: every later
  ``search`` and ``fetch`` is refused with a message telling the agent to submit what it
  has; ``policy_stop`` is always accepted (the agent must be able to record its stop).

Examples
--------
>>> import json, tempfile, urllib.request
>>> from pathlib import Path
>>> from spu.tools.offline import OfflineProvider
>>> cfg = ToolsConfig()
>>> folder = tempfile.mkdtemp()
>>> with ToolsService(OfflineProvider(cfg), AuditLog(Path(folder)), cfg) as service:
...     body = {"jsonrpc": "2.0", "id": 1, "method": "tools/call",
...             "params": {"name": "fetch", "arguments": {"url": "https://a.test/"}}}
...     request = urllib.request.Request(service.url(), data=json.dumps(body).encode(),
...         headers={"content-type": "application/json",
...                  "accept": "application/json, text/event-stream"})
...     answer = json.load(urllib.request.urlopen(request, timeout=30))
>>> json.loads(answer["result"]["content"][0]["text"])["status"]
404
"""

from __future__ import annotations

import contextlib
import contextvars
import json
import logging
import secrets
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

from spu.config import ToolsConfig, ToolsPolicy
from spu.schema import AuditEntry, PolicyStop
from spu.serving import bound_port, server_class, start_in_thread, stop_thread
from spu.tools.audit import AuditLog, now_iso
from spu.tools.providers import MAX_RESULTS_CAP, Provider, ProviderError

log = logging.getLogger(__name__)

POLICIES = tuple(p.value for p in ToolsPolicy)
TIMEOUT_MARGIN_S = 5.0
"""Seconds the service waits beyond the provider's own timeout before it answers an error."""
START_TIMEOUT_S = 30.0
STOP_TIMEOUT_S = 10.0
"""Seconds a stopping service waits for calls still in flight before it cancels them."""

INSTRUCTIONS = (
    "Audited search and fetch for this run. Every call is recorded. Use search(query, "
    "max_results) and fetch(url) for all web access. If a result exposes the source study "
    "of the task or a result of the target experiments, stop and call policy_stop(step, "
    "reason) with the step that exposed it."
)
REFUSAL = (
    "refused under the information policy (tools.policy=stop): an earlier result exposed an "
    "identifier of the source study, so the audited tools answer no further calls. Submit "
    "what you have now (a provisional rankings.json if you have one) and end the run."
)
STOP_RECORDED = (
    "Policy stop recorded (step {step!r}). Stop working on the predictions: write what you "
    "have to the output folder (a provisional rankings.json, and the step and reason in "
    "report.md), then end the run."
)

Screen = Callable[[str], list[tuple[str, str]]]
"""Finds source identifiers in a text: ``(kind, matched text)`` pairs."""

_AUDITED: contextvars.ContextVar[list[bool] | None] = contextvars.ContextVar(
    "spu_tools_audited", default=None)


MAX_REQUEST_BYTES = 4 * 1024 * 1024
"""The largest request body the MCP endpoint reads (the SDK's default); a longer one is a
413, audited unread."""


@dataclass
class PolicyState:
    """The information-policy state of a run's service."""

    policy: ToolsPolicy
    stops: list[PolicyStop] = field(default_factory=list)
    stopped: bool = False
    """True once ``policy=stop`` refused further calls."""

    @property
    def first(self) -> PolicyStop | None:
        """The first stop, if any."""
        return self.stops[0] if self.stops else None


class ToolsService:
    """The MCP server of one run; :meth:`start` it, give the agent :meth:`url`, :meth:`stop`."""

    def __init__(self, provider: Provider, audit: AuditLog, cfg: ToolsConfig,
                 screen: Screen | None = None) -> None:
        self.provider = provider
        self.audit = audit
        self.cfg = cfg
        self.screen = screen
        self.policy = PolicyState(ToolsPolicy(cfg.policy))
        self.secret = secrets.token_urlsafe(24)
        self._lock = threading.Lock()
        self._server: Any = None
        self._thread: threading.Thread | None = None
        self._port: int | None = None

    # ------------------------------------------------------------------ lifecycle

    @property
    def path(self) -> str:
        """The MCP endpoint's path, secret included."""
        return f"/{self.secret}/mcp"

    @property
    def port(self) -> int:
        """The TCP port on the host's loopback (known once started, kept after the stop)."""
        if self._port is None:
            raise RuntimeError("the tools service has not started")
        return self._port

    def url(self, host: str = "127.0.0.1") -> str:
        """The endpoint as reached from ``host`` (the sandbox's address of the host)."""
        return f"http://{host}:{self.port}{self.path}"

    def app(self) -> Any:
        """The ASGI application: the MCP endpoint at :attr:`path`, nothing else."""
        from mcp.server.mcpserver import MCPServer
        from mcp.server.transport_security import TransportSecuritySettings

        with _no_global_logging_setup():
            server: MCPServer[Any] = MCPServer("spu", instructions=INSTRUCTIONS,
                                               log_level="WARNING",
                                               middleware=[self._audit_rejected])
        server.add_tool(self._search_tool(), name="search",
                        description="Search the web (audited). Returns a JSON list of "
                                    "{url, title, snippet}.")
        server.add_tool(self._fetch_tool(), name="fetch",
                        description="Fetch a URL as text (audited). Returns JSON {url, "
                                    "status, content_type, text}.")
        server.add_tool(self._policy_stop_tool(), name="policy_stop",
                        description="Stop under the information policy: name the step that "
                                    "exposed a prohibited result and why; then submit what "
                                    "you have.")
        # The secret path is the access control; no browser is in the loop, and the
        # sandbox reaches the host under an address that is not known in advance.
        security = TransportSecuritySettings(enable_dns_rebinding_protection=False)
        return self._audit_too_large(server.streamable_http_app(
            streamable_http_path=self.path, stateless_http=True, json_response=True,
            transport_security=security, max_request_body_size=MAX_REQUEST_BYTES))

    def _audit_too_large(self, app: Any) -> Any:
        """``app``, with an audit line for each POST the SDK refuses unread as too large.

        The SDK answers a body over :data:`MAX_REQUEST_BYTES` with a 413 before it reads a
        message, so :meth:`_audit_rejected` never sees it: the line says so, tool
        ``unknown``, the size the request declared.
        """
        async def audited(scope: Any, receive: Any, send: Any) -> None:
            if scope.get("type") != "http" or scope.get("method") != "POST" \
                    or scope.get("path") != self.path:
                await app(scope, receive, send)
                return
            t0, started = time.monotonic(), now_iso()

            async def watched(message: Any) -> None:
                if message.get("type") == "http.response.start" and message.get("status") == 413:
                    headers = dict(scope.get("headers") or [])
                    declared = headers.get(b"content-length", b"").decode("latin-1")[:20]
                    self._audit_error(
                        {"arguments": {"bytes": declared or "not declared"}}, started, t0,
                        f"rejected unread: the request body is over the tools service's "
                        f"{MAX_REQUEST_BYTES} bytes (HTTP 413)")
                await send(message)

            await app(scope, receive, watched)

        return audited

    def start(self) -> ToolsService:
        """Serve on ``127.0.0.1`` and a free port, in a daemon thread; return once it listens."""
        import uvicorn

        config = uvicorn.Config(self.app(), host="127.0.0.1", port=0, log_level="warning",
                                access_log=False, lifespan="on")
        self._server = server_class()(config)
        self._server.shutdown_timeout_s = STOP_TIMEOUT_S
        self._thread = start_in_thread(self._server, "spu-tools-service", START_TIMEOUT_S)
        self._port = bound_port(self._server)
        log.info("tools service on 127.0.0.1:%d (policy %s)", self.port, self.cfg.policy)
        return self

    def stop(self) -> None:
        """Stop serving, close the provider.

        The server is woken at once (:mod:`spu.serving`): it returns as soon as its
        connections have closed, at most :data:`STOP_TIMEOUT_S` later for a call still in
        flight (the agent has ended by then).
        """
        if self._server is not None and self._thread is not None:
            stop_thread(self._server, self._thread, join_s=STOP_TIMEOUT_S + 2)
            self._thread = None
        self.provider.close()

    def __enter__(self) -> ToolsService:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    # ------------------------------------------------------------------ the tools

    def _search_tool(self) -> Callable[..., Any]:
        async def search(query: str, max_results: int = 10) -> Any:
            limit = max(1, min(int(max_results), self.cfg.max_results, MAX_RESULTS_CAP))
            args = {"query": query, "max_results": max_results}

            def run() -> tuple[str, dict[str, Any]]:
                results = self.provider.search(query, limit)[:limit]
                return json.dumps([r.to_json() for r in results], ensure_ascii=False,
                                  indent=1), {}

            return await self._call("search", args, run, self.cfg.search_timeout_s)

        return search

    def _fetch_tool(self) -> Callable[..., Any]:
        async def fetch(url: str) -> Any:
            def run() -> tuple[str, dict[str, Any]]:
                result = self.provider.fetch(url)
                text, cut = self._cut(result.text)
                full = json.dumps(result.to_json(), ensure_ascii=False, indent=1)
                shown = full if not cut else json.dumps(result.to_json(text + cut),
                                                        ensure_ascii=False, indent=1)
                return full, {"http_status": result.status, "shown": shown,
                              "truncated": bool(cut)}

            return await self._call("fetch", {"url": url}, run,
                                    self.cfg.fetch_timeout_s)

        return fetch

    def _policy_stop_tool(self) -> Callable[..., Any]:
        async def policy_stop(step: str | int, reason: str) -> Any:
            args = {"step": step, "reason": reason}

            def run() -> tuple[str, dict[str, Any]]:
                return STOP_RECORDED.format(step=str(step)), {}

            return await self._call("policy_stop", args, run, 5.0)

        return policy_stop

    def _cut(self, text: str) -> tuple[str, str]:
        limit = self.cfg.max_text_chars
        if len(text) <= limit:
            return text, ""
        return text[:limit], (f"\n[cut: the first {limit} of {len(text)} characters are shown; "
                              f"the audit log keeps the whole text]")

    async def _call(self, tool: str, args: dict[str, Any],
                    run: Callable[[], tuple[str, dict[str, Any]]], timeout_s: float) -> Any:
        """Answer one call through ``run`` (in a worker thread), audit it, screen it."""
        import anyio
        from mcp_types import CallToolResult, TextContent

        marker = _AUDITED.get()
        if marker is not None:
            marker.append(True)
        call = self.audit.next_call()
        started, t0 = now_iso(), time.monotonic()
        extra: dict[str, Any] = {}
        if self.policy.stopped and tool != "policy_stop":
            status, text, shown = "refused", REFUSAL, REFUSAL
        else:
            try:
                with anyio.fail_after(timeout_s + TIMEOUT_MARGIN_S):
                    text, extra = await anyio.to_thread.run_sync(run, abandon_on_cancel=True)
                status = "ok"
                shown = extra.pop("shown", None) or self._shown(tool, text)
            except TimeoutError:
                status = "error"
                text = shown = (f"{tool} failed: the provider did not answer within "
                                f"{timeout_s + TIMEOUT_MARGIN_S:g} s")
            except ProviderError as exc:
                status, text, shown = "error", f"{tool} failed: {exc}", f"{tool} failed: {exc}"
            except Exception as exc:  # a provider bug must not end the agent's run
                log.exception("tools service: %s failed", tool)
                status = "error"
                text = shown = f"{tool} failed: internal error ({type(exc).__name__})"
        if status == "error":
            extra["error"] = text
        kinds = self._screen(shown) if status == "ok" and tool != "policy_stop" else []
        entry = self.audit.write(call, tool, args, status, time.monotonic() - t0, text,
                                 started=started, exposure=kinds, **extra)
        self._after(entry, kinds)
        return CallToolResult(content=[TextContent(type="text", text=shown)],
                              is_error=status != "ok")

    def _shown(self, tool: str, text: str) -> str:
        body, cut = self._cut(text)
        return body + cut

    def _screen(self, text: str) -> list[str]:
        if self.screen is None:
            return []
        try:
            return sorted({kind for kind, _ in self.screen(text)})
        except Exception:  # the detector must never break a call
            log.exception("tools service: exposure screen failed")
            return []

    def _after(self, entry: AuditEntry, kinds: list[str]) -> None:
        """Record a policy stop: the agent's call, or the first flag under ``stop``."""
        with self._lock:
            if entry.tool == "policy_stop" and entry.status == "ok":
                self.policy.stops.append(PolicyStop(
                    by="agent", step=str(entry.args.get("step")),
                    reason=str(entry.args.get("reason")), call=entry.call, time=entry.time))
            elif kinds and self.policy.policy == "stop" and not self.policy.stopped:
                self.policy.stopped = True
                self.policy.stops.append(PolicyStop(
                    by="service", step=f"audited call {entry.call} ({entry.tool})",
                    reason=f"exposure: {', '.join(kinds)} of the source study in the answer",
                    call=entry.call, time=entry.time))

    async def _audit_rejected(self, ctx: Any, call_next: Any) -> Any:
        """Audit ``tools/call`` requests that never reached a tool.

        Bad arguments, no such tool: the SDK answers them itself. Everything else passes
        through untouched.
        """
        if getattr(ctx, "method", None) != "tools/call":
            return await call_next(ctx)
        marker: list[bool] = []
        token = _AUDITED.set(marker)
        t0, started = time.monotonic(), now_iso()
        params = ctx.params if isinstance(getattr(ctx, "params", None), dict) else {}
        try:
            result = await call_next(ctx)
        except Exception as exc:
            if not marker:
                self._audit_error(params, started, t0, f"rejected: {type(exc).__name__}: {exc}")
            raise
        finally:
            _AUDITED.reset(token)
        if not marker:
            self._audit_error(params, started, t0, _result_text(result))
        return result

    def _audit_error(self, params: dict[str, Any], started: str, t0: float, text: str) -> None:
        name = params.get("name")
        tool = name if isinstance(name, str) and name.isidentifier() else "unknown"
        args = params.get("arguments")
        self.audit.write(self.audit.next_call(), tool,
                         args if isinstance(args, dict) else {"arguments": args}, "error",
                         time.monotonic() - t0, text, started=started, error=text[:2000])


@contextlib.contextmanager
def _no_global_logging_setup() -> Iterator[None]:
    """Keep ``MCPServer()`` from configuring the root logger of the process.

    The SDK calls ``logging.basicConfig`` with its own handler, which only acts when the
    root logger has no handler: one placeholder handler for the duration keeps the
    runner's (or a test's) logging as it was.
    """
    root = logging.getLogger()
    placeholder = logging.NullHandler()
    root.addHandler(placeholder)
    try:
        yield
    finally:
        root.removeHandler(placeholder)


def _result_text(result: Any) -> str:
    data = result.model_dump() if hasattr(result, "model_dump") else result
    if isinstance(data, dict):
        parts = [str(c.get("text", "")) for c in data.get("content") or [] if isinstance(c, dict)]
        if parts:
            return "\n".join(parts)
    return json.dumps(data, default=str)[:2000]
