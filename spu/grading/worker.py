"""Entry point of the isolated grading process: ``python -m spu.grading.worker JOB_DIR``.

Reads ``contract.json``, ``answers.json`` and (if present) ``rankings.json`` from
JOB_DIR and prints ``{"strict": Grade, "recovered": Grade}`` as JSON on stdout.

``--serve`` grades many submissions in one process (a sweep's grading service): one
JSON request a line on stdin, ``{"key": name, "contract": ..., "answers": ...,
"submission": base64 or null}`` (``contract`` and ``answers`` needed only the first
time a key is named), one JSON line ``{"strict", "recovered"}`` or ``{"error"}`` on
stdout per request. It sees no file: everything comes through the pipe.
"""

from __future__ import annotations

import base64
import json
import sys
from pathlib import Path
from typing import Any, TextIO

from spu.grading.rules import GradingKey
from spu.schema import AnswerKey, Contract


def main(argv: list[str]) -> int:
    """Grade the job folder named by ``argv[0]``."""
    job = Path(argv[0])
    contract = Contract.model_validate_json((job / "contract.json").read_bytes())
    answers = AnswerKey.model_validate_json((job / "answers.json").read_bytes())
    path = job / "rankings.json"
    data = path.read_bytes() if path.is_file() else None
    key = GradingKey.build(contract, answers)
    strict = key.grade(data, recover=False)
    recovered = key.grade(data, recover=True)
    json.dump(
        {"strict": strict.model_dump(mode="json"), "recovered": recovered.model_dump(mode="json")},
        sys.stdout,
    )
    return 0


def serve(stdin: TextIO | None = None, stdout: TextIO | None = None) -> int:
    """Grade requests read from ``stdin``, one JSON line each, until it closes."""
    source = stdin if stdin is not None else sys.stdin
    sink = stdout if stdout is not None else sys.stdout
    keys: dict[str, GradingKey] = {}
    reply: dict[str, Any]
    for line in source:
        try:
            request = json.loads(line)
            name = str(request["key"])
            if name not in keys:
                keys[name] = GradingKey.build(Contract.model_validate(request["contract"]),
                                              AnswerKey.model_validate(request["answers"]))
            raw = request.get("submission")
            data = None if raw is None else base64.b64decode(raw)
            key = keys[name]
            reply = {"strict": key.grade(data, recover=False).model_dump(mode="json"),
                     "recovered": key.grade(data, recover=True).model_dump(mode="json")}
        except Exception as exc:  # noqa: BLE001 - one bad request must not end the service
            reply = {"error": f"{type(exc).__name__}: {exc}"}
        sink.write(json.dumps(reply) + "\n")
        sink.flush()
    return 0


if __name__ == "__main__":
    if sys.argv[1:2] == ["--serve"]:
        sys.exit(serve())
    sys.exit(main(sys.argv[1:]))
