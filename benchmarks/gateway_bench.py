"""Model gateway benchmark: what the per-run gateway adds to a model request, and to a run.

Run: ``.venv/bin/python benchmarks/gateway_bench.py [--requests 200] [--mb 16] [--repeats 5]
[--starts 50]``

The gateway runs as a run's does: a process of its own forked by the driver's gateway
host (:class:`spu.gateway.process.GatewayProcess`), under its own descriptor and file
limits. Prints, from one process, against the same scripted model server (``spu.scripted``):

- what a run pays to start and stop its gateway (median of ``--starts``): in its own
  process, against the same gateway in a thread of the driver (as before issue 41);

- time to first byte of a short streamed answer, straight to the server and through
  the gateway (median of ``--requests`` requests each, on kept-alive connections,
  alternating), and the milliseconds the gateway adds (goal: under 2 ms);
- throughput of a long streamed answer (``--mb`` MB of text in 64-character deltas,
  Anthropic Messages SSE), timed from its first byte to its last, straight and through
  the gateway (median of ``--repeats``), and the share the gateway loses, twice:

  - **at a provider's pace** (the goal: under 2%): the server sends each event as it
    encodes it, in chunks (``ScriptedTurn.as_generated``), no faster than ``--pace`` MB/s
    (default 8: a fast model streams some hundred tokens a second, tens of kilobytes of
    events, so this is hundreds of times any provider's stream); the gateway relays each
    chunk while the rest is being produced, and any lag it adds shows as lost throughput;
  - **as fast as the server encodes** (not a goal): the same, unpaced, so that the
    server's generation, the gateway and the client compete for the machine's cores;
  - **the relay's ceiling**: the server renders the whole answer first and sends it at
    memory speed, which no provider does. This is the most the gateway can pass on (a
    Python hop: every byte read once more and written once more through the kernel), not
    a goal; on a small machine the third process also competes for the cores.

Both paths stream through ``httpx``; the gateway reads every event on the way (usage,
stop reason) and writes its record line, as in a run.
"""

from __future__ import annotations

import argparse
import contextlib
import multiprocessing
import statistics
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx

from spu.config import ModelGatewayConfig
from spu.gateway.process import OPEN_FILES, GatewayProcess, GatewaySpec, file_size_limit
from spu.gateway.server import ModelGateway
from spu.scripted import Script, ScriptedModelServer, ScriptedTurn

SHORT = {"model": "bench", "stream": True, "max_tokens": 100,
         "messages": [{"role": "user", "content": "hi"}],
         "tools": [{"name": "Bash", "input_schema": {"type": "object"}}]}


def first_byte_s(client: httpx.Client, url: str, headers: dict[str, str]) -> float:
    """Seconds to the first body byte of one streamed answer (the rest is read too)."""
    start = time.perf_counter()
    with client.stream("POST", url, json=SHORT, headers=headers) as response:
        chunks = response.iter_bytes()
        next(chunks)
        elapsed = time.perf_counter() - start
        for _ in chunks:
            pass
    return elapsed


def transfer(client: httpx.Client, url: str, headers: dict[str, str]) -> tuple[int, float]:
    """Bytes of one long streamed answer and the seconds from its first byte to its last."""
    size, first = 0, None
    with client.stream("POST", url, json=SHORT, headers=headers) as response:
        for chunk in response.iter_bytes():
            if first is None:
                first = time.perf_counter()
            size += len(chunk)
    assert first is not None
    return size, time.perf_counter() - first


def _serve_script(script: Script, queue: Any, stop: Any) -> None:
    with ScriptedModelServer(script) as server:
        queue.put(server.url)
        stop.wait()


def gateway_spec(folder: Path, upstream: str) -> GatewaySpec:
    """A run's gateway in front of ``upstream``, under the limits a run's has."""
    cfg = ModelGatewayConfig()
    return GatewaySpec(folder, upstream=upstream, api="anthropic", api_model="bench", cfg=cfg,
                       confinement={"nofile": OPEN_FILES, "fsize": file_size_limit(cfg)})


@contextlib.contextmanager
def serving(script: Script, folder: Path) -> Iterator[tuple[str, str, str]]:
    """The scripted server and a run's gateway in front of it, each in its own process.

    As in a run, where the agent CLI is another process than the gateway; the server
    stands for a remote provider. (In one process, the client, the server and the
    gateway would share one interpreter lock, and the benchmark would time that.)
    """
    context = multiprocessing.get_context("fork")
    queue, stop = context.Queue(), context.Event()
    server = context.Process(target=_serve_script, args=(script, queue, stop), daemon=True)
    server.start()
    upstream = queue.get(timeout=60)
    gateway = GatewayProcess(gateway_spec(folder, upstream)).start()
    try:
        yield upstream, gateway.url(), gateway.token
    finally:
        gateway.stop()
        stop.set()
        server.join(timeout=10)


def start_stop_ms(folder: Path, starts: int) -> tuple[float, float, float, float]:
    """Median milliseconds to start and to stop a run's gateway: in its own process, and
    in a thread of this process (how every run's gateway ran before issue 41)."""
    times: dict[str, list[float]] = {"process start": [], "process stop": [],
                                     "thread start": [], "thread stop": []}
    GatewayProcess(gateway_spec(folder / "warm", "http://127.0.0.1:9")).start().stop()
    for k in range(starts):
        began = time.perf_counter()
        process = GatewayProcess(gateway_spec(folder / f"p{k}", "http://127.0.0.1:9")).start()
        started = time.perf_counter()
        process.stop()
        times["process start"].append(started - began)
        times["process stop"].append(time.perf_counter() - started)
        began = time.perf_counter()
        thread = ModelGateway(folder / f"t{k}", upstream="http://127.0.0.1:9",
                              api_model="bench").start()
        started = time.perf_counter()
        thread.stop()
        times["thread start"].append(started - began)
        times["thread stop"].append(time.perf_counter() - started)
    return tuple(statistics.median(v) * 1e3 for v in times.values())  # type: ignore[return-value]


def throughput(script: Script, folder: Path, repeats: int) -> tuple[int, float, float]:
    """Bytes of the answer, and its median rate straight and through the gateway."""
    with serving(script, folder) as (upstream, url, token), \
            httpx.Client(timeout=600) as client:
        rates: dict[str, list[float]] = {"direct": [], "gateway": []}
        size = 0
        for _ in range(repeats):
            size, seconds = transfer(client, upstream + "/v1/messages", {})
            rates["direct"].append(size / seconds)
            size, seconds = transfer(client, url + "/v1/messages", {"x-api-key": token})
            rates["gateway"].append(size / seconds)
    return size, statistics.median(rates["direct"]), statistics.median(rates["gateway"])


def main(argv: list[str] | None = None) -> int:
    """Run both measurements and print them with their ratios."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--requests", type=int, default=200)
    parser.add_argument("--mb", type=float, default=16.0)
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--pace", type=float, default=8.0,
                        help="MB/s of the provider-paced stream (default 8)")
    parser.add_argument("--starts", type=int, default=50,
                        help="gateways started and stopped for the per-run cost (default 50)")
    args = parser.parse_args(argv)
    folder = Path(tempfile.mkdtemp(prefix="spu-gateway-bench-"))
    if args.starts:
        p_start, p_stop, t_start, t_stop = start_stop_ms(folder / "starts", args.starts)
        print(f"a run's gateway, start + stop (median of {args.starts}): in its own process "
              f"{p_start:.1f} + {p_stop:.1f} ms, in a thread of the driver {t_start:.1f} + "
              f"{t_stop:.1f} ms; {p_start + p_stop - t_start - t_stop:.1f} ms more per run")
    short = Script(name="short", turns=(ScriptedTurn(text="Done."),))
    text = "lorem ipsum " * int(args.mb * 1024 * 1024 / 12)

    with serving(short, folder / "short") as (upstream, url, token), \
            httpx.Client(timeout=600) as client:
        direct, through = [], []
        for _ in range(args.requests):
            direct.append(first_byte_s(client, upstream + "/v1/messages", {}))
            through.append(first_byte_s(client, url + "/v1/messages", {"x-api-key": token}))
    d_ttfb, g_ttfb = statistics.median(direct), statistics.median(through)
    print(f"time to first byte (median of {args.requests}): direct {d_ttfb * 1e3:.2f} ms, "
          f"through the gateway {g_ttfb * 1e3:.2f} ms, added {(g_ttfb - d_ttfb) * 1e3:.2f} ms"
          f" (ratio {g_ttfb / d_ttfb:.2f})")

    mb = 1024 * 1024
    kinds: list[tuple[str, dict[str, Any]]] = [
        (f"at a provider's pace of {args.pace:g} MB/s (goal: under 2% lost)",
         {"as_generated": True, "bytes_per_s": args.pace * mb}),
        ("as fast as the server encodes it (not a goal)", {"as_generated": True}),
        ("rendered first, the relay's ceiling (not a goal)", {}),
    ]
    for k, (label, sending) in enumerate(kinds):
        long = Script(name="long", turns=(ScriptedTurn(text=text, delta_chars=64,
                                                       **sending),))
        size, d_rate, g_rate = throughput(long, folder / f"long-{k}", args.repeats)
        print(f"throughput of a {size / mb:.1f} MB answer {label}, median of {args.repeats}: "
              f"direct {d_rate / mb:.0f} MB/s, through the gateway {g_rate / mb:.0f} MB/s, "
              f"ratio {g_rate / d_rate:.3f} ({(1 - g_rate / d_rate) * 100:.1f}% lost)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
