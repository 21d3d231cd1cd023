"""Round twelve (lead, from the helper's reading): what a Responses request can make the
provider do on its own side, outside the run's sandbox and its record.

OpenAI's hosted ``file_search`` and ``image_generation`` tools, a stored ``prompt`` (made
in the provider's dashboard, it may carry a web search), and ``background`` responses
(answered at once, generated later, fetched with a GET the gateway does not forward: their
usage would never reach ``requests.jsonl`` or the spend cap). The real gateway in front of
a stand-in provider on loopback.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from spu.gateway.verdict import gateway_verdict, read_requests
from tests.gateway_doubles import gateway_before, stand_in
from tests.redteam_round12._parsers import Keeps, dumps, folder, post, refused_unforwarded

ASK = {"model": "m", "input": "Rank.", "max_output_tokens": 16}


@pytest.mark.parametrize(("extra", "error_type", "status"), [
    ({"tools": [{"type": "file_search", "vector_store_ids": ["vs_1"]}]},
     "gateway.server_tool_refused", 403),
    ({"tools": [{"type": "image_generation"}]}, "gateway.server_tool_refused", 403),
    ({"prompt": {"id": "pmpt_1", "version": "2"}}, "gateway.server_tool_refused", 403),
    ({"background": True}, "gateway.not_allowed", 400),
    ({"background": "true"}, "gateway.not_allowed", 400),
    ({"Background": True}, "gateway.bad_request", 400),
], ids=["file_search", "image_generation", "stored_prompt", "background", "background_text",
        "Background"])
def test_what_the_provider_would_do_on_its_side_is_refused(
        tmp_path: Path, extra: dict[str, object], error_type: str, status: int) -> None:
    """Agent: a Responses request with a hosted tool, a stored prompt or ``background``.

    Fixed (round twelve, lead): such a request went on (file_search and image_generation
    were not among the server tools; a prompt and background were not read). Now each is a
    recorded refusal, never forwarded, the agent's doing."""
    Keeps.seen = []
    with stand_in(Keeps) as upstream, gateway_before(folder(tmp_path), upstream) as gw:
        answer = post(gw, dumps({**ASK, **extra}), path="/v1/responses")
    entries = read_requests(gw.requests_path)
    refused_unforwarded(answer, entries, error_type=error_type, status=status)
    assert gateway_verdict(entries).infra_error is None


def test_an_honest_responses_request_still_goes_on(tmp_path: Path) -> None:
    """Honest: Codex's request (function and custom tools, ``background`` false, a prompt
    cache key) is forwarded as sent."""
    Keeps.seen = []
    body = {**ASK, "background": False, "prompt_cache_key": "k", "store": False,
            "tools": [{"type": "function", "name": "shell", "parameters": {}},
                      {"type": "custom", "name": "apply_patch"}]}
    with stand_in(Keeps) as upstream, gateway_before(folder(tmp_path), upstream) as gw:
        answer = post(gw, dumps(body), path="/v1/responses")
    assert answer.status_code == 200, answer.text
    assert [sent for _, sent in Keeps.seen] == [dumps(body)]
