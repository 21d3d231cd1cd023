r"""Turning a fetched body into text: HTML with ``trafilatura``, PDF with ``pypdf``.

Traps handled here:

- a page that does not say its charset, or says a wrong one, must not fail the fetch: the
  body is decoded as declared, else as UTF-8, else as Windows-1252 with replacement
  characters, and the note says so;
- ``trafilatura`` drops links by default, and a DOI often appears only in a link: links
  are kept (Markdown ``[text](url)``), so that the agent sees them and the exposure
  detector screens them;
- ``trafilatura`` finds no main text in some pages (a bare listing, a tiny page): the
  page's whole visible text is returned instead;
- a PDF that ``pypdf`` cannot read, and any other binary type, gives a short text that
  says what it was, never an exception;
- parsing runs on the host, outside the sandbox, and a page can be made to cost minutes of
  CPU or gigabytes: HTML is cut at :data:`MAX_HTML_BYTES` first, and HTML and PDF are
  parsed in :class:`ExtractWorker`, a child process under ``RLIMIT_AS`` and a per-page
  ``RLIMIT_CPU``; a page that reaches them gives a short text that says so.

Examples
--------
>>> page_text(b"caf\xe9 au lait", "text/plain")
('café au lait', 'not UTF-8: decoded as cp1252')
>>> page_text(b"%PDF-1.4 broken", "application/pdf")[0].startswith("[PDF of 15 bytes")
True
"""

from __future__ import annotations

import io
import json
import logging
import os
import re
import resource
import select
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from typing import IO, Any

log = logging.getLogger(__name__)

HTML_TYPES = ("text/html", "application/xhtml+xml")
MAX_HTML_BYTES = 2 << 20
"""HTML longer than this is cut before it is parsed (a note says so)."""
MAX_PDF_PAGES = 1000
"""Pages of a PDF turned into text at most (a note says when there were more)."""
EXTRACT_CPU_S = 20
"""CPU seconds the worker may spend on one page."""
EXTRACT_MEMORY_BYTES = 2 << 30
"""Address space of the worker (``RLIMIT_AS``)."""
EXTRACT_WALL_S = 60.0
"""Seconds the host waits for one page before it kills the worker."""
TEXT_TYPES = ("text/", "application/json", "application/xml", "application/javascript",
              "application/ld+json", "application/x-ndjson")


def charset_of(content_type: str) -> str | None:
    """The ``charset`` parameter of a Content-Type header.

    Examples
    --------
    >>> charset_of('text/html; charset="ISO-8859-1"')
    'ISO-8859-1'
    """
    match = re.search(r"charset\s*=\s*\"?([A-Za-z0-9_.:-]+)", content_type or "")
    return match.group(1) if match else None


def decode(body: bytes, content_type: str = "") -> tuple[str, str | None]:
    """``body`` as text, and a note when it was not valid in the declared charset or UTF-8."""
    declared = charset_of(content_type)
    if declared is None and body[:1024].lower().find(b"charset=") >= 0:
        declared = charset_of(body[:1024].decode("ascii", errors="replace"))
    for encoding in filter(None, (declared, "utf-8")):
        try:
            return body.decode(encoding), None
        except (UnicodeDecodeError, LookupError):
            continue
    note = f"not {declared or 'UTF-8'}: decoded as cp1252"
    return body.decode("cp1252", errors="replace"), note


def _is_pdf(body: bytes, content_type: str) -> bool:
    return content_type.startswith("application/pdf") or body[:5] == b"%PDF-"


def _is_html(body: bytes, content_type: str) -> bool:
    if content_type.startswith(HTML_TYPES):
        return True
    head = body[:512].lstrip().lower()
    return not content_type and head.startswith((b"<!doctype html", b"<html"))


def pdf_text(body: bytes) -> tuple[str, str | None]:
    """The text of a PDF, page by page; a PDF that cannot be read says so."""
    from pypdf import PdfReader
    from pypdf.errors import PyPdfError

    try:
        reader = PdfReader(io.BytesIO(body))
        count = len(reader.pages)
        pages = [reader.pages[k].extract_text() or "" for k in range(min(count, MAX_PDF_PAGES))]
    except (PyPdfError, ValueError, KeyError, TypeError, OSError, RecursionError) as exc:
        return (f"[PDF of {len(body)} bytes that could not be read: {type(exc).__name__}]",
                f"PDF not readable: {exc}"[:300])
    note = (f"PDF of {count} pages: the first {MAX_PDF_PAGES} read" if count > MAX_PDF_PAGES
            else None)
    return "\n\n".join(p.strip() for p in pages if p.strip()), note


def html_text(html: str, url: str | None = None) -> str:
    """The main text of an HTML page, links kept; the whole visible text as a fallback."""
    import trafilatura

    text = trafilatura.extract(html, url=url, output_format="markdown", include_links=True,
                               include_tables=True, include_comments=False,
                               favor_recall=True, with_metadata=False)
    if text and text.strip():
        title = trafilatura.extract_metadata(html)
        heading = title.title if title is not None and title.title else None
        return f"{heading}\n\n{text}" if heading and heading not in text[:500] else text
    from lxml import html as lxml_html
    from lxml.etree import ParserError

    try:
        tree = lxml_html.fromstring(html)
    except (ParserError, ValueError):
        return html
    for node in tree.xpath("//script|//style"):
        node.drop_tree()
    return " ".join(tree.text_content().split())


def page_text(body: bytes, content_type: str, url: str | None = None) -> tuple[str, str | None]:
    """The text of a fetched body by its type, and a note for the agent (or None)."""
    content_type = (content_type or "").lower().strip()
    if _is_pdf(body, content_type):
        return pdf_text(body)
    if _is_html(body, content_type):
        cut = None
        if len(body) > MAX_HTML_BYTES:
            body, cut = body[:MAX_HTML_BYTES], (f"HTML of {len(body)} bytes cut at "
                                                 f"{MAX_HTML_BYTES} bytes before extraction")
        html, note = decode(body, content_type)
        return html_text(html, url), "; ".join(n for n in (cut, note) if n) or None
    if not content_type or content_type.startswith(TEXT_TYPES) or "+json" in content_type \
            or "+xml" in content_type:
        return decode(body, content_type)
    kind = content_type.split(";")[0] or "unknown type"
    return f"[{kind} content of {len(body)} bytes, not shown as text]", None


def needs_worker(body: bytes, content_type: str) -> bool:
    """Whether ``body`` is parsed (HTML, PDF) rather than only decoded."""
    content_type = (content_type or "").lower().strip()
    return _is_pdf(body, content_type) or _is_html(body, content_type)


class ExtractWorker:
    """A child process that parses pages under limits of its own, started on first use.

    It answers one page at a time (a lock: a run's parallel fetches queue here rather than
    take every core of the host). Before each page it sets its soft ``RLIMIT_CPU`` to what
    it has used plus ``cpu_s``, so a page that spins is killed by ``SIGXCPU``; its address
    space is capped at ``memory_bytes``; the host kills it after ``wall_s``. A killed
    worker is started again for the next page.

    Args:
        cpu_s: CPU seconds per page.
        memory_bytes: ``RLIMIT_AS`` of the worker.
        wall_s: Seconds the host waits for one page.
        confine: Called with the worker's process id once it runs (e.g.
            :meth:`spu.sandbox.limits.ServiceGroup.add`: the run's services cgroup).
    """

    def __init__(self, cpu_s: float = EXTRACT_CPU_S, memory_bytes: int = EXTRACT_MEMORY_BYTES,
                 wall_s: float = EXTRACT_WALL_S,
                 confine: Callable[[int], None] | None = None) -> None:
        self.cpu_s = cpu_s
        self.memory_bytes = memory_bytes
        self.wall_s = wall_s
        self.confine = confine
        self._process: subprocess.Popen[bytes] | None = None
        self._lock = threading.Lock()

    def text(self, body: bytes, content_type: str,
             url: str | None = None) -> tuple[str, str | None]:
        """:func:`page_text` of ``body``, HTML and PDF parsed in the worker."""
        if not needs_worker(body, content_type):
            return page_text(body, content_type, url)
        with self._lock:
            try:
                return self._ask(body, content_type, url)
            except (OSError, ValueError) as exc:
                self._kill()
                kind = "PDF" if _is_pdf(body, (content_type or "").lower()) else "HTML"
                return (f"[{kind} of {len(body)} bytes not turned into text: its parsing "
                        f"stopped at the extraction limits ({self.cpu_s:g} CPU-s, "
                        f"{self.memory_bytes >> 20} MiB, {self.wall_s:g} s)]",
                        f"text extraction stopped: {exc}"[:300])

    def _start(self) -> subprocess.Popen[bytes]:
        if self._process is None or self._process.poll() is not None:
            self._process = subprocess.Popen(
                [sys.executable, "-m", "spu.tools.extract", "--worker", str(self.cpu_s),
                 str(self.memory_bytes)],
                stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL)
            if self.confine is not None:
                try:
                    self.confine(self._process.pid)
                except OSError as exc:  # the worker's own limits still hold
                    log.warning("page parser %d not put under the services' limits: %s",
                                self._process.pid, exc)
        return self._process

    def _ask(self, body: bytes, content_type: str, url: str | None) -> tuple[str, str | None]:
        process = self._start()
        assert process.stdin is not None and process.stdout is not None
        header = json.dumps({"content_type": content_type, "url": url, "size": len(body)})
        process.stdin.write(header.encode() + b"\n" + body)
        process.stdin.flush()
        deadline = time.monotonic() + self.wall_s
        line = _read_line(process.stdout, deadline)
        answer = json.loads(line)
        return str(answer["text"]), answer.get("note")

    def _kill(self) -> None:
        process, self._process = self._process, None
        if process is not None and process.poll() is None:
            process.kill()
        if process is not None:
            process.wait()

    def close(self) -> None:
        """Stop the worker."""
        with self._lock:
            self._kill()


def _read_line(stream: IO[bytes], deadline: float) -> bytes:
    """One line from the worker before ``deadline``; OSError when it died or took too long."""
    fd = stream.fileno()
    data = bytearray()
    while not data.endswith(b"\n"):
        left = deadline - time.monotonic()
        if left <= 0 or not select.select([fd], [], [], left)[0]:
            raise OSError("no answer within the time limit")
        piece = os.read(fd, 1 << 20)
        if not piece:
            raise OSError("the worker ended (CPU or memory limit)")
        data += piece
    return bytes(data)


def serve(cpu_s: float, memory_bytes: int) -> None:
    """The worker's loop: one header line and body in, one JSON line out, until EOF."""
    hard_as = resource.getrlimit(resource.RLIMIT_AS)[1]  # a services group's may be lower
    if hard_as != resource.RLIM_INFINITY:
        memory_bytes = min(memory_bytes, hard_as)
    resource.setrlimit(resource.RLIMIT_AS, (memory_bytes, memory_bytes))
    resource.setrlimit(resource.RLIMIT_CORE, (0, 0))
    source, sink = sys.stdin.buffer, sys.stdout.buffer
    while True:
        header = source.readline()
        if not header:
            return
        request: dict[str, Any] = json.loads(header)
        body = source.read(int(request["size"]))
        used = resource.getrusage(resource.RUSAGE_SELF)
        soft = int(used.ru_utime + used.ru_stime + cpu_s) + 1
        hard = resource.getrlimit(resource.RLIMIT_CPU)[1]
        if hard != resource.RLIM_INFINITY:
            soft = min(soft, hard)
        resource.setrlimit(resource.RLIMIT_CPU, (soft, hard))
        try:
            text, note = page_text(body, str(request.get("content_type") or ""),
                                   request.get("url"))
        except MemoryError:
            text, note = f"[page of {len(body)} bytes too large to parse]", "out of memory"
        sink.write(json.dumps({"text": text, "note": note}).encode() + b"\n")
        sink.flush()


if __name__ == "__main__":
    if sys.argv[1:2] != ["--worker"]:
        sys.exit("usage: python -m spu.tools.extract --worker CPU_S MEMORY_BYTES "
                 "(started by ExtractWorker)")
    serve(float(sys.argv[2]), int(sys.argv[3]))
