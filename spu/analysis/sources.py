"""Information sources: the class of each fetched URL and the operators of each query.

Figure 15c-d. A URL's class comes from its host (and, for a few hosts that serve
both, its path); a query's operators from its syntax. Both are pure functions of a
string.

Examples
--------
>>> source_class("https://pubs.acs.org/doi/10.1021/jacs.0c01234")
'literature'
>>> source_class("https://pubchem.ncbi.nlm.nih.gov/compound/2244")
'database'
>>> sorted(k for k, v in search_operators(['"copper catalysis" -review site:nature.com'])
...        .items() if v)
['exclusion', 'phrase', 'site']
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from urllib.parse import urlparse

SOURCE_CLASSES = ("literature", "preprint", "database", "software and docs", "encyclopedia",
                  "patent", "other")
"""Classes of fetched sources (Figure 15c)."""

_HOSTS: tuple[tuple[str, str], ...] = (
    # preprints first: they sit on the same kind of hosts as journals
    ("arxiv.org", "preprint"), ("biorxiv.org", "preprint"), ("medrxiv.org", "preprint"),
    ("chemrxiv.org", "preprint"), ("ssrn.com", "preprint"), ("researchsquare.com", "preprint"),
    ("preprints.org", "preprint"),
    ("pubchem.ncbi.nlm.nih.gov", "database"), ("ncbi.nlm.nih.gov/pmc", "literature"),
    ("pubmed.ncbi.nlm.nih.gov", "literature"), ("europepmc.org", "literature"),
    ("doi.org", "literature"), ("pubs.acs.org", "literature"), ("nature.com", "literature"),
    ("sciencedirect.com", "literature"), ("wiley.com", "literature"),
    ("springer.com", "literature"), ("rsc.org", "literature"), ("science.org", "literature"),
    ("cell.com", "literature"), ("mdpi.com", "literature"), ("plos.org", "literature"),
    ("frontiersin.org", "literature"), ("tandfonline.com", "literature"),
    ("pnas.org", "literature"), ("semanticscholar.org", "literature"),
    ("scholar.google", "literature"), ("researchgate.net", "literature"),
    ("iop.org", "literature"), ("aip.org", "literature"), ("aps.org", "literature"),
    ("oup.com", "literature"), ("sagepub.com", "literature"), ("jstor.org", "literature"),
    ("elifesciences.org", "literature"), ("biomedcentral.com", "literature"),
    ("ncbi.nlm.nih.gov", "database"), ("uniprot.org", "database"), ("rcsb.org", "database"),
    ("ebi.ac.uk", "database"), ("ensembl.org", "database"), ("chembl", "database"),
    ("materialsproject.org", "database"), ("webbook.nist.gov", "database"),
    ("nist.gov", "database"), ("zinc", "database"), ("drugbank", "database"),
    ("string-db.org", "database"), ("cbioportal.org", "database"), ("depmap.org", "database"),
    ("alphafold", "database"), ("pdbe.org", "database"), ("kegg.jp", "database"),
    ("genome.jp", "database"), ("clinicaltrials.gov", "database"), ("chemspider", "database"),
    ("sigmaaldrich.com", "database"), ("oqmd.org", "database"), ("aflow", "database"),
    ("crystallography.net", "database"), ("ccdc.cam.ac.uk", "database"),
    ("github.com", "software and docs"), ("githubusercontent.com", "software and docs"),
    ("readthedocs", "software and docs"), ("pypi.org", "software and docs"),
    ("stackoverflow.com", "software and docs"), ("anaconda.org", "software and docs"),
    ("gitlab.com", "software and docs"), ("docs.", "software and docs"),
    ("wikipedia.org", "encyclopedia"), ("wikidata.org", "encyclopedia"),
    ("britannica.com", "encyclopedia"), ("libretexts.org", "encyclopedia"),
    ("patents.google", "patent"), ("patentscope", "patent"), ("espacenet", "patent"),
    ("freepatentsonline", "patent"),
)


def source_class(url: str) -> str:
    """Class of a fetched URL (:data:`SOURCE_CLASSES`), from its host and path."""
    parsed = urlparse(url if "://" in url else f"https://{url}")
    where = (parsed.hostname or "").lower() + parsed.path.lower()
    for needle, cls in _HOSTS:
        if needle in where:
            return cls
    return "other"


OPERATORS: dict[str, re.Pattern[str]] = {
    "exclusion": re.compile(r"(?:^|\s)-(?:\"[^\"]+\"|[^\s\-]\S*)"),
    "phrase": re.compile(r"\"[^\"]+\""),
    "site": re.compile(r"\b-?site:\S+", re.IGNORECASE),
    "or": re.compile(r"\sOR\s|\s\|\s"),
    "filetype": re.compile(r"\b(?:filetype|ext):\S+", re.IGNORECASE),
    "in_title_or_url": re.compile(r"\b(?:intitle|allintitle|inurl|intext):", re.IGNORECASE),
    "date": re.compile(r"\b(?:before|after):\S+", re.IGNORECASE),
}
"""Search operators counted in Figure 15d."""


def search_operators(queries: Sequence[str]) -> dict[str, float]:
    """Share of ``queries`` using each operator of :data:`OPERATORS`.

    Examples
    --------
    >>> search_operators(["a -b", "c", '"d e"', "f OR g"])["exclusion"]
    0.25
    """
    n = len(queries)
    return {name: (sum(1 for q in queries if pattern.search(q)) / n if n else 0.0)
            for name, pattern in OPERATORS.items()}
