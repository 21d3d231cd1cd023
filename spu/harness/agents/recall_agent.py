#!/usr/bin/env python3
"""Recall probe agent: asks the model one question about the task from memory (stdlib only).

Runs inside the sandbox like any agent. It reads the public task files of
``$SPU_TASK_DIR`` (the instruction, the procedure, the protocol, the targets and the
contract; nothing else exists there), sends them with one question to the run's model
gateway (``SPU_MODEL_URL``, ``SPU_MODEL_TOKEN``, ``SPU_MODEL_API``; the model id the
gateway forwards in ``SPU_RECALL_MODEL``), offering no tools,
and writes what the model answered:

  --probe=source  which study the experiments come from (title, authors, journal, year,
                  DOI); the answer goes to ``recall.json``, the runner screens it for
                  the source's identifiers.
  --probe=order   the measured order of each group, without computing anything; the
                  answer's JSON rankings go to ``rankings.json`` (graded like any
                  submission), the whole answer to ``recall.json``.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import sys
import urllib.error
import urllib.request

PUBLIC_FILES = ("instruction.md", "experiment.md", "protocol.json", "targets.csv",
                "contract.json")
"""The task files the question quotes, in this order (the ones a task holds)."""

MAX_FILE_CHARS = 60_000
"""Characters of one task file quoted at most."""

MAX_TOKENS = 4096
"""Output tokens the answer may take."""

TIMEOUT_S = 600

QUESTIONS = {
    "source": (
        "Do not solve the task below and do not compute anything. Answer from memory only: "
        "which published study do these experiments come from? Give its title, authors, "
        "journal, year and DOI, as far as you remember them. If you do not know the study, "
        "say so; do not guess an identifier."),
    "order": (
        "Do not solve the task below by reasoning or computing. Answer from memory only: "
        "if you remember the measured outcomes of these experiments, give the measured "
        "order of each group, from the lowest to the highest measured value. Answer with "
        "one JSON object only, of the form {\"rankings\": [{\"group_id\": ..., \"order\": "
        "[experiment ids, lowest first]}]}, naming every group and every experiment."),
}


def task_text(task_dir: str) -> tuple[str, list[str]]:
    """The public task files quoted in the question, and the names of every file seen."""
    seen = sorted(os.listdir(task_dir))
    parts = []
    for name in PUBLIC_FILES:
        path = os.path.join(task_dir, name)
        if os.path.isfile(path):
            with open(path, encoding="utf-8", errors="replace") as f:
                parts.append(f"=== {name} ===\n{f.read(MAX_FILE_CHARS)}")
    return "\n\n".join(parts), seen


def request_body(api: str, model: str, prompt: str) -> tuple[str, dict]:
    """The endpoint path and body of one tool-less question in the gateway's API."""
    if api == "anthropic":
        return "/v1/messages", {"model": model, "max_tokens": MAX_TOKENS, "stream": False,
                                "messages": [{"role": "user", "content": prompt}]}
    if api == "openai-responses":
        return "/v1/responses", {"model": model, "stream": False, "input": prompt,
                                 "max_output_tokens": MAX_TOKENS}
    return "/v1/chat/completions", {"model": model, "stream": False,
                                    "max_tokens": MAX_TOKENS,
                                    "messages": [{"role": "user", "content": prompt}]}


def answer_text(api: str, answer: dict) -> str:
    """The text of a whole (non-streamed) answer in the gateway's API."""
    if api == "anthropic":
        return "".join(b.get("text", "") for b in answer.get("content") or []
                       if isinstance(b, dict) and b.get("type") == "text")
    if api == "openai-responses":
        texts = []
        for item in answer.get("output") or []:
            for part in (item.get("content") or []) if isinstance(item, dict) else []:
                if isinstance(part, dict) and part.get("type") == "output_text":
                    texts.append(part.get("text", ""))
        return "".join(texts)
    choices = answer.get("choices") or [{}]
    return str((choices[0].get("message") or {}).get("content") or "")


def ask(prompt: str) -> str:
    """Send ``prompt`` to the run's model gateway; the answer's text."""
    url, token = os.environ["SPU_MODEL_URL"], os.environ["SPU_MODEL_TOKEN"]
    api = os.environ.get("SPU_MODEL_API", "anthropic")
    model = os.environ["SPU_RECALL_MODEL"]
    path, body = request_body(api, model, prompt)
    headers = {"content-type": "application/json"}
    if api == "anthropic":
        headers.update({"x-api-key": token, "anthropic-version": "2023-06-01"})
    else:
        headers["authorization"] = f"Bearer {token}"
    request = urllib.request.Request(url.rstrip("/") + path, data=json.dumps(body).encode(),
                                     headers=headers)
    # The gateway is on the host's address: never through a proxy.
    opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))
    with opener.open(request, timeout=TIMEOUT_S) as response:
        return answer_text(api, json.load(response))


def rankings_of(text: str) -> dict | None:
    """The first JSON object of ``text`` that holds ``rankings`` (fenced or bare)."""
    decoder = json.JSONDecoder()
    for match in re.finditer(r"\{", text):
        try:
            value, _ = decoder.raw_decode(text, match.start())
        except ValueError:
            continue
        if isinstance(value, dict) and isinstance(value.get("rankings"), list):
            return value
    return None


def main() -> int:
    """Ask the question of ``--probe`` and write the answer to the output folder."""
    parser = argparse.ArgumentParser()
    parser.add_argument("--probe", choices=sorted(QUESTIONS), required=True)
    args = parser.parse_args()
    task_dir, out = os.environ["SPU_TASK_DIR"], os.environ["SPU_OUTPUT_DIR"]
    text, seen = task_text(task_dir)
    prompt = f"{QUESTIONS[args.probe]}\n\n{text}"
    try:
        answer = ask(prompt)
    except (urllib.error.URLError, OSError, ValueError) as exc:
        print(f"recall probe: the model could not be asked: {exc}", file=sys.stderr)
        return 1
    record = {"probe": args.probe, "task_files": seen, "prompt": prompt, "answer": answer}
    with open(os.path.join(out, "recall.json"), "w", encoding="utf-8") as f:
        json.dump(record, f, indent=1)
    if args.probe == "order":
        found = rankings_of(answer)
        if found is None:
            print("recall probe: the answer holds no rankings", file=sys.stderr)
            return 0
        with open(os.path.join(task_dir, "contract.json"), encoding="utf-8") as f:
            contract = json.load(f)
        submission = {"task_id": contract["task_id"], "task_version": contract["task_version"],
                      "rankings": found["rankings"]}
        with open(os.path.join(out, "rankings.json"), "w", encoding="utf-8") as f:
            json.dump(submission, f, indent=1)
    print(f"recall probe {args.probe}: answered ({len(answer)} characters)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
