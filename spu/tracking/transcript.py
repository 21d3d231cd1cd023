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
{{ steps_html }}
{% if left_out %}<p>{{ left_out }}</p>{% endif %}
<h2>Audited calls</h2>
{% if audits %}<table><tr><th>#</th><th>time</th><th>tool</th><th>arguments</th><th>status</th><th>exposure</th></tr>
{% for a in audits %}<tr><td>{{ a.call }}</td><td>{{ a.time }}</td><td>{{ a.tool }}</td><td>{{ a.args|tojson }}</td><td>{{ a.shown_status }}</td><td{% if a.exposure %} class="flag"{% endif %}>{{ a.exposure|join(", ") }}</td></tr>
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


_SCALARS = (str, int, float, bool, type(None))


def _indented(value: Any) -> str:
    """``json.dumps(value, indent=1, default=str)``, a flat object written directly.

    Most tool arguments are a flat object; they come out as that call writes them, without
    its indenting encoder (pure Python, and slow).
    """
    if isinstance(value, dict) and value and all(
            type(k) is str and type(v) in _SCALARS for k, v in value.items()):
        encode = json.encoder.encode_basestring_ascii
        body = ",\n".join(f" {encode(k)}: {encode(v) if type(v) is str else json.dumps(v)}"
                           for k, v in value.items())
        return f"{{\n{body}\n}}"
    return json.dumps(value, indent=1, default=str)


def audit_status(entry: dict[str, Any]) -> str:
    """The status cell of an audited call: the service's status, or the page's HTTP status.

    A fetch that did not get its page shows the page's status (the service answers ``ok``
    for a 404: the tool worked, the page was not there).

    Examples:
        >>> audit_status({"status": "ok", "http_status": 404})
        'HTTP 404 Not Found'
        >>> audit_status({"status": "ok", "http_status": 200}), audit_status({"status": "refused"})
        ('ok', 'refused')
    """
    from http import HTTPStatus

    code = entry.get("http_status")
    if isinstance(code, int) and not 200 <= code < 300:
        try:
            return f"HTTP {code} {HTTPStatus(code).phrase}"
        except ValueError:
            return f"HTTP {code}"
    return str(entry.get("status", ""))


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
            args = c.arguments if isinstance(c.arguments, str) else _indented(c.arguments)
            calls.append({"name": c.name, "arguments": _text(args, max_chars), "output": output,
                          "is_error": c.is_error, "lines": lines, "folded": lines > FOLD_LINES})
        steps.append({"index": s.index, "role": s.role, "agent": s.agent,
                      "timestamp": s.timestamp, "text": _text(s.text, max_chars),
                      "reasoning": _text(s.reasoning, max_chars), "calls": calls})
    # The agent's file: never through a link, never blocking on a FIFO, at most 1 MiB read.
    data = read_submission_file(run_dir / "output" / "rankings.json")
    rankings = _text(data.decode("utf-8", "replace"), max_chars) if data else None
    return {
        "r": record, "steps": steps, "instruction": instruction,
        "audits": [{**a, "shown_status": audit_status(a)} for a in audit_entries(run_dir)],
        "rankings": rankings,
        "score": official_score(record.scored, record.score_strict, record.score_recovered),
        "left_out": (f"{left} more steps are in trajectory.jsonl.gz" if left else ""),
    }


def render_transcript(record: RunRecord, run_dir: Path, max_chars: int = 20000,
                      max_steps: int = 5000) -> str:
    """The transcript page of a run, as HTML text (texts and steps capped, with a note)."""
    from markupsafe import Markup

    context = transcript_context(record, run_dir, max_chars, max_steps)
    return _template().render(steps_html=Markup(render_steps(context["steps"])), **context)


def render_steps(steps: list[dict[str, Any]]) -> str:
    """The page's steps (:func:`transcript_context`'s ``steps``) as HTML, every text escaped.

    Written out by hand rather than in the template: the steps are nearly all of a page,
    and building them here takes a third of the time the template took.
    """
    from markupsafe import escape

    def e(value: Any) -> str:
        return str(escape(value))

    out: list[str] = []
    for s in steps:
        role, index = e(s["role"]), e(s["index"])
        agent = f" (sub-agent {e(s['agent'])})" if s["agent"] else ""
        reasoning = (f"<details><summary>reasoning</summary><pre>{e(s['reasoning'])}</pre>"
                     "</details>" if s["reasoning"] else "")
        text = f"<pre>{e(s['text'])}</pre>" if s["text"] else ""
        out.append(f'<div class="step {role}" id="step-{index}">\n<b>#{index} {role}{agent}</b>'
                   f'\n<small>{e(s["timestamp"] or "")}</small>\n{reasoning}\n{text}\n')
        for c in s["calls"]:
            error = ' <span class="err">error</span>' if c["is_error"] else ""
            if c["output"] is None:
                output = ""
            elif c["folded"]:
                output = (f"<details><summary>output ({e(c['lines'])} lines)</summary>"
                          f"<pre>{e(c['output'])}</pre></details>")
            else:
                output = f"<pre>{e(c['output'])}</pre>"
            out.append(f'<div class="call"><b>{e(c["name"])}</b>{error}\n'
                       f'<pre>{e(c["arguments"])}</pre>\n{output}\n</div>')
        out.append("\n</div>")
    return "".join(out)


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
