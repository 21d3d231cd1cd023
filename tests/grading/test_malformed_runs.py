"""Malformed submissions through a whole run (issue 12: the attacks that held stay held).

Each agent (``harness=command``, in the sandbox) writes one kind of malformed
``rankings.json`` next to a report and a script. Invariant: the run ends as the grading
rules (SPEC section 3) say, with the strict and the recovered score they give, and nothing
the agent left is lost (its report, its scripts, ``grade.json``, ``run.json``).
"""

from __future__ import annotations

import json

import pytest
from scipy.stats import spearmanr

from spu.config import EffortConfig, HarnessConfig, ModelConfig, SandboxConfig
from spu.runner import RunSpec, run_one
from spu.tasks import load_answers, load_task
from tests.conftest import EXAMPLE_TWO_GROUPS, have_bwrap

AGENT = r'''#!/usr/bin/env python3
import json, os, pathlib, sys
kind = sys.argv[1]
task = pathlib.Path(os.environ["SPU_TASK_DIR"])
out = pathlib.Path(os.environ["SPU_OUTPUT_DIR"])
contract = json.loads((task / "contract.json").read_text())
groups = {g["group_id"]: list(g["items"]) for g in contract["groups"]}
(out / "report.md").write_text("# My reasoning\n")
(out / "scripts").mkdir(exist_ok=True)
(out / "scripts" / "fit.py").write_text("print('fit')\n")
head = {"task_id": contract["task_id"], "task_version": contract["task_version"]}
ranked = [{"group_id": g, "order": items} for g, items in groups.items()]
target = out / "rankings.json"

def dump(obj):
    target.write_text(json.dumps(obj))

if kind == "missing":
    pass
elif kind == "empty-file":
    target.write_bytes(b"")
elif kind == "over-1-mib":
    target.write_text(json.dumps({**head, "rankings": ranked}) + " " * (1 << 20))
elif kind == "not-utf8":
    target.write_bytes(json.dumps({**head, "rankings": ranked}).encode("utf-16"))
elif kind == "byte-order-mark":
    target.write_bytes(b"\xef\xbb\xbf" + json.dumps({**head, "rankings": ranked}).encode())
elif kind == "not-json":
    target.write_text("{'task_id': 'x', rankings: [}")
elif kind == "duplicate-keys":
    target.write_text('{"task_id": "%s", "task_id": "%s", "rankings": %s}'
                      % (head["task_id"], head["task_id"], json.dumps(ranked)))
elif kind == "nan":
    target.write_text('{"task_id": "%s", "rankings": %s, "confidence": NaN}'
                      % (head["task_id"], json.dumps(ranked)))
elif kind == "wrong-task-id":
    dump({**head, "task_id": "spu-other", "rankings": ranked})
elif kind == "wrong-task-version":
    dump({**head, "task_version": "9.9", "rankings": ranked})
elif kind == "unknown-group":
    dump({**head, "rankings": ranked + [{"group_id": "G9", "order": ["E1", "E2"]}]})
elif kind == "rankings-keyed-by-group":
    dump({**head, "rankings": groups})
elif kind == "entry-not-an-object":
    dump({**head, "rankings": ["G1", "G2"]})
elif kind == "order-not-a-list":
    dump({**head, "rankings": [{"group_id": g, "order": " ".join(i)} for g, i in groups.items()]})
elif kind == "group-absent":
    dump({**head, "rankings": ranked[:1]})
elif kind == "group-twice":
    dump({**head, "rankings": ranked + ranked[:1]})
elif kind == "item-missing":
    dump({**head, "rankings": [{"group_id": "G1", "order": groups["G1"][1:]}] + ranked[1:]})
elif kind == "item-repeated":
    dump({**head, "rankings": [{"group_id": "G1", "order": groups["G1"] + groups["G1"][:1]}]
          + ranked[1:]})
elif kind == "item-foreign":
    dump({**head, "rankings": [{"group_id": "G1", "order": groups["G1"][:-1] + groups["G2"][:1]}]
          + ranked[1:]})
elif kind == "empty-rankings":
    dump({**head, "rankings": []})
elif kind == "link-to-a-host-file":
    os.symlink("/etc/passwd", target)
else:
    raise SystemExit(f"unknown kind {kind}")
'''

WHOLE_FILE = {  # kind -> (outcome, recovered score: None = the same -1)
    "missing": ("no_file", None), "empty-file": ("rejected", None),
    "over-1-mib": ("rejected", None), "not-utf8": ("rejected", None),
    "byte-order-mark": ("rejected", None), "not-json": ("rejected", None),
    "duplicate-keys": ("rejected", None), "nan": ("rejected", None),
    "wrong-task-id": ("rejected", None), "wrong-task-version": ("rejected", None),
    "unknown-group": ("rejected", None), "entry-not-an-object": ("rejected", None),
    "order-not-a-list": ("rejected", None), "empty-rankings": ("no_file", None),
    "link-to-a-host-file": ("rejected", None),  # read as empty, never followed
    "rankings-keyed-by-group": ("recovered", "presented"),
}
GROUP_CONFINED = {"group-absent": "G2", "group-twice": "G1", "item-missing": "G1",
                  "item-repeated": "G1", "item-foreign": "G1"}


def presented_rho(group_id: str) -> float:
    """Spearman's rho of a group ranked in contract order (scipy: ties averaged)."""
    task = load_task(EXAMPLE_TWO_GROUPS)
    answers = load_answers(task.answers_path())
    items = next(g.items for g in task.contract.groups if g.group_id == group_id)
    values = [answers.groups[group_id][i] for i in items]
    return float(spearmanr(range(len(items)), values).statistic)


@pytest.mark.slow
@pytest.mark.parametrize("kind", [*WHOLE_FILE, *GROUP_CONFINED])
def test_a_malformed_submission_ends_as_the_rules_say_and_loses_nothing(kind,
                                                                        tmp_path) -> None:
    agent = tmp_path / "agent.py"
    agent.write_text(AGENT)
    agent.chmod(0o755)
    record = run_one(RunSpec(
        model=ModelConfig(name="random", provider="baseline"),
        harness=HarnessConfig(name="command", entrypoint=str(agent), args=[kind]),
        effort=EffortConfig(name="none"), task_dir=EXAMPLE_TWO_GROUPS,
        output_root=tmp_path / "outputs",
        sandbox=SandboxConfig(name="local" if have_bwrap() else "subprocess")))
    assert record.process.exit_code == 0, record.process
    weights = {"G1": 0.6, "G2": 0.4}
    if kind in WHOLE_FILE:
        outcome, recovered = WHOLE_FILE[kind]
        assert record.outcome.value == outcome
        assert record.score_strict == -1.0
        expected = -1.0 if recovered is None else sum(
            w * presented_rho(g) for g, w in weights.items())
        assert record.score_recovered == pytest.approx(expected, abs=1e-12)
        assert record.scored is (recovered is not None)
    else:
        bad = GROUP_CONFINED[kind]
        assert record.outcome.value == "valid" and record.scored
        assert record.grade is not None
        by_group = {g.group_id: g for g in record.grade.groups}
        assert by_group[bad].rho == -1.0 and by_group[bad].error
        good = next(g for g in weights if g != bad)
        assert by_group[good].error is None
        assert by_group[good].rho == pytest.approx(presented_rho(good), abs=1e-12)
        expected = weights[bad] * -1.0 + weights[good] * presented_rho(good)
        assert record.score_strict == pytest.approx(expected, abs=1e-12)  # weight kept
    run_dir = tmp_path / "outputs" / "runs" / record.run_key
    assert (run_dir / "output" / "report.md").read_text() == "# My reasoning\n"
    assert (run_dir / "output" / "scripts" / "fit.py").is_file()
    saved = json.loads((run_dir / "run.json").read_text())
    assert (saved["outcome"], saved["score_strict"]) == (record.outcome.value,
                                                         record.score_strict)
    assert set(json.loads((run_dir / "grade.json").read_text())) == {"strict", "recovered"}
    if kind == "link-to-a-host-file":  # never followed: the host file stays out of the run
        assert "root:" not in (run_dir / "grade.json").read_text()
