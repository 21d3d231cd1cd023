"""``model=consensus``: each task's submission is the mean rank of other configurations'.

The paper's consensus (E.8: "+0.081 over the average submission") as a configuration
of its own, run, graded, sealed and recorded like any other::

    spu model=consensus harness=consensus consensus.members=[opus5-max,astra-medium] \
        -m task="glob(*)"

For each task, every member's **official submission** is read: the ``rankings.json``
of its repeat-0 run on that task (same task id; the same ``task_digest`` preferred,
then the same version) under ``consensus.runs`` (an output root; default
``output_root``). A member is named by configuration label (``opus5-max``) or by run
key (that one run, for its own task). The consensus orders each group's items by their
mean position over the members that ordered the group completely; **ties go to the
item id, ascending** (the rule of :func:`spu.stats.agreement.consensus_orders`, with
no randomness). ``consensus.leave_out=LABEL`` drops one member: the leave-one-out
consensus.

Its configuration label is ``consensus-none-<label>``: ``consensus.label``, else the
number of members and a short hash of their names (:func:`consensus_label`), so two
consensus configurations never share a label. The run's identity names its members'
run keys (``harness.args`` of the identity read ``member=<label>:<run_key>``, then
``leave_out=<label>``), so a member that reruns, or a new member, gives the consensus a
new run key. The submission is computed on the
host and copied into the output folder by a standard-library agent
(``agents/consensus_agent.py``) inside the sandbox, so grading, sealing, the ledger
and tracking follow the path of every run. A task no member has a submission for ends
``no_file``.
"""

from __future__ import annotations

import json
import re
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from spu.harness.base import AgentContext, HarnessError
from spu.harness.command import AGENT_DIR, CommandHarness
from spu.sandbox.base import Sandbox

AGENT_SCRIPT = Path(__file__).parent / "agents" / "consensus_agent.py"
SUBMISSION_DIR = "consensus"
"""Folder under ``<workspace>/.agent/`` holding the submission the agent copies out."""
MEMBER_PREFIX = "member="
LEAVE_OUT_PREFIX = "leave_out="
RUN_KEY = re.compile(r"^[0-9a-f]{16}$")
"""What a member named by run key looks like (:data:`spu.identity.KEY_HEX_DIGITS`)."""
TIE_RULE = "mean position over the members, ties by item id ascending"


@dataclass(frozen=True)
class MemberRun:
    """One member's official run on a task."""

    member: str
    """The member as named in ``consensus.members``."""
    run_key: str
    run_dir: Path


def _opt(node: Any, name: str) -> Any:
    getter = getattr(node, "get", None)
    if callable(getter) and not hasattr(type(node), "__dataclass_fields__"):
        return getter(name)
    return getattr(node, name, None)


def runs_root(consensus: Any, output_root: str | Path | None) -> Path:
    """The output root holding the members' runs: ``consensus.runs``, else ``output_root``."""
    root = _opt(consensus, "runs") if consensus is not None else None
    return Path(str(root or output_root or "outputs")).expanduser().resolve()


def _records(root: Path) -> list[tuple[Path, dict[str, Any]]]:
    out: list[tuple[Path, dict[str, Any]]] = []
    runs = root / "runs"
    if not runs.is_dir():
        return out
    for folder in sorted(runs.iterdir()):
        try:
            record = json.loads((folder / "run.json").read_text(encoding="utf-8"))
        except (OSError, ValueError):
            continue
        if isinstance(record, dict):
            out.append((folder, record))
    return out


def _digest(record: dict[str, Any]) -> str | None:
    ident = record.get("identity") or {}
    return (ident.get("task") or {}).get("task_digest")


def member_runs(members: Sequence[str], root: Path, task_id: str, task_version: str,
                task_digest: str | None = None, leave_out: str | None = None) -> list[MemberRun]:
    """Each member's official run on the task, in the order of ``members``.

    A member without such a run (or without a ``rankings.json`` in it) is left out; a
    member given by run key counts only for its own task. Among several runs of one
    label, the one of the same ``task_digest`` wins, then the same version, then the
    latest run key in sort order (a stable choice).
    """
    records = _records(root)
    found: list[MemberRun] = []
    for member in dict.fromkeys(members):
        if member == leave_out:
            continue
        candidates = []
        for folder, record in records:
            if record.get("task_id") != task_id or int(record.get("repeat", 0)) != 0:
                continue
            if record.get("model") == "consensus" or record.get("run_key") != folder.name:
                continue  # a consensus never feeds another; a record must be its folder's
            if RUN_KEY.match(member):
                if record.get("run_key") != member:
                    continue
            elif record.get("config") != member:
                continue
            if not (folder / "output" / "rankings.json").is_file():
                continue
            candidates.append((_digest(record) == task_digest and task_digest is not None,
                               record.get("task_version") == task_version,
                               str(record.get("run_key")), folder))
        if candidates:
            _, _, key, folder = max(candidates)
            found.append(MemberRun(member, key, folder))
    return found


def identity_args(consensus: Any, output_root: str | Path | None, task_id: str,
                  task_version: str, task_digest: str | None) -> list[str]:
    """What the consensus run's identity records as its arguments: its members' run keys.

    Members in sorted order, each ``member=<name>:<run_key>``, then ``leave_out=<name>``.
    """
    # Sorted: the consensus does not depend on the members' order, nor does its key.
    members = sorted({str(m) for m in (_opt(consensus, "members") or [])}) if consensus else []
    leave_out = _opt(consensus, "leave_out") if consensus is not None else None
    leave_out = str(leave_out) if leave_out else None
    runs = member_runs(members, runs_root(consensus, output_root), task_id, task_version,
                       task_digest, leave_out)
    args = [f"{MEMBER_PREFIX}{r.member}:{r.run_key}" for r in runs]
    if leave_out:
        args.append(f"{LEAVE_OUT_PREFIX}{leave_out}")
    return args


def consensus_label(consensus: Any) -> str:
    """The consensus's name in configuration labels: ``consensus.label``, else one of its members.

    Two consensus configurations of other members must not share a label (the runs table
    holds one official run per configuration and task), so the default names the number
    of members and 6 hex digits of the SHA-256 of their sorted names, and the member left
    out.

    Examples
    --------
    >>> from spu.config import ConsensusConfig
    >>> consensus_label(ConsensusConfig(members=["b", "a"])) == consensus_label(
    ...     ConsensusConfig(members=["a", "b"]))
    True
    >>> consensus_label(ConsensusConfig(members=["a", "b", "c"], leave_out="c"))[:2]
    '3m'
    >>> consensus_label(ConsensusConfig(members=["a"], label="all"))
    'all'
    """
    import hashlib

    label = _opt(consensus, "label") if consensus is not None else None
    if label:
        return str(label)
    members = sorted({str(m) for m in (_opt(consensus, "members") or [])}) if consensus else []
    digest = hashlib.sha256("\n".join(members).encode()).hexdigest()[:6]
    leave_out = _opt(consensus, "leave_out") if consensus is not None else None
    return f"{len(members)}m{digest}" + (f"-without-{leave_out}" if leave_out else "")


def consensus_submission(contract: Any, submissions: Sequence[bytes]) -> dict[str, Any]:
    """The consensus ``rankings.json`` (SPEC section 2) of the members' submitted files.

    Each file is read as the statistics read it (a schema departure normalized without
    moving an item); a group no member ordered completely is left out.

    Examples
    --------
    >>> from spu.schema import ComparisonGroup, Contract
    >>> c = Contract(task_id="t", task_version="1", groups=[
    ...     ComparisonGroup(group_id="G", endpoint="y", weight=1.0, items=["a", "b", "c"])])
    >>> a = b'{"task_id": "t", "rankings": [{"group_id": "G", "order": ["c", "a", "b"]}]}'
    >>> b = b'{"task_id": "t", "rankings": [{"group_id": "G", "order": ["a", "c", "b"]}]}'
    >>> consensus_submission(c, [a, b])["rankings"]
    [{'group_id': 'G', 'order': ['a', 'c', 'b']}]
    """
    from spu.grading.consensus import consensus_orders, orders_from_bytes

    orders = [o for o in (orders_from_bytes(s) for s in submissions) if o is not None]
    combined = consensus_orders(contract, orders)
    return {"task_id": contract.task_id, "task_version": contract.task_version,
            "rankings": [{"group_id": g.group_id, "order": combined[g.group_id]}
                         for g in contract.groups if g.group_id in combined]}


class ConsensusHarness(CommandHarness):
    """The mean rank of the members' official submissions, run as an offline agent."""

    name = "consensus"
    uses_tools = False
    reference_agent = True
    selfcheck_overrides = ("model=consensus",)
    selfcheck_expected_failures = {
        "runs_a_task_end_to_end": "it ranks by its members' finished runs "
                                  "(consensus.members), which a self-check has none of"}

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.members: list[str] = []
        self.root: Path | None = None

    def model_api(self) -> str | None:
        """None: the consensus calls no model."""
        return None

    def entrypoint(self) -> Path:
        """The bundled agent that copies the consensus submission out."""
        return AGENT_SCRIPT

    def check(self) -> None:
        """Only ``model=consensus`` runs here."""
        if self.model.name != "consensus":
            raise HarnessError(f"harness=consensus runs model=consensus, not "
                               f"model={self.model.name}")

    def bind_run(self, spec: Any, identity: Any) -> None:
        """Read the members' run keys from the run's identity and the runs root from ``spec``.

        Raises:
            HarnessError: ``consensus.members`` is empty.
        """
        consensus = getattr(spec, "consensus", None)
        if not consensus or not list(_opt(consensus, "members") or []):
            raise HarnessError("model=consensus needs consensus.members=[LABEL,...] "
                               "(configuration labels or run keys)")
        self.root = runs_root(consensus, getattr(spec, "output_root", None))
        self.members = [a[len(MEMBER_PREFIX):] for a in identity.config.args
                        if a.startswith(MEMBER_PREFIX)]

    def prepare(self, ctx: AgentContext, sandbox: Sandbox) -> None:
        """Compute the consensus on the host and put it beside the agent in the sandbox."""
        super().prepare(ctx, sandbox)
        files = []
        from spu.grading.submission import read_submission_file

        for entry in self.members:
            key = entry.rsplit(":", 1)[-1]
            if not RUN_KEY.match(key):
                continue  # only a run key names a folder
            path = (self.root or Path("outputs")) / "runs" / key / "output" / "rankings.json"
            data = read_submission_file(path)  # an agent's file: never through a link
            if data is not None:
                files.append(data)
        base = f"{ctx.paths.workspace}/{AGENT_DIR}/{SUBMISSION_DIR}"
        if not files:
            return  # the agent writes nothing: the run ends no_file
        submission = consensus_submission(ctx.task.contract, files)
        sandbox.write_file(f"{base}/rankings.json",
                           json.dumps(submission, indent=1).encode(), mode=0o644)
        report = ("# Consensus submission\n\nMean position of each item over the official "
                  f"submissions of {len(files)} member run(s), {TIE_RULE} (paper E.8):\n\n"
                  + "".join(f"- `{m}`\n" for m in self.members))
        sandbox.write_file(f"{base}/report.md", report.encode(), mode=0o644)
        sandbox.write_file(f"{base}/sources.json", json.dumps(
            {"sources": [], "note": "consensus of other runs' submissions",
             "members": self.members}).encode(), mode=0o644)

    def args(self, ctx: AgentContext) -> list[str]:
        """Where the agent finds the submission to copy."""
        return ["--from", f"{ctx.paths.workspace}/{AGENT_DIR}/{SUBMISSION_DIR}"]
