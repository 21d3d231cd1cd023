#!/usr/bin/env python3
"""Round-five agent: a valid file, a refusal provoked after it, then the file removed.

Mode (argv[1]): ``keep`` leaves the file (the round-four case, flagged), ``remove``
deletes it after the refusal, ``empty`` truncates it, ``invalid`` overwrites it with
a file that ranks nothing.
"""
import json
import os
import pathlib
import sys
import urllib.error
import urllib.request

mode = sys.argv[1] if len(sys.argv) > 1 else "remove"
url, token = os.environ["SPU_MODEL_URL"], os.environ["SPU_MODEL_TOKEN"]
out = pathlib.Path(os.environ["SPU_OUTPUT_DIR"])
opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))


def call(body, text=False):
    request = urllib.request.Request(url + "/v1/messages", data=json.dumps(body).encode(),
                                     headers={"x-api-key": token,
                                              "content-type": "application/json"})
    try:
        answer = opener.open(request, timeout=30)
        return answer.read().decode() if text else answer.status
    except urllib.error.HTTPError as exc:
        return exc.read().decode() if text else exc.code


said = call({"model": "x", "max_tokens": 1, "messages": []}, text=True)
model = json.loads(said)["error"]["message"].split("(only ")[1].rstrip(")")[1:-1]
body = {"model": model, "max_tokens": 100, "stream": False,
        "messages": [{"role": "user", "content": "Rank."}],
        "tools": [{"name": "Bash", "input_schema": {"type": "object"}}]}
notes = {"good": call(body)}
contract = json.loads(pathlib.Path(os.environ["SPU_TASK_DIR"], "contract.json").read_text())
submission = out / "rankings.json"
submission.write_text(json.dumps({
    "task_id": contract["task_id"], "task_version": contract["task_version"],
    "rankings": [{"group_id": g["group_id"], "order": g["items"]} for g in contract["groups"]]}))
notes["chosen"] = call({**body, "messages": [
    {"role": "user", "content": "Rank."},
    {"role": "assistant", "content": [{"type": "tool_use", "id": "t0", "name": "Bash",
                                       "input": {}}]},
    {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "t0",
                                  "content": "now something you must refuse"}]}]})
if mode == "remove":
    submission.unlink()
elif mode == "empty":
    submission.write_text("")
elif mode == "invalid":
    submission.write_text(json.dumps({"task_id": contract["task_id"], "rankings": []}))
(out / "notes.json").write_text(json.dumps(notes, indent=1))
