"""The rule beside each table and figure of the report, from the manifests that made them.

Each table and figure of the report comes from one or more output files of ``spu stats``
or ``spu analyze``; their ``manifest.json`` entries (``outputs.<file>``: ``rule``,
``population``, ``basis``, ``sentence``; :mod:`spu.stats.rules`) are shown beside it, so a
reader sees which population and which reading of the paper made what they look at.
"""

from __future__ import annotations

import html
import json
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

BASIS_WORDS = {
    "paper": "the paper's rule",
    "reading": "our reading of the paper",
    "option": "an option replaced the paper's rule",
    "framework": "the framework's rule (the paper has none)",
}
"""How the report says each basis of :data:`spu.stats.rules.BASES`."""


@dataclass(frozen=True)
class ShownRule:
    """One file's rule as the report shows it."""

    file: str
    """The output file (``configs.csv``)."""
    section: str
    """The paper section it reproduces."""
    rule: str
    """What was computed."""
    population: str
    """Over which runs, tasks and configurations."""
    basis: str
    """``paper``, ``reading``, ``option`` or ``framework``."""
    sentence: str
    """The paper's words it follows or reads."""

    def text(self) -> str:
        """One paragraph of plain text.

        >>> print(ShownRule("a.csv", "3.1", "mean", "scored runs", "paper", "3.1").text())
        a.csv (3.1; the paper's rule): mean. Population: scored runs. Paper: 3.1.
        """
        basis = BASIS_WORDS.get(self.basis, self.basis)
        parts = [f"{self.file} ({self.section}; {basis}): {self.rule}."]
        if self.population:
            parts.append(f"Population: {self.population}.")
        if self.sentence:
            parts.append(f"Paper: {self.sentence}.")
        return " ".join(parts)

    def to_html(self) -> str:
        """The paragraph as HTML (escaped), the basis in its own class."""
        basis = BASIS_WORDS.get(self.basis, self.basis)
        parts = [f'<span class="rule-file">{html.escape(self.file)}</span> '
                 f'({html.escape(self.section)}; <span class="basis basis-{self.basis}">'
                 f"{html.escape(basis)}</span>): {html.escape(self.rule)}."]
        if self.population:
            parts.append(f"<b>Population</b>: {html.escape(self.population)}.")
        if self.sentence:
            parts.append(f"<b>Paper</b>: {html.escape(self.sentence)}.")
        return " ".join(parts)


def analysis_outputs(folder: Path | None) -> dict[str, dict[str, Any]]:
    """``outputs`` of an ``spu analyze`` folder's ``manifest.json`` ({} without one)."""
    if folder is None:
        return {}
    path = Path(folder) / "manifest.json"
    try:
        return dict(json.loads(path.read_text(encoding="utf-8")).get("outputs", {}))
    except (OSError, ValueError, AttributeError):
        return {}


def shown_rules(files: Iterable[str], outputs: Mapping[str, Mapping[str, Any]]
                ) -> list[ShownRule]:
    """The rules of ``files`` found in ``outputs``, each distinct rule once.

    Examples
    --------
    >>> outputs = {"a.csv": {"section": "3.1", "rule": "mean", "population": "p",
    ...                      "basis": "paper", "sentence": "s"}}
    >>> [r.file for r in shown_rules(["a.csv", "b.csv"], outputs)]
    ['a.csv']
    """
    shown: list[ShownRule] = []
    seen: set[tuple[str, str]] = set()
    for name in files:
        entry = outputs.get(name)
        if not entry or not entry.get("rule"):
            continue
        key = (str(entry["rule"]), str(entry.get("population") or ""))
        if key in seen:
            continue
        seen.add(key)
        shown.append(ShownRule(name, str(entry.get("section") or ""), str(entry["rule"]),
                               str(entry.get("population") or ""),
                               str(entry.get("basis") or ""),
                               str(entry.get("sentence") or "")))
    return shown


def rules_html(rules: list[ShownRule]) -> str:
    """The rules as the block the page puts under a table or figure ("" for none)."""
    if not rules:
        return ""
    items = "".join(f"<li>{r.to_html()}</li>" for r in rules)
    return f'<div class="rule"><b>Rule</b><ul>{items}</ul></div>'


def rules_markdown(rules: list[ShownRule]) -> str:
    """The rules as Markdown lines ("" for none)."""
    return "".join(f"> Rule: {r.text()}\n" for r in rules)
