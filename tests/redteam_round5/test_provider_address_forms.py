"""Round five: every spelling of a model provider's address is refused by the egress proxy.

The real proxy (``EgressProxy``, its ``proxy.py`` plugin) with ``localhost`` standing for a
provider's API host: its addresses (127.0.0.1, ::1) are in the deny-address list, and each
spelling below is asked as a CONNECT tunnel and as an absolute-URI request. A spelling that
reaches the address must be refused as the provider's API, not as a mere local address (the
local rule has an allow list; the provider rule has none), and never passed on.
"""

from __future__ import annotations

import json
import socket
from pathlib import Path

import pytest

from spu.tools.addresses import normal_address
from spu.tools.egress import EgressProxy, read_egress

IPV6_LOOPBACK = ["[::1]", "[0:0:0:0:0:0:0:1]", "[0::1]"]
"""Spellings of ``::1``: the provider's only where ``localhost`` resolves to it here."""

SPELLINGS = [
    "localhost", "LOCALHOST", "localhost.", "LocalHost.",
    "127.0.0.1", "127.1", "2130706433", "0x7f000001", "017700000001", "0x7f.0.0.1",
    "0177.0.0.1", "[::ffff:127.0.0.1]", "[::ffff:7f00:1]",
    "[0:0:0:0:0:ffff:7f00:1]", "LOCALHOST.", "[::FFFF:7F00:1]",
    # NAT64's well-known prefix (RFC 6052): on an IPv6-only host with NAT64 it reaches the
    # IPv4 address it embeds.
    "[64:ff9b::7f00:1]", "[64:ff9b::127.0.0.1]",
]

UNRESOLVED = ["127.0.0.1.", "%31%32%37.0.0.1", "127.0.0.1%00"]
"""Spellings the resolver does not take: refused (502, "unresolved"), never passed on."""


def _ask(proxy_port: int, line: bytes) -> bytes:
    with socket.create_connection(("127.0.0.1", proxy_port), timeout=20) as raw:
        raw.sendall(line)
        return raw.recv(1024)


@pytest.mark.slow
def test_every_spelling_of_a_providers_address_is_refused_as_the_provider(
        tmp_path: Path) -> None:
    from spu.tools.egress_plugin import MODEL_API_REFUSED

    with EgressProxy(tmp_path) as proxy:
        proxy.refuse_hosts(["localhost"])
        proxy.wait_resolved()
        denied = set(json.loads((tmp_path / "egress.deny_addresses.json").read_text()))
        assert "127.0.0.1" in denied, denied
        answers = {}
        for host in SPELLINGS + (IPV6_LOOPBACK if "::1" in denied else []):
            answers[("CONNECT", host)] = _ask(proxy.port, (
                f"CONNECT {host}:9 HTTP/1.1\r\nHost: {host}:9\r\n\r\n").encode())
            answers[("GET", host)] = _ask(proxy.port, (
                f"GET http://{host}:9/v1/messages HTTP/1.1\r\nHost: {host}:9\r\n\r\n").encode())
        for host in UNRESOLVED:
            answers[("CONNECT", host)] = _ask(proxy.port, (
                f"CONNECT {host}:9 HTTP/1.1\r\nHost: {host}:9\r\n\r\n").encode())
    for host in UNRESOLVED:
        reply = answers.pop(("CONNECT", host))
        assert b" 403 " in reply or b" 502 " in reply, (host, reply[:40])
    not_refused = {k: v[:40] for k, v in answers.items() if b" 403 " not in v}
    assert not not_refused, not_refused
    lines = list(read_egress(tmp_path / "egress.jsonl"))
    reasons = {(e["method"], e["host"]): e.get("refused") for e in lines}
    assert all(reasons.pop(("CONNECT", h), "refused") for h in UNRESOLVED), reasons
    wrong = {k: v for k, v in reasons.items() if v != MODEL_API_REFUSED}
    assert not wrong, wrong


def test_nat64_addresses_are_the_ipv4_addresses_they_embed() -> None:
    from spu.tools.egress_plugin import _local

    assert normal_address("64:ff9b::7f00:1") == "127.0.0.1"
    assert normal_address("64:FF9B::93.184.216.34") == "93.184.216.34"
    assert _local("64:ff9b::10.0.0.5")  # the host's private network through NAT64
    assert normal_address("2001:db8::1") == "2001:db8::1"
