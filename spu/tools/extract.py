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
  says what it was, never an exception.

Examples
--------
>>> page_text(b"caf\xe9 au lait", "text/plain")
('café au lait', 'not UTF-8: decoded as cp1252')
>>> page_text(b"%PDF-1.4 broken", "application/pdf")[0].startswith("[PDF of 15 bytes")
True
"""

from __future__ import annotations

import io
import re

HTML_TYPES = ("text/html", "application/xhtml+xml")
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
        pages = [page.extract_text() or "" for page in reader.pages]
    except (PyPdfError, ValueError, KeyError, TypeError, OSError) as exc:
        return (f"[PDF of {len(body)} bytes that could not be read: {type(exc).__name__}]",
                f"PDF not readable: {exc}"[:300])
    return "\n\n".join(p.strip() for p in pages if p.strip()), None


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
        html, note = decode(body, content_type)
        return html_text(html, url), note
    if not content_type or content_type.startswith(TEXT_TYPES) or "+json" in content_type \
            or "+xml" in content_type:
        return decode(body, content_type)
    kind = content_type.split(";")[0] or "unknown type"
    return f"[{kind} content of {len(body)} bytes, not shown as text]", None
