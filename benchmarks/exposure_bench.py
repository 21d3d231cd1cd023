"""The exposure screen's costs: the gateway's record per request, the screen per text.

    .venv/bin/python benchmarks/exposure_bench.py [--turns 50,200,800] [--size 200000]

Printed, from one process:

- **per request, at the gateway** (``spu.gateway.inputs.InputRecord.keep``, run on the
  gateway's event loop once each answer has ended): a Claude Code-like Messages body
  of ``--turns`` tool calls (a 20 KB system prompt, 30 KB of tool definitions, each tool
  result 3 KB), every text already kept (the steady state of a conversation: each request
  repeats the ones before). Beside it, in the same run: ``json.loads`` of the same body
  (which the gateway does anyway) and the tool results alone read and hashed as the
  gateway did before (``answers.tool_results``, SHA-256 each);
- **the screen** (``ExposureDetector.scan``) on a text of ``--size`` characters and twice
  that: plain ASCII, text with other scripts, and inputs crafted against each new part
  (base64 runs, escapes, look-alikes, zero-width characters); growth 2.0 is linear.
"""

from __future__ import annotations

import argparse
import base64
import hashlib
import json
import statistics
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from spu.analysis.exposure import ExposureDetector
from spu.gateway.answers import tool_results
from spu.gateway.inputs import InputRecord
from spu.schema import SourceRecord

SOURCE = SourceRecord(doi="10.1126/science.aar5169", title="Predicting reaction performance "
                                                           "in C-N cross-coupling using "
                                                           "machine learning")


def claude_like_body(turns: int) -> dict[str, Any]:
    """A Messages body of ``turns`` tool calls and results, with a system prompt and tools."""
    messages: list[dict[str, Any]] = [{"role": "user", "content": [
        {"type": "text", "text": "<system-reminder>" + "r" * 2000 + "</system-reminder>"},
        {"type": "text", "text": "Rank the experiments."}]}]
    for k in range(turns):
        messages += [
            {"role": "assistant", "content": [
                {"type": "text", "text": f"Step {k}: looking at the data."},
                {"type": "tool_use", "id": f"toolu_{k:04d}", "name": "Bash",
                 "input": {"command": f"python3 analyse.py --part {k}"}}]},
            {"role": "user", "content": [
                {"type": "tool_result", "tool_use_id": f"toolu_{k:04d}",
                 "content": f"row {k}: " + "0.123, " * 420}]}]
    tools = [{"name": f"Tool{k}", "description": "Does a thing. " * 40,
              "input_schema": {"type": "object", "properties": {
                  "command": {"type": "string", "description": "what to run"}}}}
             for k in range(50)]
    return {"model": "m", "max_tokens": 32000, "stream": True,
            "system": [{"type": "text", "text": "You are an agent. " * 1100,
                        "cache_control": {"type": "ephemeral"}}],
            "messages": messages, "tools": tools}


def median_s(run: Callable[[], object], repeats: int) -> float:
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        run()
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def before(body: dict[str, Any]) -> None:
    """What the gateway did per request before: the tool results, each hashed."""
    for _, text in tool_results("messages", body):
        hashlib.sha256(text.encode()).hexdigest()


def per_request(turns_list: list[int], repeats: int) -> None:
    print(f"{'turns':>6} {'body MB':>8} {'json.loads ms':>14} {'before ms':>10} "
          f"{'keep ms':>8} {'keep/loads':>11}")
    for turns in turns_list:
        body = claude_like_body(turns)
        raw = json.dumps(body).encode()
        with tempfile.TemporaryDirectory() as folder:
            record = InputRecord(Path(folder), 524288, 64 << 20)
            record.keep("messages", body)  # every text now kept: the steady state
            keep = median_s(lambda b=body, r=record: r.keep("messages", b), repeats)
        loads = median_s(lambda r=raw: json.loads(r), repeats)
        old = median_s(lambda b=body: before(b), repeats)
        print(f"{turns:>6} {len(raw) / 1e6:>8.2f} {loads * 1e3:>14.2f} {old * 1e3:>10.2f} "
              f"{keep * 1e3:>8.2f} {keep / loads:>11.2f}")


CRAFTED: dict[str, Callable[[int], str]] = {
    "plain ASCII prose": lambda n: ("The yields were measured at three temperatures. "
                                    * (n // 48 + 1))[:n],
    "other scripts": lambda n: ("Выход реакции 收率 ἀπόδοσις. " * (n // 26 + 1))[:n],
    "one base64 run": lambda n: "A" * n,
    "base64 lines": lambda n: "MTAuMTEy\n" * (n // 9),
    "base64 of text": lambda n: base64.b64encode(b"x" * (n * 3 // 4)).decode(),
    "percent escapes": lambda n: "%25" * (n // 3),
    "JSON escapes": lambda n: "\\u00" * (n // 4),
    "look-alikes and ZWSP": lambda n: "\u0455\u200b" * (n // 2),
    "URL-safe run": lambda n: "-_" * (n // 2),
    "marks, falling class": lambda n: "a" + "\u0301" * (n // 2) + "\u0316" * (n // 2),
    "U+FDFA (18 in NFKC)": lambda n: "\ufdfa" * n,
    "letters spaced apart": lambda n: "a " * (n // 2),
    "single letters, runs": lambda n: "a b c d e ff " * (n // 13),
    "markup and '<'": lambda n: "<b>10.1126/</b>" * (n // 15) + "<" * (n // 2),
}


def screen(size: int, repeats: int) -> None:
    detector = ExposureDetector.for_source(SOURCE)
    detector.scan("warm up the tables \u0455")
    print(f"\n{'input':<22} {'s at n':>8} {'s at 2n':>8} {'growth':>7}   (n = {size})")
    for name, make in CRAFTED.items():
        small, large = make(size), make(2 * size)
        t1 = median_s(lambda t=small: detector.scan(t), repeats)
        t2 = median_s(lambda t=large: detector.scan(t), repeats)
        print(f"{name:<22} {t1:>8.3f} {t2:>8.3f} {t2 / t1:>7.2f}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--turns", default="50,200,800")
    parser.add_argument("--size", type=int, default=200_000)
    parser.add_argument("--repeats", type=int, default=5)
    args = parser.parse_args()
    per_request([int(t) for t in args.turns.split(",")], args.repeats)
    screen(args.size, max(1, args.repeats // 2))


if __name__ == "__main__":
    main()
