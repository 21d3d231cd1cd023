"""``tools.provider=web``: a search API and ``httpx`` fetches, under timeouts and size limits.

Search goes to ``tools.options.search_api``: ``searxng`` (a SearXNG instance's JSON API
at ``tools.options.search_url``, ``/search?format=json``) or ``brave`` (the Brave Search
API, key in the variable ``tools.options.api_key_env``): the provider's own options
(:class:`WebOptions`). Fetch reads at most ``tools.max_fetch_bytes``
within ``tools.fetch_timeout_s`` (connection and whole body) and turns HTML and PDF
into text (:mod:`spu.tools.extract`).

Traps handled here:

- the service runs on the host, outside the sandbox, so a fetch of ``127.0.0.1`` or a
  private address would reach the host's own services (the tracking server, the scripted
  model server, other runs' services): every host name is resolved first and refused
  unless all its addresses are public, and the connection goes to the address that was
  checked (the name is kept for TLS and the ``Host`` header), so DNS cannot change the
  answer between the check and the connection; redirects are followed by hand, each
  checked the same way (``tools.allow_local_fetch`` lifts this, for tests and local mirrors);
- a server that drips bytes slowly never hits a read timeout: the whole body has a
  deadline, and what arrived by then is returned, cut, with a note;
- a body larger than the limit is cut at the limit, never read whole into memory;
- a compressed body can hold a thousand times its size (a gzip bomb, or ``gzip, gzip``):
  the request asks for ``identity``, the raw bytes are read, and one layer of gzip or
  deflate at most is decompressed, its output bounded by ``tools.max_fetch_bytes``;
- a page that costs minutes of CPU or gigabytes to parse would cost them on the host:
  HTML is cut at :data:`spu.tools.extract.MAX_HTML_BYTES` and parsed, like PDF, in a
  worker process under CPU-time and memory limits of its own
  (:class:`spu.tools.extract.ExtractWorker`).
"""

from __future__ import annotations

import os
import socket
import time
import zlib
from typing import Any, Literal
from urllib.parse import urljoin, urlsplit, urlunsplit

from spu.config import ToolsConfig
from spu.tools.addresses import public_address
from spu.tools.extract import ExtractWorker
from spu.tools.providers import (
    FetchResult,
    Provider,
    ProviderConfigError,
    ProviderError,
    ProviderOptions,
    SearchResult,
)

SEARCH_APIS = ("searxng", "brave")
"""The search APIs ``tools.options.search_api`` names."""
BRAVE_URL = "https://api.search.brave.com/res/v1/web/search"
MAX_REDIRECTS = 5
USER_AGENT = "spu-audited-fetch/1"
DECODED_ENCODINGS = ("gzip", "x-gzip", "deflate")
"""Content encodings decoded (one layer); any other, or a second layer, stays as it came."""
NOT_DECODED = "content encoding"


def resolve_checked(host: str, port: int, allow_local: bool) -> str:
    """An address of ``host`` to connect to, refusing local and private ones.

    Raises:
        ProviderError: the name does not resolve, or resolves to a loopback, private,
            link-local or reserved address (unless ``allow_local``).

    Examples
    --------
    >>> resolve_checked("127.0.0.1", 80, allow_local=False)
    Traceback (most recent call last):
    ...
    spu.tools.providers.ProviderError: fetch refused: 127.0.0.1 is a local or private address
    """
    try:
        infos = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)
    except (socket.gaierror, UnicodeError) as exc:
        raise ProviderError(f"cannot resolve {host}: {exc}") from None
    addresses = [str(info[4][0]) for info in infos]
    if not addresses:
        raise ProviderError(f"cannot resolve {host}")
    if not allow_local and not all(public_address(a) for a in addresses):
        raise ProviderError(f"fetch refused: {host} is a local or private address")
    return addresses[0]


class WebOptions(ProviderOptions):
    """``tools.provider=web``'s options."""

    result_neutral = frozenset({"api_key_env"})  # where the key is, not what is found

    search_api: Literal["searxng", "brave"] = "searxng"
    """``searxng`` (a SearXNG instance's JSON API) or ``brave`` (the Brave Search API)."""
    search_url: str | None = None
    """Base URL of the search API (SearXNG: the instance; Brave: null for its endpoint)."""
    api_key_env: str | None = None
    """Environment variable holding the search API key, never the key (Brave: default
    ``BRAVE_API_KEY``)."""


class WebProvider(Provider):
    """A search API and the open web."""

    name = "web"
    options_model = WebOptions

    def __init__(self, cfg: ToolsConfig) -> None:
        super().__init__(cfg)
        self._client: Any = None
        self.extractor = ExtractWorker()

    def check(self) -> None:
        """The search API is known and has its URL or key."""
        if self.search_api == "searxng" and not self.options["search_url"]:
            raise ProviderConfigError("tools.options.search_url: the SearXNG instance to "
                                      "search is not set (e.g. tools.options.search_url="
                                      "http://127.0.0.1:8888)")
        if self.search_api == "brave":
            name = self.options["api_key_env"] or "BRAVE_API_KEY"
            if not os.environ.get(name):
                raise ProviderConfigError(f"tools.options.api_key_env: the Brave Search API "
                                          f"key is not in the environment variable {name}")

    @property
    def search_api(self) -> str:
        """The search API asked (``tools.options.search_api``)."""
        return str(self.options["search_api"])

    @property
    def client(self) -> Any:
        """One ``httpx.Client`` for the run (environment proxies not used: see the module)."""
        if self._client is None:
            import httpx

            self._client = httpx.Client(trust_env=False, follow_redirects=False,
                                        headers={"user-agent": USER_AGENT})
        return self._client

    def close(self) -> None:
        """Close the connections."""
        if self._client is not None:
            self._client.close()
            self._client = None
        self.extractor.close()

    # ------------------------------------------------------------------ search

    def search(self, query: str, max_results: int) -> list[SearchResult]:
        """Ask the configured search API."""
        import httpx

        try:
            if self.search_api == "brave":
                results = self._brave(query, max_results)
            else:
                results = self._searxng(query)
        except httpx.TimeoutException:
            raise ProviderError(f"the search API ({self.search_api}) did not answer within "
                                f"{self.cfg.search_timeout_s:g} s") from None
        except httpx.HTTPError as exc:
            raise ProviderError(f"the search API ({self.search_api}) failed: "
                                f"{type(exc).__name__}: {exc}") from None
        return results[:max_results]

    def _get_json(self, url: str, **kwargs: Any) -> Any:
        response = self.client.get(url, timeout=self.cfg.search_timeout_s, **kwargs)
        if response.status_code != 200:
            raise ProviderError(f"the search API ({self.search_api}) answered HTTP "
                                f"{response.status_code}")
        try:
            return response.json()
        except ValueError:
            raise ProviderError(f"the search API ({self.search_api}) answered something "
                                f"other than JSON") from None

    def _searxng(self, query: str) -> list[SearchResult]:
        base = str(self.options["search_url"]).rstrip("/")
        data = self._get_json(f"{base}/search", params={"q": query, "format": "json"})
        items = data.get("results") if isinstance(data, dict) else None
        return [SearchResult(url=str(r.get("url", "")), title=str(r.get("title") or ""),
                             snippet=str(r.get("content") or ""),
                             published=r.get("publishedDate") or None)
                for r in items or [] if isinstance(r, dict) and r.get("url")]

    def _brave(self, query: str, max_results: int) -> list[SearchResult]:
        key = os.environ.get(self.options["api_key_env"] or "BRAVE_API_KEY", "")
        data = self._get_json(self.options["search_url"] or BRAVE_URL,
                              params={"q": query, "count": min(max_results, 20)},
                              headers={"accept": "application/json",
                                       "x-subscription-token": key})
        web = data.get("web") if isinstance(data, dict) else None
        items = web.get("results") if isinstance(web, dict) else None
        return [SearchResult(url=str(r.get("url", "")), title=str(r.get("title") or ""),
                             snippet=str(r.get("description") or ""),
                             published=r.get("page_age") or r.get("age") or None)
                for r in items or [] if isinstance(r, dict) and r.get("url")]

    # ------------------------------------------------------------------ fetch

    def fetch(self, url: str) -> FetchResult:
        """GET ``url`` (redirects followed by hand, each target checked) and turn it into text."""
        import httpx

        deadline = time.monotonic() + self.cfg.fetch_timeout_s
        current = url
        for _ in range(MAX_REDIRECTS + 1):
            try:
                outcome = self._get(current, deadline)
            except httpx.TimeoutException:
                raise ProviderError(f"{current} did not answer within "
                                    f"{self.cfg.fetch_timeout_s:g} s") from None
            except httpx.HTTPError as exc:
                raise ProviderError(f"fetch of {current} failed: {type(exc).__name__}: "
                                    f"{exc}") from None
            if isinstance(outcome, str):
                current = outcome
                continue
            return outcome
        raise ProviderError(f"fetch of {url}: more than {MAX_REDIRECTS} redirects")

    def _get(self, url: str, deadline: float) -> FetchResult | str:
        """The page, or the URL a redirect points to."""
        import httpx

        parts = urlsplit(url)
        if parts.scheme not in ("http", "https") or not parts.hostname:
            raise ProviderError(f"fetch refused: {url!r} is not an http(s) URL")
        port = parts.port or (443 if parts.scheme == "https" else 80)
        address = resolve_checked(parts.hostname, port, self.cfg.allow_local_fetch)
        host_in_url = f"[{address}]" if ":" in address else address
        netloc = host_in_url if parts.port is None else f"{host_in_url}:{parts.port}"
        pinned = urlunsplit((parts.scheme, netloc, parts.path or "/", parts.query, ""))
        host_header = parts.hostname if parts.port is None else f"{parts.hostname}:{parts.port}"
        remaining = max(deadline - time.monotonic(), 0.1)
        timeout = httpx.Timeout(remaining)
        request = self.client.build_request(
            "GET", pinned, headers={"host": host_header, "accept": "*/*",
                                    "accept-encoding": "identity"}, timeout=timeout,
            extensions={"sni_hostname": parts.hostname})
        response = self.client.send(request, stream=True)
        try:
            if response.is_redirect and response.headers.get("location"):
                return urljoin(url, response.headers["location"])
            body, cut = self._read(response, deadline)
        finally:
            response.close()
        content_type = response.headers.get("content-type", "")
        if cut is not None and cut.startswith(NOT_DECODED):  # still compressed: binary
            text, note = f"[{len(body)} bytes, {cut}; not shown as text]", None
        else:
            text, note = self.extractor.text(body, content_type, url)
        notes = [n for n in (cut, note) if n]
        return FetchResult(url=url, status=response.status_code,
                           content_type=content_type.split(";")[0].strip(), text=text,
                           note="; ".join(notes) or None)

    def _read(self, response: Any, deadline: float) -> tuple[bytes, str | None]:
        """The body's raw bytes, one layer of gzip or deflate decoded, both bounded."""
        limit = self.cfg.max_fetch_bytes
        encodings = [e.strip().lower() for e in
                     response.headers.get("content-encoding", "").split(",")
                     if e.strip() and e.strip().lower() != "identity"]
        decoder = None
        note = None
        if len(encodings) == 1 and encodings[0] in DECODED_ENCODINGS:
            decoder = zlib.decompressobj(wbits=zlib.MAX_WBITS | 32)  # gzip or zlib header
        elif encodings:
            note = (f"{NOT_DECODED} {', '.join(encodings)} not decoded (one layer of "
                    f"gzip or deflate at most)")
        chunks: list[bytes] = []
        size = raw_size = 0
        for raw in response.iter_raw():  # as it arrives: the deadline is checked per piece
            raw_size += len(raw)
            if decoder is None:
                piece = raw
            else:
                try:  # never more than what is left of the limit, plus one byte to know
                    piece = decoder.decompress(raw, limit - size + 1)
                except zlib.error as exc:
                    return b"".join(chunks), f"{encodings[0]} body not decodable: {exc}"
            chunks.append(piece)
            size += len(piece)
            if size > limit or raw_size > limit or (decoder is not None
                                                    and decoder.unconsumed_tail):
                declared = response.headers.get("content-length")
                whole = f" of {declared}" if declared else ""
                kind = " decoded" if decoder is not None else ""
                return (b"".join(chunks)[:limit],
                        f"cut at the size limit: first {limit}{kind} bytes{whole} read")
            if time.monotonic() > deadline:
                return (b"".join(chunks),
                        f"cut at the time limit: {size} bytes read in "
                        f"{self.cfg.fetch_timeout_s:g} s")
        return b"".join(chunks), note
