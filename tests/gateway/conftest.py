"""Fixtures of the gateway tests: the scripted model server behind a run's gateway."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import ExitStack
from pathlib import Path
from typing import Any

import pytest

from spu.config import ModelGatewayConfig, PriceConfig
from spu.gateway.server import ModelGateway
from spu.scripted import Script, ScriptedModelServer

SCRIPTED_PRICES = PriceConfig(input=1.0, cache_read=0.1, cache_write_5m=1.25,
                              cache_write_1h=2.0, output=5.0)
"""Nominal prices the gateway is tested at (conf/model/scripted.yaml's own are $0)."""


def anthropic_body(turn: int, *, model: str = "spu_agent", stream: bool = True) -> dict[str, Any]:
    """A Claude Code-like request for script turn ``turn`` (``turn`` tool results so far)."""
    messages: list[dict[str, Any]] = [{"role": "user", "content": "Rank the experiments."}]
    for k in range(turn):
        messages += [
            {"role": "assistant", "content": [{"type": "tool_use", "id": f"toolu_{k}",
                                               "name": "Bash", "input": {"command": "ls"}}]},
            {"role": "user", "content": [{"type": "tool_result", "tool_use_id": f"toolu_{k}",
                                          "content": f"output of call {k}"}]},
        ]
    return {"model": model, "stream": stream, "max_tokens": 1000, "messages": messages,
            "tools": [{"name": "Bash", "input_schema": {"type": "object"}}]}


def responses_body(turn: int, *, model: str = "spu_agent") -> dict[str, Any]:
    """A Codex-like request for script turn ``turn``."""
    items: list[dict[str, Any]] = [{"type": "message", "role": "user",
                                    "content": [{"type": "input_text", "text": "Rank."}]}]
    for k in range(turn):
        items += [{"type": "function_call", "call_id": f"call_{k}", "name": "exec_command",
                   "arguments": "{}"},
                  {"type": "function_call_output", "call_id": f"call_{k}",
                   "output": f"output of call {k}"}]
    return {"model": model, "stream": True, "input": items,
            "tools": [{"type": "function", "name": "exec_command", "parameters": {}}]}


@pytest.fixture
def behind_gateway(tmp_path: Path) -> Iterator[Callable[..., tuple[ScriptedModelServer,
                                                                    ModelGateway]]]:
    """Start a scripted server playing ``script`` and a gateway in front of it."""
    with ExitStack() as stack:
        def start(script: Script | None = None, *, api: str = "anthropic",
                  api_model: str | None = "spu_agent", max_cost_usd: float | None = None,
                  cfg: ModelGatewayConfig | None = None, name: str = "run"
                  ) -> tuple[ScriptedModelServer, ModelGateway]:
            server = stack.enter_context(ScriptedModelServer(
                script, log_path=tmp_path / name / "scripted_server.jsonl"))
            upstream = server.url if api == "anthropic" else server.url + "/v1"
            gateway = stack.enter_context(ModelGateway(
                tmp_path / name / "model", upstream=upstream, api=api, api_model=api_model,
                prices=SCRIPTED_PRICES, max_cost_usd=max_cost_usd, cfg=cfg))
            return server, gateway
        yield start
