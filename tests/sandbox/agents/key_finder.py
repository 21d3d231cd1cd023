#!/usr/bin/env python3
"""A hostile agent: search the whole file system for answer keys, and submit its own.

It walks ``/`` (not ``/proc``, ``/sys``, ``/dev``) and reads every ``answers.json``, every
JSON file in a ``hidden`` folder, and the ``answers.json`` members of every archive it
finds (``.tar.gz``, ``.tgz``, ``.whl``, ``.zip``: a dataset's archive, a wheel of spu).
It writes what it read to ``$SPU_OUTPUT_DIR/found.json`` (path -> content) and submits a
ranking built from the key of its own task where it found one (else the presented order).
"""

import json
import os
import tarfile
import zipfile

TASK, OUT = os.environ["SPU_TASK_DIR"], os.environ["SPU_OUTPUT_DIR"]
SKIP = {"/proc", "/sys", "/dev"}
ARCHIVES = (".tar.gz", ".tgz", ".whl", ".zip")
MAX_BYTES = 64 << 20


def read_members(path):
    """The ``answers.json`` members of an archive, by ``path!member``."""
    found = {}
    try:
        if path.endswith((".whl", ".zip")):
            with zipfile.ZipFile(path) as z:
                for name in z.namelist():
                    if name.endswith("answers.json"):
                        found[f"{path}!{name}"] = z.read(name).decode(errors="replace")
        else:
            with tarfile.open(path) as t:
                for m in t:
                    if m.isreg() and m.name.endswith("answers.json"):
                        found[f"{path}!{m.name}"] = t.extractfile(m).read().decode(
                            errors="replace")
    except Exception:  # noqa: BLE001 - not an archive after all
        pass
    return found


def search():
    found = {}
    for top, dirs, files in os.walk("/", onerror=lambda e: None):
        dirs[:] = [d for d in dirs if os.path.join(top, d) not in SKIP]
        for name in files:
            path = os.path.join(top, name)
            try:
                if name == "answers.json" or (name.endswith(".json")
                                              and os.path.basename(top) == "hidden"):
                    with open(path, encoding="utf-8", errors="replace") as f:
                        found[path] = f.read(1 << 20)
                elif name.endswith(ARCHIVES) and os.path.getsize(path) < MAX_BYTES:
                    found.update(read_members(path))
            except OSError:
                continue
    return found


def main():
    with open(os.path.join(TASK, "contract.json"), encoding="utf-8") as f:
        contract = json.load(f)
    found = search()
    with open(os.path.join(OUT, "found.json"), "w", encoding="utf-8") as f:
        json.dump(found, f, indent=1)
    key = None
    for text in found.values():
        try:
            value = json.loads(text)
        except ValueError:
            continue
        if isinstance(value, dict) and value.get("task_id") == contract["task_id"]:
            key = value
    rankings = []
    for group in contract["groups"]:
        order = list(group["items"])
        if key is not None:
            values = key["groups"][group["group_id"]]
            order.sort(key=lambda e: values[e])
        rankings.append({"group_id": group["group_id"], "order": order})
    with open(os.path.join(OUT, "rankings.json"), "w", encoding="utf-8") as f:
        json.dump({"task_id": contract["task_id"], "task_version": contract["task_version"],
                   "rankings": rankings}, f)


if __name__ == "__main__":
    main()
