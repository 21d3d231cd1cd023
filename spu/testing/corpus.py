"""A corpus of run folders shaped like the paper's, built from recorded CLI sessions.

``python -m spu.testing.corpus --out DIR --runs 40`` writes ``DIR/runs/<run_key>/`` folders
as ``run_one`` leaves them (``run.json``, ``task/``, ``output/``, ``trajectory.jsonl.gz``,
``tools/audit.jsonl``) for ``spu analyze`` examples, tests and the benchmark, without
running an agent. Each trajectory starts from a session recorded with the real Claude
Code or Codex CLI (``tests/golden/cli_sessions``, or a built-in copy of its first calls
when the tests are not installed) and adds calls in that CLI's own tool vocabulary:
reading the inputs, probes, installs, searches and fetches through the audited tools,
scripts written then run (method families), notes, a first complete ranking in model
text, code or tool output, revisions, and the submission. Scores are graded against the
task's answer key, so the statistics have something to find. Everything is seeded.
"""

from __future__ import annotations

import argparse
import json
import shutil
import sys
from collections.abc import Sequence
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any, NamedTuple

import numpy as np

from spu.grading.rules import GradingKey
from spu.schema import (
    Outcome,
    RunRecord,
    SandboxInfo,
    ToolCall,
    Trajectory,
    TrajectoryStep,
    Usage,
)
from spu.tasks.package import TaskPackage, discover_tasks, load_answers, load_task
from spu.tracking.trajectories import TRAJECTORY_FILE, write_trajectory

CONFIGS: tuple[tuple[str, str, str], ...] = (
    ("opus55", "max", "claude_code"), ("opus5", "max", "claude_code"),
    ("sonnet55", "max", "claude_code"), ("deepseek", "max", "claude_code"),
    ("qwen38", "max", "claude_code"), ("astra", "max", "codex"), ("astra", "medium", "codex"),
)

SCRIPTS = {
    "cheminformatics": "from rdkit import Chem\nfrom rdkit.Chem import Descriptors\n"
                       "print([Descriptors.MolWt(Chem.MolFromSmiles(s)) for s in ['CCO']])\n",
    "semiempirical_qm": "import subprocess\nsubprocess.run(['xtb', 'mol.xyz', '--opt'])\n"
                        "from xtb.interface import Calculator\n",
    "dft": "from pyscf import gto, dft\nmol = gto.M(atom='H 0 0 0; H 0 0 0.74')\n"
           "print(dft.RKS(mol).kernel())\n",
    "molecular_dynamics": "import openmm\nfrom openmm import app\nprint('Platform: CUDA')\n",
    "ml_potentials": "from mace.calculators import mace_mp\ncalc = mace_mp()\n",
    "docking": "from vina import Vina\nv = Vina()\n",
    "bioinformatics": "from Bio import pairwise2\nfrom Bio.Seq import Seq\n",
    "fitting_rate_equations": "from scipy.optimize import curve_fit\n"
                              "from scipy.integrate import solve_ivp\n"
                              "popt, _ = curve_fit(lambda x, a: a * x, [1, 2], [2, 4])\n",
    "monte_carlo": "import numpy as np\nrng = np.random.default_rng(0)\n"
                   "w = rng.dirichlet(np.ones(4), size=10000)\n",
}
GPU_SCRIPT = "import torch\nx = torch.randn(4096, 4096, device='cuda')\nprint(x.device)\n"
URLS = ("https://pubs.acs.org/doi/10.1021/x", "https://pubchem.ncbi.nlm.nih.gov/compound/2244",
        "https://en.wikipedia.org/wiki/Suzuki_reaction", "https://github.com/rdkit/rdkit",
        "https://arxiv.org/abs/2401.00001", "https://www.example.org/page")
TYPED_TABLE = ("notes on the mechanism\nprior = {\n    'A': (1.2, 30),\n    'B': (2.5, 45),\n"
               "    'C': (0.8, 60),\n}\n")
"""A table of values typed in (paper 4.2), in the notes of some runs."""
RECOLLECTION = "\nRecollection: I recall a study of this kind; it may have shaped the order.\n"
"""A disclosed recollection (paper 3.7), in the report of some runs."""
QUERIES = ("suzuki coupling yield ligand", "\"ligand bite angle\" palladium -review",
           "site:nature.com cross coupling base", "xtb documentation")


class _Builder:
    """The steps of one synthetic trajectory in one CLI's vocabulary."""

    def __init__(self, harness: str, start: datetime, rng: np.random.Generator) -> None:
        self.harness, self.rng, self.now = harness, rng, start
        self.steps: list[TrajectoryStep] = []
        self.audit: list[dict[str, Any]] = []
        self.answers: list[str] = []
        """The answer of each audited call (``audit``'s), as the tools service gave it."""
        self.n_calls = 0

    def step(self, text: str | None = None, calls: Sequence[ToolCall] = (),
             reasoning: str | None = None, role: str = "assistant") -> None:
        self.n_calls += len(calls)
        self.now += timedelta(seconds=float(self.rng.exponential(20.0)) + 0.5)
        self.steps.append(TrajectoryStep(
            index=len(self.steps), timestamp=self.now.isoformat().replace("+00:00", "Z"),
            role=role, text=text, reasoning=reasoning, tool_calls=list(calls),  # type: ignore[arg-type]
            usage=Usage(input=200, cache_read=4000, output=int(self.rng.integers(50, 800)))
            if role == "assistant" else None))

    def shell(self, command: str, output: str) -> ToolCall:
        if self.harness == "codex":
            return ToolCall(name="exec_command", arguments={"cmd": command},
                            output=f"Process exited with code 0\nOutput:\n{output}")
        return ToolCall(name="Bash", arguments={"command": command, "description": "step"},
                        output=output)

    def write(self, path: str, content: str) -> ToolCall:
        if self.harness == "codex":
            body = "\n".join("+" + ln for ln in content.splitlines())
            return ToolCall(name="apply_patch",
                            arguments={"input": f"*** Begin Patch\n*** Add File: {path}\n{body}"
                                                "\n*** End Patch"}, output="Success.")
        return ToolCall(name="Write", arguments={"file_path": path, "content": content},
                        output=f"File created successfully at: {path}")

    def mcp(self, tool: str, args: dict[str, Any], output: str) -> ToolCall:
        name = f"mcp__spu__{tool}" if self.harness == "claude_code" else f"spu__{tool}"
        # SPEC 7's status; the one URL outside the corpus fails, as an offline fetch does
        failed = tool == "fetch" and "example.org" in str(args.get("url"))
        self.audit.append({"time": self.now.isoformat(), "tool": tool, "args": args,
                           "status": "error" if failed else "ok", "latency_s": 0.4,
                           "text_sha256": "0" * 64, "chars": len(output)})
        self.answers.append(output)
        return ToolCall(name=name, arguments=args, output=output)


def _ranking_json(task_id: str, orders: dict[str, list[str]]) -> str:
    return json.dumps({"task_id": task_id, "rankings": [
        {"group_id": g, "order": o} for g, o in orders.items()]})


def _shuffle(rng: np.random.Generator, orders: dict[str, list[str]], swaps: int
             ) -> dict[str, list[str]]:
    out = {g: list(o) for g, o in orders.items()}
    for _ in range(swaps):
        g = list(out)[int(rng.integers(len(out)))]
        if len(out[g]) > 1:
            i = int(rng.integers(len(out[g]) - 1))
            out[g][i], out[g][i + 1] = out[g][i + 1], out[g][i]
    return out


def opening_calls(recorded: Trajectory | None) -> int:
    """Tool calls every run of :func:`build_run` makes besides its working steps.

    The recorded session's first two steps, the read of the inputs and the probe, and
    the two submission files.
    """
    return (sum(len(s.tool_calls) for s in recorded.steps[:2]) if recorded else 0) + 4


def _draft_and_final(task: TaskPackage, rng: np.random.Generator,
                     submitted: dict[str, list[str]] | None
                     ) -> tuple[dict[str, list[str]], dict[str, list[str]]]:
    """A run's first draft and its submitted orders.

    Drawn from the presented order; or, given ``submitted``, the draft one to three swaps
    from it (or it), half the time each.
    """
    if submitted is None:
        presented = {g.group_id: list(g.items) for g in task.contract.groups}
        draft = _shuffle(rng, presented, 3 + int(rng.integers(6)))
        final = _shuffle(rng, draft, int(rng.integers(0, 4))) if rng.random() < 0.5 else draft
    else:
        final = {g: list(o) for g, o in submitted.items()}
        draft = _shuffle(rng, final, 1 + int(rng.integers(3))) if rng.random() < 0.5 else final
    return draft, final


def _write_draft(b: _Builder, where: str, text: str) -> None:
    """The first complete ranking, in the model's text, a file it writes, or a tool's output."""
    if where == "model_text":
        b.step(f"My first complete ranking:\n{text}")
    elif where == "tool_call":
        b.step(None, [b.write("/workspace/draft.json", text)])
    else:
        b.step(None, [b.shell("python3 rank.py", text)])


def _work_step(b: _Builder, rng: np.random.Generator, r: float, room: int,
               families: list[str], use_gpu: bool, notes: str, blob: str) -> None:
    """One working step, chosen by the draw ``r``.

    A search, a fetch, a method script, GPU work, an install, notes, a look at data, a
    wait, or a thought; ``room`` is the calls left, so that a two-call step fits.
    """
    if r < 0.15:
        q = QUERIES[int(rng.integers(len(QUERIES)))]
        b.step(None, [b.mcp("search", {"query": q}, "[{\"url\": \"...\"}]")])
    elif r < 0.27:
        url = URLS[int(rng.integers(len(URLS)))]
        b.step(None, [b.mcp("fetch", {"url": url}, "page text " + blob)])
    elif r < 0.47 and families and room >= 2:
        family = families[int(rng.integers(len(families)))]
        name = f"/workspace/{family}.py"
        b.step(None, [b.write(name, SCRIPTS[family])])
        b.step(None, [b.shell(f"cd /workspace && python3 {name}", "done " + blob)])
    elif r < 0.52 and use_gpu and room >= 2:
        b.step(None, [b.write("/workspace/gpu.py", GPU_SCRIPT)])
        failed = rng.random() < 0.3
        b.step(None, [b.shell("python3 /workspace/gpu.py",
                              "OSError: libcudart.so.12: cannot open shared object file"
                              if failed else "cuda:0")])
    elif r < 0.57:
        b.step(None, [b.shell("pip install rdkit", "Successfully installed rdkit")])
    elif r < 0.67:
        b.step(None, [b.write("/workspace/notes.md", notes)])
    elif r < 0.77:
        b.step(None, [b.shell("python3 -c 'import pandas as pd; "
                              "print(pd.read_csv(\"/workspace/x.csv\").describe())'",
                              "count 12 " + blob)])
    elif r < 0.85:
        b.step(None, [b.shell("ls -la /workspace && head -5 /workspace/x.csv", "a b c")])
    elif r < 0.9:
        b.step(None, [b.shell("sleep 30; tail -5 /workspace/job.log", "step 400")])
    else:
        b.step("Thinking about the proxy.", reasoning="The endpoint is governed by ...")


def _submit(b: _Builder, rng: np.random.Generator, rankings: str, recalls: bool) -> str:
    """The closing steps (the submission, the report, the last word); the report's text.

    The report's stated expectation is drawn; ``recalls`` adds a recollection.
    """
    b.step(None, [b.shell(f"cat > /output/rankings.json <<'EOF'\n{rankings}\nEOF", "")])
    stated = round(float(rng.uniform(0.2, 0.8)), 2) if rng.random() < 0.3 else None
    report = "# Report\n\nRanked by a proxy.\n" + (
        f"Expected Spearman correlation: {stated}\n" if stated is not None else "") + (
        RECOLLECTION if recalls else "")
    b.step(None, [b.write("/output/report.md", report)])
    b.step("Submitted.")
    return report


class BuiltRun(NamedTuple):
    """What :func:`build_run` makes of one run."""

    trajectory: Trajectory
    final: dict[str, list[str]]
    """The submitted orders, group by group."""
    audit: list[dict[str, Any]]
    """The audit lines of its search and fetch calls (``tools/audit.jsonl``)."""
    report: str
    """``output/report.md``."""
    answers: list[str]
    """The answer of each audited call, in ``audit``'s order."""


def save_trajectory(folder: Path, trajectory: Trajectory) -> Path:
    """Write ``trajectory`` into a run folder as the runner does (``trajectory.jsonl.gz``).

    The simulated study (:mod:`spu.stats.simulate`) writes its run folders' trajectories
    through it, so that statistics never import the tracking stage's file format.
    """
    return write_trajectory(folder / TRAJECTORY_FILE, trajectory)


def build_run(task: TaskPackage, key: GradingKey | None, config: tuple[str, str, str],
              calls: int, rng: np.random.Generator, start: datetime,
              recorded: Trajectory | None = None, output_blob: int = 0,
              exact: bool = False, *, submitted: dict[str, list[str]] | None = None,
              use_gpu: bool | None = None
              ) -> BuiltRun:
    """One synthetic trajectory, its submitted orders, audit lines, report text and answers.

    ``calls`` working steps; with ``exact``, working steps until the trajectory holds
    exactly ``calls`` tool calls in all (at least :func:`opening_calls`). ``submitted``
    fixes the orders the run submits (the first draft is then one to three swaps from
    them, or them, half the time each); ``use_gpu`` whether it tries GPU work (default:
    one run in four). Without them the run draws as it always did.
    """
    model, effort, harness = config
    b = _Builder(harness, start, rng)
    # Draws of their own, so the runs draw everything else as before they were added.
    own = np.random.default_rng([int(start.timestamp()), 26])
    typed = own.random() < 0.22  # paper 4.2: 22% of runs type in a table of values
    recalls = own.random() < 0.42  # paper 3.7: 42% of reports disclose a recollection
    if recorded is not None:  # the recorded session's opening, as the CLI wrote it
        for s in recorded.steps[:2]:
            b.step(s.text, s.tool_calls, s.reasoning, role=s.role)
    else:
        b.step("# Task: predict how real experiments turned out", role="user")
    # exact: working steps, drawn as below, until they made ``budget`` calls
    budget = max(calls - opening_calls(recorded), 0) if exact else None
    if budget is not None:
        calls = budget
    b.step("Reading the task files.", [b.shell('cat "${SPU_TASK_DIR:-/task}/targets.csv"',
                                               "experiment_id,group_id\n")])
    b.step(None, [b.shell("nvidia-smi; nproc; free -g", "NVIDIA H20 | 0MiB / 97871MiB")])
    families = [f for f in SCRIPTS if rng.random() < 0.35]
    drawn_gpu = rng.random() < 0.25
    use_gpu = drawn_gpu if use_gpu is None else use_gpu
    draft, final = _draft_and_final(task, rng, submitted)
    draft_at = int(rng.integers(calls // 4, max(calls // 4 + 1, calls - 3)))
    where = rng.choice(["model_text", "tool_call", "tool_output"])
    blob = "x" * output_blob
    k = 0
    before = b.n_calls
    drafted = False
    while k < calls if budget is None else b.n_calls - before < budget:
        r = rng.random()
        room = 2 if budget is None else budget - (b.n_calls - before)
        due = k == draft_at if budget is None else not drafted and (k >= draft_at or room <= 1)
        if due:
            drafted = True
            _write_draft(b, where, _ranking_json(task.id, draft))
        else:
            _work_step(b, rng, r, room, families, use_gpu, TYPED_TABLE if typed else
                       "notes on the mechanism", blob)
        k += 1
    report = _submit(b, rng, _ranking_json(task.id, final), recalls)
    trajectory = Trajectory(harness=harness, cli_version="corpus", steps=b.steps)
    return BuiltRun(trajectory, final, b.audit, report, b.answers)


def _recorded(harness: str) -> Trajectory | None:
    root = Path(__file__).resolve().parents[2] / "tests" / "golden" / "cli_sessions" / harness
    try:
        if harness == "claude_code":
            from spu.harness.trajectory.claude_code import read_claude_code_sessions
            return read_claude_code_sessions(root / "presented_order" / "projects").trajectory
        from spu.harness.trajectory.codex import read_codex_sessions
        return read_codex_sessions(root / "presented_order" / "sessions").trajectory
    except OSError:
        return None


def call_targets(rng: np.random.Generator, n_runs: int, total: int, minimum: int) -> np.ndarray:
    """Tool calls of each run, adding up to ``total`` exactly.

    Poisson around the mean, at least ``minimum``; the difference to ``total`` is spread
    one call at a time over random runs.

    Examples
    --------
    >>> t = call_targets(np.random.default_rng(0), 1155, 227_103, 10)
    >>> int(t.sum()), bool(t.min() >= 10)
    (227103, True)
    """
    if total < minimum * n_runs:
        raise ValueError(f"{total} tool calls cannot make {n_runs} runs of at least {minimum}")
    n = np.maximum(rng.poisson(total / n_runs, n_runs), minimum)
    left = total - int(n.sum())
    while left:
        i = int(rng.integers(n_runs))
        change = 1 if left > 0 else -1
        if n[i] + change >= minimum:
            n[i] += change
            left -= change
    return n


STREAM_API = {"claude_code": ("anthropic", "messages"), "codex": ("openai", "responses")}
"""Each CLI's provider API and the gateway endpoint its turns go to."""


def _stream_events(harness: str, step: TrajectoryStep) -> list[dict[str, Any]]:
    """A step as the CLI's own standard output streams it (``stream-json``, ``--json``).

    Shaped like the real events, with the step's texts, arguments and outputs: what
    matters here is what a run folder holds and how much, not every field of a CLI.
    """
    if harness == "codex":
        items: list[dict[str, Any]] = []
        if step.reasoning:
            items.append({"type": "reasoning", "text": step.reasoning})
        if step.text:
            items.append({"type": "agent_message", "text": step.text})
        items += [{"type": "command_execution", "command": c.arguments,
                   "aggregated_output": c.output, "exit_code": 1 if c.is_error else 0,
                   "name": c.name, "id": c.id} for c in step.tool_calls]
        return [{"type": "item.completed", "item": {"id": f"item_{step.index}_{n}", **item}}
                for n, item in enumerate(items)]
    content: list[dict[str, Any]] = []
    if step.reasoning:
        content.append({"type": "thinking", "thinking": step.reasoning})
    if step.text:
        content.append({"type": "text", "text": step.text})
    content += [{"type": "tool_use", "id": c.id, "name": c.name, "input": c.arguments}
                for c in step.tool_calls]
    usage = step.usage.model_dump() if step.usage is not None else None
    events = [{"type": step.role if step.role in ("assistant", "user") else "system",
               "message": {"role": step.role, "content": content, "usage": usage}}]
    if step.tool_calls:
        events.append({"type": "user", "message": {"role": "user", "content": [
            {"type": "tool_result", "tool_use_id": c.id, "content": c.output,
             "is_error": c.is_error} for c in step.tool_calls]}})
    return events


def write_run_files(folder: Path, run: BuiltRun, config: tuple[str, str, str],
                    key: GradingKey | None, submission: str) -> None:
    """Give a corpus folder what ``run_one`` also leaves in a run folder.

    The CLI's standard output (``logs/agent.stdout``), the model gateway's record of each
    turn (``model/requests.jsonl``, ``model/gateway.json``), the tools service's audit log
    with the full answer of each call (``tools/calls/``, written by the service's own
    :class:`~spu.tools.audit.AuditLog`), its egress files and ``grade.json`` (graded by
    the task's key). Every value is derived from the run, none drawn: a corpus is the
    same with these files or without them.
    """
    from spu.schema import GatewayRequest
    from spu.tools.audit import AuditLog

    api, endpoint = STREAM_API[config[2]]
    (folder / "logs").mkdir(exist_ok=True)
    (folder / "model").mkdir(exist_ok=True)
    with open(folder / "logs" / "agent.stdout", "w", encoding="utf-8") as out:
        for step in run.trajectory.steps:
            out.writelines(json.dumps(event) + "\n" for event in _stream_events(config[2], step))
    (folder / "logs" / "agent.stderr").write_text("")
    requests, context = [], 0
    for step in run.trajectory.steps:
        if step.role != "assistant" or step.usage is None:
            continue
        latency = 1.0 + step.usage.output / 60  # the answer streams at about 60 tokens/s
        asked = datetime.fromisoformat(step.timestamp or "") - timedelta(seconds=latency)
        answered = sum(len(c.output or "") for c in step.tool_calls)
        context += 4 * (step.usage.output + step.usage.input) + answered
        requests.append(GatewayRequest(
            time=asked.isoformat(timespec="milliseconds"), endpoint=endpoint,
            model=config[0], status=200, latency_s=round(latency, 3), ttfb_s=0.8,
            usage=step.usage, stop_reason="tool_use" if step.tool_calls else "end_turn",
            bytes_in=20_000 + context, bytes_out=400 + 4 * step.usage.output, stream=True))
    (folder / "model" / "requests.jsonl").write_text(
        "".join(r.model_dump_json() + "\n" for r in requests))
    (folder / "model" / "gateway.json").write_text(json.dumps(
        {"port": 0, "api": api, "upstream": "http://127.0.0.1:0", "api_model": config[0],
         "max_cost_usd": None}, indent=1))
    tools = folder / "tools"
    (tools / "audit.jsonl").write_text("")  # the service's own lines instead
    audit = AuditLog(tools)
    for entry, answer in zip(run.audit, run.answers, strict=True):
        audit.write(audit.next_call(), entry["tool"], entry["args"], entry["status"],
                    entry["latency_s"], answer, started=entry["time"])
    for name, value in (("egress.allow.json", ["127.0.0.1:0"]),
                        ("egress.deny.json", ["127.0.0.1"]),
                        ("egress.deny_addresses.json", ["127.0.0.1"]),
                        ("endpoints.json", {"policy": "record", "provider": "offline"})):
        (tools / name).write_text(json.dumps(value))
    (tools / "egress.jsonl").write_text("")
    if key is not None:
        data = submission.encode()
        (folder / "grade.json").write_text(json.dumps(
            {"strict": key.grade(data).model_dump(mode="json"),
             "recovered": key.grade(data, recover=True).model_dump(mode="json")}, indent=1))


def make_corpus(out: Path, n_runs: int, task_root: Path = Path("tasks"), calls: int = 40,
                seed: int = 0, output_blob: int = 0, repeats: int = 0,
                total_calls: int | None = None, run_files: bool = False) -> list[Path]:
    """Write ``n_runs`` run folders under ``out/runs`` (configurations x tasks, cycled).

    ``calls`` is the mean number of working steps per run; ``total_calls`` instead fixes
    the corpus's tool calls exactly (the paper's 1,155 runs hold 227,103); ``output_blob``
    pads some tool outputs with that many characters (for memory tests); ``repeats``
    adds repeated runs; ``run_files`` adds what a run folder holds beside
    (:func:`write_run_files`: the CLI's output, the gateway's record, the tools' answers).
    """
    rng = np.random.default_rng(seed)
    tasks = [load_task(p) for p in discover_tasks(task_root)]
    keys: dict[str, GradingKey | None] = {}
    for t in tasks:
        try:
            keys[t.id] = GradingKey.build(t.contract, load_answers(t.answers_path()))
        except (OSError, ValueError):
            keys[t.id] = None
    recorded = {h: _recorded(h) for h in ("claude_code", "codex")}
    targets = None
    if total_calls is not None:  # a generator of its own: the runs draw as without it
        least = max(opening_calls(r) for r in recorded.values()) + 2
        targets = call_targets(np.random.default_rng([seed, 1]), n_runs, total_calls, least)
    folders = []
    start = datetime(2026, 11, 1, tzinfo=UTC)
    for i in range(n_runs):
        # every configuration on each task in turn, so tasks hold several configurations
        config = CONFIGS[i % len(CONFIGS)]
        task = tasks[(i // len(CONFIGS)) % len(tasks)]
        repeat = 0 if i < n_runs - repeats else 1 + i % 5
        n_calls = max(6, int(rng.poisson(calls))) if targets is None else int(targets[i])
        built = build_run(task, keys[task.id], config, n_calls, rng, start,
                          recorded[config[2]], output_blob, exact=targets is not None)
        trajectory, final, audit, report, _ = built
        run_key = f"{i:05d}-{task.id}-{config[0]}-{config[1]}-{repeat}"
        folder = out / "runs" / run_key
        if folder.exists():
            shutil.rmtree(folder)
        (folder / "task").mkdir(parents=True)
        (folder / "output").mkdir()
        (folder / "tools").mkdir()
        shutil.copy(task.path / "contract.json", folder / "task" / "contract.json")
        shutil.copy(task.path / "targets.csv", folder / "task" / "targets.csv")
        submission = _ranking_json(task.id, final)
        (folder / "output" / "rankings.json").write_text(submission)
        (folder / "output" / "report.md").write_text(report)
        (folder / "tools" / "audit.jsonl").write_text("".join(json.dumps(a) + "\n"
                                                              for a in audit))
        save_trajectory(folder, trajectory)
        key = keys[task.id]
        score = key.score_orders(final) if key is not None else 0.0
        span = (datetime.fromisoformat(trajectory.steps[-1].timestamp or "") -
                datetime.fromisoformat(trajectory.steps[0].timestamp or "")).total_seconds()
        record = RunRecord(
            run_key=run_key, task_id=task.id, task_version=task.version,
            discipline=task.meta.discipline.value, subfield=task.meta.subfield,
            visibility=task.meta.visibility.value, model=config[0], harness=config[2],
            effort=config[1], repeat=repeat, config=f"{config[0]}-{config[1]}",
            outcome=Outcome.valid, scored=True, score_strict=score, score_recovered=score,
            runtime_s=span, tool_calls=sum(len(s.tool_calls) for s in trajectory.steps),
            sandbox=SandboxInfo(backend="local"), usage=Usage(output=1000))
        (folder / "run.json").write_text(record.model_dump_json(indent=1))
        if run_files:
            write_run_files(folder, built, config, key, submission)
        folders.append(folder)
        start += timedelta(hours=1)
    return folders


def main(argv: Sequence[str] | None = None) -> int:
    """``python -m spu.testing.corpus --out DIR [--runs N] [--calls N | --total-calls N]``."""
    p = argparse.ArgumentParser(prog="python -m spu.testing.corpus", description=__doc__)
    p.add_argument("--out", type=Path, required=True)
    p.add_argument("--runs", type=int, default=40)
    p.add_argument("--calls", type=int, default=40, help="mean working steps per run")
    p.add_argument("--total-calls", type=int, default=None,
                   help="tool calls of the whole corpus, exactly (the paper: 227103)")
    p.add_argument("--tasks", type=Path, default=Path("tasks"))
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--run-files", action="store_true",
                   help="also write what a run folder holds beside: the CLI's output "
                        "(logs/), the gateway's record (model/), the tools' answers")
    args = p.parse_args(argv)
    folders = make_corpus(args.out, args.runs, args.tasks, args.calls, args.seed,
                          total_calls=args.total_calls, run_files=args.run_files)
    print(f"wrote {len(folders)} run folders under {args.out / 'runs'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
