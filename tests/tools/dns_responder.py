"""A tiny DNS responder for the egress tests: fixed A answers, the first lookups failing.

It answers UDP queries on the address it is given (the loopback of a network namespace
a test made, whose ``/etc/resolv.conf`` names it): a name in ``answers`` gets its A
records (and an empty AAAA answer), except its first ``fail_first[name]`` queries, which
get ``rcode`` (2: SERVFAIL; 0: an empty answer); any other name gets NXDOMAIN. glibc asks
A and AAAA together, so ``fail_first=2`` fails exactly one ``getaddrinfo``.
"""

from __future__ import annotations

import socket
import struct
import threading


class DnsResponder:
    """Answers DNS queries on ``host:port`` from a thread until the process ends."""

    def __init__(self, answers: dict[str, list[str]], fail_first: dict[str, int],
                 rcode: int = 2, host: str = "127.0.0.1", port: int = 53) -> None:
        self.answers = answers
        self.fail_first = fail_first
        self.rcode = rcode
        self.failed: dict[str, int] = {}
        self.queries: list[tuple[str, int]] = []
        self.sock = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        self.sock.bind((host, port))
        threading.Thread(target=self._serve, daemon=True).start()

    def _serve(self) -> None:
        while True:
            data, peer = self.sock.recvfrom(4096)
            self.sock.sendto(self.answer(data), peer)

    def answer(self, data: bytes) -> bytes:
        """The response to one query packet."""
        ident, flags = struct.unpack("!HH", data[:4])
        i, labels = 12, []
        while data[i]:
            labels.append(data[i + 1:i + 1 + data[i]].decode())
            i += 1 + data[i]
        (qtype,) = struct.unpack("!H", data[i + 1:i + 3])
        question = data[12:i + 5]
        name = ".".join(labels).lower()
        self.queries.append((name, qtype))
        rcode, records = 0, []
        if name not in self.answers:
            rcode = 3
        elif self.failed.get(name, 0) < self.fail_first.get(name, 0):
            self.failed[name] = self.failed.get(name, 0) + 1
            rcode = self.rcode
        elif qtype == 1:
            records = self.answers[name]
        head = struct.pack("!HHHHHH", ident, 0x8180 | (flags & 0x0100) | rcode, 1,
                           len(records), 0, 0)
        body = b"".join(b"\xc0\x0c" + struct.pack("!HHIH", 1, 1, 0, 4) + socket.inet_aton(a)
                        for a in records)
        return head + question + body
