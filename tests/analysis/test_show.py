"""Issue 25: ``spu show`` and ``spu compare`` read recorded runs in the terminal."""

from __future__ import annotations

import json
from pathlib import Path

from spu.schema import RunRecord
from spu.testing.corpus import make_corpus
from spu.tracking.trajectories import iter_steps
from tests.conftest import REPO, run_module


def _record(folder: Path) -> RunRecord:
    return RunRecord.model_validate_json((folder / "run.json").read_text())


def test_show_prints_the_summary_then_steps_and_filters_them(tmp_path) -> None:
    """``spu show RUN_KEY``: the summary, then every tool call; ``--step N`` one step,
    ``--grep TEXT`` the steps that mention it; ``spu compare`` two runs of one task."""
    folders = make_corpus(tmp_path / "outputs", 7, task_root=REPO / "tasks", calls=12, seed=3)
    first = folders[0]
    record = _record(first)
    steps = list(iter_steps(first / "trajectory.jsonl.gz"))
    out = str(tmp_path / "outputs")
    shown = run_module(["spu", "show", record.run_key, "--output-root", out])
    assert shown.returncode == 0, shown.stderr
    assert shown.stdout.startswith(f"run {record.run_key}: {record.task_id}")
    for call in (c for s in steps for c in s.tool_calls):
        assert f"-> {call.name}" in shown.stdout
    one = run_module(["spu", "show", record.run_key, "--output-root", out, "--step", "3"])
    assert "#3 " in one.stdout and "#4 " not in one.stdout
    name = steps[-1].tool_calls[0].name if steps[-1].tool_calls else steps[1].tool_calls[0].name
    grep = run_module(["spu", "show", record.run_key, "--output-root", out, "--grep", name])
    assert grep.stdout.count(f"-> {name}") >= 1
    assert grep.stdout.count("\n#") < shown.stdout.count("\n#")
    same_task = [f for f in folders[1:] if _record(f).task_id == record.task_id]
    other = _record(same_task[0])
    compared = run_module(["spu", "compare", record.run_key, other.run_key, "--output-root",
                           out])
    assert compared.returncode == 0, compared.stderr
    assert f"A = {record.run_key}" in compared.stdout and "activity time shares:" in \
        compared.stdout
    for g in json.loads((first / "output" / "rankings.json").read_text())["rankings"]:
        assert f"group {g['group_id']}:" in compared.stdout
    missing = run_module(["spu", "show", "nope", "--output-root", out])
    assert missing.returncode == 2 and "no such run" in missing.stderr


ATTACKS = {
    "clear": "\x1b[2J\x1b[H",
    "title": "\x1b]0;pwned\x07",
    "clipboard": "\x1b]52;c;cm0gLXJmIH4=\x07",  # "rm -rf ~"
    "hidden-link": "\x1b]8;;http://127.0.0.1:8765/x\x1b\\click\x1b]8;;\x1b\\",
    "c1-csi": "\x9b2J",
    "overwrite": "\rvalid · score 0.991\b\b",
    "bidi": "\u202etxt.exe",
    "surrogate": "\ud800",
}
"""What an agent writes to act on the operator's terminal (issue 41, V2/V3)."""


def test_show_and_compare_print_what_the_agent_wrote_as_text(tmp_path) -> None:
    """Invariant: ``spu show`` and ``spu compare`` print the agent's texts (messages,
    reasoning, tool names, arguments and outputs, a sub-agent's name, group ids and items
    of its ``rankings.json``) with every control character escaped: the terminal gets no
    escape sequence, no C1 control, no carriage return or backspace, no bidirectional
    control, and a lone surrogate does not stop the command."""
    import subprocess
    import sys

    from spu.schema import ToolCall, Trajectory, TrajectoryStep
    from spu.tracking.trajectories import read_trajectory, write_trajectory

    folders = make_corpus(tmp_path / "outputs", 7, task_root=REPO / "tasks", calls=4, seed=3)
    first, record = folders[0], _record(folders[0])
    other = next(_record(f) for f in folders[1:] if _record(f).task_id == record.task_id)
    payload = " ".join(f"{k}:{v}" for k, v in ATTACKS.items())
    old = read_trajectory(first / "trajectory.jsonl.gz")
    steps = [TrajectoryStep(index=0, text=payload, reasoning=payload, agent=payload,
                            tool_calls=[ToolCall(name="Bash" + ATTACKS["title"],
                                                 arguments={"command": payload},
                                                 output=payload)])]
    write_trajectory(first / "trajectory.jsonl.gz",
                     Trajectory(harness=old.harness, steps=steps, usage=old.usage))
    rankings = json.loads((first / "output" / "rankings.json").read_text())
    rankings["rankings"].append({"group_id": "G" + ATTACKS["clear"] + ATTACKS["clipboard"],
                                 "order": ["E1" + ATTACKS["hidden-link"], "E2\x9b2J"]})
    (first / "output" / "rankings.json").write_text(json.dumps(rankings))
    out = str(tmp_path / "outputs")
    printed = {}
    for args in (["show", record.run_key], ["compare", record.run_key, other.run_key]):
        done = subprocess.run([sys.executable, "-m", "spu", *args, "--output-root", out],
                              capture_output=True, timeout=120)
        assert done.returncode == 0, done.stderr.decode(errors="replace")
        text = printed[args[0]] = done.stdout.decode("utf-8")
        bad = sorted({hex(ord(c)) for c in text if (ord(c) < 0x20 and c not in "\n\t")
                      or 0x7f <= ord(c) <= 0x9f or 0x202a <= ord(c) <= 0x202e})
        assert bad == [], f"spu {args[0]} printed control characters {bad}"
        assert "\\x1b]52;c;cm0gLXJmIH4=\\x07" in text and "\\x1b[2J" in text
    assert "\\u202etxt.exe" in printed["show"] and "\\x08\\x08" in printed["show"]
    assert "\\x9b2J" in printed["compare"] and "\\x1b]8;;http" in printed["compare"]
