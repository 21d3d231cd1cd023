"""What the model was sent, and the tool calls it made: the gateway's record for the screen.

Every request of a generation endpoint (``messages``, ``responses``,
``chat_completions``) is read for what reaches the model as input (:func:`sent_to_model`):
system and developer text (Anthropic ``system``, Responses ``instructions``), user text,
tool results (their text, whatever the blocks inside: text, documents, search results),
documents (text, content blocks, a PDF as a ``base64`` source or as a ``file_data``
``data:`` URL), search results (title, source, content), and definitions (tools, output
formats: their keys and numbers too). Any other string is text, read as it is. The
model's own turns (assistant messages, reasoning) are not input: their tool calls are
kept apart. Images and audio are not read (no text to screen). Keys are matched in any
spelling (:func:`~spu.gateway.answers.fold_key`), as a lenient parser before the provider
would.

:class:`InputRecord` keeps, once the provider has answered a request (and not when it
refused it), each distinct text once in ``<run_dir>/model/tool_results.jsonl`` (a text
longer than ``model_gateway.tool_result_chars`` as its head and its tail; a ``context``
line beside a text whose neighbour in the model's context is not its neighbour there),
each distinct PDF once under ``model/documents/``, and the tool calls of the model's
answers in ``model/tool_calls.jsonl``. Each file has a cap; the line where a cap stopped
the record says so (``"kind": "cap"``), and the screen then says the run's screen is
incomplete (``run.json``'s ``screen_incomplete``).

:class:`SentReader` reads the record back for the screen (PDFs as text, in a child process
under CPU, memory and time limits: :class:`spu.tools.extract.ExtractWorker`), and
:func:`read_calls` the tool calls, for ``tool_calls`` and ``shell_downloads``.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import json
import logging
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from spu.gateway.answers import MAX_DEPTH, AnswerCall, AnswerReading, fold_key, loads

log = logging.getLogger(__name__)

GENERATIONS = frozenset({"messages", "responses", "chat_completions"})
"""Endpoints whose requests reach the model (a token count does not)."""

TEXTS_FILE = "tool_results.jsonl"
"""Every distinct text the model was sent (its name from when it held tool results only)."""
CALLS_FILE = "tool_calls.jsonl"
"""The model's tool calls, one line per call id and source."""
DOCUMENTS_DIR = "documents"
"""The PDFs the model was sent, by SHA-256."""

CALLS_LIMIT_BYTES = 16 << 20
"""Cap on ``tool_calls.jsonl``."""
MAX_CALL_INPUT = 16 << 10
"""Characters kept of a tool call's input (a shell command is read for downloads)."""
MAX_DOCUMENTS = 64
"""Distinct PDFs kept of a run; past it, a cap line."""

KIND_SYSTEM, KIND_USER, KIND_RESULT = "system", "user", "tool_result"
KIND_DOCUMENT, KIND_DEFINITION, KIND_CAP = "document", "definition", "cap"
KIND_CONTEXT = "context"
"""A line of context: what stands next to a new text in the model's context where the
record, keeping each text once, would not show it there (:meth:`InputRecord.keep`)."""

CONTEXT_CHARS = 1024
"""Characters of a context line at most (``spu.analysis.exposure.JOIN_CHARS``: what the
screen joins across a boundary)..."""
CONTEXT_FLOOR = 256
"""... and at most this many more than the new text it stands beside."""
MAX_ID_CHARS = 256
"""Characters kept of an id or a tool's name (the agent chooses them in its history)."""


def _folded(*names: str) -> frozenset[str]:
    return frozenset(fold_key(n) for n in names)


NOT_TEXT_KEYS = _folded("type", "id", "tool_use_id", "call_id", "tool_call_id",
                        "cache_control", "media_type", "mime_type", "signature",
                        "encrypted_content", "role", "status", "detail", "index")
"""Keys whose values are structure, never text the model reads."""
NOT_TEXT_PARTS = frozenset({"image", "inputimage", "imageurl", "inputaudio", "audio",
                            "thinking", "redactedthinking", "reasoning", "compaction"})
"""Parts (by folded type) with no text to screen (images, audio) or the model's own."""
CALL_TYPES = frozenset({"tooluse", "servertooluse", "functioncall", "customtoolcall",
                        "localshellcall"})
"""Parts and items (by folded type) that are the model's own tool calls."""
RESULT_TYPES = frozenset({"toolresult", "functioncalloutput", "customtoolcalloutput",
                          "localshellcalloutput"})
"""Parts and items (by folded type) that are tool results."""
SYSTEM_ROLES = frozenset({"system", "developer"})
DEFINITION_KEYS = _folded("tools", "functions", "response_format", "text", "output_format",
                          "output_config")
"""Top-level fields of definitions the model reads (tool descriptions, output schemas)."""


@dataclass(frozen=True)
class SentText:
    """A text the model was sent."""

    kind: str
    text: str
    call_id: str | None = None


@dataclass(frozen=True)
class SentFile:
    """A PDF the model was sent (decoded from base64)."""

    data: bytes
    call_id: str | None = None


@dataclass(frozen=True)
class ShownCall:
    """A tool call of the model as a request's conversation shows it (its input unread)."""

    id: str
    name: str
    arguments: Any

    def call(self) -> AnswerCall:
        """The call, its input as text (JSON where it is no text)."""
        args = self.arguments
        text = args if isinstance(args, str) else json.dumps(args, ensure_ascii=False)
        return AnswerCall(self.id, self.name, text[:MAX_CALL_INPUT])


@dataclass
class Sent:
    """What one request sends the model."""

    texts: list[SentText] = field(default_factory=list)
    files: list[SentFile] = field(default_factory=list)
    calls: list[ShownCall] = field(default_factory=list)
    """The model's earlier tool calls as the request shows them."""
    deep: bool = False
    """Some content lay past :data:`~spu.gateway.answers.MAX_DEPTH` and was not read."""


PLAIN_KEYS = frozenset((
    "type", "id", "name", "input", "text", "content", "role", "tool_use_id", "source",
    "media_type", "data", "cache_control", "title", "context", "citations", "is_error",
    "call_id", "output", "arguments", "action", "status", "tool_calls", "function",
    "tool_call_id", "filename", "file_data", "file", "image_url", "url", "detail",
    "encrypted_content", "summary", "signature", "thinking", "format", "input_audio",
    "annotations", "refusal", "audio", "index", "description", "input_schema",
    "parameters", "strict", "enabled", "command"))
"""Keys in the spelling the APIs give them: a node holding only such keys is read by
them directly; one holding any other key is read in every spelling (:func:`_one`)."""


def _one(node: dict[str, Any], name: str) -> Any:
    """The value of ``node``'s key ``name`` in any spelling (the last), or None."""
    if node.keys() <= PLAIN_KEYS:  # no other spelling of any key: read directly
        return node.get(name)
    target = fold_key(name)
    found = None
    for key, value in node.items():
        if fold_key(key) == target:
            found = value
    return found


def _kind(node: dict[str, Any]) -> str:
    value = _one(node, "type")
    return fold_key(value) if isinstance(value, str) else ""


FILE_KEYS = _folded("file_data")
"""Keys whose string is a file sent inline (a ``data:`` URL, or bare base64), which the
provider decodes: OpenAI's ``input_file`` and Chat's ``file`` parts. Any other string is
text the model reads as it is, a ``data:`` URL or base64 in a text block included (the
screen decodes base64 itself): read as a file, the text around it went unscreened."""


def _base64(payload: str) -> bytes | None:
    """``payload`` decoded as base64 written whole (lines broken anywhere), or None."""
    try:
        return binascii.a2b_base64(payload.replace("\r", "").replace("\n", ""),
                                   strict_mode=True)
    except (binascii.Error, ValueError):
        return None


def _binary(data: bytes) -> bool:
    """Whether ``data`` is no text (a quarter of its first KiB control bytes or NUL)."""
    head = data[:1024]
    return sum(b < 9 or 13 < b < 32 or b == 127 for b in head) * 4 > len(head)


def _inline_file(value: str, sent: Sent, call_id: str | None) -> str:
    """The text of a file sent inline; a PDF goes to ``sent.files`` (no text then).

    A ``data:`` URL's payload (base64 or percent-encoded), or bare base64; a payload that
    is neither is read as the text it is, and so is one that decodes to text.
    """
    meta, payload = "", value
    if value[:5].lower() == "data:" and "," in value[:256]:
        meta, payload = value.split(",", 1)
        meta = meta.lower()
        if not meta.endswith(";base64"):
            from urllib.parse import unquote

            return unquote(payload)
    data = _base64(payload)
    if data is None:
        return value
    if "pdf" in meta or b"%PDF-" in data[:1024]:
        sent.files.append(SentFile(data, call_id))
        return ""
    return "" if _binary(data) else data.decode("utf-8", "replace")


def _source_pdf(item: dict[str, Any]) -> bytes | None:
    """The PDF of a ``base64`` source (the provider decodes it as a PDF or an image)."""
    data = _one(item, "data")
    if not isinstance(data, str):
        return None
    try:
        decoded = base64.b64decode(data.split(",", 1)[-1] if data[:5].lower() == "data:"
                                   else data, validate=False)
    except (binascii.Error, ValueError):
        return None
    pdf = b"%PDF-" in decoded[:1024] or "pdf" in str(_one(item, "media_type")).lower()
    return decoded if pdf else None


def _gather(node: Any, sent: Sent, call_id: str | None, schema: bool = False) -> str:
    """The text of one part of a request (its strings, in order), its PDFs into ``sent``.

    ``schema``: a definition (a tool's schema, an output format), whose keys (a
    property's name) and numbers (an ``enum``, a ``default``) the model reads too.
    """
    parts: list[str] = []
    stack: list[tuple[Any, int, bool]] = [(node, 0, False)]
    while stack:
        item, depth, inline = stack.pop()
        if isinstance(item, str):
            parts.append(_inline_file(item, sent, call_id) if inline else item)
        elif depth >= MAX_DEPTH:
            sent.deep = True
        elif isinstance(item, list):
            stack.extend((v, depth + 1, False) for v in reversed(item))
        elif isinstance(item, dict):
            kind = _kind(item)
            if kind in NOT_TEXT_PARTS or kind in CALL_TYPES:
                continue
            if kind == "base64":  # a source: a PDF, or an image (no text)
                pdf = _source_pdf(item)
                if pdf is not None:
                    sent.files.append(SentFile(pdf, call_id))
                continue
            for key, value in reversed(item.items()):
                name = fold_key(key)
                if name not in NOT_TEXT_KEYS:
                    stack.append((value, depth + 1, name in FILE_KEYS))
                if schema:
                    stack.append((key, depth + 1, False))
        elif schema and isinstance(item, int | float) and not isinstance(item, bool):
            parts.append(str(item))
    return "\n".join(p for p in parts if p)


def _add(sent: Sent, kind: str, node: Any, call_id: str | None = None,
         schema: bool = False) -> None:
    text = _gather(node, sent, call_id, schema)
    if text:
        sent.texts.append(SentText(kind, text, call_id))


def _call(node: dict[str, Any], sent: Sent) -> None:
    """The model's tool call ``node`` (a ``tool_use`` block or a Responses call item)."""
    ident = _one(node, "call_id") or _one(node, "id")
    kind = _kind(node)
    name = _one(node, "name") or ("local_shell" if kind == "localshellcall" else "")
    args = next((v for v in (_one(node, "input"), _one(node, "arguments"),
                             _one(node, "action")) if v is not None), "")
    if ident is not None:
        sent.calls.append(ShownCall(str(ident), str(name), args))


def _anthropic(body: dict[str, Any], sent: Sent) -> None:
    system = _one(body, "system")
    if system is not None:
        _add(sent, KIND_SYSTEM, system)
    messages = _one(body, "messages")
    for message in messages if isinstance(messages, list) else []:
        if not isinstance(message, dict):
            continue
        content = _one(message, "content")
        if isinstance(content, dict):  # one block, as a lenient parser reads it
            content = [content]
        own = str(_one(message, "role")).casefold() == "assistant"
        if isinstance(content, str):
            if not own:
                sent.texts.append(SentText(KIND_USER, content))
            continue
        for block in content if isinstance(content, list) else []:
            if isinstance(block, dict):
                _anthropic_block(block, own, sent)


_PLAIN_TEXT = {"text": (KIND_USER, "text"), "tool_result": (KIND_RESULT, "content")}
"""The common blocks read without a walk: a text block, a tool result of plain text."""


def _anthropic_block(block: dict[str, Any], own: bool, sent: Sent) -> None:
    """One content block of a Messages conversation (``own``: of an assistant turn)."""
    if block.keys() <= PLAIN_KEYS:  # this runs for every block of every request
        plain = _PLAIN_TEXT.get(block.get("type"))  # type: ignore[arg-type]
        if plain is not None and not own and isinstance(block.get(plain[1]), str) \
                and not (block.keys() - {"type", "cache_control", "citations", "is_error",
                                         "tool_use_id", plain[1]}):
            sent.texts.append(SentText(plain[0], block[plain[1]],
                                       None if plain[0] == KIND_USER
                                       else str(block.get("tool_use_id"))))
            return
        if block.get("type") == "tool_use" and block.keys() <= _CALL_KEYS:
            sent.calls.append(ShownCall(str(block.get("id")), str(block.get("name") or ""),
                                        block.get("input", "")))
            return
    kind = _kind(block)
    if kind in CALL_TYPES:
        _call(block, sent)
    elif own:
        return
    elif kind in RESULT_TYPES:
        _add(sent, KIND_RESULT, block, str(_one(block, "tool_use_id")))
    else:
        _add(sent, KIND_DOCUMENT if kind == "document" else KIND_USER, block)


_CALL_KEYS = frozenset({"type", "id", "name", "input", "cache_control"})


def _responses(body: dict[str, Any], sent: Sent) -> None:
    for key, default_kind in (("instructions", KIND_SYSTEM), ("input", KIND_USER)):
        value = _one(body, key)
        if isinstance(value, str):
            sent.texts.append(SentText(default_kind, value))
            continue
        stack = [value]
        while stack:
            item = stack.pop()
            if isinstance(item, list):
                stack.extend(reversed(item))
            elif isinstance(item, dict):
                _responses_item(item, default_kind, sent)


def _responses_item(item: dict[str, Any], default_kind: str, sent: Sent) -> None:
    kind = _kind(item)
    role = str(_one(item, "role")).casefold()
    if kind in CALL_TYPES:
        _call(item, sent)
    elif kind in RESULT_TYPES:
        _add(sent, KIND_RESULT, _one(item, "output"), str(_one(item, "call_id")))
    elif role == "assistant" or kind in NOT_TEXT_PARTS:
        return
    else:
        _add(sent, KIND_SYSTEM if role in SYSTEM_ROLES else default_kind, item)


def _chat(body: dict[str, Any], sent: Sent) -> None:
    messages = _one(body, "messages")
    for message in messages if isinstance(messages, list) else []:
        if not isinstance(message, dict):
            continue
        role = str(_one(message, "role")).casefold()
        if role == "assistant":
            calls = _one(message, "tool_calls")
            for call in calls if isinstance(calls, list) else []:
                function = _one(call, "function") if isinstance(call, dict) else None
                if isinstance(function, dict):
                    _call({"id": _one(call, "id"), "name": _one(function, "name"),
                           "arguments": _one(function, "arguments")}, sent)
            continue
        if role in ("tool", "function"):
            ident = _one(message, "tool_call_id") or _one(message, "name")
            _add(sent, KIND_RESULT, _one(message, "content"), str(ident))
        else:
            _add(sent, KIND_SYSTEM if role in SYSTEM_ROLES else KIND_USER, message)


def sent_to_model(endpoint: str, body: Any) -> Sent:
    r"""What a request of ``endpoint`` sends the model (nothing for other endpoints).

    Examples
    --------
    >>> sent = sent_to_model("messages", {"system": "Be brief.", "messages": [
    ...     {"role": "user", "content": [{"type": "search_result", "source": "s",
    ...       "title": "A title", "content": [{"type": "text", "text": "a finding"}]}]},
    ...     {"role": "assistant", "content": [{"type": "text", "text": "my own words"},
    ...       {"type": "tool_use", "id": "t1", "name": "Bash", "input": {"command": "ls"}}]},
    ...     {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "t1",
    ...       "content": [{"type": "document", "title": "T", "source": {
    ...           "type": "text", "media_type": "text/plain", "data": "page"}}]}]}]})
    >>> [(t.kind, t.text, t.call_id) for t in sent.texts][1:]
    [('user', 's\nA title\na finding', None), ('tool_result', 'T\npage', 't1')]
    >>> sent.calls
    [ShownCall(id='t1', name='Bash', arguments={'command': 'ls'})]
    >>> [(t.kind, t.text) for t in sent_to_model("chat_completions", {"messages": [
    ...     {"role": "developer", "content": "rules"},
    ...     {"role": "tool", "tool_call_id": "c1", "content": "done"}]}).texts]
    [('system', 'rules'), ('tool_result', 'done')]
    """
    sent = Sent()
    if endpoint not in GENERATIONS or not isinstance(body, dict):
        return sent
    # Definitions first, as the model reads them: a conversation's texts then follow one
    # another in the record as they follow one another in the model's context.
    for key, value in body.items():
        if fold_key(key) in DEFINITION_KEYS and value not in (None, "", [], {}):
            _add(sent, KIND_DEFINITION, value, schema=True)
    {"messages": _anthropic, "responses": _responses, "chat_completions": _chat}[endpoint](
        body, sent)
    return sent


def _bounded(ident: str | None) -> str | None:
    return ident if ident is None else ident[:MAX_ID_CHARS]


def _now() -> str:
    return datetime.now(UTC).isoformat(timespec="milliseconds")


def _digest(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def _context_size(new_text: str) -> int:
    return min(CONTEXT_CHARS, CONTEXT_FLOOR + len(new_text))


def _following(texts: list[SentText], keys: list[str], seen: set[str], i: int,
               size: int) -> tuple[str, str | None]:
    """What the model reads from text ``i`` on, through texts already kept (``size`` long).

    Also the key of the last text it holds whole where a new text follows it (the
    record's context then runs on into that text's line), else None.
    """
    parts: list[str] = []
    got = 0
    for k in range(i, len(texts)):
        if k > i and keys[k] not in seen:
            return "".join(parts), keys[k - 1]  # a new text: written next, as it follows
        parts.append(texts[k].text[:size - got])
        got += len(parts[-1])
        if got >= size:
            break
    return "".join(parts), None


class InputRecord:
    """The gateway's record of what the model was sent and the tool calls it made.

    One per run, written from the gateway's threads (a lock). Each distinct text is one
    line of :data:`TEXTS_FILE` (``time``, ``kind``, ``call_id``, ``chars``, ``truncated``,
    ``text``: its first ``text_chars`` characters, and ``tail``: its last ones, where it
    is longer than twice that); each distinct PDF a file under :data:`DOCUMENTS_DIR` and a
    line naming it. The texts file and the PDFs share ``limit_bytes``; past it, or past
    :data:`MAX_DOCUMENTS`, one line ``{"kind": "cap", "note"}`` says what stopped.

    Args:
        folder: the gateway's folder (``<run_dir>/model``).
        text_chars: ``model_gateway.tool_result_chars``.
        limit_bytes: ``model_gateway.tool_results_mb`` in bytes.
    """

    def __init__(self, folder: Path, text_chars: int, limit_bytes: int,
                 calls_limit_bytes: int = CALLS_LIMIT_BYTES) -> None:
        self.folder = Path(folder)
        self.path = self.folder / TEXTS_FILE
        self.calls_path = self.folder / CALLS_FILE
        self.text_chars = max(1, text_chars)
        self.limit_bytes = limit_bytes
        self.calls_limit_bytes = calls_limit_bytes
        self.folder.mkdir(parents=True, exist_ok=True)
        self.calls_path.touch()  # its presence: this run's calls are counted here
        self._lock = threading.Lock()
        self._seen: set[str] = set()
        self._calls_seen: set[tuple[str, str]] = set()
        self._answer_inputs: dict[str, bool] = {}
        """The ids of the model's calls (from its answers): whether the answer gave an input."""
        self._last: str | None = None
        """The key of the text the record's last line holds (None: no text, or a part)."""
        self._bytes = 0
        self._calls_bytes = 0
        self._documents = 0
        self._capped: set[str] = set()
        """The caps reached, each noted once: ``bytes``, ``documents``, ``depth``, ``calls``."""

    def keep(self, endpoint: str, body: Any) -> None:
        """Record what a request of ``endpoint`` sends the model, once each."""
        sent = sent_to_model(endpoint, body)
        if not (sent.texts or sent.files or sent.calls or sent.deep):
            return
        with self._lock:
            lines = self._text_lines(sent.texts)
            lines += [self._file_line(f) for f in sent.files]
            if sent.deep:
                lines.append(self._cap_line("depth", f"content nested past {MAX_DEPTH} "
                                                     f"levels in a request was not read"))
            self._append(self.path, [line for line in lines if line])
            # A call the history shows is the agent's to write: only the input of a call
            # the model made, whose answer arrived without one (cut), is taken from it.
            self._append(self.calls_path, [
                line for c in sent.calls
                if self._answer_inputs.get(c.id[:MAX_ID_CHARS]) is False
                and (line := self._call_line(c, "request"))])

    def answered(self, endpoint: str, reading: AnswerReading, body: Any = None,
                 status: int = 200) -> None:
        """Record what a request of ``endpoint`` sent the model, and its answer's calls.

        ``body`` (the request) is kept (:meth:`keep`) once the provider has answered it,
        unless it refused it (``status`` 400 or more): such a request reached no model and
        was billed nothing, so that an agent could fill the record's cap with texts the
        provider refused, at no cost, and blind the screen to what came after.
        """
        if endpoint not in GENERATIONS:
            return
        if body is not None and status < 400:
            try:
                self.keep(endpoint, body)
            except Exception as exc:  # the record line is written; the screen says so
                log.exception("what a request sent the model could not be read")
                with self._lock:
                    self._append(self.path, [self._cap_line("failed", (
                        f"what a request sent the model could not be recorded "
                        f"({type(exc).__name__}): later ones may be missing"))])
        if not reading.tool_calls:
            return
        with self._lock:
            for call in reading.tool_calls:
                known = self._answer_inputs.get(call.id[:MAX_ID_CHARS], False)
                self._answer_inputs[call.id[:MAX_ID_CHARS]] = known or bool(call.input)
            self._append(self.calls_path, [line for call in reading.tool_calls
                                            if (line := self._call_line(call, "answer"))])

    # Each line builder runs under the lock and returns "" for a line not to write.

    @staticmethod
    def _key(sent: SentText) -> str:
        raw = sent.text.encode("utf-8", "surrogatepass")
        return f"{sent.kind}:{_bounded(sent.call_id)}:{_digest(raw)[:24]}"

    def _text_lines(self, texts: list[SentText]) -> list[str]:
        """The lines of one request's texts: each new one, with context where needed.

        The record keeps each text once, so a new text may follow, in the record, another
        than the text it follows in the model's context (a request in between, a history
        edited), and a text already kept may follow it in the context: a line of context
        then holds what stands before it in the context (or after it), for the screen's
        joins: :data:`CONTEXT_FLOOR` characters more than the new text, at most
        :data:`CONTEXT_CHARS` (an identifier across the boundary has at most its own
        length on the far side; a tiny text must not buy a kilobyte of record).
        """
        keys = [self._key(t) for t in texts]
        lines: list[str] = []
        wrote_previous = False
        tail = ""  # the request's last CONTEXT_CHARS characters before text i
        for i, (sent, key) in enumerate(zip(texts, keys, strict=True)):
            if key in self._seen:
                if wrote_previous:  # a kept text right after a new one
                    after, self._last = _following(texts, keys, self._seen, i,
                                                   _context_size(texts[i - 1].text))
                    lines.append(self._context_line(after, gap=False))
                wrote_previous = False
            else:
                if i and self._last != keys[i - 1]:
                    lines.append(self._context_line(tail[-_context_size(sent.text):],
                                                    gap=True))
                lines.append(self._text_line(sent, key))
                self._last, wrote_previous = key, True
            text = sent.text
            tail = (text if len(text) >= CONTEXT_CHARS else tail + text)[-CONTEXT_CHARS:]
        return lines

    def _context_line(self, text: str, gap: bool) -> str:
        if not text or "bytes" in self._capped:
            return ""
        return self._within(json.dumps({"kind": KIND_CONTEXT, "after_gap": gap, "text": text},
                                       ensure_ascii=False) + "\n")

    def _text_line(self, sent: SentText, key: str) -> str:
        text = sent.text
        if key in self._seen or "bytes" in self._capped:
            return ""
        self._seen.add(key)
        n = self.text_chars
        line: dict[str, Any] = {"time": _now(), "kind": sent.kind,
                                "call_id": _bounded(sent.call_id),
                                "chars": len(text), "truncated": len(text) > 2 * n,
                                "text": text[:n] if len(text) > 2 * n else text}
        if len(text) > 2 * n:
            line["tail"] = text[-n:]
        return self._within(json.dumps(line, ensure_ascii=False) + "\n")

    def _file_line(self, sent: SentFile) -> str:
        digest = _digest(sent.data)
        if digest in self._seen or "bytes" in self._capped:
            return ""
        self._seen.add(digest)
        if self._documents >= MAX_DOCUMENTS:
            return self._cap_line("documents", f"more than {MAX_DOCUMENTS} distinct PDFs were "
                                               f"sent to the model: later ones are not kept")
        name = f"{DOCUMENTS_DIR}/{digest[:32]}.pdf"
        line = json.dumps({"time": _now(), "kind": KIND_DOCUMENT, "call_id": sent.call_id,
                           "file": name, "bytes": len(sent.data)}) + "\n"
        if self._bytes + len(sent.data) + len(line) > self.limit_bytes:
            return self._cap_line("bytes", self._cap_note())
        try:
            (self.folder / DOCUMENTS_DIR).mkdir(parents=True, exist_ok=True)
            (self.folder / name).write_bytes(sent.data)
        except OSError as exc:
            log.error("a PDF sent to the model could not be kept in %s: %s", name, exc)
            return self._cap_line("written", f"a PDF the model was sent could not be kept "
                                             f"({exc.strerror or exc})")
        self._documents += 1
        self._bytes += len(sent.data)
        return self._within(line)

    def _within(self, line: str) -> str:
        size = len(line.encode("utf-8", "replace"))
        if self._bytes + size > self.limit_bytes:
            return self._cap_line("bytes", self._cap_note())
        self._bytes += size
        return line

    def _cap_note(self) -> str:
        return (f"model/{TEXTS_FILE} reached its cap ({self.limit_bytes} bytes, "
                f"model_gateway.tool_results_mb): later texts the model was sent are not kept")

    def _cap_line(self, cap: str, note: str) -> str:
        """The line saying that ``cap`` stopped the record (once; "" after)."""
        if cap in self._capped:
            return ""
        self._capped.add(cap)
        return json.dumps({"time": _now(), "kind": KIND_CAP, "note": note}) + "\n"

    def _call_line(self, shown: AnswerCall | ShownCall, source: str) -> str:
        key = (shown.id[:MAX_ID_CHARS], source)
        if key in self._calls_seen or "calls" in self._capped:
            return ""
        self._calls_seen.add(key)
        call = shown.call() if isinstance(shown, ShownCall) else shown
        line = json.dumps({"time": _now(), "id": call.id[:MAX_ID_CHARS],
                           "name": call.name[:MAX_ID_CHARS],
                           "input": call.input[:MAX_CALL_INPUT], "from": source},
                          ensure_ascii=False) + "\n"
        size = len(line.encode("utf-8", "replace"))
        if self._calls_bytes + size > self.calls_limit_bytes:
            return self._cap_line("calls", f"model/{CALLS_FILE} reached its cap "
                                           f"({self.calls_limit_bytes} bytes)")
        self._calls_bytes += size
        return line

    @staticmethod
    def _append(path: Path, lines: list[str]) -> None:
        """Append ``lines``; a file that cannot be written is logged (the request goes on)."""
        if not lines:
            return
        try:
            with open(path, "a", encoding="utf-8", errors="replace") as f:
                f.writelines(lines)
        except OSError as exc:
            log.error("the model's inputs could not be recorded in %s: %s", path, exc)


# --------------------------------------------------------------------------- reading back


MAX_PDF_BYTES = 32 << 20
"""A kept PDF larger than this is not read (the gateway's request limit)."""
PDF_BUDGET_S = 120.0
"""Seconds of PDF reading a run's screen spends at most; the PDFs left are notes."""
MAX_TEXT_CHARS = 1 << 20
"""Characters of one PDF's text screened: its first and last halves (a note past it)."""


@dataclass(frozen=True)
class ScreenedText:
    """A text for the screen, in the order the model was sent it."""

    label: str
    """What it was: ``tool_result``, ``user``, ``system``, ``document``, ``definition``;
    or ``context``: what stood beside the next text (or the last) in the model's context,
    screened only across that boundary (its own text was screened where it was kept)."""
    text: str
    after_gap: bool = False
    """Not adjacent to the text before it (a kept tail after its head)."""


def _lines(path: Path) -> Iterator[dict[str, Any]]:
    """The JSON objects of a JSON Lines file, read a line at a time (bad lines skipped)."""
    if not path.is_file():
        return
    with open(path, encoding="utf-8", errors="replace") as f:
        for line in f:
            try:
                value = json.loads(line)
            except (ValueError, RecursionError):  # a decode error is a ValueError
                continue
            if isinstance(value, dict):
                yield value


class SentReader:
    """What the gateway kept of what the model was sent, read back for the screen.

    Iterate :meth:`texts`; :attr:`notes` then says what kept the screen from seeing all
    of it (a cap of the record, texts kept as head and tail, a PDF not read).
    """

    def __init__(self, folder: str | Path, worker: Any = None) -> None:
        self.folder = Path(folder)
        self._notes: list[str] = []
        self._cut: list[int] = []
        self._worker = worker
        self._pdf_deadline: float | None = None

    @property
    def notes(self) -> list[str]:
        """What the screen could not see, one line each (empty: it saw everything kept)."""
        cut = ([f"{len(self._cut)} text(s) sent to the model were kept as head and tail "
                f"only (the longest {max(self._cut)} characters): their middle was not "
                f"screened"] if self._cut else [])
        return [*self._notes, *cut]

    def texts(self) -> Iterator[ScreenedText]:
        """Each text the model was sent, in order (a PDF as its text)."""
        for line in _lines(self.folder / TEXTS_FILE):
            kind = str(line.get("kind") or KIND_RESULT)
            if kind == KIND_CAP:
                self._notes.append(str(line.get("note") or "a cap of the gateway's record"))
            elif kind == KIND_CONTEXT:
                yield ScreenedText(KIND_CONTEXT, str(line.get("text") or ""),
                                   after_gap=bool(line.get("after_gap")))
            elif kind == KIND_DOCUMENT and line.get("file"):
                yield from self._document(str(line["file"]))
            else:
                yield ScreenedText(kind, str(line.get("text") or ""))
                if line.get("truncated"):
                    chars = line.get("chars")
                    self._cut.append(chars if isinstance(chars, int) else 0)
                    if isinstance(line.get("tail"), str):
                        yield ScreenedText(kind, line["tail"], after_gap=True)

    def _document(self, name: str) -> Iterator[ScreenedText]:
        path = self.folder / name
        if "/" in name.removeprefix(DOCUMENTS_DIR + "/") or not path.is_file() \
                or path.is_symlink():
            self._notes.append(f"a PDF the model was sent is missing from the record "
                               f"({name[:100]})")
            return
        if self._pdf_deadline is None:
            self._pdf_deadline = time.monotonic() + PDF_BUDGET_S
        size = path.stat().st_size
        if size > MAX_PDF_BYTES or time.monotonic() > self._pdf_deadline:
            self._notes.append(f"a PDF the model was sent ({name}, {size} bytes) was not "
                               f"read (over {MAX_PDF_BYTES} bytes, or past {PDF_BUDGET_S:g} s "
                               f"of PDFs)")
            return
        text, note = self._extract(path.read_bytes())
        if note:
            self._notes.append(f"a PDF the model was sent ({name}): {note}")
        if len(text) > MAX_TEXT_CHARS:
            self._cut.append(len(text))
            yield ScreenedText(KIND_DOCUMENT, text[:MAX_TEXT_CHARS // 2])
            yield ScreenedText(KIND_DOCUMENT, text[-MAX_TEXT_CHARS // 2:], after_gap=True)
        elif text:
            yield ScreenedText(KIND_DOCUMENT, text)

    def _extract(self, data: bytes) -> tuple[str, str | None]:
        if self._worker is None:
            from spu.tools.extract import ExtractWorker

            self._worker = ExtractWorker()
        text, note = self._worker.text(data, "application/pdf")
        return str(text), note

    def close(self) -> None:
        """Stop the PDF reader's child process, if one started."""
        if self._worker is not None and hasattr(self._worker, "close"):
            self._worker.close()


@dataclass(frozen=True)
class GatewayCalls:
    """The model's tool calls as the gateway's record shows them."""

    ids: tuple[str, ...]
    """Call ids: every call of the model's answers."""
    shell_commands: tuple[str, ...]
    """The command lines of the shell tools' calls among them."""
    complete: bool
    """False where a cap of the record stopped it."""


def read_calls(folder: str | Path) -> GatewayCalls | None:
    """The tool calls the gateway saw (None: no record of them, an older run).

    A call counts when the model's answer made it. A call only the conversation shows,
    or a tool result only, does not (the agent writes its history as it likes: forged
    pairs of a call and its result would count calls the model never made); the
    history's input of a call is read only where the model's answer arrived without one
    (cut before it). An input that is no JSON (or JSON Python cannot read: nested past
    its stack, an integer past 4,300 digits) is read as the command line it is.
    """
    from spu.tools.egress import SHELL_TOOLS, shell_command

    folder = Path(folder)
    if not (folder / CALLS_FILE).is_file():
        return None
    complete = True
    names: dict[str, str] = {}
    inputs: dict[str, str] = {}
    for line in _lines(folder / CALLS_FILE):
        if line.get("kind") == KIND_CAP:
            complete = False
            continue
        ident, given = str(line.get("id")), line.get("input")
        if line.get("from") == "answer":
            names.setdefault(ident, str(line.get("name") or ""))
            if given:
                inputs[ident] = str(given)
        elif given and ident not in inputs:
            inputs[ident] = str(given)
    commands = []
    for ident, name in names.items():
        if name in SHELL_TOOLS:
            text = inputs.get(ident, "")
            arguments = loads(text.encode("utf-8", "surrogatepass"))
            command = shell_command(text if arguments is None else arguments)
            if command:
                commands.append(command)
    return GatewayCalls(tuple(names), tuple(commands), complete)
