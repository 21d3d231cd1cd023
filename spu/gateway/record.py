"""The model gateway's record: one line per request, the tool results, the files kept.

Everything the gateway writes under ``<run_dir>/model/``, by :class:`GatewayRecord`:
``requests.jsonl`` (SPEC 11), ``tool_results.jsonl`` (the exposure screen's input),
``refusal_files/`` and, with ``log_bodies``, ``bodies/``. The record also sums what the
lines cost (:attr:`GatewayRecord.spent_usd`), which the spend cap reads.
"""

from __future__ import annotations

import hashlib
import json
import threading
import time
from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from spu.config import ModelGatewayConfig, PriceConfig
from spu.gateway.answers import error_body, tool_results
from spu.gateway.exchange import Exchange
from spu.gateway.verdict import MAX_REFUSAL_FILES, REFUSAL_FILES
from spu.schema import Usage


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
        cfg: ``model_gateway`` options (``log_bodies``, the tool results' bounds).
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
        self.tool_results_path = folder / "tool_results.jsonl"
        self.spent_usd = 0.0
        """The cost of every line written so far, at list prices."""
        self._lock = threading.Lock()
        self._count = 0
        self._seen_results: set[str] = set()
        self._results_bytes = 0
        self._kept_at_refusals: set[str] = set()

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
        # bytes, a label, an id) is written well formed: a lone surrogate, which JSON
        # allows and UTF-8 does not, would cost the request its line.
        for name, value in e:
            if isinstance(value, str):
                setattr(e, name, well_formed(value))
        with self._lock:
            self._count += 1
            n = self._count
            if self.prices is not None and e.usage != Usage():
                from spu.cost.prices import request_cost

                self.spent_usd += request_cost(self.prices, e.usage,
                                               cache_write_rate=self.cache_write_rate).total
            if self.cfg.log_bodies:
                e.body_file = self._write_bodies(n, exchange)
            with open(self.requests_path, "a", encoding="utf-8") as f:
                f.write(e.model_dump_json() + "\n")

    def _write_bodies(self, n: int, exchange: Exchange) -> str:
        name = f"bodies/{n:05d}.json"
        path = self.folder / name
        path.parent.mkdir(exist_ok=True)
        answer = bytes(exchange.answer).decode("utf-8", "replace")
        request = (exchange.body if exchange.body is not None
                   else exchange.raw_request.decode("utf-8", "replace"))
        path.write_text(json.dumps({"request": request, "answer": answer}, ensure_ascii=False),
                        encoding="utf-8", errors="replace")
        return name

    def keep_tool_results(self, endpoint: str, body: Any) -> None:
        """Append the tool results the model is sent for the first time, bounded."""
        cap = self.cfg.tool_result_chars
        limit = int(self.cfg.tool_results_mb * 1024 * 1024)
        lines = []
        with self._lock:
            for call_id, text in tool_results(endpoint, body):
                call_id, text = well_formed(call_id), well_formed(text)
                key = call_id + ":" + hashlib.sha256(text.encode()).hexdigest()[:16]
                if key in self._seen_results:
                    continue
                self._seen_results.add(key)
                line = json.dumps({"time": now_iso(), "call_id": call_id, "chars": len(text),
                                   "truncated": len(text) > cap, "text": text[:cap]},
                                  ensure_ascii=False) + "\n"
                if self._results_bytes + len(line) > limit:
                    break
                self._results_bytes += len(line)
                lines.append(line)
            if lines:
                with open(self.tool_results_path, "a", encoding="utf-8") as f:
                    f.writelines(lines)

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
        folder.mkdir(exist_ok=True)
        (folder / f"{n:06d}.json").write_bytes(submission)
        (folder / f"{n - MAX_REFUSAL_FILES:06d}.json").unlink(missing_ok=True)
