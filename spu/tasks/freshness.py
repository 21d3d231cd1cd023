"""Freshness: was a task's source published before a model's training cutoff?

A task whose measurements were published before the model's training cutoff may be in
its training data (paper appendix B records each model's cutoff with its submission).
Both dates are ISO dates of any precision, ``YYYY``, ``YYYY-MM`` or ``YYYY-MM-DD``: the
answer key's ``source.published`` and the model's ``training_cutoff``. Each stands for
the period it names (``2019`` is the whole of 2019), and the rule is:

- **true** (published before the cutoff): the publication period ends no later than the
  cutoff period ends (``2019`` against ``2025-03``; ``2025-03-10`` against ``2025-03``);
- **false** (fresh): the publication period starts after the cutoff period ends
  (``2025-06`` against ``2025-03``);
- **unknown**: either date is missing, or the periods overlap otherwise (``2025``
  against ``2025-03``).
"""

from __future__ import annotations

import calendar
import re
from datetime import date

DATE = re.compile(r"^(\d{4})(?:-(\d{2})(?:-(\d{2}))?)?$")
"""An ISO date of year, month or day precision."""
RULE = ("published_before_cutoff: true where the source's publication period "
        "(source.published) ends no later than the model's training_cutoff period, false "
        "where it starts after it, unknown otherwise (a date missing, or periods overlapping)")
"""The rule in one line, as manifests name it."""


class DateError(ValueError):
    """Not an ISO date of year, month or day precision."""


def period(text: str) -> tuple[date, date]:
    """The first and last day ``text`` names.

    Examples
    --------
    >>> period("2019")
    (datetime.date(2019, 1, 1), datetime.date(2019, 12, 31))
    >>> period("2024-02")[1]
    datetime.date(2024, 2, 29)

    Raises:
        DateError: ``text`` is not ``YYYY``, ``YYYY-MM`` or ``YYYY-MM-DD``, or no such day.
    """
    found = DATE.match(str(text).strip())
    if found is None:
        raise DateError(f"{text!r} is not a date (YYYY, YYYY-MM or YYYY-MM-DD)")
    year, month, day = (int(g) if g else None for g in found.groups())
    assert year is not None
    try:
        if month is None:
            return date(year, 1, 1), date(year, 12, 31)
        if day is None:
            return date(year, month, 1), date(year, month, calendar.monthrange(year, month)[1])
        return date(year, month, day), date(year, month, day)
    except ValueError as exc:
        raise DateError(f"{text!r} is not a date: {exc}") from None


def check_date(text: str) -> str:
    """``text`` stripped, when it is a date of :data:`DATE`'s form.

    Raises:
        DateError: it is not.
    """
    period(text)
    return str(text).strip()


def published_before_cutoff(published: str | None, cutoff: str | None) -> bool | None:
    """Whether ``published`` came before the training ``cutoff`` (None: unknown).

    Examples
    --------
    >>> published_before_cutoff("2019", "2025-03"), published_before_cutoff("2025-06", "2025-03")
    (True, False)
    >>> published_before_cutoff("2025", "2025-03") is None, published_before_cutoff(None, "2025")
    (True, None)
    """
    if not published or not cutoff:
        return None
    try:
        pub_first, pub_last = period(published)
        _, cut_last = period(cutoff)
    except DateError:
        return None
    if pub_last <= cut_last:
        return True
    if pub_first > cut_last:
        return False
    return None


def freshness_text(value: bool | None) -> str:
    """``true``, ``false`` or ``unknown``: the runs table's spelling."""
    return "unknown" if value is None else ("true" if value else "false")
