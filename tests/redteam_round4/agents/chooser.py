#!/usr/bin/env python3
"""Round-four agent: one good model call, a file, then an outcome of its choosing.

Mode (argv[1]):
- ``infra404``: after the file, POST the configured model to a path the upstream does not
  serve (it answers 404): the run's last model request "failed on the provider's side";
- ``refusal``: after the file, one more request the provider refuses (the script's turn 1
  stands for a prompt written to be refused): the run's last answer is a refusal;
- ``wrapper``: after the file, print one line as bubblewrap (or docker-init) prints its
  own failures as all of stderr, and exit 1: "the sandbox did not start";
- ``planter``: links from /output and /workspace into the host's ``<run>/model/`` (relative,
  and absolute by the host path bwrap's command line shows), then tries to leave its
  cgroup (write its pid to every ``cgroup.procs`` it can see, mount cgroup2);
- ``probe``: look for secrets and host processes, write what it saw to notes.json.
"""
import glob
import json
import os
import pathlib
import sys
import urllib.error
import urllib.request

mode = sys.argv[1] if len(sys.argv) > 1 else "infra404"
url, token = os.environ["SPU_MODEL_URL"], os.environ["SPU_MODEL_TOKEN"]
out = pathlib.Path(os.environ["SPU_OUTPUT_DIR"])
opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))


def call(path, body, text=False):
    request = urllib.request.Request(url + path, data=json.dumps(body).encode(), headers={
        "x-api-key": token, "content-type": "application/json"})
    try:
        answer = opener.open(request, timeout=30)
        return answer.read().decode() if text else answer.status
    except urllib.error.HTTPError as exc:
        return exc.read().decode() if text else exc.code


model = "presented_order"
if mode == "refusal":  # the gateway's 403 names the one model it forwards
    said = call("/v1/messages", {"model": "x", "max_tokens": 1, "messages": []}, text=True)
    model = json.loads(said)["error"]["message"].split("(only ")[1].rstrip(")")[1:-1]
body = {"model": model, "max_tokens": 100,
        "stream": False, "messages": [{"role": "user", "content": "Rank."}],
        "tools": [{"name": "Bash", "input_schema": {"type": "object"}}]}
notes = {"good": call("/v1/messages", body)}
contract = json.loads(pathlib.Path(os.environ["SPU_TASK_DIR"], "contract.json").read_text())
(out / "rankings.json").write_text(json.dumps({
    "task_id": contract["task_id"], "task_version": contract["task_version"],
    "rankings": [{"group_id": g["group_id"], "order": g["items"]} for g in contract["groups"]]}))
if mode == "infra404":
    notes["chosen"] = call("/v1/nope/chat/completions", body)
elif mode == "refusal":
    provoking = {**body, "messages": [
        {"role": "user", "content": "Rank."},
        {"role": "assistant", "content": [{"type": "tool_use", "id": "t0", "name": "Bash",
                                           "input": {}}]},
        {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "t0",
                                      "content": "now something you must refuse"}]}]}
    notes["chosen"] = call("/v1/messages", provoking)
elif mode == "wrapper":
    (out / "notes.json").write_text(json.dumps(notes, indent=1))
    line = ("[FATAL tini (7)] exec /workspace/.agent/chooser.py failed: Permission denied"
            if os.path.exists("/sbin/docker-init") else
            "bwrap: execvp /workspace/.agent/chooser.py: Permission denied")
    sys.stderr.write(line + "\n")
    sys.stderr.flush()
    os._exit(1)
elif mode == "planter":
    host_out = None
    try:
        words = pathlib.Path("/proc/1/cmdline").read_bytes().split(b"\0")
        for k, w in enumerate(words[:-1]):
            if words[k + 1] == b"/output" and w.endswith(b"/output"):
                host_out = w.decode()
    except OSError:
        pass
    targets = ["../model/requests.jsonl", "../model", "../../model/requests.jsonl"]
    if host_out:
        targets.append(str(pathlib.Path(host_out).parent / "model" / "requests.jsonl"))
    for k, target in enumerate(targets):
        for folder in (out, pathlib.Path("/workspace")):
            try:
                os.symlink(target, folder / f"link{k}")
            except OSError as exc:
                notes[f"symlink {folder}/{k}"] = repr(exc)
    notes["cgroup_before"] = pathlib.Path("/proc/self/cgroup").read_text()
    tries = {}
    for procs in glob.glob("/sys/fs/cgroup/**/cgroup.procs", recursive=True)[:50]:
        try:
            pathlib.Path(procs).write_text(str(os.getpid()))
            tries[procs] = "written"
        except OSError as exc:
            tries[procs] = repr(exc)
    try:
        os.makedirs("/tmp/cg", exist_ok=True)
        import ctypes
        libc = ctypes.CDLL(None, use_errno=True)
        rc = libc.mount(b"none", b"/tmp/cg", b"cgroup2", 0, None)
        tries["mount"] = f"rc={rc} errno={ctypes.get_errno()}"
    except OSError as exc:
        tries["mount"] = repr(exc)
    notes["cgroup_tries"] = tries
    notes["cgroup_after"] = pathlib.Path("/proc/self/cgroup").read_text()
elif mode == "probe":
    seen = {}
    for path in glob.glob("/proc/[0-9]*/cmdline"):
        try:
            seen[path] = pathlib.Path(path).read_bytes().replace(b"\0", b" ").decode(
                "utf-8", "replace")
        except OSError as exc:
            seen[path] = repr(exc)
    notes["processes"] = seen
    found = []
    for path in glob.glob("/proc/[0-9]*/environ"):
        try:
            data = pathlib.Path(path).read_bytes()
        except OSError:
            continue
        for entry in data.split(b"\0"):
            name = entry.split(b"=", 1)[0].decode("utf-8", "replace")
            if name and not name.startswith(("SPU_", "PATH", "HOME", "LANG", "TERM", "HOSTNAME",
                                             "PWD", "SHLVL", "_", "TMPDIR", "USER", "LC_",
                                             "PYTHON", "OLDPWD", "http", "HTTP", "https",
                                             "HTTPS", "no_proxy", "NO_PROXY", "SSL_CERT",
                                             "REQUESTS_CA", "PIP_", "NODE_", "npm_", "LOGNAME",
                                             "SHELL", "container")):
                found.append(f"{path}: {name}")
    notes["other_env"] = found
    files = []
    for root in ("/output", "/workspace", "/tmp", "/task", os.environ["SPU_OUTPUT_DIR"]):
        for dirpath, _, names in os.walk(root):
            files += [os.path.join(dirpath, n) for n in names]
    notes["files"] = files[:2000]
(out / "notes.json").write_text(json.dumps(notes, indent=1))
