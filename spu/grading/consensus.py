"""The consensus of several submissions: pure functions of their files (paper E.8).

Both the consensus configuration (:mod:`spu.harness.consensus`, which builds a task's
submission from its members' stored files) and the agreement analysis
(:mod:`spu.stats.agreement`) take the mean position of each item over the submissions
that order its group completely, ties by item id.
"""

from __future__ import annotations

from collections.abc import Sequence

from spu.grading.recovery import RecoveryFailed, normalize_departures
from spu.grading.rules import parse_submission
from spu.schema import Contract

Orders = dict[str, list[str]]
"""Submitted order of each comparison group, by group id."""


def orders_from_bytes(data: bytes | None) -> Orders | None:
    """Group orders of a submitted file; ``None`` when none can be read.

    Examples
    --------
    >>> orders_from_bytes(b'{"task_id": "t", "rankings": {"G1": ["b", "a"]}}')
    {'G1': ['b', 'a']}
    """
    if data is None:
        return None
    obj, reason = parse_submission(data)
    if reason is not None:
        return None
    try:
        # A canonical file comes back unchanged (no departure found).
        normalized, _ = normalize_departures(obj)
    except RecoveryFailed:
        return None
    orders: Orders = {}
    twice: set[str] = set()
    for entry in normalized["rankings"]:
        gid, order = entry["group_id"], entry["order"]
        if gid in orders:
            twice.add(gid)
        orders[gid] = [str(x) for x in order]
    for gid in twice:
        del orders[gid]
    return orders


def is_complete(order: list[str] | None, items: list[str]) -> bool:
    """Whether ``order`` lists every item of the group exactly once.

    Examples
    --------
    >>> is_complete(["b", "a"], ["a", "b"]), is_complete(["a", "a"], ["a", "b"])
    (True, False)
    """
    return order is not None and len(order) == len(items) and set(order) == set(items)


def consensus_orders(contract: Contract, submissions: Sequence[Orders]) -> Orders:
    """Consensus ranking: items by average position over the submissions (ties by id).

    A group is left out when no submission orders it completely.

    Examples
    --------
    >>> from spu.schema import ComparisonGroup
    >>> c = Contract(task_id="t", task_version="1", groups=[
    ...     ComparisonGroup(group_id="G", endpoint="y", weight=1.0, items=["a", "b", "c"])])
    >>> consensus_orders(c, [{"G": ["a", "b", "c"]}, {"G": ["b", "a", "c"]}])
    {'G': ['a', 'b', 'c']}
    """
    out: Orders = {}
    for g in contract.groups:
        complete = [s[g.group_id] for s in submissions if is_complete(s.get(g.group_id), g.items)]
        if not complete:
            continue
        total = dict.fromkeys(g.items, 0)
        for o in complete:
            for position, item in enumerate(o):
                total[item] += position
        mean_position = {item: total[item] / len(complete) for item in g.items}
        out[g.group_id] = sorted(g.items, key=lambda item: (mean_position[item], item))
    return out
