"""Round five: a CLI's session file, which the agent can write, read on the host.

An agent with a shell appends to its own Codex session file (``$CODEX_HOME/sessions``)
after writing its submission. A reader that raises makes the harness's ``parse`` raise,
and the runner records a run whose harness raised as ``infra_error`` (excluded, retried):
the reader must take whatever the file holds.
"""

from __future__ import annotations

import json
from pathlib import Path

from spu.harness.trajectory.codex import read_codex_sessions
from tests.conftest import REPO

GOLDEN = REPO / "tests" / "golden" / "cli_sessions" / "codex" / "presented_order" / "sessions"


def test_a_codex_call_whose_arguments_nest_past_the_parser_is_read(tmp_path: Path) -> None:
    (source,) = GOLDEN.rglob("*.jsonl")
    lines, replaced = [], False
    for line in source.read_text().splitlines():
        entry = json.loads(line)
        payload = entry.get("payload")
        if (not replaced and isinstance(payload, dict)
                and payload.get("type") == "function_call"):
            payload["arguments"] = "[" * 100_000 + "]" * 100_000  # a string: valid JSONL
            replaced = True
        lines.append(json.dumps(entry))
    assert replaced
    target = tmp_path / "sessions" / source.relative_to(GOLDEN)
    target.parent.mkdir(parents=True)
    target.write_text("\n".join(lines) + "\n")
    reading = read_codex_sessions(tmp_path / "sessions")
    calls = [c for s in reading.trajectory.steps for c in s.tool_calls]
    deep = [c.arguments for c in calls if isinstance(c.arguments, str | list)
            and str(c.arguments).startswith("[")]
    assert deep, "the call whose arguments nest 100,000 deep is lost"
    # kept: as its text, or (spu.gateway.answers.loads(deep_as_text=True)) with the part
    # nested past 64 levels as its text
    inner = deep[0]
    while isinstance(inner, list):
        (inner,) = inner
    assert isinstance(inner, str) and inner.startswith("[[[") and inner.endswith("]]]")
    reading.trajectory.model_dump_json()  # and the trajectory can be written
