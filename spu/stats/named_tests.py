"""``tests.csv``: every named hypothesis test of the analyses, one row each (SPEC section 9).

Each row says which test it is, its statistic, degrees of freedom (``df``, below), the
p-value, the paper section that reports it, the number of units it rests on and how the
null distribution was obtained (``exact``, ``monte-carlo``, ``asymptotic``,
``simulated``). Families corrected together carry ``p_holm`` as well.

``df`` is defined one way for every test of groups of tasks (the discipline tests of 3.3,
4.4, 4.6 and E.10, and the subfield one of 4.4): the number of groups the test compares
less one (:func:`groups_df`), whether its p comes from the chi-squared (Kruskal-Wallis)
or from permuting or splitting the tasks (the chi-squared test of the same groups would
have that df). A test of one group's count (``widest_spread``, hypergeometric) has none.
The interaction F tests of E.9 give their numerator and denominator df (``"n1,n2"``).
"""

from __future__ import annotations

import math
from typing import Any

TEST_COLUMNS: tuple[str, ...] = (
    "test", "statistic", "df", "p_value", "section", "n", "method", "p_holm")
"""Columns of ``tests.csv``: those SPEC section 9 fixes first, then more."""


def groups_df(n_groups: int) -> int | None:
    """``df`` of a test across ``n_groups`` groups of tasks: the groups less one.

    None where fewer than two groups leave nothing to compare.

    Examples
    --------
    >>> groups_df(4), groups_df(1)
    (3, None)
    """
    return n_groups - 1 if n_groups >= 2 else None


def named_test(test: str, statistic: float, p_value: float, section: str, *,
             df: Any = None, n: int | None = None, method: str = "",
             p_holm: float = math.nan) -> dict[str, Any]:
    """One row of ``tests.csv``.

    Examples
    --------
    >>> named_test("kruskal_wallis_task_means", 4.9, 0.18, "3.3", df=3, n=100,
    ...          method="asymptotic")["df"]
    3
    """
    return {"test": test, "statistic": statistic, "df": df, "p_value": p_value,
            "section": section, "n": n, "method": method, "p_holm": p_holm}
