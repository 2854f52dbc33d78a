"""pandas <-> R data.frame, column by column, keeping types exactly.

Not rpy2's pandas2ri: its rules have changed across pandas versions; these are explicit.
Numbers -> double (NaN/NA -> NA_real_), integers (also nullable Int) -> integer, booleans ->
logical, strings -> character (None/NA -> NA_character_), pandas Categorical -> factor with the
same levels in the same order (ordered too), datetime64 (dates) -> Date (days) or POSIXct.
Back from R the same mapping in reverse: integer with NA -> Int64, logical -> boolean,
factor -> Categorical, Date -> datetime64[ns] at midnight.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from . import r_session


def _column_to_r(ro, s: pd.Series):
    na = s.isna().to_numpy()
    if isinstance(s.dtype, pd.CategoricalDtype):
        codes = s.cat.codes.to_numpy().astype(np.int64) + 1
        vec = ro.IntVector([ro.NA_Integer if c == 0 else int(c) for c in codes])
        levels = ro.StrVector([str(x) for x in s.cat.categories])
        out = ro.r("function(codes, levels, ordered) factor(levels[codes], levels=levels, ordered=ordered)")
        return out(vec, levels, ro.BoolVector([bool(s.cat.ordered)]))
    if pd.api.types.is_bool_dtype(s):
        vals = s.to_numpy(dtype=object)
        return ro.BoolVector([ro.NA_Logical if m else bool(v) for v, m in zip(vals, na, strict=True)])
    if pd.api.types.is_integer_dtype(s):
        vals = s.to_numpy(dtype=object)
        return ro.IntVector([ro.NA_Integer if m else int(v) for v, m in zip(vals, na, strict=True)])
    if pd.api.types.is_float_dtype(s):
        return ro.FloatVector(np.where(na, ro.NA_Real, s.to_numpy(dtype=float, na_value=np.nan)))
    if pd.api.types.is_datetime64_any_dtype(s):
        ts = pd.to_datetime(s)
        if ts.dt.tz is None and (ts.dropna() == ts.dropna().dt.normalize()).all():
            days = (ts - pd.Timestamp("1970-01-01")).dt.days.to_numpy(dtype=float, na_value=np.nan)
            vec = ro.FloatVector(np.where(na, ro.NA_Real, days))
            return ro.r("function(x) structure(x, class='Date')")(vec)
        secs = (ts.dt.tz_localize(None) if ts.dt.tz is not None else ts)
        secs = ((secs - pd.Timestamp("1970-01-01")).dt.total_seconds()).to_numpy(dtype=float, na_value=np.nan)
        vec = ro.FloatVector(np.where(na, ro.NA_Real, secs))
        return ro.r("function(x) structure(x, class=c('POSIXct','POSIXt'), tzone='UTC')")(vec)
    vals = s.to_numpy(dtype=object)
    return ro.StrVector([ro.NA_Character if m else str(v) for v, m in zip(vals, na, strict=True)])


def pandas_to_r(df: pd.DataFrame):
    """An R data.frame with the same columns, types, levels and missing values."""
    with r_session() as (ro, _):
        cols = {str(c): _column_to_r(ro, df[c]) for c in df.columns}
        rdf = ro.DataFrame(cols) if cols else ro.r("data.frame()")
        rdf = ro.r("function(x, n) { attr(x, 'row.names') <- seq_len(n); x }")(rdf, df.shape[0])
        # keep names exactly (DataFrame() may mangle with check.names)
        rdf.names = ro.StrVector([str(c) for c in df.columns])
        return rdf


def _column_from_r(ro, v) -> pd.Series | np.ndarray:
    classes = list(ro.r["class"](v))
    if "factor" in classes:
        levels = list(ro.r["levels"](v))
        codes = np.asarray(ro.r["as.integer"](v), dtype=object)
        codes = np.array([-1 if c == ro.NA_Integer or c is None else int(c) - 1 for c in codes])
        return pd.Categorical.from_codes(codes, categories=levels, ordered="ordered" in classes)
    if "Date" in classes:
        days = np.asarray(ro.r["as.numeric"](v), dtype=float)
        return pd.to_datetime(days, unit="D", origin="unix")
    if "POSIXct" in classes:
        secs = np.asarray(ro.r["as.numeric"](v), dtype=float)
        return pd.to_datetime(secs, unit="s", origin="unix")
    rtype = ro.r["typeof"](v)[0]
    na = np.asarray(ro.r["is.na"](v), dtype=bool)
    if rtype == "double":
        return np.where(na, np.nan, np.asarray(v, dtype=float))
    if rtype == "integer":
        arr = np.asarray(ro.r["ifelse"](ro.r["is.na"](v), 0, v), dtype=np.int64)
        return pd.arrays.IntegerArray(arr, na) if na.any() else arr
    if rtype == "logical":
        arr = np.asarray(ro.r["ifelse"](ro.r["is.na"](v), False, v), dtype=bool)
        return pd.arrays.BooleanArray(arr, na) if na.any() else arr
    vals = list(ro.r["as.character"](v))
    return pd.array([None if m else x for x, m in zip(vals, na, strict=True)], dtype=object)


def r_to_pandas(rdf) -> pd.DataFrame:
    """A pandas DataFrame from an R data.frame (types as in the module docstring)."""
    with r_session() as (ro, _):
        names = list(ro.r["names"](rdf))
        cols = {n: _column_from_r(ro, rdf.rx2(n)) for n in names}
        return pd.DataFrame(cols)
