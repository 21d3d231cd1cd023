"""``transcript.html``: a run a person can read, rendered from its trajectory (SPEC 13).

One self-contained page (inline style, no script, no external asset): the run's summary,
the instruction, each model message and each tool call in order (an output longer than
a few lines folded in ``<details>``), the audited search and fetch calls with their
exposure flags, and the submission with its grade group by group. MLflow's artifact view
shows it; ``spu show`` prints the same in the terminal.
"""

from __future__ import annotations

import functools
import json
from pathlib import Path
from typing import Any

from spu.grading.submission import read_submission_file
from spu.identity import official_score
from spu.schema import RunRecord
from spu.tracking.trajectories import find_trajectory, iter_step_views

TRANSCRIPT_FILE = "transcript.html"
"""The transcript's name among the run's artifacts."""

FOLD_LINES = 6
"""Tool outputs with more lines than this are folded."""

_TEMPLATE = """<!doctype html>
<html lang="en"><head><meta charset="utf-8">
<title>{{ r.task_id }} / {{ r.config }} / r{{ r.repeat }}: transcript</title>
<style>
body{font:14px/1.45 system-ui,sans-serif;max-width:72rem;margin:1rem auto;padding:0 1rem}
pre{white-space:pre-wrap;word-break:break-word;background:#f6f6f6;padding:.5rem;margin:.3rem 0}
.step{border-left:3px solid #ccc;padding-left:.7rem;margin:.8rem 0}
.assistant{border-color:#4a7fd4}.user{border-color:#3a3}.tool{border-color:#c80}
.call{margin:.4rem 0 .4rem 1rem}.err{color:#b00}.flag{color:#b00;font-weight:bold}
table{border-collapse:collapse}td,th{border:1px solid #ccc;padding:.2rem .5rem;text-align:left}
</style></head><body>
<h1>{{ r.task_id }} &middot; {{ r.config }} &middot; repeat {{ r.repeat }}</h1>
<table>
<tr><th>run key</th><td>{{ r.run_key }}</td></tr>
<tr><th>outcome</th><td>{{ r.outcome.value }}</td></tr>
<tr><th>score</th><td>{{ "%.4f"|format(score) }} (strict {{ "%.4f"|format(r.score_strict) }})</td></tr>
<tr><th>model / harness / effort</th><td>{{ r.model }} / {{ r.harness }} / {{ r.effort }}</td></tr>
<tr><th>tokens (input, cache read, cache write, output)</th><td>{{ r.usage.input }}, {{ r.usage.cache_read }}, {{ r.usage.cache_write }}, {{ r.usage.output }}</td></tr>
<tr><th>cost</th><td>{{ "%.4f USD"|format(r.cost_usd) if r.cost_usd is not none else "n/a" }}</td></tr>
<tr><th>time</th><td>{{ r.started_at or "" }} to {{ r.finished_at or "" }} ({{ "%.0f"|format(r.runtime_s) }} s)</td></tr>
<tr><th>tool calls</th><td>{{ r.tool_calls }}</td></tr>
</table>
{% if instruction %}<h2>Instruction</h2><pre>{{ instruction }}</pre>{% endif %}
<h2>Steps</h2>
{% for s in steps %}<div class="step {{ s.role }}" id="step-{{ s.index }}">
<b>#{{ s.index }} {{ s.role }}{% if s.agent %} (sub-agent {{ s.agent }}){% endif %}</b>
<small>{{ s.timestamp or "" }}</small>
{% if s.reasoning %}<details><summary>reasoning</summary><pre>{{ s.reasoning }}</pre></details>{% endif %}
{% if s.text %}<pre>{{ s.text }}</pre>{% endif %}
{% for c in s.calls %}<div class="call"><b>{{ c.name }}</b>{% if c.is_error %} <span class="err">error</span>{% endif %}
<pre>{{ c.arguments }}</pre>
{% if c.output is not none %}{% if c.folded %}<details><summary>output ({{ c.lines }} lines)</summary><pre>{{ c.output }}</pre></details>{% else %}<pre>{{ c.output }}</pre>{% endif %}{% endif %}
</div>{% endfor %}
</div>{% endfor %}
{% if left_out %}<p>{{ left_out }}</p>{% endif %}
<h2>Audited calls</h2>
{% if audits %}<table><tr><th>#</th><th>time</th><th>tool</th><th>arguments</th><th>status</th><th>exposure</th></tr>
{% for a in audits %}<tr><td>{{ a.call }}</td><td>{{ a.time }}</td><td>{{ a.tool }}</td><td>{{ a.args|tojson }}</td><td>{{ a.status }}</td><td{% if a.exposure %} class="flag"{% endif %}>{{ a.exposure|join(", ") }}</td></tr>
{% endfor %}</table>{% else %}<p>none</p>{% endif %}
<h2>Submission</h2>
{% if rankings %}<pre>{{ rankings }}</pre>{% else %}<p>no rankings.json</p>{% endif %}
<h2>Grade</h2>
{% if r.grade %}<p>{{ r.grade.status.value }}{% for e in r.grade.errors %}; {{ e }}{% endfor %}</p>
<table><tr><th>group</th><th>weight</th><th>rho</th><th>error</th></tr>
{% for g in r.grade.groups %}<tr><td>{{ g.group_id }}</td><td>{{ "%.3f"|format(g.weight) }}</td><td>{{ "%.4f"|format(g.rho) }}</td><td>{{ g.error or "" }}</td></tr>
{% endfor %}</table>{% else %}<p>not graded</p>{% endif %}
</body></html>
"""  # noqa: E501 (HTML lines read best whole)


def _text(value: str | None, max_chars: int) -> str | None:
    from spu.tracking.traces import cut

    return cut(value, max_chars)


def transcript_context(record: RunRecord, run_dir: Path, max_chars: int = 20000,
                       max_steps: int = 5000) -> dict[str, Any]:
    """What the transcript shows, read from the run folder (steps capped at ``max_steps``)."""
    from spu.tracking.traces import audit_entries

    run_dir = Path(run_dir)
    path = find_trajectory(run_dir)
    steps: list[dict[str, Any]] = []
    instruction = None
    left = 0
    for s in iter_step_views(path) if path is not None else ():
        if instruction is None and s.role == "user" and s.text:
            instruction = _text(s.text, max_chars)
            continue
        if len(steps) >= max_steps:
            left += 1
            continue
        calls = []
        for c in s.tool_calls:
            output = _text(c.output, max_chars)
            lines = output.count("\n") + 1 if output else 0
            args = c.arguments if isinstance(c.arguments, str) else json.dumps(
                c.arguments, indent=1, default=str)
            calls.append({"name": c.name, "arguments": _text(args, max_chars), "output": output,
                          "is_error": c.is_error, "lines": lines, "folded": lines > FOLD_LINES})
        steps.append({"index": s.index, "role": s.role, "agent": s.agent,
                      "timestamp": s.timestamp, "text": _text(s.text, max_chars),
                      "reasoning": _text(s.reasoning, max_chars), "calls": calls})
    # The agent's file: never through a link, never blocking on a FIFO, at most 1 MiB read.
    data = read_submission_file(run_dir / "output" / "rankings.json")
    rankings = _text(data.decode("utf-8", "replace"), max_chars) if data else None
    return {
        "r": record, "steps": steps, "instruction": instruction, "audits": audit_entries(run_dir),
        "rankings": rankings,
        "score": official_score(record.scored, record.score_strict, record.score_recovered),
        "left_out": (f"{left} more steps are in trajectory.jsonl.gz" if left else ""),
    }


def render_transcript(record: RunRecord, run_dir: Path, max_chars: int = 20000,
                      max_steps: int = 5000) -> str:
    """The transcript page of a run, as HTML text (texts and steps capped, with a note)."""
    context = transcript_context(record, run_dir, max_chars, max_steps)
    return _template().render(**context)


@functools.cache
def _template() -> Any:
    """The page's template, compiled once (compiling it takes longer than rendering it)."""
    import jinja2

    env = jinja2.Environment(autoescape=True, undefined=jinja2.StrictUndefined)
    return env.from_string(_TEMPLATE)


def write_transcript(path: Path, record: RunRecord, run_dir: Path, max_chars: int = 20000,
                     max_steps: int = 5000) -> Path:
    """Write the transcript page of a run to ``path``; returns ``path``."""
    path = Path(path)
    path.write_text(render_transcript(record, run_dir, max_chars, max_steps), encoding="utf-8")
    return path
