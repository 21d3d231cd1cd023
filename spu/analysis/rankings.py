"""Rankings in the making: the first complete ranking, where each order first appears, revisions.

Paper 4.2, 4.3 and E.7. The trajectory is read in time order, one text at a time (the
model's messages and reasoning, the code and arguments of each call, each tool output),
and :class:`RankingTracker` keeps only what it needs between texts:

- **complete rankings**: a JSON object in the submission format (``rankings`` with
  ``group_id`` and ``order``, or a departure the grader's recovery normalizes) that lists
  every group and every item and differs from the input order; the first one is the run's
  *first draft*, each later different one a *revision*, the submitted file the last;
- **first appearance** of each submitted group order (groups of at least three items
  whose order differs from the input order): the earliest text in which the group's item
  ids occur in the submitted order, consecutively among the group's ids; sources in
  the paper's words: ``model_text``, ``tool_call``, ``tool_output``, else ``file_only``.

Traps handled here:

- item ids are matched as whole tokens (``E12`` is not inside ``E120``);
- a ranking inside JSON-encoded arguments or a Python heredoc is still JSON text once the
  arguments are decoded, but a Python dict literal is not the submission format;
- a Codex ``apply_patch`` adds lines with a leading ``+``, removed before the search;
- a group ranked in the input order is no draft (a presented-order baseline has none).

Examples
--------
>>> from spu.schema import ComparisonGroup, Contract
>>> c = Contract(task_id="t", task_version="1", groups=[
...     ComparisonGroup(group_id="G", endpoint="y", weight=1.0, items=["a1", "b2", "c3"])])
>>> tracker = RankingTracker(c, submitted={"G": ["c3", "a1", "b2"]})
>>> tracker.feed(1, 0.2, "model_text", "I think c3 < a1 < b2.")
>>> tracker.feed(2, 0.5, "tool_call",
...              '{"task_id": "t", "rankings": [{"group_id": "G", "order": ["c3", "b2", "a1"]}]}')
>>> result = tracker.finish()
>>> result.first_step, result.first_source, result.revisions, result.group_sources
(2, 'tool_call', 1, {'G': 'model_text'})
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from itertools import combinations

from spu.schema import Contract

Orders = dict[str, list[str]]

SOURCES = ("model_text", "tool_call", "tool_output", "file_only")
"""Where an order first appears (Figure 16a), in the paper's order."""

MIN_GROUP_ITEMS = 3
"""Groups smaller than this are not traced (paper 4.2: at least three items)."""

_TOKEN = re.compile(r"[A-Za-z0-9_]+(?:[-.][A-Za-z0-9_]+)*")
_ORDER_KEYS = ("order", "item_ids", "ranking", "ranked_item_ids", "items", "ordering",
               "ordered_item_ids")
_decoder = json.JSONDecoder()


def rankings_in_text(text: str, limit: int = 20) -> list[Orders]:
    """Rankings in the submission format found in ``text``, in order of appearance.

    Examples
    --------
    >>> rankings_in_text('x = {"rankings": [{"group_id": "G", "order": ["b", "a"]}]}; y')
    [{'G': ['b', 'a']}]
    >>> rankings_in_text("{'rankings': []}")  # a Python literal is not the format
    []
    """
    found: list[Orders] = []
    start = 0
    decoded: dict[int, tuple[object, int] | None] = {}  # by brace: each decoded once
    while len(found) < limit:
        at = text.find('"rankings"', start)
        if at < 0:
            break
        start = at + 10
        # The object holding the key starts at one of the nearest '{' before it.
        brace = at
        for _ in range(4):
            brace = text.rfind("{", 0, brace)
            if brace < 0:
                break
            if brace not in decoded:
                try:
                    decoded[brace] = _decoder.raw_decode(text, brace)
                except (ValueError, RecursionError):  # not JSON, or nested past the stack
                    decoded[brace] = None
            if (value := decoded[brace]) is None:
                continue
            obj, end = value
            if end > at and isinstance(obj, dict) and "rankings" in obj:
                orders = _orders(obj["rankings"])
                if orders:
                    found.append(orders)
                start = max(start, end)
                break
    return found


def _orders(rankings: object) -> Orders | None:
    orders: Orders = {}
    if isinstance(rankings, dict):  # departure: keyed by group id
        for gid, value in rankings.items():
            if isinstance(value, dict):
                value = next((value[k] for k in _ORDER_KEYS if k in value), None)
            if isinstance(value, list):
                orders[str(gid)] = [str(x) for x in value]
        return orders or None
    if not isinstance(rankings, list):
        return None
    for entry in rankings:
        if not isinstance(entry, dict):
            return None
        gid = entry.get("group_id", entry.get("group"))
        order = next((entry[k] for k in _ORDER_KEYS if k in entry), None)
        if gid is None or not isinstance(order, list):
            return None
        if str(gid) in orders:
            return None
        orders[str(gid)] = [str(x) for x in order]
    return orders or None


def is_complete_ranking(orders: Mapping[str, Sequence[str]], contract: Contract,
                        presented: Mapping[str, Sequence[str]] | None = None) -> bool:
    """Every group of the contract, each listing every item once, and not the input order.

    The input order is ``presented``, the order of the task's ``targets.csv`` rows
    (:func:`spu.tasks.threshold.presented_orders`, the one the presented-order score and
    baseline use); without it, the contract's item order.

    Examples
    --------
    >>> from spu.schema import ComparisonGroup
    >>> c = Contract(task_id="t", task_version="1", groups=[
    ...     ComparisonGroup(group_id="G", endpoint="y", weight=1.0, items=["a", "b"])])
    >>> is_complete_ranking({"G": ["b", "a"]}, c), is_complete_ranking({"G": ["a", "b"]}, c)
    (True, False)
    """
    if set(orders) != {g.group_id for g in contract.groups}:
        return False
    differs = False
    for g in contract.groups:
        order = list(orders[g.group_id])
        if len(order) != len(g.items) or set(order) != set(g.items):
            return False
        shown = presented.get(g.group_id, g.items) if presented is not None else g.items
        differs = differs or order != list(shown)
    return differs


def differs_from_draft(submitted: Orders | None, draft: Orders, contract: Contract) -> bool:
    """Whether the submitted orders differ from the first draft on any group (paper 4.3).

    The submission is compared as submitted, complete or not: one that went back to the
    input order, or dropped an item, differs from the draft too. A draft revised and
    then restored is not a different submission, however often it changed between.

    References
    ----------
    Paper 4.3 ("Of the 772 runs whose trajectory contains a complete ranking before the
    submission, 317 submitted a different one") and Figure 17c ("for the 317 runs whose
    submission differs from it").

    Examples
    --------
    >>> from spu.schema import ComparisonGroup
    >>> c = Contract(task_id="t", task_version="1", groups=[
    ...     ComparisonGroup(group_id="G", endpoint="y", weight=1.0, items=["a", "b", "c"])])
    >>> draft = {"G": ["b", "a", "c"]}
    >>> differs_from_draft({"G": ["b", "a", "c"]}, draft, c)
    False
    >>> differs_from_draft({"G": ["a", "b", "c"]}, draft, c), differs_from_draft(None, draft, c)
    (True, False)
    """
    if submitted is None:
        return False
    return any(list(submitted.get(g.group_id, [])) != list(draft.get(g.group_id, []))
               for g in contract.groups)


def flipped_pairs(draft: Sequence[str], final: Sequence[str]) -> list[tuple[str, str]]:
    """Item pairs whose relative order differs between two complete orders of a group.

    Each pair is given in the draft's order.

    Examples
    --------
    >>> flipped_pairs(["a", "b", "c"], ["b", "a", "c"])
    [('a', 'b')]
    """
    pos = {item: i for i, item in enumerate(final)}
    return [(a, b) for a, b in combinations(draft, 2) if pos[a] > pos[b]]


@dataclass(frozen=True)
class FlipShares:
    """Flipped pairs that moved into the measured order, against random flips."""

    flipped: int
    """Flipped pairs with distinct measured values."""
    into_measured: int
    """Of them, those the submission puts in the measured order."""
    expected_share: float
    """Share expected from flipping random pairs at the same distance in the draft."""


def flip_shares(draft: Orders, final: Orders, measured: Mapping[str, Mapping[str, float]]
                ) -> FlipShares:
    """Flips from ``draft`` to ``final`` scored against the measured values (Figure 24e).

    A flipped pair moves into the measured order when the draft had it the wrong way.
    A random flip at the same distance ``d`` (positions apart in the draft) does so with
    the share of the draft's pairs at distance ``d`` that are the wrong way; the
    expectation averages that share over the flipped pairs.

    Examples
    --------
    Draft ``a b c`` with measured ``b < a < c``: flipping (a, b) fixes the one wrong pair;
    of the two pairs at distance 1, one is wrong, so random flips fix half:

    >>> m = {"G": {"a": 2.0, "b": 1.0, "c": 3.0}}
    >>> flip_shares({"G": ["a", "b", "c"]}, {"G": ["b", "a", "c"]}, m)
    FlipShares(flipped=1, into_measured=1, expected_share=0.5)
    """
    flipped = into = 0
    expected = 0.0
    for gid, order in draft.items():
        values = measured.get(gid)
        if gid not in final or values is None or sorted(final[gid]) != sorted(order):
            continue  # flips are counted on the groups submitted complete
        pos = {item: i for i, item in enumerate(order)}
        wrong_at: dict[int, list[bool]] = {}
        for a, b in combinations(order, 2):
            if values.get(a) is None or values.get(b) is None or values[a] == values[b]:
                continue
            wrong_at.setdefault(pos[b] - pos[a], []).append(values[a] > values[b])
        for a, b in flipped_pairs(order, final[gid]):
            if values.get(a) is None or values.get(b) is None or values[a] == values[b]:
                continue
            flipped += 1
            into += values[a] > values[b]  # the draft had a before b, the wrong way
            at = wrong_at[pos[b] - pos[a]]
            expected += sum(at) / len(at)
    return FlipShares(flipped, into, expected / flipped if flipped else float("nan"))


@dataclass
class RankingsInTheMaking:
    """What :class:`RankingTracker` found in one trajectory."""

    first_step: int | None = None
    """Step of the first complete ranking (None: none in the trajectory)."""
    first_t: float | None = None
    """Its point in the run (0 to 1)."""
    first_source: str | None = None
    """Where it was: ``model_text``, ``tool_call`` or ``tool_output``."""
    first_draft: Orders | None = None
    """The first complete ranking."""
    versions: int = 0
    """Distinct successive complete rankings in the trajectory."""
    revisions: int = 0
    """Changes of the complete ranking after the first draft, the submission included."""
    pairs_flipped: int = 0
    """Item pairs ordered differently in the submission than in the first draft."""
    group_sources: dict[str, str] = field(default_factory=dict)
    """Where each traced submitted group order first appears."""
    group_steps: dict[str, int] = field(default_factory=dict)
    """...and at which step (absent for ``file_only``)."""


class RankingTracker:
    """Reads the texts of one trajectory in time order; keeps only small state."""

    def __init__(self, contract: Contract, submitted: Orders | None,
                 presented: Mapping[str, Sequence[str]] | None = None) -> None:
        """Trace ``submitted`` through the texts; ``presented`` is the input order.

        Args:
            contract: The task's groups and items.
            submitted: The submitted orders by group (None: nothing submitted).
            presented: The input order by group (``targets.csv``'s rows, see
                :func:`is_complete_ranking`); None: the contract's item order.
        """
        self.contract = contract
        self.presented = {g.group_id: list(
            (presented or {}).get(g.group_id, g.items)) for g in contract.groups}
        self.ids = {item for g in contract.groups for item in g.items}
        # Whether a text names any item at all, in one pass (most texts name none).
        self._names_an_item = re.compile("|".join(
            re.escape(item) for item in sorted(self.ids, key=len, reverse=True)))
        self.submitted = submitted or {}
        self.result = RankingsInTheMaking()
        self._last: Orders | None = None
        # The traced groups: at least three items, submitted complete, not input order.
        self._pending: dict[str, str] = {}
        self._members: dict[str, set[str]] = {}
        for g in contract.groups:
            order = self.submitted.get(g.group_id)
            if (order and len(g.items) >= MIN_GROUP_ITEMS and len(order) == len(g.items)
                    and set(order) == set(g.items)
                    and list(order) != self.presented[g.group_id]):
                self._pending[g.group_id] = "\x00".join(order)
                self._members[g.group_id] = set(g.items)

    def feed(self, step: int, t: float, source: str, text: str | None) -> None:
        """Read one text of ``source`` at ``step`` (time ``t``)."""
        if not text:
            return
        if self._pending:
            self._trace(step, source, text)
        if '"rankings"' in text:
            for orders in rankings_in_text(text):
                self._ranking(step, t, source, orders)

    def _trace(self, step: int, source: str, text: str) -> None:
        # A text is tokenized only when it names an item (a fast substring test).
        if not self._names_an_item.search(text):
            return
        tokens = [tok for tok in _TOKEN.findall(text) if tok in self.ids]
        if len(tokens) < MIN_GROUP_ITEMS:
            return
        for gid in list(self._pending):
            members = self._members[gid]
            stream = "\x00".join(tok for tok in tokens if tok in members)
            wanted = self._pending[gid]
            at = stream.find(wanted)
            # whole tokens: the match must start and end at separators
            while at >= 0:
                end = at + len(wanted)
                if (at == 0 or stream[at - 1] == "\x00") and (
                        end == len(stream) or stream[end] == "\x00"):
                    self.result.group_sources[gid] = source
                    self.result.group_steps[gid] = step
                    del self._pending[gid]
                    break
                at = stream.find(wanted, at + 1)

    def _ranking(self, step: int, t: float, source: str, orders: Orders) -> None:
        if not is_complete_ranking(orders, self.contract, self.presented):
            return
        r = self.result
        if r.first_draft is None:
            r.first_step, r.first_t, r.first_source, r.first_draft = step, t, source, orders
        if orders != self._last:
            r.versions += 1
            self._last = orders

    def finish(self) -> RankingsInTheMaking:
        """The findings; groups never seen in the trajectory are ``file_only``."""
        r = self.result
        for gid in self._pending:
            r.group_sources[gid] = "file_only"
        self._pending = {}
        if r.first_draft is not None:
            final = self.submitted if is_complete_ranking(
                self.submitted, self.contract, self.presented) else None
            r.revisions = max(r.versions - 1, 0) + int(final is not None and final != self._last)
            if final is not None:
                r.pairs_flipped = sum(len(flipped_pairs(order, final[gid]))
                                      for gid, order in r.first_draft.items())
        return r
