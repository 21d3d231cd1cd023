"""A hand-labelled trajectory: the labeller against a person's labels (issue 43, gap 6).

Thirty tool calls of one run, in order, written as a Claude Code agent makes them, each
with the activity a person gives it from the definitions of paper appendix E.7 (l.777):
"Each tool call receives one primary activity by a fixed priority: subagent, web search,
web fetch or shell download, software installation, scientific computation, submission
files, other Python, code writing, notes and data files, reading the task inputs,
environment probes, waiting and monitoring, viewing files, planning and time checks, and
other. Scientific computation is executed Python that imports a module of a method
family [...] or a program of a method family that actually runs."

The hand labels read "viewing files" as reading a file's contents or a folder's listing,
so a command that only prints or changes directory (``echo``, ``printf``, ``cd``,
``true``) is ``other``; a script is credited when it runs, not when it is written. The
calls go through one :class:`~spu.activities.RunContext`, as ``spu analyze`` reads a run.
"""

from __future__ import annotations

from typing import Any

import pytest

from spu.activities import RunContext, label_call


def _bash(command: str) -> dict[str, Any]:
    return {"command": command}


TRAJECTORY: list[tuple[str, dict[str, Any], str, str]] = [
    # (tool, arguments, output, hand label)
    ("TodoWrite", {"todos": [{"content": "read the task", "status": "pending"}]}, "",
     "planning"),
    ("Bash", _bash("echo checkpoint"), "checkpoint", "other"),
    ("Read", {"file_path": "/task/instruction.md"}, "Rank the catalysts", "reading_inputs"),
    ("Bash", _bash("head -5 /task/targets.csv"), "experiment_id,group_id", "reading_inputs"),
    ("Bash", _bash("nvidia-smi && nproc"), "NVIDIA H20\n16", "environment_probe"),
    ("Bash", _bash("cd /workspace"), "", "other"),
    ("Bash", _bash("printf '%s\\n' starting"), "starting", "other"),
    ("mcp__spu__search", {"query": "Suzuki coupling Pd ligand yield trend"}, "[]",
     "web_search"),
    ("mcp__spu__fetch", {"url": "https://pubs.acs.org/doi/10.1021/x"}, "abstract",
     "web_fetch"),
    ("Bash", _bash("curl -sL https://files.rcsb.org/download/1ABC.pdb -o 1abc.pdb"), "",
     "web_fetch"),
    ("Bash", _bash("pip install rdkit"), "Successfully installed rdkit", "software_install"),
    ("Write", {"file_path": "/workspace/notes.md", "content": "ligand bite angle matters"},
     "ok", "notes_and_data"),
    ("Write", {"file_path": "/workspace/descriptors.py",
               "content": "from rdkit import Chem\nfrom rdkit.Chem import Descriptors\n"
                          "print(Descriptors.MolWt(Chem.MolFromSmiles('CCO')))\n"},
     "ok", "code_writing"),
    ("Bash", _bash("python3 descriptors.py"), "46.07", "scientific_computation"),
    ("Bash", _bash("ls -la /workspace"), "notes.md descriptors.py", "viewing_files"),
    ("Bash", _bash("true"), "", "other"),
    ("Bash", _bash("python3 -c 'import pandas as pd; print(pd.read_csv(\"feat.csv\").shape)'"),
     "(12, 4)", "other_python"),
    ("Bash", _bash("xtb mol.xyz --opt > xtb.log"), "normal termination of xtb",
     "scientific_computation"),
    ("Bash", _bash("sleep 30"), "", "waiting"),
    ("Bash", _bash("tail -20 xtb.log"), "TOTAL ENERGY", "viewing_files"),
    ("Read", {"file_path": "/workspace/xtb.log"}, "TOTAL ENERGY", "viewing_files"),
    ("Grep", {"pattern": "TOTAL ENERGY", "path": "/workspace"}, "xtb.log", "viewing_files"),
    ("Bash", _bash("echo ---; cat /workspace/notes.md"), "---\nligand", "viewing_files"),
    ("Bash", _bash("date"), "Mon Jan  5 10:00:00 UTC 2026", "planning"),
    ("Task", {"prompt": "check the literature trend", "subagent_type": "general-purpose"},
     "done", "subagent"),
    ("Write", {"file_path": "/workspace/rank.py",
               "content": "import json\nscores = {'a': 1.0}\nprint(sorted(scores))\n"},
     "ok", "code_writing"),
    ("Bash", _bash("python3 rank.py"), "['a']", "other_python"),
    ("Bash", _bash("python3 - <<'PY'\nimport json\njson.dump({'groups': {}}, "
                   "open('/output/rankings.json', 'w'))\nPY"), "", "submission_files"),
    ("Write", {"file_path": "/output/report.md", "content": "# Report\nExpected rho 0.4"},
     "ok", "submission_files"),
    ("Bash", _bash('echo "done: $SPU_TASK_DIR"'), "done: /task", "other"),
]
"""Thirty calls of one run with their hand labels."""

DISAGREEMENTS: dict[int, str] = {}
"""Calls (index into :data:`TRAJECTORY`) where the labeller and the hand label differ,
with why; each is an expected failure below."""


def _labels() -> list[str]:
    ctx = RunContext()
    return [label_call(name, args, output, ctx).activity.value
            for name, args, output, _ in TRAJECTORY]


def test_the_trajectory_is_thirty_calls_covering_the_activities_a_run_shows() -> None:
    assert len(TRAJECTORY) == 30
    hand = {label for *_, label in TRAJECTORY}
    assert hand >= {"viewing_files", "code_writing", "scientific_computation", "web_search",
                    "web_fetch", "other", "reading_inputs", "submission_files", "planning",
                    "waiting", "environment_probe", "software_install", "notes_and_data",
                    "other_python", "subagent"}
    print_only = [i for i, (_, args, _, _) in enumerate(TRAJECTORY)
                  if str(args.get("command", "")).split(" ")[0] in ("echo", "printf", "cd",
                                                                   "true")]
    assert len(print_only) >= 5


@pytest.mark.parametrize("index", [
    pytest.param(i, marks=pytest.mark.xfail(strict=True, reason=DISAGREEMENTS[i]))
    if i in DISAGREEMENTS else i for i in range(len(TRAJECTORY))])
def test_the_labeller_agrees_with_the_hand_label(index: int) -> None:
    """Each call's label, the run's earlier calls read first (a script is credited when it
    runs: ``python3 descriptors.py`` is scientific computation because the file written
    two calls before imports RDKit, ``python3 rank.py`` other Python)."""
    name, args, _, hand = TRAJECTORY[index]
    assert _labels()[index] == hand, (name, args)


def test_all_thirty_agree() -> None:
    """The whole trajectory: 30 of 30 calls agree (no disagreement to document)."""
    labels = _labels()
    wrong = [(i, TRAJECTORY[i][3], got) for i, got in enumerate(labels)
             if got != TRAJECTORY[i][3] and i not in DISAGREEMENTS]
    assert not wrong
    assert sum(got == TRAJECTORY[i][3] for i, got in enumerate(labels)) == 30 - len(
        DISAGREEMENTS)
