"""What the scripted model says, turn by turn, and the token usage it reports.

A :class:`Script` is a list of :class:`ScriptedTurn`: each turn is one model
response, with text, optional reasoning, and optionally one shell command that the
agent CLI runs through its own shell tool (``Bash`` in Claude Code, ``exec_command``
in Codex) or one call of another tool the CLI offers, by its bare name (``search``:
the audited tools service's ``mcp__spu__search`` in Claude Code). The server picks the
turn from the conversation it receives (the number of tool results in it), so the same
script drives both CLIs and survives their retries.

Every response reports a distinct, known usage (:func:`scripted_usage`), different in
each bucket and each turn, so that tests can check usage bucket by bucket.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from spu.schema import Usage

LIST_TASK_FILES = 'ls -la "${SPU_TASK_DIR:-/task}"'

WRITE_PRESENTED_ORDER = """python3 - <<'PY'
import csv, json, os
task = os.environ.get("SPU_TASK_DIR", "/task")
out = os.environ.get("SPU_OUTPUT_DIR", "/output")
with open(os.path.join(task, "contract.json"), encoding="utf-8") as f:
    contract = json.load(f)
with open(os.path.join(task, "targets.csv"), newline="", encoding="utf-8") as f:
    position = {row["experiment_id"]: k for k, row in enumerate(csv.DictReader(f))}
rankings = [
    {"group_id": g["group_id"],
     "order": sorted(g["items"], key=lambda i: position.get(i, len(position)))}
    for g in contract["groups"]
]
submission = {"task_id": contract["task_id"], "task_version": contract["task_version"],
              "rankings": rankings}
with open(os.path.join(out, "rankings.json"), "w", encoding="utf-8") as f:
    json.dump(submission, f, indent=1)
print("ranked", len(rankings), "group(s) in the presented order")
PY"""

WRITE_REPORT = """out="${SPU_OUTPUT_DIR:-/output}"
cat > "$out/report.md" <<'MD'
# Scripted submission

The scripted model server ranked every group in the presented order of targets.csv.
No source was consulted; this run exercises the harness, not a model.
MD
echo '{"sources": []}' > "$out/sources.json"
echo report written"""


@dataclass(frozen=True)
class ScriptedTurn:
    """One model response of a script."""

    text: str = ""
    """Assistant text of the response."""
    command: str | None = None
    """Shell command the agent runs through its shell tool; None ends the conversation."""
    reasoning: str | None = None
    """Reasoning text (a thinking block, or a reasoning summary in the Responses API)."""
    refusal: str | None = None
    """Refuse instead of answering, with this provider category (``bio``, ``cyber``)."""
    http_error: int | None = None
    """Answer with this HTTP status instead (an API error)."""
    agent_prompt: str | None = None
    """Delegate to a sub-agent with this prompt (Claude Code's ``Agent`` tool) instead."""
    tool: str | None = None
    """Call this tool instead: a name the request offers, or the bare name of an MCP tool
    (``search`` matches ``mcp__spu__search``); the turn fails loudly when none matches."""
    arguments: dict[str, Any] | None = None
    """Arguments of the ``tool`` call."""
    fault_times: int | None = None
    """How many requests of this turn get its fault (``http_error`` or the stream cut):
    None for every one; 2 for a burst of two, then the answer."""
    cut_after_events: int | None = None
    """Cut the stream after this many events (fewer bytes than announced, then the
    connection closes): a stream dropped mid-answer."""
    first_byte_delay_s: float = 0.0
    """Seconds to wait before the first byte of the answer (a slow provider)."""
    delta_chars: int = 0
    """Stream the text in deltas of this many characters (0: one delta)."""
    as_generated: bool = False
    """Stream each event as it is encoded (chunked transfer encoding), as a provider streams
    while it generates, rather than render the whole answer first and send it with its
    length. The answer's bytes are the same."""
    bytes_per_s: float = 0.0
    """With ``as_generated``: send no faster than this many bytes a second (0: as fast as
    the events are encoded), a provider's pace."""

    @property
    def is_final(self) -> bool:
        """True when the turn ends the conversation (no tool call follows)."""
        return self.command is None and self.agent_prompt is None and self.tool is None


FINAL_TURN = ScriptedTurn(text="Done.")


@dataclass(frozen=True)
class ScriptedAnswer:
    """The answer to a request outside the agent loop that asks :attr:`if_asked`.

    Such a request offers no shell tool (a recall probe's question, for one).
    """

    if_asked: tuple[str, ...]
    """Strings the request's text must all contain (a task id, a word of the question)."""
    text: str
    """What the model answers."""

SUBAGENT_MARKER = "[scripted sub-agent]"
"""A conversation whose first user message holds this marker plays ``subagent_turns``."""


@dataclass(frozen=True)
class Script:
    """The turns the scripted model plays, in order."""

    name: str
    turns: tuple[ScriptedTurn, ...] = field(default_factory=tuple)
    subagent_turns: tuple[ScriptedTurn, ...] = field(default_factory=tuple)
    """What a sub-agent started by an ``agent_prompt`` turn plays."""
    reject_key: bool = False
    """Answer every request, model lists included, with HTTP 401 (a key the provider
    rejects)."""
    answers: tuple[ScriptedAnswer, ...] = field(default_factory=tuple)
    """Answers to requests outside the agent loop, the first whose ``if_asked`` the request
    holds (a model that remembers some tasks); other such requests get a short text."""

    def answer(self, asked: str) -> str | None:
        """The text of the first :attr:`answers` entry whose ``if_asked`` are all in ``asked``."""
        return next((a.text for a in self.answers
                     if all(wanted in asked for wanted in a.if_asked)), None)

    def turn(self, index: int, *, subagent: bool = False) -> ScriptedTurn:
        """Turn ``index`` (0-based); past the end, a final "Done." that stops the agent."""
        turns = self.subagent_turns if subagent else self.turns
        return turns[index] if 0 <= index < len(turns) else FINAL_TURN


def default_script() -> Script:
    """List the task files, write a ranking in presented order, write a report, stop."""
    return Script(
        name="presented_order",
        turns=(
            ScriptedTurn(
                text="I will look at the task files first.",
                reasoning="The task folder holds the contract and the targets; list it.",
                command=LIST_TASK_FILES,
            ),
            ScriptedTurn(text="Writing a ranking in the presented order.",
                         command=WRITE_PRESENTED_ORDER),
            ScriptedTurn(text="Writing the report and the source record.", command=WRITE_REPORT),
            ScriptedTurn(text="Submitted rankings.json with every group in the presented order."),
        ),
    )


EXAMPLE_QUERY = "additive effects on yields of palladium catalysed C-N cross-coupling"
"""What the ``spu_agent`` script searches for (answered by ``examples/tools_corpus.jsonl``)."""

EXAMPLE_URL = "https://corpus.spu.invalid/notes/ranking-experiments"
"""What the ``spu_agent`` script fetches (a document of ``examples/tools_corpus.jsonl``)."""


def spu_agent_script() -> Script:
    """The default script: the task, the audited tools, a ranking in presented order.

    List the task files, search and fetch through the audited tools, write a ranking in
    presented order and a report, stop. Where the run has no tools service, its two
    calls run shell commands that say so.
    """
    turns = default_script().turns
    return Script(
        name="spu_agent",
        turns=(
            turns[0],
            ScriptedTurn(text="Searching the literature through the audited tools.",
                         tool="search", arguments={"query": EXAMPLE_QUERY, "max_results": 5}),
            ScriptedTurn(text="Reading a note on ranking experiments.", tool="fetch",
                         arguments={"url": EXAMPLE_URL}),
            *turns[1:],
        ),
    )


def policy_stop_script() -> Script:
    """Search, meet a prohibited result, write a provisional ranking, call ``policy_stop``."""
    turns = spu_agent_script().turns
    return Script(
        name="policy_stop",
        turns=(
            *turns[:2],
            ScriptedTurn(text="Writing a provisional ranking before stopping.",
                         command=WRITE_PRESENTED_ORDER),
            ScriptedTurn(text="A search result names the source study: stopping under the "
                              "information policy.", tool="policy_stop",
                         arguments={"step": "search 1",
                                    "reason": "a search result showed the source study's DOI"}),
            ScriptedTurn(text="Stopped under the information policy after step 'search 1'; a "
                              "provisional ranking in presented order is submitted."),
        ),
    )


def subagent_script() -> Script:
    """The default script, with the task files listed by a sub-agent (Claude Code only)."""
    turns = default_script().turns
    return Script(
        name="subagent",
        turns=(
            ScriptedTurn(text="I will ask a sub-agent to list the task files.",
                         agent_prompt=f"{SUBAGENT_MARKER} List the files of the task folder."),
            *turns[1:],
        ),
        subagent_turns=(
            ScriptedTurn(text="Listing the task folder.", command=LIST_TASK_FILES),
            ScriptedTurn(text="The task folder holds contract.json and targets.csv."),
        ),
    )


def refusal_script(category: str = "bio") -> Script:
    """Look at the task once, then refuse with the provider category ``category``."""
    return Script(
        name=f"refusal_{category}",
        turns=(
            ScriptedTurn(text="I will look at the task files first.", command=LIST_TASK_FILES),
            ScriptedTurn(refusal=category),
        ),
    )


def api_error_script(status: int = 400) -> Script:
    """Look at the task once, then answer the next request with HTTP ``status``."""
    return Script(
        name=f"api_error_{status}",
        turns=(
            ScriptedTurn(text="I will look at the task files first.", command=LIST_TASK_FILES),
            ScriptedTurn(http_error=status),
        ),
    )


def offered_tool(offered: list[str], wanted: str) -> str | None:
    """The name under which the request offers tool ``wanted``, or None.

    An exact name wins; otherwise an MCP tool whose qualified name ends with the bare
    name after a separator (``mcp__spu__search``, ``spu.search``, ``spu/search``).

    Examples
    --------
    >>> offered_tool(["Bash", "mcp__spu__search", "mcp__spu__fetch"], "search")
    'mcp__spu__search'
    >>> offered_tool(["Bash"], "search") is None
    True
    """
    if wanted in offered:
        return wanted
    for name in offered:
        if any(name.endswith(sep + wanted) for sep in ("__", ".", "/")):
            return name
    return None


def not_offered(turn: ScriptedTurn) -> ScriptedTurn:
    """What a ``tool`` turn plays when the request does not offer its tool.

    A shell command that says so, so that the script goes on (the turns count tool
    results) and the trajectory shows what happened.

    Examples
    --------
    >>> not_offered(ScriptedTurn(text="Searching.", tool="search")).command
    "echo '[scripted] tool search is not offered'"
    """
    name = re.sub(r"[^0-9A-Za-z_.-]", "_", str(turn.tool))
    return ScriptedTurn(text=turn.text, reasoning=turn.reasoning,
                        command=f"echo '[scripted] tool {name} is not offered'")


def rejected_key_script() -> Script:
    """Refuse the key: every request, the model list included, gets HTTP 401."""
    return Script(name="rejected_key", turns=default_script().turns, reject_key=True)


def repeated_error_script(status: int) -> Script:
    """Accept the key (the model list answers), then answer every turn with HTTP ``status``.

    ``auth_error`` (401): a key that lists models but may not generate; ``rate_limited``
    (429): the provider's rate limit, which the CLIs retry for minutes.
    """
    name = {401: "auth_error", 429: "rate_limited"}.get(status, f"error_{status}")
    return Script(name=name, turns=tuple(ScriptedTurn(http_error=status) for _ in range(3)))


BUILTIN_SCRIPTS = {
    "spu_agent": spu_agent_script,
    "policy_stop": policy_stop_script,
    "presented_order": default_script,
    "refusal": refusal_script,
    "api_error": api_error_script,
    "subagent": subagent_script,
    "rejected_key": rejected_key_script,
    "auth_error": lambda: repeated_error_script(401),
    "rate_limited": lambda: repeated_error_script(429),
}
"""Scripts selectable by name (``spu scripted-server --script NAME``)."""


class ScriptError(ValueError):
    """A script file cannot be read; the message names the file and the key."""


def load_script(source: str | Path) -> Script:
    """A built-in script by name, or a script file (JSON: ``{"name", "turns": [...]}``).

    Each turn is an object with the fields of :class:`ScriptedTurn`; ``answers``, where
    given, a list of ``{"if_asked": str or [str, ...], "text"}`` (:class:`ScriptedAnswer`).
    """
    if str(source) in BUILTIN_SCRIPTS:
        return BUILTIN_SCRIPTS[str(source)]()
    path = Path(source)
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        known = ", ".join(sorted(BUILTIN_SCRIPTS))
        raise ScriptError(f"{path}: no such script file (built-in scripts: {known})") from None
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise ScriptError(f"{path}: not a readable JSON file: {exc}") from None
    if not isinstance(data, dict) or not isinstance(data.get("turns"), list):
        raise ScriptError(f"{path}: key 'turns' must be a list of turns")
    subagent = data.get("subagent_turns", [])
    if not isinstance(subagent, list):
        raise ScriptError(f"{path}: key 'subagent_turns' must be a list of turns")
    if not isinstance(data.get("reject_key", False), bool):
        raise ScriptError(f"{path}: key 'reject_key' must be true or false")
    return Script(
        name=str(data.get("name", path.stem)),
        reject_key=bool(data.get("reject_key", False)),
        answers=_answers(path, data.get("answers", [])),
        turns=tuple(_turn(path, f"turns[{k}]", raw) for k, raw in enumerate(data["turns"])),
        subagent_turns=tuple(_turn(path, f"subagent_turns[{k}]", raw)
                             for k, raw in enumerate(subagent)),
    )


def _answers(path: Path, raw: Any) -> tuple[ScriptedAnswer, ...]:
    if not isinstance(raw, list):
        raise ScriptError(f"{path}: key 'answers' must be a list of answers")
    found = []
    for k, entry in enumerate(raw):
        asked = entry.get("if_asked") if isinstance(entry, dict) else None
        asked = [asked] if isinstance(asked, str) else asked
        if (not isinstance(entry, dict) or set(entry) != {"if_asked", "text"}
                or not isinstance(entry["text"], str) or not isinstance(asked, list)
                or not asked or not all(isinstance(a, str) and a for a in asked)):
            raise ScriptError(f"{path}: answers[{k}] must be an object with 'if_asked' (a "
                              f"string or a list of strings, none empty) and 'text' (a string)")
        found.append(ScriptedAnswer(if_asked=tuple(asked), text=entry["text"]))
    return tuple(found)


def _turn(path: Path, where: str, raw: Any) -> ScriptedTurn:
    fields = set(ScriptedTurn.__dataclass_fields__)
    if not isinstance(raw, dict):
        raise ScriptError(f"{path}: {where} must be an object")
    unknown = sorted(set(raw) - fields)
    if unknown:
        raise ScriptError(f"{path}: {where} has unknown key {unknown[0]!r} "
                          f"(known: {', '.join(sorted(fields))})")
    for key in ("text", "command", "reasoning", "refusal", "agent_prompt", "tool"):
        if raw.get(key) is not None and not isinstance(raw[key], str):
            raise ScriptError(f"{path}: {where}.{key} must be a string")
    if raw.get("arguments") is not None and not isinstance(raw["arguments"], dict):
        raise ScriptError(f"{path}: {where}.arguments must be an object")
    for key in ("fault_times", "cut_after_events", "delta_chars"):
        if raw.get(key) is not None and (isinstance(raw[key], bool)
                                         or not isinstance(raw[key], int) or raw[key] < 0):
            raise ScriptError(f"{path}: {where}.{key} must be an integer, 0 or more")
    if not isinstance(raw.get("as_generated", False), bool):
        raise ScriptError(f"{path}: {where}.as_generated must be true or false")
    pace = raw.get("bytes_per_s", 0.0)
    if isinstance(pace, bool) or not isinstance(pace, (int, float)) or pace < 0:
        raise ScriptError(f"{path}: {where}.bytes_per_s must be a number, 0 or more")
    delay = raw.get("first_byte_delay_s", 0.0)
    if isinstance(delay, bool) or not isinstance(delay, (int, float)) or delay < 0:
        raise ScriptError(f"{path}: {where}.first_byte_delay_s must be a number of seconds")
    if raw.get("http_error") is not None and (
            isinstance(raw["http_error"], bool) or not isinstance(raw["http_error"], int)):
        raise ScriptError(f"{path}: {where}.http_error must be an integer")
    return ScriptedTurn(**raw)


def scripted_usage(turn: int, *, subagent: bool = False) -> Usage:
    """The usage the server reports for a response to turn ``turn`` (0-based).

    Every bucket differs from every other and from turn to turn, so a parser that
    swaps buckets, double counts a response or drops one gives a wrong total.
    Sub-agent turns count from 100, so they differ from the main agent's.

    Examples
    --------
    >>> scripted_usage(0)
    Usage(input=101, cache_read=2003, cache_write=305, cache_write_1h=41, output=57)
    >>> scripted_usage(2).cache_read
    2203
    """
    turn = turn + 100 if subagent else turn
    return Usage(
        input=101 + 10 * turn,
        cache_read=2003 + 100 * turn,
        cache_write=305 + 20 * turn,
        cache_write_1h=41 + 2 * turn,
        output=57 + 7 * turn,
    )


SIDE_USAGE = Usage(input=13, cache_read=0, cache_write=0, output=3)
"""Usage of an answer to a request outside the script (a title, a summary)."""
