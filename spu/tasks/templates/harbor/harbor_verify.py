"""Harbor verifier of an SPU task: grade the submission, write the task score as the reward.

``spu task export --format harbor`` writes this file as ``tests/verify.py``, beside the
task's contract, its answer key and the vendored SPU grader (``tests/grader/``);
``tests/test.sh`` runs it with the container's ``python3`` (standard library only).
Harbor copies ``tests/`` in only after the agent has finished.

It reads the submission (``$SPU_OUTPUT_DIR/rankings.json``, normally
``/output/rankings.json``) as the SPU runner does, without following a link, grades it
under the strict rules and under recovery (SPEC section 3), and writes

- ``/logs/verifier/reward.txt``: the task score under the strict rules, the score
  ``spu grade`` prints (a failed file scores -1; see SPEC section 3);
- ``/logs/verifier/grade.json``: the full grade, strict and recovered, with the grader
  version and the submission's SHA-256.

It exits 0 whenever it wrote a reward, and 2 when the task's own files cannot be read.
"""

from __future__ import annotations

import argparse
import hashlib
import importlib
import json
import os
import sys
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent


def _arguments(argv: list[str]) -> argparse.Namespace:
    output = Path(os.environ.get("SPU_OUTPUT_DIR") or "/output")
    p = argparse.ArgumentParser(description="Grade an SPU submission and write the reward.")
    p.add_argument("--submission", type=Path, default=output / "rankings.json",
                   help="the submitted rankings.json (default: $SPU_OUTPUT_DIR/rankings.json)")
    p.add_argument("--logs", type=Path, default=Path("/logs/verifier"),
                   help="where reward.txt and grade.json go (default: /logs/verifier)")
    return p.parse_args(argv)


def verify(submission: Path, logs: Path) -> dict[str, Any]:
    """Grade ``submission`` against the task in this folder; write and return the record."""
    sys.path.insert(0, str(HERE / "grader"))
    from spu.grading.rules import GRADER_VERSION, grade_submission
    from spu.grading.submission import read_submission_file
    from spu.strict_json import loads_strict

    # The vendored records (standard library), not the pydantic models of spu.schema.
    records: Any = importlib.import_module("spu.schema")
    contract = records.Contract.from_json(
        loads_strict((HERE / "contract.json").read_text("utf-8")))
    answers = records.AnswerKey.from_json(
        loads_strict((HERE / "answers.json").read_text("utf-8")))
    data = read_submission_file(submission)
    strict = grade_submission(contract, answers, data)
    recovered = grade_submission(contract, answers, data, recover=True)
    record = {
        "task_id": contract.task_id,
        "task_version": contract.task_version,
        "reward": strict.score,
        "score_strict": strict.score,
        "score_recovered": recovered.score,
        "status": strict.status.value,
        "grade": strict.public_json(),
        "recovered": {**recovered.public_json(),
                      "recovered_departures": list(recovered.recovered_departures)},
        "grader_version": GRADER_VERSION,
        "submission": str(submission),
        "submission_sha256": None if data is None else hashlib.sha256(data).hexdigest(),
    }
    logs.mkdir(parents=True, exist_ok=True)
    (logs / "grade.json").write_text(json.dumps(record, indent=1) + "\n", encoding="utf-8")
    # repr() keeps every bit of the score; Harbor reads the file with float().
    (logs / "reward.txt").write_text(repr(strict.score) + "\n", encoding="utf-8")
    return record


def main(argv: list[str] | None = None) -> int:
    """Write the reward; exit 2 (writing none) when the task's own files are broken."""
    args = _arguments(sys.argv[1:] if argv is None else argv)
    try:
        record = verify(args.submission, args.logs)
    except (OSError, ValueError) as exc:
        print(f"spu verifier: the task's own files cannot be read: {exc}", file=sys.stderr)
        return 2
    print(json.dumps({k: record[k] for k in ("task_id", "reward", "score_recovered",
                                             "status")}))
    for error in record["grade"]["errors"]:
        print(f"  {error}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
