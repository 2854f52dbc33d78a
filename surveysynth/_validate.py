"""Argument parsing and input checks shared by designs and estimators.

Every error names the column, the first offending rows (by the caller's index labels) and the
fix, because the person reading it is holding a confidential file and a deadline.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Sequence

import numpy as np
import pandas as pd

_FORMULA_SPLIT = re.compile(r"\s*[+]\s*")


def parse_vars(spec: str | Sequence[str] | None, argument: str) -> list[str] | None:
    """Column names from ``None``, a name, a list of names, or an R-style formula string.

    ``"~a+b"`` gives ``["a", "b"]``; ``"~1"`` and ``"~0"`` give ``[]`` (R: no clustering);
    back-quoted names (``"~`sch.wide`"``) are unquoted. ``None`` stays ``None``.
    """
    if spec is None:
        return None
    if isinstance(spec, str):
        text = spec.strip()
        if text.startswith("~"):
            body = text[1:].strip()
            if body in ("1", "0", ""):
                return []
            parts = [p.strip().strip("`") for p in _FORMULA_SPLIT.split(body)]
            if any(not p for p in parts) or any(ch in p for p in parts for ch in "*:|()"):
                raise ValueError(
                    f"{argument}={spec!r}: only sums of column names are understood in formulas "
                    "(like '~a+b'); pass a list of column names instead."
                )
            return parts
        return [text]
    if isinstance(spec, Iterable):
        names = list(spec)
        bad = [x for x in names if not isinstance(x, str)]
        if bad:
            raise ValueError(f"{argument}: column names must be strings, got {bad[:3]!r}.")
        return names
    raise ValueError(f"{argument}: expected a column name, a list of names or a formula string.")


def as_list(x: str | Sequence[str] | None, argument: str = "variables") -> list[str]:
    """Column names from ``None`` (none), a name, a list of names, or an R-style formula
    (``"~api00+api99"``, as R survey's ``svymean(~api00+api99, d)``): every estimator, ``by=``
    and table argument takes what ``SurveyDesign`` takes for its design columns."""
    if x is None:
        return []
    if isinstance(x, str):
        return parse_vars(x, argument) or []
    return list(x)


def first_rows(index: pd.Index, mask: np.ndarray, k: int = 5) -> str:
    """Readable list of the first ``k`` index labels where ``mask`` holds, with a count."""
    where = np.flatnonzero(mask)
    labels = [repr(v) if isinstance(v, str) else str(v) for v in index[where[:k]]]
    more = f" and {where.shape[0] - k} more" if where.shape[0] > k else ""
    return f"rows {', '.join(labels)}{more}"


def require_columns(data: pd.DataFrame, columns: Iterable[str], argument: str) -> None:
    missing = [c for c in columns if c not in data.columns]
    if missing:
        available = ", ".join(map(str, list(data.columns)[:12]))
        more = ", ..." if data.shape[1] > 12 else ""
        raise ValueError(
            f"{argument}: column(s) {missing} not in the data. Available columns: "
            f"{available}{more}. Fix: check the spelling or add the column."
        )


def check_no_na(data: pd.DataFrame, columns: Iterable[str], argument: str) -> None:
    for c in columns:
        na = data[c].isna().to_numpy()
        if na.any():
            raise ValueError(
                f"{argument}: column {c!r} has missing values in {first_rows(data.index, na)}. "
                "Design variables cannot be missing: fill or drop those rows before building "
                "the design."
            )


def numeric_column(data: pd.DataFrame, column: str, argument: str) -> np.ndarray:
    s = data[column]
    if not (pd.api.types.is_numeric_dtype(s) or pd.api.types.is_bool_dtype(s)):
        raise ValueError(
            f"{argument}: column {column!r} is {s.dtype}, not numeric. Fix: convert it "
            "(pd.to_numeric) or pass a numeric column."
        )
    return s.to_numpy(dtype=float, na_value=np.nan)
