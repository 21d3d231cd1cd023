#!/usr/bin/env python3
"""Network adversary: reaches for every listening port of the machine, and for named targets.

``--target LABEL=HOST:PORT`` (repeated): an HTTP GET to each, the answer's first bytes
recorded. ``--scan-hosts`` and ``--scan-ports`` (comma-separated): a TCP connect to every
pair, plus every port the sandbox's own ``/proc/net/tcp*`` lists, on every address
the sandbox has; an HTTP GET to each one that answers. Everything goes to
``$SPU_OUTPUT_DIR/net.json``. It submits nothing.
"""

import argparse
import fcntl
import json
import os
import socket
import struct
from concurrent.futures import ThreadPoolExecutor

TIMEOUT_S = 2.0


def http_get(host, port):
    """The first bytes of an HTTP answer, or None when nothing answers."""
    try:
        with socket.create_connection((host, port), timeout=TIMEOUT_S) as conn:
            conn.settimeout(TIMEOUT_S)
            conn.sendall(f"GET / HTTP/1.0\r\nHost: {host}\r\n\r\n".encode())
            data = b""
            while len(data) < 4096:
                chunk = conn.recv(4096)
                if not chunk:
                    break
                data += chunk
            return data.decode("utf-8", "replace")
    except OSError:
        return None


def connects(host, port):
    try:
        with socket.create_connection((host, port), timeout=TIMEOUT_S):
            return True
    except OSError:
        return False


def own_listeners():
    ports = set()
    for name in ("/proc/net/tcp", "/proc/net/tcp6"):
        try:
            lines = open(name).read().splitlines()[1:]
        except OSError:
            continue
        for line in lines:
            fields = line.split()
            if fields[3] == "0A":  # LISTEN
                ports.add(int(fields[1].rsplit(":", 1)[1], 16))
    return sorted(ports)


def own_addresses():
    """The IPv4 address of every interface of the sandbox (SIOCGIFADDR, no tools needed)."""
    found = set()
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as sock:
        for _index, name in socket.if_nameindex():
            try:
                packed = fcntl.ioctl(sock.fileno(), 0x8915,  # SIOCGIFADDR
                                     struct.pack("256s", name.encode()[:15]))
                found.add(socket.inet_ntoa(packed[20:24]))
            except OSError:
                continue
    return sorted(found)


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--target", action="append", default=[])
    parser.add_argument("--scan-hosts", default="")
    parser.add_argument("--scan-ports", default="")
    args = parser.parse_args()
    report = {"targets": {}, "open": [], "own_listeners": own_listeners(),
              "own_addresses": own_addresses()}
    for spec in args.target:
        label, address = spec.split("=", 1)
        host, port = address.rsplit(":", 1)
        report["targets"][label] = http_get(host, int(port))
    hosts = sorted({*filter(None, args.scan_hosts.split(",")), *report["own_addresses"]})
    ports = sorted({*(int(p) for p in filter(None, args.scan_ports.split(","))),
                    *report["own_listeners"]})
    pairs = [(h, p) for h in hosts for p in ports]
    with ThreadPoolExecutor(32) as pool:
        results = list(pool.map(lambda pair: connects(*pair), pairs))
    report["scanned"] = len(pairs)
    for (host, port), ok in zip(pairs, results, strict=True):
        if ok:
            report["open"].append([host, port, (http_get(host, port) or "")[:200]])
    with open(os.path.join(os.environ["SPU_OUTPUT_DIR"], "net.json"), "w") as f:
        json.dump(report, f, indent=1)


if __name__ == "__main__":
    main()
