"""Strict JSON: what the grader accepts, and what every trusted task file must be.

Python's ``json`` merges duplicate keys silently, accepts ``NaN`` and ``Infinity``,
and raises outside ``JSONDecodeError`` on a 4,300-digit integer or deep nesting.
:func:`loads_strict` turns each of these into one :class:`StrictJSONError` whose
message is short whatever the input, so that a submission, a contract or an answer
key is read by one parser with one set of rules.
"""

from __future__ import annotations

import json
from typing import Any

SHOWN_CHARS = 60
"""Longest excerpt of the input quoted in a message."""


class StrictJSONError(ValueError):
    """The text is not strict JSON; ``kind`` is ``duplicate``, ``constant`` or ``syntax``."""

    def __init__(self, kind: str, message: str, key: str | None = None) -> None:
        super().__init__(message)
        self.kind = kind
        self.key = key


class _Duplicate(ValueError):
    pass


class _Constant(ValueError):
    pass


def shown(value: Any) -> str:
    """``repr(value)``, cut short: messages stay small whatever was read."""
    try:
        text = repr(value)
    except RecursionError:  # a value nested almost as deep as the parser allows
        return "a deeply nested value"
    return text if len(text) <= SHOWN_CHARS else text[: SHOWN_CHARS - 3] + "..."


def _no_duplicates(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    seen: dict[str, Any] = {}
    for key, value in pairs:
        if key in seen:
            raise _Duplicate(key)
        seen[key] = value
    return seen


def _reject_constant(name: str) -> Any:
    raise _Constant(name)


def _parse_int(digits: str) -> int | float:
    # Python refuses integers of more than 4,300 digits (a ValueError json.loads lets
    # through). Such a number is valid JSON; it can only sit where its value does not
    # matter (an extra key) or where no number is accepted anyway.
    try:
        return int(digits)
    except ValueError:
        return float(digits)


def loads_strict(text: str, allow_nan: bool = False) -> Any:
    """Parse ``text`` as strict JSON: no duplicate keys, no ``NaN``/``Infinity``.

    ``allow_nan=True`` reads the constants as floats, for a caller that reports
    where they are itself (the task validator).

    Raises
    ------
    StrictJSONError
        On a duplicate key (``kind="duplicate"``, ``key`` set), a non-JSON constant
        (``constant``) or anything else the parser refuses (``syntax``).

    Examples
    --------
    >>> loads_strict('{"a": 1, "a": 2}')
    Traceback (most recent call last):
    ...
    spu.strict_json.StrictJSONError: duplicate key 'a'
    """
    try:
        return json.loads(
            text,
            object_pairs_hook=_no_duplicates,
            parse_constant=None if allow_nan else _reject_constant,
            parse_int=_parse_int,
        )
    except _Duplicate as exc:
        raise StrictJSONError("duplicate", f"duplicate key {shown(exc.args[0])}",
                              key=exc.args[0]) from None
    except _Constant as exc:
        raise StrictJSONError("constant", f"not JSON: {exc.args[0]} is not a JSON value") from None
    except json.JSONDecodeError as exc:
        hint = " (the file starts with a byte-order mark)" if text.startswith("\ufeff") else ""
        raise StrictJSONError(
            "syntax", f"not JSON: {exc.msg} at line {exc.lineno} column {exc.colno}{hint}"
        ) from None
    except RecursionError:
        raise StrictJSONError("syntax", "not JSON: nested too deeply") from None
    except ValueError as exc:  # anything else the decoder refuses is not JSON either
        raise StrictJSONError("syntax", f"not JSON: {exc}") from None
