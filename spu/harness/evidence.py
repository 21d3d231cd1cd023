"""A run's evidence as the provider side saw it: the gateway's record over the session files.

The harness reads the agent's session files back (:meth:`Harness.parse`); the run's model
gateway (:mod:`spu.gateway`) recorded every request. Where they disagree the gateway's
record wins, and the run says so (SPEC section 11, ``evidence_disagreement``).
"""

from __future__ import annotations

import dataclasses
from typing import Any

from spu.gateway.inputs import GatewayCalls
from spu.gateway.verdict import GatewayVerdict
from spu.harness.base import AgentResult


def gateway_evidence(result: AgentResult, verdict: GatewayVerdict) -> AgentResult:
    """``result`` with usage, refusal and infra error as the provider side saw them.

    The session files (and the CLI's output) are the agent's to write; the gateway's
    record is not. Usage is always the record's. Refusal and infra error are the
    record's once the model answered at least once: before any answer no tool call
    ran, so nothing of the agent's could have written the session files, and a CLI
    that could not start keeps the infra error it reported. Where the two disagree,
    ``evidence_disagreement`` says how.

    Examples
    --------
    >>> from spu.harness.base import AgentResult
    >>> from spu.schema import GatewayRequest, Usage
    >>> from spu.gateway.verdict import gateway_verdict
    >>> answer = GatewayRequest(time="t", endpoint="messages", status=200, complete=True,
    ...                         final=True, usage=Usage(input=5))
    >>> forged = AgentResult(refused=True, refusal_label="[bio]", usage=Usage(input=10**9))
    >>> fixed = gateway_evidence(forged, gateway_verdict([answer]))
    >>> fixed.refused, fixed.usage.input, fixed.evidence_disagreement
    (False, 5, 'the session files show a refusal ([bio]) that the provider never sent')
    """
    changes: dict[str, Any] = {"usage": verdict.usage,
                               "model_requests": list(verdict.request_usages),
                               "cost_limit": verdict.cost_limit,
                               "agent_caused": verdict.agent_caused}
    claims = []
    if verdict.generations > 0:
        if result.refused and not verdict.refusal:
            claims.append(f"the session files show a refusal ({result.refusal_label}) that "
                          f"the provider never sent")
        elif verdict.refusal and not result.refused:
            claims.append("the provider refused, which the session files do not show")
        if result.infra_error and not verdict.infra_error:
            claims.append(f"the session files or the CLI's output show an error the "
                          f"provider side did not ({result.infra_error[:200]})")
        changes.update(refused=verdict.refusal, refusal_label=verdict.refusal_label,
                       infra_error=verdict.infra_error)
    elif verdict.infra_error and not result.infra_error:
        changes["infra_error"] = verdict.infra_error
    changes["evidence_disagreement"] = "; ".join(claims) or None
    return dataclasses.replace(result, **changes)


def gateway_counts(result: AgentResult, calls: GatewayCalls | None) -> AgentResult:
    r"""``result`` with ``tool_calls`` and ``shell_downloads`` counted from the gateway's record.

    The gateway saw every tool call the model's answers made
    (:func:`spu.gateway.inputs.read_calls`); an agent that deletes or edits its session
    lines changes none, nor does one that writes calls and results into the history it
    sends. Where the session files (the harness's trajectory, not one built from the audit
    log) count otherwise, ``evidence_disagreement`` says so, with both counts; where a cap
    of the record stopped it (the counts are of the calls before it), it says that too.
    ``calls`` None (no such record: an older gateway) leaves ``result``.

    Examples
    --------
    >>> from spu.gateway.inputs import GatewayCalls
    >>> from spu.schema import Trajectory
    >>> emptied = AgentResult(trajectory=Trajectory(harness="claude_code"), tool_calls=0)
    >>> seen = GatewayCalls(ids=("t1", "t2"), shell_commands=("curl -O https://x.org/a",),
    ...                     complete=True)
    >>> counted = gateway_counts(emptied, seen)
    >>> counted.tool_calls, counted.shell_downloads
    (2, 1)
    >>> print(counted.evidence_disagreement.replace("; ", "\n"))
    the session files show 0 tool calls, the gateway's record 2
    the session files show 0 shell downloads, the gateway's record 1
    """
    if calls is None:
        return result
    from spu.tools.egress import count_shell_downloads, shell_downloads

    downloads = count_shell_downloads(calls.shell_commands)
    claims = [result.evidence_disagreement] if result.evidence_disagreement else []
    if not calls.complete:
        claims.append(f"the gateway's record of the model's tool calls reached its cap: "
                      f"{len(calls.ids)} tool calls and {downloads} shell downloads are "
                      f"those before it")
    if result.trajectory is not None and not result.trajectory_from_audit:
        shown = shell_downloads(result.trajectory.steps)
        for what, session, record in (("tool calls", result.tool_calls, len(calls.ids)),
                                      ("shell downloads", shown, downloads)):
            if session != record:
                claims.append(f"the session files show {session} {what}, the gateway's "
                              f"record {record}")
    return dataclasses.replace(result, tool_calls=len(calls.ids), shell_downloads=downloads,
                               evidence_disagreement="; ".join(claims) or None)
