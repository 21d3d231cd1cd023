"""Round eleven: request bodies against the round-ten reader (``answers.loads``).

Where Python's json gives up on a body with other than a syntax error (nesting past its
recursion limit, an integer past 4,300 digits), round ten re-reads it through a regex
tokenizer (``answers._pruned``) that keeps the top of the document. The agent chooses its
whole body; the real gateway in front of stand-in providers on loopback.
"""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
from pathlib import Path

import httpx

from spu.gateway.answers import loads
from spu.gateway.verdict import read_requests
from tests.gateway.conftest import SCRIPTED_PRICES
from tests.gateway_doubles import JsonProvider, gateway_before, send_raw, stand_in

HI = {"model": "m", "max_tokens": 16, "messages": [{"role": "user", "content": "Hi."}]}
ROOT = Path(__file__).resolve().parents[2]

_HOLDS_THE_LOOP = textwrap.dedent("""
    import json, socket, sys, time
    from pathlib import Path
    import httpx
    from tests.gateway_doubles import JsonProvider, gateway_before, send_raw, stand_in
    HI = {"model": "m", "max_tokens": 16, "messages": [{"role": "user", "content": "Hi."}]}
    # A body Python's json stops on (an integer past 4,300 digits) whose tail is a string
    # opened and never closed, full of escaped quotes: each quote the regex meets starts
    # a string scanned to the end, so the re-read is quadratic (1 MiB: hours of CPU).
    pairs = int(sys.argv[2])
    evil = b'{"model": "m", "n": ' + b"9" * 5000 + b', "s": "' + b'\\\\"' * pairs
    with stand_in(JsonProvider) as upstream, \\
            gateway_before(Path(sys.argv[1]), upstream) as gw:
        agent = socket.create_connection(("127.0.0.1", gw.port), timeout=10)
        agent.sendall(b"POST /v1/messages HTTP/1.1\\r\\nhost: x\\r\\n"
                      b"content-type: application/json\\r\\n"
                      + f"x-api-key: {gw.token}\\r\\n".encode()
                      + f"content-length: {len(evil)}\\r\\n\\r\\n".encode() + evil)
        time.sleep(0.5)
        print("SENT", flush=True)
        try:
            answer = httpx.post(gw.url() + "/v1/messages", json=HI, timeout=8,
                                headers={"x-api-key": gw.token})
            print("STATUS", answer.status_code, flush=True)
        except httpx.HTTPError as exc:
            print("STALLED", type(exc).__name__, flush=True)
        import os
        os._exit(0)  # the gateway's thread is still reading the body: no clean stop
""")


def _plain_request_beside_an_unclosed_string(tmp_path: Path) -> None:
    """Agent: one body of 512 KiB (the cap is 32 MiB) that ``loads`` re-reads forever.

    ``_pruned``'s ``"(?:[^"\\\\]|\\\\.)*"`` meets a string never closed: the match fails
    at the document's end, ``finditer`` steps on one byte, and the escaped quote there
    starts a new string scanned to the end again. The re-read runs on the gateway's event
    loop, in C holding the GIL: every other request of the run waits behind it, and so
    does every other thread of the host process (the child's own 8 s client timeout never
    fires; the harness's clocks, in-process, would not either).
    """
    script = tmp_path / "hold.py"
    script.write_text(_HOLDS_THE_LOOP)
    try:
        done = subprocess.run([sys.executable, str(script), str(tmp_path / "model"),
                               str(256 * 1024)], cwd=ROOT, capture_output=True, text=True,
                              timeout=16, env={"PYTHONPATH": str(ROOT), "PATH": ""})
        out = done.stdout + done.stderr
    except subprocess.TimeoutExpired as exc:  # the child is killed: its CPU given back
        out = f"TIMEOUT {exc.stdout!r}"
    assert "STATUS 200" in out, out[-2000:]


def test_the_gateway_answers_while_it_reads_an_unclosed_string(tmp_path: Path) -> None:
    """The finding above, through the real gateway: a plain request beside it stalls.

    Fixed (round ten): was (high): _pruned's string regex is quadratic on a string never
    closed (each escaped quote restarts a scan to the end); loads runs it on the event
    loop for any body json stops on with a RecursionError or the int-digit ValueError,
    so a 512 KiB body (cap 32 MiB) holds the whole gateway for hours, in C with the GIL
    held: the run's other requests and every thread of the host process (its clocks, its
    stop) wait, one CPU burns. Fix: only re-read a body that is JSON (tokenize linearly:
    one pass with a state machine, or match strings only from a position the previous
    token ended at, failing the whole read on an unclosed string), and run the parse off
    the loop (asyncio.to_thread) with a size bound.
    """
    _plain_request_beside_an_unclosed_string(tmp_path)


def test_loads_the_pruned_view_keeps_the_top_level() -> None:
    """Agent: hide another model, a stream flag or a server tool below the pruning depth.

    Holds: for a document that is JSON, the tokenizer skips every string whole (escaped
    quotes and backslashes, brackets inside strings), so what lies at the top (model,
    stream, max_tokens, tools) is what the provider reads; only the deep part is null.
    """
    deep = b"[" * 3000 + b"]" * 3000
    tricky = json.dumps('a\\"[{]}\\\\" ] } "model": "evil"').encode()
    body = (b'{"model": "m", "x": ' + deep + b', "s": ' + tricky
            + b', "stream": true, "max_tokens": 16, "n": ' + b"9" * 5000
            + b', "tools": [{"type": "web_search_20250305", "name": "web_search"}]}')
    seen = loads(body)
    assert seen["model"] == "m" and seen["stream"] is True and seen["max_tokens"] == 16
    assert seen["tools"] == [{"type": "web_search_20250305", "name": "web_search"}]
    assert seen["s"] == json.loads(tricky) and seen["n"] == float("inf")
    # A second "model" key is the last one in both views (Python's and the pruned).
    twice = b'{"model": "m", "x": ' + deep + b', "model": "other"}'
    assert loads(twice)["model"] == "other" == json.loads(b'{"model": "m", "model": "other"}')[
        "model"]


def test_a_hidden_server_tool_in_a_deep_body_is_still_refused(tmp_path: Path) -> None:
    """Agent: a server tool beside tool schemas nested past Python's recursion limit.

    Holds: the body is read (pruned) and the server tool at the top is refused, with a
    line; the provider is never sent it.
    """
    body = json.dumps({**HI, "tools": [{"type": "web_search_20250305", "name": "w"},
                                       {"name": "t", "input_schema": "DEEP"}]}).encode()
    body = body.replace(b'"DEEP"', b"[" * 5000 + b"]" * 5000)
    with stand_in(JsonProvider) as upstream, gateway_before(tmp_path / "model", upstream) as gw:
        answer = httpx.post(gw.url() + "/v1/messages", content=body, timeout=20,
                            headers={"x-api-key": gw.token,
                                     "content-type": "application/json"})
    assert answer.status_code == 403, answer.text
    (entry,) = read_requests(gw.requests_path)
    assert entry.error_type == "gateway.server_tool_refused", entry



def test_a_huge_max_tokens_under_a_spend_cap_leaves_its_line(tmp_path: Path) -> None:
    """Agent: ``max_tokens`` of 10**400 in a run with a spend cap.

    Fixed (round ten): was (medium): a max_tokens of 400 digits (JSON Python reads
    whole, under the 4,300-digit limit) is an int, so _cost_bound prices it:
    request_cost multiplies it into a float and raises OverflowError in _reserve,
    outside any handler: a bare 500, no record line for a request the agent sent (and
    its spend-cap wait skipped). Fix: in _cost_bound (and asked_output_tokens) treat an
    int past 2**63 as no bound (the whole cap), as asked_output_tokens does for floats;
    catch OverflowError there.
    """
    body = json.dumps({**HI, "max_tokens": 10**400}).encode()
    with stand_in(JsonProvider) as upstream, \
            gateway_before(tmp_path / "model", upstream, prices=SCRIPTED_PRICES,
                           max_cost_usd=5.0) as gw:
        status = send_raw(gw.port, f"x-api-key: {gw.token}\r\n".encode(), body)
    assert read_requests(gw.requests_path), status
