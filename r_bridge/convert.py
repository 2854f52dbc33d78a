"""pandas <-> R data.frame, column by column, keeping types, levels and missing values exactly.

Not rpy2's pandas2ri: its rules have changed across pandas versions; these are explicit and
vectorized (numbers cross through numpy buffers; strings cross as their distinct values plus
integer codes, so no Python loop runs over rows).

pandas -> R
    float (also nullable Float)         double, NaN/NA -> NA_real_
    integer (int8..int64, uint, Int*)   integer, NA -> NA_integer_. R integers are 32-bit:
                                        a column outside +-2147483647 goes to double when
                                        every value is exact there (|x| <= 2^53), else error.
    bool / boolean                      logical, NA -> NA
    str / object holding strings        character, None/NaN/NA -> NA_character_
    Categorical                         factor, same levels in the same order (ordered ->
                                        ordered factor); levels become character (R's rule)
    datetime64, all values at midnight  Date
    datetime64 otherwise / tz-aware     POSIXct (tz-aware keeps its time zone in ``tzone``)
    anything else (timedelta, period, mixed objects)   ValueError naming the column
R -> pandas: the reverse (factor -> Categorical, integer with NA -> Int64, logical with NA ->
boolean, character -> the pandas default string dtype, Date -> datetime64[s], POSIXct ->
datetime64[us], with its time zone).

Decision: ``pandas_to_r`` records each column's pandas dtype in the data.frame attribute
``"pandas.dtypes"``; ``r_to_pandas`` restores those dtypes when the column still converts to
them, so a round trip gives the same dtypes (``Int64`` without missing values stays ``Int64``,
``object`` stays ``object``). R code never needs the attribute. The pandas index is not
transferred (R row names are 1..n); character R row names become the index on the way back.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pandas as pd

from . import r_session

NA_INTEGER = np.iinfo(np.int32).min
NA_REAL = np.array([0x7FF00000000007A2], dtype=np.uint64).view(np.float64)[0]  # R's NA_real_
_INT32_MAX = np.iinfo(np.int32).max
_EXACT_DOUBLE = 2**53

_R_FUNS: dict[str, Any] = {}
_R_CODE = {
    "factor": "function(codes, levels, ordered) structure(codes, levels = levels, "
    "class = if (ordered) c('ordered', 'factor') else 'factor')",
    "take": "function(u, i) u[i]",
    "as_logical": "function(x) as.logical(x)",
    "date": "function(x) structure(x, class = 'Date')",
    "posixct": "function(x, tz) structure(x, class = c('POSIXct', 'POSIXt'), tzone = tz)",
    "frame": "function(cols, names, n, dtypes) { names(cols) <- names; "
    "attr(cols, 'row.names') <- .set_row_names(as.integer(n)); class(cols) <- 'data.frame'; "
    "attr(cols, 'pandas.dtypes') <- dtypes; cols }",
    "describe": "function(x) { if (is.array(x) && length(dim(x)) == 1L && is.atomic(x)) "
    "{ x <- as.vector(x) }; list(class = class(x), type = typeof(x), dim = !is.null(dim(x)), "
    "tz = if (is.null(attr(x, 'tzone'))) '' else attr(x, 'tzone')[1], x = x) }",
    "codes": "function(x) { u <- unique(x); list(u, match(x, u)) }",
    "frame_info": "function(x) list(names(x), .row_names_info(x) > 0, "
    "if (.row_names_info(x) > 0) as.character(row.names(x)) else character(0), "
    "attr(x, 'pandas.dtypes'))",
}


def _rfun(ro, name: str):
    """A small R helper, parsed once per process (callers hold the R lock)."""
    if name not in _R_FUNS:
        _R_FUNS[name] = ro.r(_R_CODE[name])
    return _R_FUNS[name]


def _strings_to_r(ro, s: pd.Series):
    codes, uniques = pd.factorize(s, use_na_sentinel=True)
    u = ro.StrVector([str(x) for x in uniques])
    idx = np.where(codes < 0, NA_INTEGER, codes + 1).astype(np.int32)
    return _rfun(ro, "take")(u, ro.IntVector(idx))


def _column_to_r(ro, s: pd.Series, name: str):
    na = s.isna().to_numpy()
    dtype = s.dtype
    if isinstance(dtype, pd.CategoricalDtype):
        levels = [str(x) for x in dtype.categories]
        if len(set(levels)) != len(levels):
            raise ValueError(
                f"column {name!r}: categories {list(dtype.categories)[:10]} are not distinct as "
                "text, so they cannot be R factor levels. Fix: rename the categories."
            )
        codes = s.cat.codes.to_numpy().astype(np.int32)
        codes = np.where(codes < 0, NA_INTEGER, codes + 1).astype(np.int32)
        return _rfun(ro, "factor")(
            ro.IntVector(codes), ro.StrVector(levels), ro.BoolVector([bool(dtype.ordered)])
        )
    if pd.api.types.is_bool_dtype(dtype):
        ints = s.to_numpy(dtype=np.int32, na_value=NA_INTEGER) if na.any() else (
            s.to_numpy(dtype=bool).astype(np.int32)
        )
        return _rfun(ro, "as_logical")(ro.IntVector(np.ascontiguousarray(ints)))
    if pd.api.types.is_integer_dtype(dtype):
        big = s.to_numpy(dtype=np.int64, na_value=0) if not pd.api.types.is_unsigned_integer_dtype(
            dtype
        ) else None
        if big is None:  # unsigned: may exceed int64
            u = s.to_numpy(dtype=np.uint64, na_value=0)
            if (u > _INT32_MAX).any():
                if (u > _EXACT_DOUBLE).any():
                    raise ValueError(
                        f"column {name!r}: unsigned integers above 2^53 have no exact R type. "
                        "Fix: convert the column to str or float first."
                    )
                return ro.FloatVector(np.where(na, NA_REAL, u.astype(np.float64)))
            big = u.astype(np.int64)
        if ((big > _INT32_MAX) | (big < -_INT32_MAX)).any():
            if (np.abs(big) > _EXACT_DOUBLE).any():
                rows = np.flatnonzero(np.abs(big) > _EXACT_DOUBLE)[:5].tolist()
                raise ValueError(
                    f"column {name!r}: integers beyond 2^53 at rows {rows} have no exact R "
                    "type (R integers are 32-bit, doubles exact to 2^53). Fix: store the "
                    "column as str (e.g. identifiers) or float."
                )
            return ro.FloatVector(np.where(na, NA_REAL, big.astype(np.float64)))
        return ro.IntVector(np.where(na, NA_INTEGER, big).astype(np.int32))
    if pd.api.types.is_float_dtype(dtype):
        vals = s.to_numpy(dtype=np.float64, na_value=np.nan)
        return ro.FloatVector(np.ascontiguousarray(np.where(na, NA_REAL, vals)))
    if pd.api.types.is_datetime64_any_dtype(dtype):
        tz = getattr(dtype, "tz", None)
        naive = s.dt.tz_convert("UTC").dt.tz_localize(None) if tz is not None else s
        us = naive.to_numpy().astype("datetime64[us]").astype(np.int64)
        secs = np.where(na, np.nan, us / 1e6)
        midnight = bool((us[~na] % (86400 * 10**6) == 0).all())
        if tz is None and midnight:
            days = np.where(na, NA_REAL, secs / 86400.0)
            return _rfun(ro, "date")(ro.FloatVector(days))
        zone = str(tz) if tz is not None else "UTC"
        return _rfun(ro, "posixct")(
            ro.FloatVector(np.where(na, NA_REAL, secs)), ro.StrVector([zone])
        )
    if pd.api.types.is_string_dtype(dtype):
        kind = pd.api.types.infer_dtype(s, skipna=True)
        if kind in ("string", "empty"):
            return _strings_to_r(ro, s)
        raise ValueError(
            f"column {name!r} holds {kind} values in an object column; R needs one type per "
            "column. Fix: convert it (astype(str), pd.to_numeric or a Categorical) first."
        )
    raise ValueError(
        f"column {name!r} has dtype {dtype}, which has no R data.frame counterpart here. "
        "Fix: convert it to numbers, strings, a Categorical or datetime64 first."
    )


def pandas_to_r(df: pd.DataFrame):
    """An R data.frame with the same columns, types, factor levels and missing values.

    See the module docstring for the type mapping. The DataFrame is not modified.
    """
    if not isinstance(df, pd.DataFrame):
        raise TypeError(f"pandas_to_r needs a pandas DataFrame, got {type(df).__name__}.")
    names = [str(c) for c in df.columns]
    if len(set(names)) != len(names):
        dup = sorted({n for n in names if names.count(n) > 1})
        raise ValueError(f"data has duplicated column names {dup[:5]}: rename them first.")
    with r_session() as (ro, _):
        cols = [_column_to_r(ro, df.iloc[:, j], names[j]) for j in range(df.shape[1])]
        dtypes = ro.StrVector([str(t) for t in df.dtypes])
        dtypes.names = ro.StrVector(names)
        return _rfun(ro, "frame")(
            ro.r["list"](*cols), ro.StrVector(names), df.shape[0], dtypes
        )


def _column_from_r(ro, v, name: str):
    info = _rfun(ro, "describe")(v)
    classes = list(info[0])
    rtype = info[1][0]
    v = info[4]  # one-dimensional arrays become plain vectors
    if info[2][0]:
        raise ValueError(
            f"column {name!r} is a matrix column (class {classes}); pandas columns are vectors. "
            "Fix: split it into separate columns in R first."
        )
    if "factor" in classes:
        codes = np.asarray(v, dtype=np.int32)
        codes = np.where(codes == NA_INTEGER, -1, codes - 1)
        levels = [str(x) for x in ro.r["levels"](v)]
        return pd.Categorical.from_codes(codes, categories=levels, ordered="ordered" in classes)
    if rtype in ("double", "integer") and "Date" in classes:
        days = np.asarray(v, dtype=np.float64)
        ok = ~np.isnan(days)
        out = np.full(days.shape[0], np.datetime64("NaT"), dtype="datetime64[s]")
        out[ok] = (np.round(days[ok] * 86400)).astype(np.int64).astype("datetime64[s]")
        return pd.Series(out)
    if rtype in ("double", "integer") and "POSIXct" in classes:
        secs = np.asarray(v, dtype=np.float64)
        ok = ~np.isnan(secs)
        out = np.full(secs.shape[0], np.datetime64("NaT"), dtype="datetime64[us]")
        out[ok] = np.round(secs[ok] * 1e6).astype(np.int64).astype("datetime64[us]")
        res = pd.Series(out)
        tz = info[3][0]
        return res.dt.tz_localize("UTC").dt.tz_convert(tz) if tz else res
    if len(classes) > 1 or classes[0] not in ("numeric", "integer", "logical", "character"):
        raise ValueError(
            f"column {name!r} has R class {classes}, which is not converted. Fix: convert it "
            "in R (as.numeric, as.character, factor) first."
        )
    if rtype == "double":
        return np.array(v, dtype=np.float64)
    if rtype in ("integer", "logical"):
        arr = np.asarray(v, dtype=np.int32)
        na = arr == NA_INTEGER
        if rtype == "integer":
            vals = np.where(na, 0, arr).astype(np.int64)
            return pd.arrays.IntegerArray(vals, na) if na.any() else vals
        vals = np.where(na, 0, arr).astype(bool)
        return pd.arrays.BooleanArray(vals, na) if na.any() else vals
    if rtype == "character":
        uniq, idx = _rfun(ro, "codes")(v)
        u = np.array([None if x is ro.NA_Character else str(x) for x in uniq], dtype=object)
        idx = np.asarray(idx, dtype=np.int32) - 1
        return pd.Series(u[idx] if idx.shape[0] else np.array([], dtype=object))
    raise ValueError(f"column {name!r} has R type {rtype!r}, which is not converted.")


def _restore(col, dtype: str | None) -> pd.Series:
    s = col if isinstance(col, pd.Series) else pd.Series(col)
    if dtype is None or str(s.dtype) == dtype:
        return s
    try:
        if dtype == "object":
            out = s.astype(object)
            return out.where(s.notna(), None)
        if dtype == "category" or dtype.startswith("category"):
            return s
        if dtype.startswith("datetime64[") and "," not in dtype and hasattr(s, "dt") and (
            getattr(s.dtype, "tz", None) is not None
        ):
            return s.dt.tz_convert("UTC").dt.tz_localize(None).astype(dtype)
        return s.astype(dtype)
    except (TypeError, ValueError):
        return s


def r_to_pandas(rdf) -> pd.DataFrame:
    """A pandas DataFrame from an R data.frame (types as in the module docstring)."""
    with r_session() as (ro, _):
        if "data.frame" not in list(ro.r["class"](rdf)):
            raise TypeError(f"r_to_pandas needs an R data.frame, got class {list(ro.r['class'](rdf))}.")
        names_r, has_rn, rownames, dtypes = _rfun(ro, "frame_info")(rdf)
        names = [str(x) for x in names_r]
        recorded = {}
        if dtypes is not ro.NULL and dtypes.names is not ro.NULL:
            recorded = dict(zip([str(x) for x in dtypes.names], [str(x) for x in dtypes],
                                strict=True))
        cols = {}
        for j, n in enumerate(names):
            cols[n] = _restore(_column_from_r(ro, rdf[j], n), recorded.get(n))
        nrow = int(ro.r["nrow"](rdf)[0])
        index = pd.Index([str(x) for x in rownames]) if has_rn[0] else pd.RangeIndex(nrow)
        return pd.DataFrame({n: c.set_axis(index) for n, c in cols.items()}, index=index)


# ------------------------------------------------------------------ reticulate (R package)
# The R package (rpkg/) does not let reticulate convert data.frames or numpy arrays:
# reticulate turns an integer NA into -2147483648 and a character NA into the string "NA",
# and reticulate builds older than 1.35 cannot exchange arrays with NumPy 2 at all. Each
# column crosses instead as raw bytes (R raw <-> Python bytearray, copied as a block):
# float64 values with missing entries zeroed, a one-byte-per-row missing mask, and the
# factor levels / time zone; strings cross as a list. These functions are the Python half.

def from_bytes(x: Any, dtype: str = "<f8") -> np.ndarray:
    """An array from R's raw bytes (``writeBin(x, raw(), endian = "little")``) or a sequence."""
    if isinstance(x, (bytes, bytearray, memoryview)):
        return np.frombuffer(bytes(x), dtype=dtype).copy()
    return np.asarray(x, dtype=dtype if dtype != "u1" else np.uint8).reshape(-1)


def to_bytes(x: np.ndarray, dtype: str = "<f8") -> bytearray:
    """Raw bytes for R (``readBin(x, "double", n, endian = "little")``; ``"u1"``: one byte
    per value, read with ``as.logical``)."""
    return bytearray(np.ascontiguousarray(np.asarray(x).reshape(-1, order="F"),
                                          dtype=dtype).tobytes())


def frame_from_parts(parts: list[dict], n: int) -> pd.DataFrame:
    """A DataFrame from R's column parts (``kind``, ``values``, ``na``, ``levels``, ...)."""
    cols: dict[str, Any] = {}
    for p in parts:
        name, kind = str(p["name"]), str(p["kind"])
        na = from_bytes(p["na"], "u1").astype(bool)
        if na.shape[0] != n:
            raise ValueError(f"column {name!r}: {na.shape[0]} missing flags for {n} rows.")
        if kind == "character":
            raw = p["values"]
            vals = np.array([raw] if isinstance(raw, str) else list(raw), dtype=object)
            vals = np.where(na, None, vals)
            col: Any = pd.Series(vals if n else np.array([], dtype=object))
        else:
            v = from_bytes(p["values"])
            if kind == "double":
                col = np.where(na, np.nan, v)
            elif kind == "integer":
                iv = np.where(na, 0, v).astype(np.int64)
                col = pd.arrays.IntegerArray(iv, na.copy()) if na.any() else iv
            elif kind == "logical":
                bv = np.where(na, 0, v).astype(bool)
                col = pd.arrays.BooleanArray(bv, na.copy()) if na.any() else bv
            elif kind == "factor":
                raw = p.get("levels") or []
                levels = [raw] if isinstance(raw, str) else [str(x) for x in raw]
                codes = np.where(na, -1, v.astype(np.int64) - 1)
                col = pd.Categorical.from_codes(codes, categories=levels,
                                                ordered=bool(p.get("ordered", False)))
            elif kind == "Date":
                out = np.full(n, np.datetime64("NaT"), dtype="datetime64[s]")
                out[~na] = np.round(v[~na] * 86400).astype(np.int64).astype("datetime64[s]")
                col = pd.Series(out)
            elif kind == "POSIXct":
                out = np.full(n, np.datetime64("NaT"), dtype="datetime64[us]")
                out[~na] = np.round(v[~na] * 1e6).astype(np.int64).astype("datetime64[us]")
                col = pd.Series(out)
                tz = str(p.get("tz") or "")
                if tz:
                    col = col.dt.tz_localize("UTC").dt.tz_convert(tz)
            else:
                raise ValueError(f"column {name!r}: unknown kind {kind!r}.")
        cols[name] = _restore(col, p.get("dtype") or None)
    index = pd.RangeIndex(n)
    return pd.DataFrame({k: v.set_axis(index) for k, v in cols.items()}, index=index)


def frame_to_parts(df: pd.DataFrame, portable: bool = True) -> list[dict]:
    """R column parts for a DataFrame (the reverse of :func:`frame_from_parts`).

    Same type mapping as :func:`pandas_to_r`; the R package rebuilds the data.frame.
    ``portable=True`` gives values and missing flags as bytes, strings as a list.
    """
    parts = []
    for j, name in enumerate(str(c) for c in df.columns):
        s = df.iloc[:, j]
        na = s.isna().to_numpy()
        dtype = s.dtype
        part: dict[str, Any] = {"name": name, "na": na, "dtype": str(dtype), "levels": [],
                                "ordered": False, "tz": ""}
        if isinstance(dtype, pd.CategoricalDtype):
            part.update(kind="factor", levels=[str(x) for x in dtype.categories],
                        ordered=bool(dtype.ordered),
                        values=(s.cat.codes.to_numpy() + 1).astype(np.float64))
        elif pd.api.types.is_bool_dtype(dtype):
            part.update(kind="logical",
                        values=s.to_numpy(dtype=np.float64, na_value=0.0))
        elif pd.api.types.is_integer_dtype(dtype):
            v = s.to_numpy(dtype=np.float64, na_value=0.0)
            small = bool((np.abs(v) <= _INT32_MAX).all())
            if not small and (np.abs(v) > _EXACT_DOUBLE).any():
                raise ValueError(f"column {name!r}: integers beyond 2^53 have no exact R type.")
            part.update(kind="integer" if small else "double", values=v)
        elif pd.api.types.is_float_dtype(dtype):
            part.update(kind="double", values=s.to_numpy(dtype=np.float64, na_value=0.0))
        elif pd.api.types.is_datetime64_any_dtype(dtype):
            tz = getattr(dtype, "tz", None)
            naive = s.dt.tz_convert("UTC").dt.tz_localize(None) if tz is not None else s
            us = naive.to_numpy().astype("datetime64[us]").astype(np.int64)
            us = np.where(na, 0, us)
            if tz is None and bool((us % (86400 * 10**6) == 0).all()):
                part.update(kind="Date", values=us / 86400e6)
            else:
                part.update(kind="POSIXct", values=us / 1e6, tz=str(tz) if tz else "UTC")
        elif pd.api.types.is_string_dtype(dtype) and pd.api.types.infer_dtype(
                s, skipna=True) in ("string", "empty"):
            vals = s.to_numpy(dtype=object, na_value="")
            part.update(kind="character", values=np.asarray(vals, dtype=str))
        else:
            raise ValueError(
                f"column {name!r} has dtype {dtype}, which has no R data.frame counterpart "
                "here. Fix: convert it to numbers, strings, a Categorical or datetime64 first."
            )
        if portable:
            part["na"] = to_bytes(na, "u1")
            if part["kind"] == "character":
                part["values"] = part["values"].tolist()
            else:
                part["values"] = to_bytes(part["values"])
        parts.append(part)
    return parts
