"""Recovery of the five schema departures of paper appendix E.1.

Each departure renames or renests a JSON key and leaves the ordered lists of
experiment ids intact. Normalization maps a file back to the canonical schema
``{"task_id", "task_version", "rankings": [{"group_id", "order"}]}`` without moving
any item; anything ambiguous is refused rather than guessed.
"""

from __future__ import annotations

from typing import Any

ORDER_KEYS: tuple[str, ...] = (
    "item_ids",
    "ranking",
    "ranked_item_ids",
    "items",
    "ordering",
    "ordered_item_ids",
)
"""Alternative names of ``order`` seen in the paper's rejected files (departure 2)."""

TOP_LEVEL_KEYS: tuple[str, ...] = ("groups", "predictions")
"""Alternative names of ``rankings`` (departure 3)."""

OBJECT_KEYED_BY_GROUP = "object_keyed_by_group"
ALTERNATIVE_ORDER_KEY = "alternative_order_key"
ALTERNATIVE_TOP_LEVEL_KEY = "alternative_top_level_key"
ALTERNATIVE_GROUP_KEY = "alternative_group_key"
RENAMED_IDENTITY = "renamed_identity"

DEPARTURES: tuple[str, ...] = (
    OBJECT_KEYED_BY_GROUP,
    ALTERNATIVE_ORDER_KEY,
    ALTERNATIVE_TOP_LEVEL_KEY,
    ALTERNATIVE_GROUP_KEY,
    RENAMED_IDENTITY,
)
"""The five departures, in the order of appendix E.1."""


class RecoveryFailed(ValueError):
    """The file cannot be normalized without guessing."""


def _ordering(entry: dict[str, Any], where: str, found: set[str]) -> list[Any]:
    if isinstance(entry.get("order"), list):
        return list(entry["order"])
    candidates = [k for k in ORDER_KEYS if isinstance(entry.get(k), list)]
    if len(candidates) != 1:
        names = ", ".join(candidates) if candidates else "none of order, " + ", ".join(ORDER_KEYS)
        raise RecoveryFailed(f"{where}: cannot tell the ordering list ({names})")
    found.add(ALTERNATIVE_ORDER_KEY)
    return list(entry[candidates[0]])


def _entries_from_object(rankings: dict[str, Any], found: set[str]) -> list[dict[str, Any]]:
    found.add(OBJECT_KEYED_BY_GROUP)
    entries = []
    for group_id, value in rankings.items():
        if isinstance(value, list):
            order = list(value)
        elif isinstance(value, dict):
            order = _ordering(value, f"rankings[{group_id!r}]", found)
        else:
            raise RecoveryFailed(f"rankings[{group_id!r}] is neither a list nor an object")
        entries.append({"group_id": group_id, "order": order})
    return entries


def _entries_from_list(rankings: list[Any], found: set[str]) -> list[dict[str, Any]]:
    entries = []
    for i, entry in enumerate(rankings):
        if not isinstance(entry, dict):
            raise RecoveryFailed(f"rankings[{i}] is not an object")
        if isinstance(entry.get("group_id"), str):
            group_id = entry["group_id"]
        elif isinstance(entry.get("group"), str):
            group_id = entry["group"]
            found.add(ALTERNATIVE_GROUP_KEY)
        else:
            raise RecoveryFailed(f"rankings[{i}] names no group (group_id or group)")
        entries.append({"group_id": group_id, "order": _ordering(entry, f"rankings[{i}]", found)})
    return entries


def normalize_departures(obj: Any) -> tuple[dict[str, Any], list[str]]:
    """Map a schema-departing submission to the canonical schema.

    Returns the normalized object and the departures found, in appendix E.1 order.
    Item lists are copied unchanged: no experiment moves.

    Raises
    ------
    RecoveryFailed
        When the structure is not one of the five departures, or is ambiguous.

    Examples
    --------
    >>> normalize_departures({"task": "t", "groups": {"G1": ["b", "a"]}})[1]
    ['object_keyed_by_group', 'alternative_top_level_key', 'renamed_identity']
    """
    if not isinstance(obj, dict):
        raise RecoveryFailed("the file is not a JSON object")
    found: set[str] = set()
    out: dict[str, Any] = {}

    for canonical, alternative in (("task_id", "task"), ("task_version", "version")):
        if canonical in obj:
            out[canonical] = obj[canonical]
        elif alternative in obj:
            out[canonical] = obj[alternative]
            found.add(RENAMED_IDENTITY)

    if "rankings" in obj:
        rankings = obj["rankings"]
    else:
        present = [k for k in TOP_LEVEL_KEYS if k in obj]
        if len(present) != 1:
            raise RecoveryFailed(
                "no 'rankings' and not exactly one of " + ", ".join(TOP_LEVEL_KEYS)
            )
        rankings = obj[present[0]]
        found.add(ALTERNATIVE_TOP_LEVEL_KEY)

    if isinstance(rankings, dict):
        out["rankings"] = _entries_from_object(rankings, found)
    elif isinstance(rankings, list):
        out["rankings"] = _entries_from_list(rankings, found)
    else:
        raise RecoveryFailed(f"rankings is a {type(rankings).__name__}")
    return out, [d for d in DEPARTURES if d in found]
