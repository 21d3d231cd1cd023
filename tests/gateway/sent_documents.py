"""What the exposure tests send a model: the source's DOI, and a PDF that shows it."""

from __future__ import annotations

import base64

DOI = "10.1126/science.aar5169"
"""The source DOI of the shipped task ``spu-aqyk`` (its answer key names it)."""


def tiny_pdf(text: str, pages: int = 1) -> bytes:
    """A PDF of ``pages`` pages each showing ``text`` (Helvetica), as ``pypdf`` reads it."""
    stream = f"BT /F1 12 Tf 72 712 Td ({text}) Tj ET".encode()
    kids = " ".join(f"{5 + k} 0 R" for k in range(pages)).encode()
    objects = [b"<< /Type /Catalog /Pages 2 0 R >>",
               b"<< /Type /Pages /Kids [" + kids + b"] /Count %d >>" % pages,
               b"<< /Length %d >>\nstream\n" % len(stream) + stream + b"\nendstream",
               b"<< /Type /Font /Subtype /Type1 /BaseFont /Helvetica >>"]
    objects += [b"<< /Type /Page /Parent 2 0 R /MediaBox [0 0 612 792] /Contents 3 0 R "
                b"/Resources << /Font << /F1 4 0 R >> >> >>"] * pages
    out = bytearray(b"%PDF-1.4\n")
    offsets = []
    for k, body in enumerate(objects, 1):
        offsets.append(len(out))
        out += b"%d 0 obj\n" % k + body + b"\nendobj\n"
    xref = len(out)
    out += b"xref\n0 %d\n0000000000 65535 f \n" % (len(objects) + 1)
    out += b"".join(b"%010d 00000 n \n" % o for o in offsets)
    out += b"trailer\n<< /Size %d /Root 1 0 R >>\nstartxref\n%d\n%%%%EOF\n" % (
        len(objects) + 1, xref)
    return bytes(out)


PDF = base64.b64encode(tiny_pdf(f"Supporting data: doi {DOI}")).decode()
