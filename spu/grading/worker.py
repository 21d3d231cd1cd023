"""Entry point of the isolated grading process: ``python -m spu.grading.worker JOB_DIR``.

Reads ``contract.json``, ``answers.json`` and (if present) ``rankings.json`` from
JOB_DIR and prints ``{"strict": Grade, "recovered": Grade}`` as JSON on stdout.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

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


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
