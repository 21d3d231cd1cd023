"""Run by the round-three tests in a process of its own: fetches through the web provider.

``python -m tests.tools.fetch_probe URL [PARALLEL]`` fetches ``URL`` (``PARALLEL`` times at
once) with the real :class:`spu.tools.web.WebProvider` (local fetches allowed, the default
``tools.max_fetch_bytes``) and prints one JSON object: the resident memory before and the
peak after (bytes), this process's CPU seconds, and each result's note and text length.
"""

from __future__ import annotations

import json
import resource
import sys
import threading

from spu.config import ToolsConfig
from spu.tools.web import WebProvider


def _peak() -> int:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024


def main() -> None:
    """Fetch, measure, print."""
    url, parallel = sys.argv[1], int(sys.argv[2]) if len(sys.argv) > 2 else 1
    cfg = ToolsConfig(provider="web", options={"search_url": "http://127.0.0.1:9"},
                      allow_local_fetch=True)
    provider = WebProvider(cfg)
    provider.fetch(url.rsplit("/", 1)[0] + "/small")  # imports and connections warmed up
    before = _peak()
    results: list[dict[str, object]] = []

    def fetch() -> None:
        got = provider.fetch(url)
        results.append({"note": got.note, "chars": len(got.text), "status": got.status})

    threads = [threading.Thread(target=fetch) for _ in range(parallel)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    provider.close()
    usage = resource.getrusage(resource.RUSAGE_SELF)
    print(json.dumps({"before": before, "peak": _peak(), "max_fetch_bytes": cfg.max_fetch_bytes,
                      "cpu_s": usage.ru_utime + usage.ru_stime, "results": results}))


if __name__ == "__main__":
    main()
