"""Formula helpers shared by the analysis functions: R-style names with dots, the columns a
formula reads, and formulaic's model matrices with its errors as ValueErrors."""

from __future__ import annotations

import re
from typing import Any

import pandas as pd
from formulaic import model_matrix


def formula_columns(formula: str, data_cols: pd.Index) -> list[str]:
    """Columns a formula reads: column names appearing in it as whole tokens (names with dots,
    R style, included; formulaic's own variable list splits them at the dot)."""
    found = []
    for c in map(str, data_cols):
        if re.search(rf"(?<![\w.]){re.escape(c)}(?![\w.])", formula):
            found.append(c)
    return found


def quote_dotted(text: str, data_cols: pd.Index) -> str:
    """Back-quote column names with dots (R style, ``api.stu``) so that formulaic reads them as
    names inside Python expressions (``np.log(api.stu)``) too."""
    for c in sorted((str(c) for c in data_cols if "." in str(c)), key=len, reverse=True):
        text = re.sub(rf"(?<![\w.`]){re.escape(c)}(?![\w.`])", f"`{c}`", text)
    return text


def formula_matrix(formula: str, data: pd.DataFrame, what: str, **kwargs: Any):
    """formulaic's model matrix; its errors (unknown names, bad syntax) as a ValueError."""
    try:
        return model_matrix(formula, data, **kwargs)
    except Exception as exc:  # formulaic raises several types; report them alike
        raise ValueError(
            f"{what}: cannot evaluate formula {formula!r} on the design's data: {exc}. Fix: "
            f"check the names (columns: {list(map(str, data.columns))[:12]}...) and the syntax."
        ) from exc
