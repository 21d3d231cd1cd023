"""The model gateway's record: one line per request, what the model was sent, the files kept.

Everything the gateway writes under ``<run_dir>/model/``, by :class:`GatewayRecord`:
``requests.jsonl`` (SPEC 11), ``refusal_files/`` and, with ``log_bodies``, ``bodies/``;
and, by its :class:`~spu.gateway.inputs.InputRecord`, ``tool_results.jsonl``,
``tool_calls.jsonl`` and ``documents/`` (the exposure screen's input). The record also sums what the
lines cost (:attr:`GatewayRecord.spent_usd`), which the spend cap reads.

Everything the agent chooses is bounded before it is written (a model name, an error
echoing its bytes: :data:`FIELD_CHARS`; a tool call's id, by the input record), and so is
the record itself (``model_gateway.record_mb``): once it is full every request is refused,
the first refusals written (:data:`RECORD_HEADROOM_BYTES`), the rest counted
(:meth:`GatewayRecord.notes`); a line that carries usage is always written.
"""

from __future__ import annotations

import hashlib
import json
import logging
import threading
import time
from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from spu.config import ModelGatewayConfig, PriceConfig
from spu.gateway.answers import error_body
from spu.gateway.exchange import Exchange
from spu.gateway.inputs import InputRecord
from spu.gateway.verdict import MAX_REFUSAL_FILES, REFUSAL_FILES
from spu.schema import Usage

log = logging.getLogger(__name__)

FIELD_CHARS = 256
"""Characters kept of each text field of a record line (a model name, an id, a label)."""
ERROR_CHARS = 1024
"""Characters kept of a line's ``error`` (the gateway's own messages are shorter)."""
RECORD_HEADROOM_BYTES = 1024 * 1024
"""Bytes past ``model_gateway.record_mb`` the record still takes lines that carry no usage
(the refusals that say it is full); later ones are counted, not written."""
MAX_BODIES_BYTES = 1024**3
"""Bytes of ``bodies/`` (``log_bodies``) at most; later bodies are not kept."""


def cut(text: str, most: int = FIELD_CHARS) -> str:
    """``text``, at most ``most`` characters (a cut one ends in ``...``).

    Examples
    --------
    >>> cut("m" * 300)[-5:], len(cut("m" * 300)), cut("short")
    ('mm...', 256, 'short')
    """
    return text if len(text) <= most else text[: most - 3] + "..."


def well_formed(text: str) -> str:
    r"""``text`` with each lone UTF-16 surrogate (which JSON allows) replaced by U+FFFD.

    Examples
    --------
    >>> well_formed("cut mid-emoji: \ud83d") == "cut mid-emoji: \ufffd"
    True
    """
    return text.encode("utf-16", "surrogatepass").decode("utf-16", "replace")


def now_iso() -> str:
    """The current time, ISO-8601 in UTC with milliseconds."""
    return datetime.now(UTC).isoformat(timespec="milliseconds")


class GatewayRecord:
    """What one run's gateway writes, and the cost of what it has written.

    Args:
        folder: ``<run_dir>/model``.
        cfg: ``model_gateway`` options (``log_bodies``, ``record_mb``, the tool results'
            bounds).
        prices: the model's list prices (None: nothing is counted).
        cache_write_rate: the cost rule :attr:`spent_usd` is counted by.
        submission_counts: whether a file kept at a refusal counts (None: every one).
    """

    def __init__(self, folder: Path, cfg: ModelGatewayConfig, prices: PriceConfig | None,
                 cache_write_rate: str = "five_minute",
                 submission_counts: Callable[[bytes], bool] | None = None) -> None:
        self.folder = folder
        self.cfg = cfg
        self.prices = prices
        self.cache_write_rate = cache_write_rate
        self.submission_counts = submission_counts
        self.requests_path = folder / "requests.jsonl"
        self.inputs = InputRecord(folder, cfg.tool_result_chars,
                                  int(cfg.tool_results_mb * 1024 * 1024))
        """What the model is sent, and its tool calls, for the screen and the counts
        (written once the answer arrived: :meth:`Relay.finish`)."""
        self.tool_results_path = self.inputs.path
        self.spent_usd = 0.0
        """The cost of every line written so far, at list prices."""
        self._lock = threading.Lock()
        self._count = 0
        self._kept_at_refusals: set[str] = set()
        self.max_bytes = int(cfg.record_mb * 1024 * 1024)
        self._bytes = self.requests_path.stat().st_size if self.requests_path.exists() else 0
        self._bodies_bytes = 0
        self.unwritten = 0
        """Lines past the cap and its headroom, counted instead of written."""
        self.write_error: str | None = None
        """Why a write failed (the disk full, the file-size limit): nothing more is taken."""

    @property
    def full(self) -> bool:
        """True once the record holds ``record_mb`` (or cannot be written): refuse all."""
        return self._bytes >= self.max_bytes or self.write_error is not None

    def notes(self) -> list[str]:
        """What the run record should say of the record itself (its cap, a failed write)."""
        said = []
        if self._bytes >= self.max_bytes:
            said.append(f"the model gateway's record reached its cap of "
                        f"model_gateway.record_mb={self.cfg.record_mb:g}; every request after "
                        f"it was refused (gateway.record_full), {self.unwritten} of them "
                        f"counted and not written")
        if self.write_error is not None:
            said.append(f"the model gateway could not write its record ({self.write_error}); "
                        f"every request after it was refused")
        return said

    def refuse(self, exchange: Exchange, api: str, status: int, kind: str, error_type: str,
               message: str) -> Any:
        """The gateway's own answer to a request it does not forward, its line written."""
        from starlette.responses import JSONResponse

        body = error_body(api, status, kind, message)
        data = json.dumps(body).encode()
        entry = exchange.entry
        entry.status, entry.error_type, entry.error = status, error_type, message
        entry.bytes_out = len(data)
        exchange.answer += data
        self.write(exchange)
        return JSONResponse(body, status_code=status)

    def write(self, exchange: Exchange) -> None:
        """Write the request's line (its latency taken now) and count its cost."""
        e = exchange.entry
        e.latency_s = round(time.monotonic() - exchange.started, 6)
        # Every text the provider or the agent sent (an error message echoing the agent's
        # bytes, a label, an id) is written bounded and well formed: a lone surrogate,
        # which JSON allows and UTF-8 does not, would cost the request its line.
        for name, value in e:
            if isinstance(value, str):
                setattr(e, name, well_formed(cut(value, ERROR_CHARS if name == "error"
                                                 else FIELD_CHARS)))
        with self._lock:
            self._count += 1
            n = self._count
            if self.prices is not None and e.usage != Usage():
                from spu.cost.prices import request_cost

                self.spent_usd += request_cost(self.prices, e.usage,
                                               cache_write_rate=self.cache_write_rate).total
            if self.cfg.log_bodies and self._bodies_bytes < MAX_BODIES_BYTES:
                e.body_file = self._write_bodies(n, exchange)
            line = e.model_dump_json() + "\n"
            if e.usage == Usage() and \
                    self._bytes + len(line) > self.max_bytes + RECORD_HEADROOM_BYTES:
                self.unwritten += 1  # costs nothing, and the record is full: counted
                return
            self._append(self.requests_path, [line])
            self._bytes += len(line)

    def _append(self, path: Path, lines: list[str]) -> None:
        """Append ``lines`` to ``path``; a failed write is noted, never raised."""
        if self.write_error is not None:
            return
        try:
            with open(path, "a", encoding="utf-8") as f:
                f.writelines(lines)
        except OSError as exc:
            self.write_error = f"{path.name}: {exc}"
            log.error("model gateway: %s", self.write_error)

    def _write_bodies(self, n: int, exchange: Exchange) -> str | None:
        name = f"bodies/{n:05d}.json"
        path = self.folder / name
        answer = bytes(exchange.answer).decode("utf-8", "replace")
        request = (exchange.body if exchange.body is not None
                   else exchange.raw_request.decode("utf-8", "replace"))
        data = json.dumps({"request": request, "answer": answer}, ensure_ascii=False)
        try:
            path.parent.mkdir(exist_ok=True)
            path.write_text(data, encoding="utf-8", errors="replace")
        except OSError as exc:
            log.error("model gateway: body %s not kept: %s", name, exc)
            return None
        self._bodies_bytes += len(data)
        return name

    def keep_at_refusal(self, submission: bytes) -> None:
        """Keep the file a refused request arrived with (distinct ones, the latest few)."""
        if self.submission_counts is not None and not self.submission_counts(submission):
            return  # nothing to grade in it: it must not push a kept file out
        digest = hashlib.sha256(submission).hexdigest()
        with self._lock:
            if digest in self._kept_at_refusals:
                return
            self._kept_at_refusals.add(digest)
            n = len(self._kept_at_refusals)
        folder = self.folder / REFUSAL_FILES
        try:
            folder.mkdir(exist_ok=True)
            (folder / f"{n:06d}.json").write_bytes(submission)
            (folder / f"{n - MAX_REFUSAL_FILES:06d}.json").unlink(missing_ok=True)
        except OSError as exc:
            log.error("model gateway: the file at a refusal not kept: %s", exc)
