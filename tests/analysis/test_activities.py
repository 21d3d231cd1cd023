"""Activity and method-family labels (paper E.7), on hand-written calls and recorded sessions."""

from __future__ import annotations

import pytest

from spu.activities import METHOD_FAMILIES, RunContext, label_call
from spu.harness.trajectory.claude_code import read_claude_code_sessions
from spu.harness.trajectory.codex import read_codex_sessions
from spu.schema import Activity
from tests.harness.golden import scenario

BASH = "Bash"


def bash(command: str) -> dict:
    return {"command": command}


# One hand-written call per activity (Claude Code and Codex vocabularies).
ACTIVITY_CASES = [
    ("Task", {"prompt": "look up", "subagent_type": "general-purpose"}, "", "subagent"),
    ("spawn_agent", {"message": "x"}, "", "subagent"),
    ("mcp__spu__search", {"query": "suzuki yields"}, "[]", "web_search"),
    ("spu__search", {"query": "suzuki yields"}, "[]", "web_search"),
    ("WebSearch", {"query": "suzuki"}, "", "web_search"),
    ("web_search", {"type": "search", "query": "suzuki"}, "", "web_search"),
    ("mcp__spu__fetch", {"url": "https://pubs.acs.org/x"}, "text", "web_fetch"),
    ("WebFetch", {"url": "https://x.org", "prompt": "p"}, "", "web_fetch"),
    (BASH, bash("curl -sL https://www.ebi.ac.uk/x.fasta -o x.fasta"), "", "web_fetch"),
    (BASH, bash("pip install rdkit xtb-python"), "Successfully installed", "software_install"),
    ("exec_command", {"cmd": "apt-get install -y openbabel"}, "", "software_install"),
    (BASH, bash("python3 -c 'from rdkit import Chem; print(Chem.MolFromSmiles(\"C\"))'"),
     "<rdkit.Chem.rdchem.Mol>", "scientific_computation"),
    (BASH, bash("xtb mol.xyz --opt > xtb.log"), "normal termination", "scientific_computation"),
    (BASH, bash("python3 - <<'PY'\nimport json\njson.dump({}, open('/output/rankings.json','w'))"
                "\nPY"), "", "submission_files"),
    ("Write", {"file_path": "/output/report.md", "content": "# report"}, "", "submission_files"),
    (BASH, bash("python3 -c 'import pandas as pd; print(pd.read_csv(\"a.csv\").shape)'"),
     "(3, 4)", "other_python"),
    ("Write", {"file_path": "/workspace/model.py", "content": "x = 1"}, "", "code_writing"),
    ("apply_patch", {"input": "*** Begin Patch\n*** Add File: rank.py\n+x = 1\n*** End Patch"},
     "", "code_writing"),
    ("Write", {"file_path": "/workspace/notes.md", "content": "notes"}, "", "notes_and_data"),
    ("Read", {"file_path": "/task/targets.csv"}, "experiment_id", "reading_inputs"),
    (BASH, bash('cat "${SPU_TASK_DIR:-/task}/protocol.json"'), "{}", "reading_inputs"),
    (BASH, bash("nvidia-smi && nproc && free -g"), "H20", "environment_probe"),
    (BASH, bash("python3 -c 'import torch; print(torch.cuda.is_available())'"), "True",
     "environment_probe"),
    ("BashOutput", {"bash_id": "1"}, "running", "waiting"),
    (BASH, bash("sleep 60"), "", "waiting"),
    ("Read", {"file_path": "/workspace/xtb.log"}, "", "viewing_files"),
    (BASH, bash("ls -la /workspace"), "", "viewing_files"),
    (BASH, bash("cd /workspace && ls"), "", "viewing_files"),
    (BASH, bash("echo ---; tail -5 run.log"), "", "viewing_files"),
    ("TodoWrite", {"todos": []}, "", "planning"),
    ("update_plan", {"plan": []}, "", "planning"),
    (BASH, bash("date"), "Mon", "planning"),
    (BASH, bash("echo start; date"), "start\nMon", "planning"),
    ("mcp__spu__policy_stop", {"step": 3, "reason": "x"}, "", "other"),
    # Print-only commands view no file: E.7's "other" (issue 43, the hand label of
    # `echo checkpoint`), as is a change of directory alone.
    (BASH, bash("echo checkpoint"), "checkpoint", "other"),
    (BASH, bash("printf '%s\\n' done"), "done", "other"),
    (BASH, bash("cd /workspace"), "", "other"),
    (BASH, bash('echo "$SPU_TASK_DIR"'), "/task", "other"),
    ("SomethingNew", {}, "", "other"),
]


@pytest.mark.parametrize(("name", "args", "output", "expected"), ACTIVITY_CASES)
def test_activity_of_hand_written_calls(name, args, output, expected) -> None:
    assert label_call(name, args, output, RunContext()).activity.value == expected


def test_every_activity_has_a_case() -> None:
    assert {c[3] for c in ACTIVITY_CASES} == {a.value for a in Activity}


FAMILY_CASES = {
    "monte_carlo": "import numpy as np\nw = np.random.dirichlet(np.ones(3), size=1000)",
    "cheminformatics": "from rdkit import Chem",
    "semiempirical_qm": "from xtb.interface import Calculator",
    "dft": "from pyscf import gto, dft",
    "molecular_dynamics": "import openmm.app as app",
    "ml_potentials": "from mace.calculators import mace_mp",
    "docking": "from vina import Vina",
    "bioinformatics": "from Bio import pairwise2",
    "fitting_rate_equations": "from scipy.optimize import curve_fit\ncurve_fit(f, x, y)",
}


@pytest.mark.parametrize("family", METHOD_FAMILIES)
def test_family_of_a_script_that_ran(family) -> None:
    """A script credits its family when it runs, not when it is written."""
    ctx = RunContext()
    written = label_call("Write", {"file_path": "/workspace/s.py",
                                   "content": FAMILY_CASES[family]}, "ok", ctx)
    assert written.activity is Activity.code_writing and written.families == ()
    ran = label_call(BASH, bash("cd /workspace && python3 s.py"), "done", ctx)
    assert ran.activity is Activity.scientific_computation
    assert ran.families == (family,)


@pytest.mark.parametrize(("program", "family"), [
    ("obabel in.smi -O out.sdf --gen3d", "cheminformatics"), ("crest mol.xyz", "semiempirical_qm"),
    ("orca input.inp > out", "dft"), ("gmx mdrun -deffnm md", "molecular_dynamics"),
    ("vina --receptor r.pdbqt --ligand l.pdbqt", "docking"), ("mafft in.fa", "bioinformatics"),
])
def test_family_of_a_program_that_ran(program, family) -> None:
    assert label_call(BASH, bash(program), "done", RunContext()).families == (family,)


def test_look_alike_rdkit_script_only_written() -> None:
    """Writing a script that imports rdkit is code writing, no method family."""
    ctx = RunContext()
    label = label_call("Write", {"file_path": "/workspace/desc.py",
                                 "content": "from rdkit import Chem"}, "", ctx)
    assert label.activity is Activity.code_writing and not label.families
    cat = label_call(BASH, bash("cat /workspace/desc.py"), "from rdkit import Chem", ctx)
    assert cat.activity is Activity.viewing_files and not cat.families


def test_look_alike_pip_install_inside_python() -> None:
    """A pip install run from Python is an installation, not other Python."""
    code = "python3 -c \"import subprocess; subprocess.run(['pip', 'install', 'rdkit'])\""
    assert label_call(BASH, bash(code), "", RunContext()).activity is Activity.software_install
    code = "python3 -c \"import os; os.system('pip install xtb')\""
    assert label_call(BASH, bash(code), "", RunContext()).activity is Activity.software_install


def test_look_alike_curl_of_the_task_files() -> None:
    """A curl of the task's own files is reading the inputs, not a download."""
    for command in ("curl -s file:///task/targets.csv", "curl http://127.0.0.1:8000/task/x"):
        assert label_call(BASH, bash(command), "", RunContext()).activity is \
            Activity.reading_inputs


def test_program_that_did_not_run_is_no_family() -> None:
    assert label_call(BASH, bash("xtb mol.xyz"), "bash: xtb: command not found",
                      RunContext()).families == ()
    out = "ModuleNotFoundError: No module named 'rdkit'"
    label = label_call(BASH, bash("python3 -c 'from rdkit import Chem'"), out, RunContext())
    assert label.families == () and label.activity is Activity.other_python


def test_gpu_workload_confirmed_by_the_programs_output() -> None:
    code = "python3 -c \"import torch; x = torch.ones(3).cuda(); print(x.device)\""
    label = label_call(BASH, bash(code), "cuda:0", RunContext())
    assert label.gpu_workload and label.gpu_confirmed
    assert label.activity is Activity.scientific_computation
    failed = label_call(BASH, bash(code), "OSError: libcudart.so.12: cannot open shared object "
                        "file", RunContext())
    assert failed.gpu_workload and not failed.gpu_confirmed
    assert failed.gpu_errors == ("library_load",)
    probe = label_call(BASH, bash("nvidia-smi"), "NVIDIA H20", RunContext())
    assert probe.gpu_probe and not probe.gpu_workload and not probe.gpu_confirmed


def test_codex_shell_as_argv_and_background_jobs() -> None:
    label = label_call("shell", {"command": ["bash", "-lc", "nohup xtb m.xyz &"]}, "",
                       RunContext())
    assert label.families == ("semiempirical_qm",) and label.background


def test_recorded_claude_code_session_labels() -> None:
    reading = read_claude_code_sessions(scenario("claude_code", "subagent") / "projects")
    ctx = RunContext()
    labels = [label_call(c.name, c.arguments, c.output, ctx).activity.value
              for s in reading.trajectory.steps for c in s.tool_calls]
    assert labels == ["subagent", "reading_inputs", "submission_files", "submission_files"]


def test_recorded_codex_session_labels() -> None:
    reading = read_codex_sessions(scenario("codex", "presented_order") / "sessions")
    ctx = RunContext()
    labels = [label_call(c.name, c.arguments, c.output, ctx).activity.value
              for s in reading.trajectory.steps for c in s.tool_calls]
    assert labels == ["reading_inputs", "submission_files", "submission_files"]
