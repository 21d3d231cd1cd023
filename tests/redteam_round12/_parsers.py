"""Stand-in providers that read a body as other parsers do, and the agent's raw POST."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, ClassVar

import httpx

from spu.schema import GatewayRequest
from tests.gateway_doubles import ANSWER, JsonProvider

HI = {"model": "m", "max_tokens": 16, "messages": [{"role": "user", "content": "Hi."}]}


class Keeps(JsonProvider):
    """Answers at once; keeps each request's headers and body (what it was sent)."""

    seen: ClassVar[list[tuple[dict[str, str], bytes]]] = []

    def reply(self, body: bytes) -> None:  # noqa: D102
        self.seen.append(({k.lower(): v for k, v in self.headers.items()}, body))
        self.send_json(ANSWER)


def post(gateway: Any, body: bytes, path: str = "/v1/messages",
         headers: list[tuple[str, str]] | None = None) -> httpx.Response:
    """POST ``body`` as sent to the gateway (``headers`` in place of a JSON content-type)."""
    sent = [("x-api-key", gateway.token),
            *(headers if headers is not None else [("content-type", "application/json")])]
    with httpx.Client(trust_env=False, timeout=30) as client:
        return client.post(f"http://127.0.0.1:{gateway.port}{path}", content=body,
                           headers=sent)


def refused_unforwarded(answer: httpx.Response, entries: list[GatewayRequest],
                        error_type: str = "gateway.bad_request",
                        status: int = 400) -> GatewayRequest:
    """The one line of a request the gateway answered itself; nothing reached the provider."""
    (entry,) = entries
    assert (answer.status_code, entry.status, entry.error_type) == (
        status, status, error_type), (entry, answer.text)
    assert Keeps.seen == [], Keeps.seen
    return entry


def dumps(body: dict[str, Any]) -> bytes:
    """A body as an honest client sends it (JSON.stringify, serde: one key each, UTF-8)."""
    return json.dumps(body).encode()


def folder(tmp_path: Path) -> Path:
    """The run's ``model`` folder."""
    return tmp_path / "model"
