"""What a provider's answer says: usage, stop reason, refusal, error (pure, no I/O).

One reader per API style reads an answer as it streams (server-sent events, fed in
chunks of any size) or whole (a JSON body), and the request readers pull out the tool
results a request carries, for the exposure screen. The field names follow the
providers' documentation:

- Anthropic Messages: ``message_start`` carries the id and the input usage,
  ``message_delta`` the stop reason (``refusal`` with ``stop_details.category``) and
  the final usage, ``message_stop`` ends the answer, ``error`` fails it mid-stream;
  ``input_tokens`` counts uncached input only.
- OpenAI Responses: ``response.completed``, ``response.incomplete`` or
  ``response.failed`` carry the whole response (status, output items, usage, error);
  ``input_tokens`` includes the cached tokens (``input_tokens_details``). A refusal is
  a ``refusal`` content part, a ``content_filter`` stop, or a failure whose code names
  a policy (``bio_policy``).
- OpenAI Chat Completions: ``choices[].finish_reason`` (``content_filter``: a refusal),
  ``message.refusal``, and ``usage`` (``prompt_tokens`` inclusive of cached ones; in the
  last chunk of a stream asked with ``include_usage``), the stream ending ``[DONE]``.
"""

from __future__ import annotations

import functools
import json
import re
import unicodedata
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

from spu.schema import Usage

API_ANTHROPIC = "anthropic"
API_RESPONSES = "openai-responses"
API_CHAT = "openai-chat"
APIS = (API_ANTHROPIC, API_RESPONSES, API_CHAT)
"""The API styles of ``SPU_MODEL_API``."""

GENERATION_ENDPOINTS = frozenset({"messages", "responses", "chat_completions"})
"""Endpoints whose answers are model generations (billed, with a stop reason)."""

RESPONSES_CALL_ITEMS = frozenset({"function_call", "custom_tool_call", "local_shell_call"})
"""Output items of a Responses answer that the client must answer with a tool result."""

NOT_FINAL_STOPS = frozenset({"tool_use", "pause_turn", "tool_calls", "function_call"})
"""Stop reasons after which the conversation goes on."""


MAX_DEPTH = 64
"""Nesting kept by :func:`loads` when Python's parser cannot read a document whole."""

_JSON_TOKEN = re.compile(rb'"(?:[^"\\]++|\\.)*+(?:"|\\?\Z)|[\[\]{}]')
"""A JSON string (skipped whole, escapes and all; one never closed runs to the end, so that
no quote inside it starts a scan of its own: linear time) or a bracket."""

MAX_PRUNED_BYTES = 2 * 1024 * 1024
"""The largest document :func:`loads` reads again with its deep parts cut (about 0.3 s a
MiB, on the gateway's event loop): a larger one Python's parser gives up on is none."""


def _safe_int(digits: str) -> int | float:
    """An integer as Python reads it, or infinity past its digit limit (4,300)."""
    try:
        return int(digits)
    except ValueError:
        return float("inf") if not digits.startswith("-") else float("-inf")


def _pruned(data: bytes, max_depth: int = MAX_DEPTH, as_text: bool = False) -> bytes:
    """``data`` with every array or object nested past ``max_depth`` replaced.

    Each is replaced by null, or with ``as_text`` by a string holding its JSON text.
    """
    out: list[bytes] = []
    depth, kept_to, cut_at, cut_from = 0, 0, 0, 0
    for token in _JSON_TOKEN.finditer(data):
        bracket = data[token.start()]
        if bracket == 34:  # a string, brackets and all
            continue
        if bracket in (91, 123):  # [ {
            depth += 1
            if depth == max_depth + 1 and not cut_at:
                out += [data[kept_to:token.start()], b"" if as_text else b"null"]
                cut_at, cut_from = depth, token.start()
        else:
            if cut_at and depth == cut_at:
                if as_text:
                    text = data[cut_from:token.end()].decode("utf-8", "replace")
                    out.append(json.dumps(text).encode())
                kept_to, cut_at = token.end(), 0
            depth -= 1
    out.append(data[kept_to:] if not cut_at else b"")
    return b"".join(out)


def nested_within(value: Any, max_depth: int = MAX_DEPTH) -> bool:
    """True when no array or object of ``value`` (itself at depth 1) nests past ``max_depth``.

    Examples
    --------
    >>> nested_within([[1], {"a": [2]}], 3), nested_within([[[1]]], 2), nested_within("x", 0)
    (True, False, True)
    """
    pending = [(value, 1)] if isinstance(value, dict | list) else []
    while pending:
        item, depth = pending.pop()
        if depth > max_depth:
            return False
        children = item.values() if isinstance(item, dict) else item
        pending += [(c, depth + 1) for c in children if isinstance(c, dict | list)]
    return True


def loads(data: bytes | str, object_pairs_hook: Any = None, *,
          deep_as_text: bool = False) -> Any:
    """``data`` decoded as JSON, or None where it is none.

    Where Python's parser gives up on a document that is JSON (nesting past its recursion
    limit, an integer past its 4,300 digits), the document (up to :data:`MAX_PRUNED_BYTES`)
    is read with its parts nested past :data:`MAX_DEPTH` as null and such integers as
    infinite: what a record line needs
    (model, stream, usage, stop reason) lies near the top. Neither may cost a request its
    record line: an agent chooses its tool schemas, and its model what it writes.

    With ``deep_as_text``, every part nested past :data:`MAX_DEPTH` is read as a string
    holding its JSON text, whether or not Python's parser could read it whole: what a
    reader of an agent's session files needs, whose values must stay within what the
    trajectory's JSON can be written and read back with (pydantic's limits are far below
    Python's), and whose deep parts are still the agent's words.

    Examples
    --------
    >>> deep = b'{"usage": {"output_tokens": 7}, "x": ' + b"[" * 5000 + b"]" * 5000 + b"}"
    >>> loads(deep)["usage"], str(loads(deep)["x"]).count("["), loads(b"[[1]]")
    ({'output_tokens': 7}, 63, [[1]])
    >>> loads(b'{"n": ' + b"9" * 5000 + b"}"), loads(b"{nope"), loads(bytes([255]))
    ({'n': inf}, None, None)
    >>> cut = loads(b'{"input": ' + b'[' * 300 + b'"doi"' + b']' * 300 + b'}', deep_as_text=True)
    >>> inner = cut["input"]
    >>> while isinstance(inner, list):
    ...     inner = inner[0]
    >>> inner.count("["), inner.strip("[]")
    (237, '"doi"')
    """
    try:
        value = json.loads(data, object_pairs_hook=object_pairs_hook)
    except (RecursionError, ValueError) as exc:  # a syntax error is a ValueError too
        if isinstance(exc, json.JSONDecodeError | UnicodeDecodeError):
            return None
    else:
        if not deep_as_text or nested_within(value):
            return value
    raw = data.encode("utf-8", "surrogatepass") if isinstance(data, str) else data
    if len(raw) > MAX_PRUNED_BYTES:
        return None
    try:
        return json.loads(_pruned(raw, as_text=deep_as_text), parse_int=_safe_int,
                          object_pairs_hook=object_pairs_hook)
    except (RecursionError, ValueError):
        return None


class _FirstDuplicate:
    """An ``object_pairs_hook`` that notes the first key an object names twice.

    Each object is built as ``json`` builds it (a key named twice keeps its last value).
    """

    def __init__(self) -> None:
        self.key: str | None = None

    def __call__(self, pairs: list[tuple[str, Any]]) -> dict[str, Any]:
        built = dict(pairs)
        if len(built) != len(pairs) and self.key is None:
            seen: set[str] = set()
            for key, _ in pairs:
                if key in seen:
                    self.key = key
                    break
                seen.add(key)
        return built


def loads_request(data: bytes) -> tuple[Any, str | None]:
    """A request body as :func:`loads` reads it, and the first key named twice in one object.

    The key is None where no object names one twice.

    Python keeps a duplicate key's last value; a provider's parser may keep its first. A
    body naming ``max_tokens``, ``stream`` or a tool's ``type`` twice would be read one way
    by the gateway's record and policy and another by the provider, so the gateway refuses
    it (``gateway.bad_request``). Reading the pairs costs about twice a plain parse.

    Examples
    --------
    >>> loads_request(b'{"max_tokens": 64000, "m": [{"a": 1}], "max_tokens": 16}')
    ({'max_tokens': 16, 'm': [{'a': 1}]}, 'max_tokens')
    >>> loads_request(b'{"tools": [{"type": "custom", "type": "web_search"}]}')[1]
    'type'
    >>> loads_request(b'{"a": {"b": 1}, "b": 2}')
    ({'a': {'b': 1}, 'b': 2}, None)
    """
    hook = _FirstDuplicate()
    return loads(data, object_pairs_hook=hook), hook.key


@functools.cache
def marks_table() -> dict[int, None]:
    """What :func:`unmarked` drops (a ``str.translate`` table, built once in 0.03 s).

    Combining marks (a non-zero combining class) and the few characters that decompose
    to marks alone (Tibetan vowel signs U+0F73, U+0F75, U+0F81; halfwidth sound marks).
    """
    table: dict[int, None] = {}
    for low, high in ((0x300, 0x40000), (0xE0000, 0xE1000)):
        for code in range(low, high):
            char = chr(code)
            if unicodedata.combining(char) or (unicodedata.decomposition(char) and
                                               unicodedata.combining(
                                                   unicodedata.normalize("NFKD", char)[0])):
                table[code] = None
    return table


def unmarked(text: str) -> str:
    """``text`` without combining marks, before any Unicode normalisation is asked of it.

    Python's normalisation sorts each run of combining marks into canonical order by
    insertion: a crafted run of marks in falling order costs its length squared (20,000
    marks 3 s, a megabyte hours, on whichever thread reads it). Every reader here drops
    the marks after normalising anyway; dropped before, no run is left to sort, and a
    base letter is read without the marks it would have composed with.

    Examples
    --------
    >>> unmarked("e\u0301\u0316x\u0f73"), unmarked("plain")
    ('ex', 'plain')
    """
    return text if text.isascii() else text.translate(marks_table())


FIELD_NAME_CHARS = 64
"""Longer than any field name: a key that still is once folded names no field."""

_KEY_DROPPED = {ord("_"): None, ord("-"): None}


def fold_key(key: str) -> str:
    """``key`` as the most lenient parser before a provider matches it to a field.

    Case folded (``ſ`` is ``s``), decomposed with its marks dropped (``İ`` is ``i``, as
    ``strings.ToLower`` makes it), ``_`` and ``-`` left out (Go's json v2 ignores them,
    protobuf's JSON takes ``cachedContent`` for ``cached_content``).

    Linear in ``key`` (:func:`unmarked`); a key still longer than
    :data:`FIELD_NAME_CHARS` once case folded and stripped is not decomposed (it names
    no field either way), and only short keys are cached: the agent chooses every key,
    and a cache of its long ones held gigabytes.

    Examples
    --------
    >>> fold_key("Previous_Response_ID"), fold_key("fİle_id"), fold_key("cachedContent")
    ('previousresponseid', 'fileid', 'cachedcontent')
    >>> fold_key("_" * 10_000 + "Model")
    'model'
    """
    if len(key) <= 2 * FIELD_NAME_CHARS:
        return _fold_short(key)
    text = unmarked(key.casefold()).translate(_KEY_DROPPED)
    if len(text) > FIELD_NAME_CHARS:
        return text
    return _fold_short(text)


@functools.lru_cache(maxsize=8192)
def _fold_short(key: str) -> str:
    text = key.casefold()
    if not text.isascii():
        text = unicodedata.normalize("NFKD", unmarked(text))
        return "".join(c for c in text if c not in "_-" and not unicodedata.combining(c))
    return text.translate(_KEY_DROPPED)


def _folded(names: tuple[str, ...]) -> frozenset[str]:
    return frozenset(map(fold_key, names))


READ_FIELDS = ("model", "stream", "stream_options", "max_tokens", "max_output_tokens",
               "max_completion_tokens", "tools", "mcp_servers", "web_search_options",
               "prompt", "background", "messages", "input", "plugins", "models",
               "previous_response_id", "conversation", "container", "preset",
               "prompt_id", "cached_content", "extra_body", "data_sources")
"""The top-level fields of a request body the gateway's record and policy read."""


def case_variant(body: Any) -> tuple[str, str] | None:
    """A key naming a field the gateway reads in other letters, and that field; or None.

    Looked for at the top level, in each ``tools`` item (``type``) and in
    ``stream_options`` (``include_usage``). Go's ``encoding/json`` (routers in front of a
    provider) matches a field's name whatever its case, Unicode folds included (``ſ`` is
    ``s``, the Kelvin sign ``k``), a JSON library lowering keys by ``strings.ToLower``
    reads ``İ`` as ``i``, and Go's json v2 and protobuf's JSON ignore ``_`` and ``-`` (or
    take camelCase): ``"MAX_TOKENS"``, ``"Tools"`` or ``"maxTokens"`` would be read there
    as the field the gateway found absent, or read with another value (:func:`fold_key`).

    Examples
    --------
    >>> case_variant({"model": "m", "Model": "big"}), case_variant({"ſtream": True})
    (('Model', 'model'), ('ſtream', 'stream'))
    >>> case_variant({"İnput": []}), case_variant({"previousResponseId": "r"})
    (('İnput', 'input'), ('previousResponseId', 'previous_response_id'))
    >>> case_variant({"tools": [{"Type": "web_search_20250305", "name": "s"}]})
    ('Type', 'type')
    >>> case_variant({"model": "m", "tools": [{"input_schema": {"Type": "object"}}]}) is None
    True
    """
    if not isinstance(body, dict):
        return None
    objects: list[tuple[dict[str, Any], tuple[str, ...]]] = [(body, READ_FIELDS)]
    tools = body.get("tools")
    objects += [(tool, ("type",)) for tool in (tools if isinstance(tools, list) else [])
                if isinstance(tool, dict)]
    options = body.get("stream_options")
    if isinstance(options, dict):
        objects.append((options, ("include_usage",)))
    for found, fields in objects:
        folded = {fold_key(name): name for name in fields}
        for key in found:
            name = folded.get(fold_key(key))
            if name is not None and key != name:
                return key, name
    return None


POST_ENDPOINTS = {"messages": "messages", "messages/count_tokens": "count_tokens",
                  "responses": "responses", "chat/completions": "chat_completions"}
"""The POST paths forwarded (after an optional ``v1/``) and the endpoint each names."""

_MODEL_ID = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.:@-]{0,199}")


def endpoint_of(method: str, path: str) -> str:
    """The endpoint a request path names (the part after the API's base URL), or ``other``.

    Only an exact list of paths is an endpoint, each with an optional ``/v1`` in front:
    ``POST`` to :data:`POST_ENDPOINTS`, ``GET models`` and ``GET models/<id>``. ``path``
    is the path as sent, not decoded: one holding a ``%`` escape, a backslash, a dot
    segment or an empty segment (``//``) is ``other``, so that nothing the upstream's
    client or server folds later (``/models/../files``) can name another endpoint.

    Examples
    --------
    >>> endpoint_of("POST", "/v1/messages"), endpoint_of("POST", "/responses")
    ('messages', 'responses')
    >>> endpoint_of("POST", "/v1/messages/count_tokens"), endpoint_of("GET", "/v1/models")
    ('count_tokens', 'models')
    >>> endpoint_of("POST", "/v1/chat/completions"), endpoint_of("GET", "/v1/messages")
    ('chat_completions', 'other')
    >>> endpoint_of("GET", "/models/../files"), endpoint_of("GET", "/models/%2e%2e/batches")
    ('other', 'other')
    >>> endpoint_of("POST", "/v1/nope/chat/completions"), endpoint_of("POST", "//v1/messages")
    ('other', 'other')
    """
    path = path.split("?", 1)[0]
    if "%" in path or "\\" in path or not path.startswith("/"):
        return "other"
    parts = path[1:].split("/")
    if parts[:1] == ["v1"]:
        parts = parts[1:]
    if not parts or any(p in ("", ".", "..") for p in parts):
        return "other"
    if method == "GET":
        if parts == ["models"] or (len(parts) == 2 and parts[0] == "models"
                                   and _MODEL_ID.fullmatch(parts[1])):
            return "models"
        return "other"
    return POST_ENDPOINTS.get("/".join(parts), "other") if method == "POST" else "other"


SERVER_TOOL_TYPES = ("web_search", "web_fetch", "mcp", "code_interpreter", "code_execution",
                     "file_search", "image_generation")
"""Tool types run by the provider itself (and their dated versions, ``web_search_20250305``):
the provider reaches the web or runs code for the agent, outside the run's sandbox."""


def server_tools(body: Any) -> list[str]:
    """The provider-side tools a request body offers the model (their types), if any.

    Anthropic's typed server tools (``web_search_*``, ``web_fetch_*``,
    ``code_execution_*``) and ``mcp_servers``; OpenAI's ``web_search`` and
    ``web_search_preview`` tools, remote ``mcp``, ``code_interpreter``, ``file_search`` and
    ``image_generation`` tools, a stored ``prompt`` (made on the provider's side, it may
    carry any of them), Chat Completions' ``web_search_options``, a router's ``plugins``
    (OpenRouter's ``web`` plugin searches the web), Azure's ``data_sources`` (its indexes,
    searched for the model), and any tool the provider would run in its own container or
    with stored files or skills (:func:`_hosted`: OpenAI's ``shell`` tool in a container).

    Examples
    --------
    >>> server_tools({"tools": [{"name": "Bash", "input_schema": {}},
    ...                         {"type": "web_fetch_20250910", "name": "web_fetch"}]})
    ['web_fetch_20250910']
    >>> server_tools({"tools": [{"type": "function", "name": "web_search"}]})
    []
    """
    if not isinstance(body, dict):
        return []
    found = []
    tools = body.get("tools")
    for tool in tools if isinstance(tools, list) else []:
        kind = tool.get("type") if isinstance(tool, dict) else None
        if isinstance(kind, str) and any(kind == t or kind.startswith(t + "_")
                                         for t in SERVER_TOOL_TYPES):
            found.append(kind)
        elif isinstance(tool, dict) and _hosted(tool):
            found.append(f"{kind} (hosted)")
    for key in ("mcp_servers", "web_search_options", "prompt", "plugins", "data_sources"):
        if body.get(key):
            found.append(key)
    return found


HOSTED_TOOL_FIELDS = ("container", "container_id", "file_ids", "vector_store_ids", "skills",
                      "skill_id")
"""Fields of a tool definition by which the provider runs it in its own container, with
stored files or skills (OpenAI's ``shell`` tool with a ``container_auto`` or
``container_reference`` environment)."""
_HOSTED = frozenset(fold_key(k) for k in HOSTED_TOOL_FIELDS)


def _hosted(tool: dict[str, Any]) -> bool:
    """Whether a tool the client runs by its type is run by the provider by its fields.

    Examples
    --------
    >>> _hosted({"type": "shell", "environment": {"type": "container_auto"}})
    True
    >>> _hosted({"type": "shell", "environment": {"type": "local"}}), _hosted({"type": "shell"})
    (False, False)
    """
    for key, value in tool.items():
        name = fold_key(key)
        if name in _HOSTED and value not in (None, "", [], {}):
            return True
        if name == "environment" and value is not None and not (
                isinstance(value, dict) and all(fold_key(k) == "type" for k in value)
                and all(str(t).casefold() == "local" for t in _all_folded(value, "type"))):
            return True
    return False


URL_KEYS = ("image_url", "file_url", "file_data", "file_id", "file_uri")
"""Keys of content the provider reads from where they point: OpenAI's ``image_url`` and
``file_url``, and the file fields a router reads a URL in (OpenRouter fetches a PDF given
by URL as ``file_data``). A ``data:`` URL and base64 are inline; a ``file_id`` that is no
URL names a file stored at the provider (:func:`content_sources`)."""

NOT_CONTENT = ("tools", "functions", "response_format", "output_format", "text",
               "output_config", "metadata")
"""Top-level fields holding definitions, schemas and labels (a property, an example or a
metadata key may be named ``image_url`` or ``file_id``), not content the provider reads."""
_NOT_CONTENT, _URL_KEYS = _folded(NOT_CONTENT), _folded(URL_KEYS)

_SCHEME = re.compile(r"\s*[a-z][a-z0-9+.-]*://", re.IGNORECASE)


def _all_folded(node: dict[str, Any], name: str) -> list[Any]:
    """The values of ``node``'s keys ``name`` in any spelling (:func:`fold_key`).

    Every spelling: a router keeping the last of two reads one the first would hide.
    """
    target = fold_key(name)
    return [v for k, v in node.items() if fold_key(k) == target]


def _fetched(value: Any) -> str | None:
    """The URL a content field points the provider to, or None (inline content)."""
    if not isinstance(value, str):
        return None
    text = value.strip()
    if text.lower().startswith("data:") or not (_SCHEME.match(text) or text.startswith("//")):
        return None
    return text[:200]


def url_sources(body: Any, most: int = 3) -> list[str]:
    """The URLs a request body asks the provider to fetch content from (the first ``most``).

    Anthropic's image and document blocks with a ``url`` source, OpenAI's ``input_image``
    and ``image_url`` parts and ``input_file`` parts with a URL (:data:`URL_KEYS`) other
    than ``data:``: the provider reaches the web for the agent, outside the run's audited
    tools and its egress record, as its own web fetch would. A ``data:`` URL, base64 and
    text sources are inline; definitions and schemas (:data:`NOT_CONTENT`) and a tool
    call's own arguments (``tool_use.input``, the model's words, which the provider does not
    fetch) are not read. Keys and the source's type are read whatever their letters, every
    spelling of one (:func:`case_variant`). :func:`content_sources` gives the file ids too.

    Examples
    --------
    >>> url_sources({"messages": [{"role": "user", "content": [{"type": "document",
    ...     "source": {"type": "url", "url": "https://example.org/paper.pdf"}}]}]})
    ['https://example.org/paper.pdf']
    >>> url_sources({"input": [{"role": "user", "content": [
    ...     {"type": "input_image", "image_url": "data:image/png;base64,iVBO"},
    ...     {"type": "input_file", "file_url": "https://example.org/a.pdf"}]}]})
    ['https://example.org/a.pdf']
    >>> url_sources({"messages": [{"role": "user", "content": [{"type": "image_url",
    ...     "Image_URL": {"URL": "http://example.org/x.png"}}]}]})
    ['http://example.org/x.png']
    >>> url_sources({"messages": [{"content": [{"ſource": {"Type": "URL", "url": "u"}}]}]})
    ['u']
    >>> url_sources({"messages": [{"content": [{"type": "image", "source": {
    ...     "type": "base64", "data": "iVBO", "Type": "url", "URL": "https://e.org/x"}}]}]})
    ['https://e.org/x']
    >>> url_sources({"messages": [{"content": [{"type": "file", "file": {
    ...     "filename": "p.pdf", "file_data": "https://e.org/p.pdf"}}]}]})
    ['https://e.org/p.pdf']
    >>> url_sources({"tools": [{"input_schema": {"properties": {"image_url": {}}}}],
    ...     "text": {"format": {"schema": {"examples": [{"image_url": "https://e.org"}]}}},
    ...     "messages": [{"content": [{"type": "tool_use", "name": "fetch",
    ...                                "input": {"image_url": "https://e.org/y"}}]}]})
    []
    """
    return content_sources(body, most)[0]


def content_sources(body: Any, most: int = 3) -> tuple[list[str], list[str]]:
    """The URLs and the stored files a body asks the provider to read (``most`` of each).

    One pass over the body: the URLs of :func:`url_sources`, and the files.

    A stored file is a ``file_id`` that is no URL (Anthropic's ``source.type: "file"``
    and ``container_upload``, OpenAI's ``input_file`` and ``input_image``, Chat's ``file``):
    a file uploaded to the provider's account, never in this run (no endpoint that uploads
    one is forwarded), so someone else's, as a previous run's document could be.

    Examples
    --------
    >>> content_sources({"messages": [{"content": [{"type": "document", "source": {
    ...     "type": "file", "file_id": "file_011CN"}}]}]})
    ([], ['file_011CN'])
    >>> content_sources({"input": [{"content": [{"type": "input_file",
    ...     "File_Id": "file-abc"}, {"type": "input_file", "file_id": "https://e.org/a"}]}]})
    (['https://e.org/a'], ['file-abc'])
    """
    urls: list[str] = []
    files: list[str] = []
    stack = ([v for k, v in body.items() if fold_key(k) not in _NOT_CONTENT]
             if isinstance(body, dict) else [body])
    while stack and len(urls) < most and len(files) < most:
        node = stack.pop()
        if isinstance(node, list):
            stack.extend(reversed(node))
            continue
        if not isinstance(node, dict):
            continue
        call, inner = False, []  # one pass over the keys: this runs on every request
        for key, value in node.items():
            name = fold_key(key)
            if name == "source" and isinstance(value, dict) and any(
                    str(t).casefold() == "url" for t in _all_folded(value, "type")):
                urls += [str(u)[:200] for u in _all_folded(value, "url")] or ["(a url source)"]
            elif name in _URL_KEYS:
                found = _all_folded(value, "url") if isinstance(value, dict) else [value]
                fetched = [u for u in map(_fetched, found) if u is not None]
                urls += fetched
                if name == "fileid" and not fetched and value not in (None, ""):
                    files.append(str(value)[:200])
            elif name == "type":
                call = call or str(value).casefold() in ("tool_use", "server_tool_use")
            if isinstance(value, (dict, list)) and name not in _NOT_CONTENT_INSIDE:
                inner.append((name, value))
        stack.extend(v for name, v in reversed(inner) if not (call and name == "input"))
    return urls[:most], files[:most]


NOT_CONTENT_INSIDE = ("tools", "parameters", "input_schema", "action", "arguments")
"""Fields within the content holding definitions (a tool search's output lists tools and
their schemas) or the model's own words (a shell call's ``action``, a call's
``arguments``), as ``tool_use.input`` is: not content the provider reads."""
_NOT_CONTENT_INSIDE = _folded(NOT_CONTENT_INSIDE)


OWN_REFERENCES = ("previous_response_id", "item_reference")
"""References a run may make to what the provider stored of its own answers: an answer
(``previous_response_id``) or an output item of one, by id (:func:`stored_references`).
Any other stored reference names what no request of the run could have made."""

WHOLE_ITEMS = ("message", "function_call", "function_call_output", "custom_tool_call",
               "custom_tool_call_output", "local_shell_call", "local_shell_call_output")
"""Responses input items that carry their content: the provider reads what is sent,
whatever their id (Codex names the items it makes itself)."""

ENCRYPTED_ITEMS = ("reasoning", "compaction")
"""Responses input items that carry their content as ``encrypted_content``; without it, the
provider reads the stored item their id names."""

STORED_FIELDS = ("previous_response_id", "conversation", "container", "preset", "prompt_id",
                 "cached_content")
"""Top-level fields naming context stored at the provider: an answer and all before it,
an OpenAI conversation, an Anthropic code container, a router's stored preset
(OpenRouter) or prompt (LiteLLM), a context cache (Gemini's OpenAI-compatible API, also
as ``extra_body.google.cached_content``)."""
_STORED_FIELDS = {fold_key(f): f for f in STORED_FIELDS}
_WHOLE, _ENCRYPTED = frozenset(WHOLE_ITEMS), frozenset(ENCRYPTED_ITEMS)


def _encrypted(item: dict[str, Any]) -> bool:
    """Whether ``item`` carries its content as ``encrypted_content`` (every spelling a text)."""
    values = _all_folded(item, "encrypted_content")
    return "encrypted_content" in item and all(isinstance(v, str) and v.strip()
                                               for v in values)


def _items(value: Any, depth: int = 0) -> Iterator[dict[str, Any]]:
    """The objects of an ``input`` (or ``instructions``): one, or a list of them.

    Lists within the list are read through (a lenient parser may flatten them).
    """
    if isinstance(value, dict):
        yield value
    elif isinstance(value, list) and depth < MAX_DEPTH:
        for v in value:
            yield from _items(v, depth + 1)


def stored_references(body: Any, most: int | None = None) -> list[tuple[str, str]]:
    """The references a body makes to context stored at the provider, as ``(kind, id)``.

    All of them (the first ``most``): the fields of :data:`STORED_FIELDS` (also within
    ``extra_body.google``), a Chat message's earlier audio answer by id (``audio.id``),
    and each Responses item (of ``input`` or ``instructions``) that is not whole: an item
    of :data:`WHOLE_ITEMS` or a message by role with content is; a reasoning or
    compaction item only with its ``encrypted_content``; any other item with an id (an
    ``item_reference``, with or without its type, an item of a provider-side tool) is an
    ``item_reference`` to what the provider stored. An item with no id names nothing
    stored. Keys are read in every spelling (:func:`fold_key`), types in any letters.

    Examples
    --------
    >>> stored_references({"previous_response_id": "resp_1", "conversation": {"id": "c"}})
    [('previous_response_id', 'resp_1'), ('conversation', 'c')]
    >>> stored_references({"input": [{"type": "message", "id": "msg_9", "content": "x"},
    ...     {"Type": "item_reference", "id": "rs_2"}, {"type": "reasoning", "id": "rs_3"},
    ...     {"type": "reasoning", "id": "rs_4", "encrypted_content": "gAAA"}]})
    [('item_reference', 'rs_2'), ('item_reference', 'rs_3')]
    >>> stored_references({"input": {"id": "msg_7"}, "instructions": [[{"id": "msg_8"}]]})
    [('item_reference', 'msg_7'), ('item_reference', 'msg_8')]
    >>> stored_references({"input": [{"type": "reasoning", "encrypted_content": None,
    ...     "content": [{"type": "reasoning_text", "text": "..."}]}], "container": None})
    []
    """
    if not isinstance(body, dict):
        return []
    found: list[tuple[str, str]] = []
    google = [g for e in _all_folded(body, "extra_body") if isinstance(e, dict)
              for g in _all_folded(e, "google") if isinstance(g, dict)]
    for node in [body, *google]:
        for key, value in node.items():
            name = fold_key(key)
            if name in _STORED_FIELDS and value not in (None, "", {}):
                ref = value.get("id", value) if isinstance(value, dict) else value
                found.append((_STORED_FIELDS[name], str(ref)[:200]))
    for key, group in body.items():
        name = fold_key(key)
        if name == "messages":
            found += [("audio", str(a.get("id", a))[:200]) for item in _items(group)
                      for a in _all_folded(item, "audio") if isinstance(a, dict)]
        if name not in ("input", "instructions"):
            continue
        for item in _items(group):
            kinds = {str(t).casefold() for t in _all_folded(item, "type") if t is not None}
            if (kinds and kinds <= _WHOLE) or (
                    not kinds and _all_folded(item, "role")
                    and any(c is not None for c in _all_folded(item, "content"))):
                continue
            if kinds and kinds <= _ENCRYPTED and _encrypted(item):
                continue
            found += [("item_reference", str(i)[:200]) for i in _all_folded(item, "id")]
    return found[:most]


def api_of_endpoint(endpoint: str) -> str:
    """The API style whose error shape answers a request to ``endpoint``."""
    if endpoint in ("messages", "count_tokens"):
        return API_ANTHROPIC
    return API_CHAT if endpoint == "chat_completions" else API_RESPONSES


def error_body(api: str, status: int, kind: str, message: str) -> dict[str, Any]:
    """An error object in the shape of ``api``'s own errors.

    Examples
    --------
    >>> error_body("anthropic", 403, "permission_error", "no")
    {'type': 'error', 'error': {'type': 'permission_error', 'message': 'no'}}
    >>> error_body("openai-responses", 403, "permission_error", "no")["error"]["code"]
    'permission_error'
    """
    if api == API_ANTHROPIC:
        return {"type": "error", "error": {"type": kind, "message": message}}
    return {"error": {"message": message, "type": kind, "param": None, "code": kind}}


def _int(value: Any) -> int:
    return int(value) if isinstance(value, (int, float)) and not isinstance(value, bool) else 0


def anthropic_usage(raw: dict[str, Any], into: Usage | None = None) -> Usage:
    """The four buckets of an Anthropic ``usage`` object (fields absent keep ``into``'s)."""
    base = into or Usage()
    values = base.model_dump()
    for key, bucket in (("input_tokens", "input"), ("cache_read_input_tokens", "cache_read"),
                        ("cache_creation_input_tokens", "cache_write"),
                        ("output_tokens", "output")):
        if raw.get(key) is not None:
            values[bucket] = _int(raw[key])
    creation = raw.get("cache_creation")
    if isinstance(creation, dict) and creation.get("ephemeral_1h_input_tokens") is not None:
        values["cache_write_1h"] = _int(creation["ephemeral_1h_input_tokens"])
    return Usage(**values)


def openai_usage(raw: dict[str, Any]) -> Usage:
    """The four buckets of an OpenAI ``usage`` object (Responses or Chat Completions).

    Input counts are inclusive of cached tokens there; DeepSeek reports
    ``prompt_cache_hit_tokens`` instead.

    Examples
    --------
    >>> openai_usage({"input_tokens": 100, "output_tokens": 7,
    ...               "input_tokens_details": {"cached_tokens": 60}})
    Usage(input=40, cache_read=60, cache_write=0, cache_write_1h=0, output=7)
    """
    total_in = _int(raw.get("input_tokens", raw.get("prompt_tokens")))
    output = _int(raw.get("output_tokens", raw.get("completion_tokens")))
    details = raw.get("input_tokens_details") or raw.get("prompt_tokens_details") or {}
    details = details if isinstance(details, dict) else {}
    cached = _int(details.get("cached_tokens", raw.get("prompt_cache_hit_tokens")))
    writes = _int(details.get("cache_write_tokens"))
    return Usage(input=max(0, total_in - cached - writes), cache_read=cached,
                 cache_write=writes, output=output)


MAX_CALL_INPUT = 16 << 10
"""Characters of a tool call's input kept while an answer streams."""


@dataclass
class AnswerCall:
    """A tool call of an answer: its id, its tool's name and its input (JSON or text)."""

    id: str
    name: str
    input: str = ""

    def add_input(self, piece: str) -> None:
        """Append a streamed piece of the input (up to :data:`MAX_CALL_INPUT`)."""
        if len(self.input) < MAX_CALL_INPUT:
            self.input = (self.input + piece)[:MAX_CALL_INPUT]


def _call_input(value: Any) -> str:
    if value is None:
        return ""
    text = value if isinstance(value, str) else json.dumps(value, ensure_ascii=False)
    return text[:MAX_CALL_INPUT]


@dataclass
class AnswerReading:
    """What one answer said, as far as it arrived."""

    usage: Usage = field(default_factory=Usage)
    stop_reason: str | None = None
    refusal: bool = False
    refusal_label: str | None = None
    error_type: str | None = None
    error: str | None = None
    complete: bool = False
    """The answer's final event (or its whole JSON body) arrived."""
    calls_tool: bool = False
    """The answer asks the client to run a tool."""
    response_id: str | None = None
    item_ids: list[str] = field(default_factory=list)
    """The ids of the answer's output items (Responses), which a later request may name."""
    tool_calls: list[AnswerCall] = field(default_factory=list)
    """The tool calls the answer makes, as far as it arrived."""

    @property
    def final(self) -> bool:
        """A complete answer after which the conversation ends (a refusal included)."""
        if not self.complete or (self.error_type is not None and not self.refusal):
            return False
        return self.refusal or not (self.calls_tool or self.stop_reason in NOT_FINAL_STOPS)

    def read_error(self, body: Any) -> None:
        """Take the type and message of a provider error object."""
        error = body.get("error") if isinstance(body, dict) else None
        if isinstance(error, dict):
            self.error_type = str(error.get("type") or error.get("code") or "error")
            self.error = str(error.get("message") or "")[:2000]
        elif isinstance(error, str):
            self.error_type, self.error = "error", error[:2000]


class AnswerReader:
    """Reads one answer: :meth:`feed` streamed bytes, or :meth:`read_body` a whole body."""

    #: SSE event names worth decoding; None decodes every event (Chat Completions).
    wanted: frozenset[str] | None = None
    #: ``event:`` line prefixes that find every wanted event and few others (the
    #: frequent delta events never match one).
    markers: tuple[bytes, ...] = ()
    #: Byte strings each output delta event holds once, where the model's own text cannot
    #: (a newline of the stream's own before or after them): counted while an answer
    #: streams, so that one cut before its final usage still counts what was generated.
    delta_markers: tuple[bytes, ...] = ()
    #: The bytes of such an event that are not its output (names, type, index, ids).
    delta_envelope: int = 100

    def __init__(self) -> None:
        self.reading = AnswerReading()
        self._buffer = bytearray()
        self._scan = 0

    def deltas_in(self, chunk: bytes) -> tuple[int, int]:
        r"""The output delta events in ``chunk``, and the tokens they hold.

        Counted at C speed (this runs on every chunk of a stream): the tokens are one for
        each 4 bytes of the chunk past the events' envelopes, at least one a delta (an
        estimate; the provider's final usage, when it comes, wins).

        Examples
        --------
        >>> event = (b'event: content_block_delta\ndata: {"type": "content_block_delta", '
        ...          b'"index": 0, "delta": {"type": "text_delta", "text": "' + b"x" * 400
        ...          + b'"}}\n\n')
        >>> AnthropicReader().deltas_in(event * 3)
        (3, 302)
        >>> AnthropicReader().deltas_in(b'data: {"text": "event: content_block_delta"}\n\n')
        (0, 0)
        """
        count = sum(chunk.count(marker) for marker in self.delta_markers)
        first = self.delta_markers[0] if self.delta_markers else b""
        if first.startswith(b"\n") and chunk.startswith(first[1:]):
            count += 1  # an event at the chunk's start
        if not count:
            return 0, 0
        return count, max(count, (len(chunk) - self.delta_envelope * count) // 4)

    def feed(self, chunk: bytes) -> None:
        """Read the complete events of ``chunk`` (the rest waits for the next chunk)."""
        buffer = self._buffer
        split_crlf = buffer.endswith(b"\r")
        buffer += chunk
        if split_crlf or b"\r" in chunk:
            buffer[:] = buffer.replace(b"\r\n", b"\n")
            self._scan = 0
        end = buffer.rfind(b"\n\n", self._scan)
        if end >= 0:
            block = bytes(buffer[:end + 2])
            del buffer[:end + 2]
            self._events(block)
        # No event boundary lies before the last byte: the next search starts there.
        self._scan = max(0, len(buffer) - 1)

    def _events(self, block: bytes) -> None:
        """Read the events of ``block`` (whole events only)."""
        if self.markers and b"event: " in block:
            # Only the wanted events are found (by bytes.find, at memchr speed) and read,
            # in stream order: the deltas that make up nearly all of a long answer are
            # passed over, not split and decoded.
            starts = []
            for marker in self.markers:
                at = block.find(marker)
                while at >= 0:
                    if at == 0 or block[at - 1] == 10:  # at a line start
                        starts.append(at)
                    at = block.find(marker, at + len(marker))
            for at in sorted(starts):
                stop = block.find(b"\n\n", at)
                self._event(block[at:stop if stop >= 0 else len(block)])
            return
        for part in block.split(b"\n\n"):
            if part:
                self._event(part)

    def _event(self, block: bytes, wanted: bool = True) -> None:
        name = ""
        data: list[bytes] = []
        for line in block.split(b"\n"):
            if line.startswith(b"event:"):
                name = line[6:].strip().decode("utf-8", "replace")
            elif line.startswith(b"data:"):
                data.append(line[5:].removeprefix(b" "))
        if not data or (wanted and self.wanted is not None and name
                        and name not in self.wanted):
            return
        text = b"\n".join(data)
        if text.strip() == b"[DONE]":
            self.done()
            return
        payload = loads(text)
        if isinstance(payload, dict):
            self.event(name or str(payload.get("type") or ""), payload)

    def event(self, name: str, payload: dict[str, Any]) -> None:
        """Read one decoded event."""

    def done(self) -> None:
        """The stream's ``[DONE]`` marker."""
        self.reading.complete = True

    def read_body(self, body: Any) -> None:
        """Read a whole (non-streamed) JSON answer."""

    def finish(self) -> None:
        """The stream ended cleanly (the connection was not cut)."""


class AnthropicReader(AnswerReader):
    """Anthropic Messages answers (and ``count_tokens``, which bills nothing)."""

    wanted = frozenset({"message_start", "message_delta", "message_stop", "error",
                        "content_block_start"})
    markers = (b"event: message_", b"event: error", b"event: content_block_start")
    delta_markers = (b"\nevent: content_block_delta",)
    delta_envelope = 120

    def __init__(self) -> None:
        super().__init__()
        self._open: dict[Any, AnswerCall] = {}
        """The tool calls streaming, by their block's index."""

    def _events(self, block: bytes) -> None:
        """The wanted events, then a tool call's input pieces (``input_json_delta``).

        The text deltas that make most of an answer stay unread: only a block holding
        ``input_json_delta`` is split for them.
        """
        super()._events(block)
        if self._open and b'"input_json_delta"' in block:
            for part in block.split(b"\n\n"):
                if b'"input_json_delta"' in part and part.startswith(
                        b"event: content_block_delta"):
                    self._event(part, wanted=False)

    def event(self, name: str, payload: dict[str, Any]) -> None:  # noqa: D102
        r = self.reading
        if name == "message_start" and isinstance(payload.get("message"), dict):
            message = payload["message"]
            r.response_id = message.get("id")
            if isinstance(message.get("usage"), dict):
                r.usage = anthropic_usage(message["usage"])
        elif name == "message_delta":
            delta = payload.get("delta") or {}
            if isinstance(delta, dict):
                self._stop(delta.get("stop_reason"), delta.get("stop_details"))
            if isinstance(payload.get("usage"), dict):
                r.usage = anthropic_usage(payload["usage"], into=r.usage)
        elif name == "content_block_start":
            block = payload.get("content_block") or {}
            if isinstance(block, dict) and block.get("type") == "tool_use":
                r.calls_tool = True
                call = AnswerCall(str(block.get("id")), str(block.get("name") or ""),
                                  _call_input(block.get("input") or None))
                r.tool_calls.append(call)
                self._open[payload.get("index")] = call
        elif name == "content_block_delta":
            delta = payload.get("delta") or {}
            piece = self._open.get(payload.get("index"))
            if piece is not None and isinstance(delta, dict) \
                    and isinstance(delta.get("partial_json"), str):
                piece.add_input(delta["partial_json"])
        elif name == "message_stop":
            r.complete = True
        elif name == "error":
            r.read_error(payload)

    def _stop(self, reason: Any, details: Any) -> None:
        r = self.reading
        if reason is not None:
            r.stop_reason = str(reason)
        if reason == "refusal":
            r.refusal = True
            if isinstance(details, dict) and details.get("category"):
                r.refusal_label = str(details["category"])

    def read_body(self, body: Any) -> None:  # noqa: D102
        r = self.reading
        if not isinstance(body, dict):
            return
        if body.get("type") == "error" or "error" in body:
            r.read_error(body)
            return
        r.complete = True
        if body.get("type") != "message":
            return  # count_tokens: {"input_tokens": N} is a count, not a bill
        r.response_id = body.get("id")
        if isinstance(body.get("usage"), dict):
            r.usage = anthropic_usage(body["usage"])
        self._stop(body.get("stop_reason"), body.get("stop_details"))
        content = body.get("content")
        r.tool_calls = [AnswerCall(str(b.get("id")), str(b.get("name") or ""),
                                   _call_input(b.get("input")))
                        for b in content if isinstance(b, dict) and b.get("type") == "tool_use"
                        ] if isinstance(content, list) else []
        r.calls_tool = bool(r.tool_calls)


class ResponsesReader(AnswerReader):
    """OpenAI Responses answers."""

    wanted = frozenset({"response.created", "response.completed", "response.incomplete",
                        "response.failed", "error", "response.refusal.done",
                        "response.output_item.added"})
    markers = (b"event: response.c", b"event: response.in", b"event: response.fa",
               b"event: error", b"event: response.refusal.do",
               b"event: response.output_item.a")
    delta_markers = (b".delta\n", b".delta\r\n")  # the event line's end: in no JSON string
    delta_envelope = 160

    def event(self, name: str, payload: dict[str, Any]) -> None:  # noqa: D102
        r = self.reading
        if name == "response.created" and isinstance(payload.get("response"), dict):
            r.response_id = payload["response"].get("id")
        elif name in ("response.completed", "response.incomplete", "response.failed"):
            if isinstance(payload.get("response"), dict):
                self.read_body(payload["response"])
        elif name == "response.output_item.added" and isinstance(payload.get("item"), dict):
            if isinstance(payload["item"].get("id"), str):  # known before a cut, too
                r.item_ids.append(payload["item"]["id"])
            self._call(payload["item"])
        elif name == "response.refusal.done":
            r.refusal = True
        elif name == "error":
            r.read_error({"error": payload.get("error", payload)})
            if isinstance(payload.get("code"), str):
                r.error_type = payload["code"]

    def read_body(self, body: Any) -> None:  # noqa: D102
        r = self.reading
        if not isinstance(body, dict):
            return
        if "status" not in body and "error" in body:
            r.read_error(body)  # an HTTP error body
            return
        r.complete = True
        r.response_id = body.get("id") or r.response_id
        status = str(body.get("status") or "")
        incomplete = body.get("incomplete_details") or {}
        reason = incomplete.get("reason") if isinstance(incomplete, dict) else None
        r.stop_reason = str(reason or status) or None
        if isinstance(body.get("usage"), dict):
            r.usage = openai_usage(body["usage"])
        if reason == "content_filter":
            r.refusal, r.refusal_label = True, "content_filter"
        error = body.get("error")
        if isinstance(error, dict):
            code = str(error.get("code") or error.get("type") or "error")
            if code.endswith("_policy"):
                r.refusal, r.refusal_label = True, code.removesuffix("_policy")
            else:
                r.error_type, r.error = code, str(error.get("message") or "")[:2000]
        for item in body.get("output") or []:
            if not isinstance(item, dict):
                continue
            if isinstance(item.get("id"), str):
                r.item_ids.append(item["id"])
            r.calls_tool = r.calls_tool or item.get("type") in RESPONSES_CALL_ITEMS
            self._call(item)
            for part in item.get("content") or []:
                if isinstance(part, dict) and part.get("type") == "refusal":
                    r.refusal = True


    def _call(self, item: dict[str, Any]) -> None:
        """Note a call item (or complete the one an ``output_item.added`` began)."""
        kind = item.get("type")
        if kind not in RESPONSES_CALL_ITEMS:
            return
        ident = str(item.get("call_id") or item.get("id"))
        name = str(item.get("name") or ("local_shell" if kind == "local_shell_call" else ""))
        given = _call_input(item.get("arguments") or item.get("input") or item.get("action"))
        for call in self.reading.tool_calls:
            if call.id == ident:
                call.input = given or call.input
                return
        self.reading.tool_calls.append(AnswerCall(ident, name, given))


class ChatReader(AnswerReader):
    """OpenAI Chat Completions answers (and the compatible APIs of other providers)."""

    delta_markers = (b'"delta":',)
    delta_envelope = 150

    def __init__(self) -> None:
        super().__init__()
        self._calls: dict[tuple[Any, Any], AnswerCall] = {}
        """The tool calls read, by choice and index (a stream sends each in pieces)."""

    def event(self, name: str, payload: dict[str, Any]) -> None:  # noqa: D102
        r = self.reading
        if "error" in payload and "choices" not in payload:
            r.read_error(payload)
            return
        r.response_id = payload.get("id") or r.response_id
        for choice in payload.get("choices") or []:
            if isinstance(choice, dict):
                self._choice(choice, choice.get("delta"))
        if isinstance(payload.get("usage"), dict):
            r.usage = openai_usage(payload["usage"])

    def _choice(self, choice: dict[str, Any], message: Any) -> None:
        r = self.reading
        if choice.get("finish_reason"):
            r.stop_reason = str(choice["finish_reason"])
            if r.stop_reason == "content_filter":
                r.refusal, r.refusal_label = True, "content_filter"
        if isinstance(message, dict):
            r.refusal = r.refusal or bool(message.get("refusal"))
            r.calls_tool = r.calls_tool or bool(message.get("tool_calls"))
            calls = message.get("tool_calls")
            for k, call in enumerate(calls if isinstance(calls, list) else []):
                if isinstance(call, dict):
                    self._call(choice.get("index", 0), call.get("index", k), call)

    def _call(self, choice: Any, index: Any, call: dict[str, Any]) -> None:
        """A tool call of a message, or a streamed piece of one (its id comes first)."""
        given = call.get("function")
        function: dict[str, Any] = given if isinstance(given, dict) else {}
        key = (choice, index)
        seen = self._calls.get(key)
        if seen is None or (call.get("id") and call.get("id") != seen.id):
            seen = AnswerCall(str(call.get("id")), str(function.get("name") or ""))
            self._calls[key] = seen
            self.reading.tool_calls.append(seen)
        if isinstance(function.get("arguments"), str):
            seen.add_input(function["arguments"])

    def read_body(self, body: Any) -> None:  # noqa: D102
        r = self.reading
        if not isinstance(body, dict):
            return
        if "error" in body and "choices" not in body:
            r.read_error(body)
            return
        r.complete = True
        r.response_id = body.get("id")
        for choice in body.get("choices") or []:
            if isinstance(choice, dict):
                self._choice(choice, choice.get("message"))
        if isinstance(body.get("usage"), dict):
            r.usage = openai_usage(body["usage"])

    def finish(self) -> None:
        """A stream that ended cleanly after a finish reason is complete without ``[DONE]``."""
        if self.reading.stop_reason is not None:
            self.reading.complete = True


def reader_for(endpoint: str) -> AnswerReader:
    """A fresh reader for an answer of ``endpoint``."""
    if endpoint in ("messages", "count_tokens"):
        return AnthropicReader()
    if endpoint == "chat_completions":
        return ChatReader()
    if endpoint == "responses":
        return ResponsesReader()
    return AnswerReader()


# --------------------------------------------------------------------------- requests


def _text(content: Any) -> str:
    """The text of a tool result's content (a string, or a list of content blocks)."""
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        parts = []
        for block in content:
            if isinstance(block, str):
                parts.append(block)
            elif isinstance(block, dict):
                value = block.get("text", block.get("output", block.get("content")))
                parts.append(_text(value) if value is not None else "")
        return "\n".join(p for p in parts if p)
    return "" if content is None else json.dumps(content, ensure_ascii=False)


def tool_results(endpoint: str, body: Any) -> list[tuple[str, str]]:
    """The tool results a request sends the model, as ``(call id, text)`` pairs.

    Examples
    --------
    >>> tool_results("messages", {"messages": [{"role": "user", "content": [
    ...     {"type": "tool_result", "tool_use_id": "t1", "content": "ok"}]}]})
    [('t1', 'ok')]
    >>> tool_results("responses", {"input": [
    ...     {"type": "function_call_output", "call_id": "c1", "output": "done"}]})
    [('c1', 'done')]
    """
    if not isinstance(body, dict):
        return []
    found: list[tuple[str, str]] = []
    messages = body.get("messages")
    messages = messages if isinstance(messages, list) else []
    if endpoint == "messages":
        for message in messages:
            content = message.get("content") if isinstance(message, dict) else None
            for block in content if isinstance(content, list) else []:
                if isinstance(block, dict) and block.get("type") == "tool_result":
                    found.append((str(block.get("tool_use_id")), _text(block.get("content"))))
    elif endpoint == "responses":
        items = body.get("input")
        for item in items if isinstance(items, list) else []:
            if isinstance(item, dict) and item.get("type") in (
                    "function_call_output", "custom_tool_call_output"):
                found.append((str(item.get("call_id")), _text(item.get("output"))))
    elif endpoint == "chat_completions":
        for message in messages:
            if isinstance(message, dict) and message.get("role") == "tool":
                found.append((str(message.get("tool_call_id")), _text(message.get("content"))))
    return found
