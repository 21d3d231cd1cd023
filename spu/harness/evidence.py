"""A run's evidence as the provider side saw it: the gateway's record over the session files.

The harness reads the agent's session files back (:meth:`Harness.parse`); the run's model
gateway (:mod:`spu.gateway`) recorded every request. Where they disagree the gateway's
record wins, and the run says so (SPEC section 11, ``evidence_disagreement``).
"""

from __future__ import annotations

import dataclasses
from typing import Any

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
