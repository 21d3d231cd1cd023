"""``tests.csv``: every named hypothesis test of the analyses, one row each (SPEC section 9).

Each row says which test it is, its statistic, degrees of freedom where the test has
them, the p-value, the paper section that reports it, the number of units it rests on
and how the null distribution was obtained (``exact``, ``monte-carlo``, ``asymptotic``,
``simulated``). Families corrected together carry ``p_holm`` as well.
"""

from __future__ import annotations

import math
from typing import Any

TEST_COLUMNS: tuple[str, ...] = (
    "test", "statistic", "df", "p_value", "section", "n", "method", "p_holm")
"""Columns of ``tests.csv``: those SPEC section 9 fixes first, then more."""


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
