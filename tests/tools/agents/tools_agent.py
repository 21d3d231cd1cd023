#!/usr/bin/env python3
"""A command agent with nothing but the standard library: search, fetch, then submit.

It calls the audited tools service at ``$SPU_TOOLS_URL`` (MCP streamable HTTP, one POST per
call), writes what each call answered to ``$SPU_OUTPUT_DIR/tool_answers.json``, tries a
direct download (which the egress proxy records), and submits the presented order.
Arguments: the search query, then any number of URLs to fetch; ``--stop STEP`` calls
``policy_stop`` at the end.
"""

import csv
import json
import os
import sys
import urllib.error
import urllib.request


def call(tool, arguments, request_id):
    body = {"jsonrpc": "2.0", "id": request_id, "method": "tools/call",
            "params": {"name": tool, "arguments": arguments}}
    request = urllib.request.Request(
        os.environ["SPU_TOOLS_URL"], data=json.dumps(body).encode(),
        headers={"content-type": "application/json",
                 "accept": "application/json, text/event-stream"})
    # The service is reached directly (NO_PROXY lists the host's address).
    with urllib.request.urlopen(request, timeout=120) as answer:
        result = json.load(answer)["result"]
    text = "\n".join(c.get("text", "") for c in result["content"])
    return {"tool": tool, "arguments": arguments, "is_error": result.get("isError", False),
            "text": text}


def main(argv):
    stop = None
    if "--stop" in argv:
        k = argv.index("--stop")
        stop, argv = argv[k + 1], argv[:k] + argv[k + 2:]
    query, urls = argv[0], argv[1:]
    answers = [call("search", {"query": query, "max_results": 5}, 1)]
    for n, url in enumerate(urls):
        answers.append(call("fetch", {"url": url}, 2 + n))
    if stop is not None:
        answers.append(call("policy_stop", {"step": stop, "reason": "a result named the source"},
                            99))
    # A download around the audited tools: the egress proxy records it (it may fail).
    try:
        urllib.request.urlopen("http://downloads.invalid/package.tar.gz", timeout=10)
    except (urllib.error.URLError, OSError):
        pass
    out = os.environ["SPU_OUTPUT_DIR"]
    with open(os.path.join(out, "tool_answers.json"), "w", encoding="utf-8") as f:
        json.dump(answers, f, indent=1)
    task = os.environ["SPU_TASK_DIR"]
    with open(os.path.join(task, "contract.json"), encoding="utf-8") as f:
        contract = json.load(f)
    with open(os.path.join(task, "targets.csv"), newline="", encoding="utf-8") as f:
        position = {row["experiment_id"]: k for k, row in enumerate(csv.DictReader(f))}
    rankings = [{"group_id": g["group_id"],
                 "order": sorted(g["items"], key=lambda i: position.get(i, 0))}
                for g in contract["groups"]]
    with open(os.path.join(out, "rankings.json"), "w", encoding="utf-8") as f:
        json.dump({"task_id": contract["task_id"], "task_version": contract["task_version"],
                   "rankings": rankings}, f)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
