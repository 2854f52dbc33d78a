"""Identification risk of partially synthetic data: the measures (seed 002; METHODS.md 11).

* :func:`data_risk` — the risk of the confidential data itself, ``IR^c_i`` (seed 002 eq. 2);
* :func:`identification_risk` — the risk ``IR_i`` of a release of L synthetic sets (eq. 1,
  averaged over the sets), with ``IR^c`` and a summary (:class:`IdentificationRisk`);
* the input checks and the exact range-count kernel shared with the risk weights
  (:mod:`surveysynth.privacy.identification_weights`).

The weights live in :mod:`~surveysynth.privacy.identification_weights`; the curator's
diagnostics (whack-a-mole, plots, bootstrapped estimates) in
:mod:`~surveysynth.privacy.identification_report`. Every per-record quantity here is derived from
the confidential data: it is for the disclosure review and never part of a public release.

Definitions (with the Decisions of METHODS.md section 11)
--------------------------------------------------------
Known pattern p: the cross-classification of the intruder-known, unsynthesized variables
``known``; M_i is the set of records sharing record i's pattern, i itself included. The ball is
``B(y_i, r) = [y_i - r|y_i|, y_i + r|y_i|]``, closed (**Decision**: radius r|y_i| so that negative
values, e.g. business losses in income, get a proper ball; the paper writes r * y_i). Risk is
computed on the outcome's ORIGINAL scale, whatever scale a synthesizer models.

Computation
-----------
Nothing here is quadratic. Within a pattern, "y_h in B(y_i)" is a range query, so all counts are
obtained by sorting once and binary search (``np.searchsorted``) over a single integer key
``group * K + rank(value)`` that orders records by (pattern, value) exactly (ranks come from
``np.unique`` over the union of values and ball ends, so every comparison is the same floating
point comparison a direct loop would make). The pairwise weight uses the identity of METHODS.md:
with ``O_hi = 1{y_h not in B(y_i)}`` and ``C_h = sum_j O_hj``,

    sum_{j != i} IR^c_ij = (1/|M|) sum_h O_hi (C_h - 1),

and here both ``C_h`` (how many balls of the pattern miss y_h: a stabbing count, itself two range
counts over the sorted ball ends) and the sum over h outside B(y_i) (total minus a prefix-sum range
over h inside the ball) are range queries. Total cost O(n log n) time and O(n) memory for all
patterns at once, instead of the O(|M|^2) per pattern of the direct identity; the L synthetic sets
of :func:`identification_risk` are processed in blocks of sets so memory stays bounded
(``block_records``).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pandas as pd

from .._validate import parse_vars

__all__ = [
    "data_risk",
    "identification_risk",
    "IdentificationRisk",
    "risk_summary",
    "as_frame",
    "known_columns",
    "check_radius",
    "outcome_values",
    "check_known",
    "pattern_codes",
    "risk_counts",
    "risk_inputs",
]

# --------------------------------------------------------------------------------------------
# input handling
# --------------------------------------------------------------------------------------------


def as_frame(data: Any, name: str) -> pd.DataFrame:
    """The DataFrame behind a DataFrame or a SurveyDesign-like object (``.data``)."""
    if isinstance(data, pd.DataFrame):
        return data
    inner = getattr(data, "data", None)
    if isinstance(inner, pd.DataFrame):
        return inner
    raise ValueError(
        f"{name} must be a pandas DataFrame or a SurveyDesign (with a .data DataFrame); "
        f"got {type(data).__name__}."
    )


def known_columns(known: Any, argument: str = "known") -> list[str]:
    """Column names from None, a name, a list of names or a formula (``"~age+sex"``)."""
    if known is None:
        return []
    if isinstance(known, str):
        return parse_vars(known, argument) or []
    known = list(known)
    for k in known:
        if not isinstance(k, str):
            raise ValueError(f"known must be column names (str); got {k!r} of type {type(k).__name__}.")
    return known


def check_radius(r: Any) -> float:
    try:
        rv = float(r)
    except (TypeError, ValueError):
        raise ValueError(f"r must be a positive number (the ball radius as a fraction of |y_i|); got {r!r}.") from None
    if not np.isfinite(rv) or rv <= 0:
        raise ValueError(
            f"r must be a positive, finite fraction of |y_i| (e.g. r=0.2 for a 20% ball); got r={r!r}. "
            "With r <= 0 the ball B(y_i, r) holds only y_i itself and every record looks unique."
        )
    return rv


def outcome_values(frame: pd.DataFrame, outcome: str, name: str) -> np.ndarray:
    if not isinstance(outcome, str):
        raise ValueError(f"outcome must be one column name (str); got {outcome!r}.")
    if outcome not in frame.columns:
        raise ValueError(
            f"outcome column {outcome!r} is not in {name} (columns: {list(frame.columns)[:20]}); "
            "pass the name of the synthesized variable."
        )
    col = frame[outcome]
    if not (pd.api.types.is_numeric_dtype(col) and not pd.api.types.is_bool_dtype(col)):
        raise ValueError(f"outcome column {outcome!r} in {name} must be numeric; it has dtype {col.dtype}.")
    y = col.to_numpy(dtype=np.float64, na_value=np.nan)
    bad = ~np.isfinite(y)
    if bad.any():
        rows = frame.index[bad][:5].tolist()
        raise ValueError(
            f"outcome column {outcome!r} in {name} has missing or non-finite values in rows {rows} "
            f"({int(bad.sum())} in all); identification risk needs every value: drop or impute them first."
        )
    return y


def check_known(frame: pd.DataFrame, known: list[str], name: str) -> None:
    missing = [k for k in known if k not in frame.columns]
    if missing:
        raise ValueError(
            f"known-pattern variable(s) {missing} not found in {name}; available columns: "
            f"{list(frame.columns)[:30]}. Pass the names of the intruder-known, unsynthesized columns."
        )
    for k in known:
        na = frame[k].isna().to_numpy()
        if na.any():
            rows = frame.index[na][:5].tolist()
            raise ValueError(
                f"known-pattern variable {k!r} in {name} is missing in rows {rows} ({int(na.sum())} in "
                "all); patterns need a value for every record: recode missing as an explicit category "
                "(e.g. fillna('missing')) if the intruder sees it as one."
            )


def pattern_codes(frame: pd.DataFrame, known: list[str]) -> np.ndarray:
    """Integer pattern code 0..P-1 per record (one pattern when ``known`` is empty)."""
    if not known:
        return np.zeros(len(frame), dtype=np.int64)
    codes = frame.groupby(known, sort=True, observed=True, dropna=False).ngroup()
    return codes.to_numpy(dtype=np.int64)


def risk_inputs(
    data: Any, known: Sequence[str] | str | None, outcome: str, r: float, name: str
) -> tuple[pd.DataFrame, list[str], float, np.ndarray, np.ndarray]:
    """The checked inputs of every risk computation on the confidential ``data`` (called
    ``name`` in messages): (frame, known columns, radius r, outcome values y, pattern codes)."""
    frame = as_frame(data, name)
    known_l = known_columns(known)
    r = check_radius(r)
    check_known(frame, known_l, name)
    y = outcome_values(frame, outcome, name)
    return frame, known_l, r, y, pattern_codes(frame, known_l)


def ball(y: np.ndarray, r: float) -> tuple[np.ndarray, np.ndarray]:
    rad = r * np.abs(y)
    return y - rad, y + rad


# --------------------------------------------------------------------------------------------
# range-count kernel
# --------------------------------------------------------------------------------------------


def _grouped_sum_le(
    group_a: np.ndarray,
    vals_a: np.ndarray,
    group_q: np.ndarray,
    queries: Sequence[tuple[np.ndarray, str]],
    weights_a: np.ndarray | None = None,
) -> list[np.ndarray]:
    """For each query (values q, side) return per-query sums of ``weights_a`` over the items a of
    the same group with ``vals_a <= q`` (side "right") or ``vals_a < q`` (side "left").

    Exact: values are replaced by their rank among all values involved (``np.unique``), and items
    are ordered by the integer key ``group * K + rank``, so the binary search compares exactly the
    floats a direct loop would compare.
    """
    allv = np.concatenate([vals_a] + [q for q, _ in queries])
    _, inv = np.unique(allv, return_inverse=True)
    inv = inv.astype(np.int64)
    k = np.int64(inv.max() + 1) if inv.size else np.int64(1)
    gmax = int(max(group_a.max(initial=0), group_q.max(initial=0))) + 1
    if gmax * int(k) >= 2**62:
        raise ValueError("too many groups x distinct values for one block; lower block_records.")
    na = vals_a.size
    key_a = group_a.astype(np.int64) * k + inv[:na]
    order = np.argsort(key_a, kind="stable")
    key_sorted = key_a[order]
    if weights_a is None:
        csum = np.arange(na + 1, dtype=np.int64)
    else:
        csum = np.concatenate([[0], np.cumsum(weights_a[order])])
    start = np.searchsorted(key_sorted, group_q.astype(np.int64) * k, side="left")
    out = []
    pos = na
    for q, side in queries:
        rq = inv[pos : pos + q.size]
        pos += q.size
        idx = np.searchsorted(key_sorted, group_q.astype(np.int64) * k + rq, side=side)
        out.append(csum[idx] - csum[start])
    return out


def _in_ball_counts(group_pts, pts, group_q, lo, hi, weights=None):
    """Per query i: sum of weights of points in the same group with lo_i <= pt <= hi_i."""
    le_hi, lt_lo = _grouped_sum_le(group_pts, pts, group_q, [(hi, "right"), (lo, "left")], weights)
    return le_hi - lt_lo


def risk_counts(y: np.ndarray, codes: np.ndarray, r: float, pairwise: bool):
    """IR^c, pattern sizes and (optionally) the pairwise sums S_i = sum_{j != i} |M| IR^c_ij."""
    lo, hi = ball(y, r)
    size = np.bincount(codes)[codes]
    inside = _in_ball_counts(codes, y, codes, lo, hi)
    ir_c = (size - inside) / size
    if not pairwise:
        return ir_c, size, None
    # C_h: number of balls B(y_j), j in M_h, that miss y_h = |M| - #{j: lo_j <= y_h <= hi_j}
    lo_le = _grouped_sum_le(codes, lo, codes, [(y, "right")])[0]
    hi_lt = _grouped_sum_le(codes, hi, codes, [(y, "left")])[0]
    c = size - (lo_le - hi_lt)
    w = c - 1
    total = np.bincount(codes, weights=w.astype(np.float64))  # exact for counts < 2**53
    total = np.rint(total).astype(np.int64)[codes]
    inside_w = _in_ball_counts(codes, y, codes, lo, hi, weights=w)
    s = total - inside_w  # = sum_h O_hi (C_h - 1) = |M| * sum_{j != i} IR^c_ij
    return ir_c, size, s


# --------------------------------------------------------------------------------------------
# public: data risk and weights
# --------------------------------------------------------------------------------------------


def data_risk(data: Any, known: Sequence[str] | str | None, outcome: str, r: float = 0.2) -> np.ndarray:
    """Identification risk of the confidential data, ``IR^c_i`` (seed 002 eq. 2).

    ``IR^c_i = #{h in M_i: y_h not in B(y_i, r)} / |M_i|``: the share of records in i's known
    pattern whose value is NOT close to y_i. High when y_i is isolated within its pattern.

    Parameters
    ----------
    data : DataFrame or SurveyDesign (its ``.data``); never modified.
    known : intruder-known, unsynthesized columns forming the patterns ([] or None: one pattern).
    outcome : the sensitive (to be synthesized) numeric column, on its original scale.
    r : ball radius as a fraction of |y_i| (> 0).

    Returns
    -------
    float array of length n, in record order.
    """
    _, _, r, y, codes = risk_inputs(data, known, outcome, r, "data")
    return risk_counts(y, codes, r, pairwise=False)[0]



# --------------------------------------------------------------------------------------------
# public: risk of a release
# --------------------------------------------------------------------------------------------


def _synthetic_outcomes(
    synthetic: Any, original: pd.DataFrame, known: list[str], outcome: str
) -> np.ndarray:
    """(L, n) array of synthetic outcomes from a release, DataFrames or an array; checks that the
    rows correspond to the original's (partial synthesis: known columns unchanged)."""
    n = len(original)
    if isinstance(synthetic, np.ndarray):
        arr = np.asarray(synthetic, dtype=np.float64)
        if arr.ndim == 1:
            arr = arr[None, :]
        if arr.ndim != 2 or arr.shape[1] != n:
            raise ValueError(
                f"synthetic array must have shape (L, n) with n = {n} records; got {arr.shape}."
            )
        bad = ~np.isfinite(arr)
        if bad.any():
            l_bad, i_bad = np.nonzero(bad)
            raise ValueError(
                f"synthetic outcomes have non-finite values (set, record) {list(zip(l_bad[:5].tolist(), i_bad[:5].tolist(), strict=True))}."
            )
        return arr
    designs = getattr(synthetic, "designs", None)
    if designs is not None and not isinstance(synthetic, (pd.DataFrame, list, tuple)):
        frames = [as_frame(d, f"synthetic.designs[{k}]") for k, d in enumerate(designs)]
    elif isinstance(synthetic, (list, tuple)):
        frames = [as_frame(d, f"synthetic[{k}]") for k, d in enumerate(synthetic)]
    else:
        frames = [as_frame(synthetic, "synthetic")]
    if not frames:
        raise ValueError("synthetic holds no data sets; pass at least one synthetic data set.")
    out = np.empty((len(frames), n))
    for k, f in enumerate(frames):
        nm = f"synthetic set {k}"
        if len(f) != n:
            raise ValueError(
                f"{nm} has {len(f)} rows but the original has {n}: identification risk is defined for "
                "partially synthetic data whose rows correspond one-to-one to the original records."
            )
        check_known(f, known, nm)
        for col in known:
            a = original[col].to_numpy(dtype=object)
            b = f[col].to_numpy(dtype=object)
            diff = a != b
            if diff.any():
                rows = np.flatnonzero(diff)[:5].tolist()
                raise ValueError(
                    f"known variable {col!r} differs between the original and {nm} at positions {rows}: "
                    "known-pattern variables must be released unsynthesized and in the original row order."
                )
        out[k] = outcome_values(f, outcome, nm)
    return out


@dataclass
class IdentificationRisk:
    """Identification risk of a partially synthetic release (seed 002 eq. 1).

    Attributes
    ----------
    ir : per-record risk IR_i averaged over the L synthetic sets (length n, record order).
    ir_by_set : (L, n) array of IR_i^(l).
    data_risk : per-record risk of the confidential data IR^c_i.
    r, threshold, known, outcome : the settings used.

    These are per-record, confidential-data-derived quantities for the agency's own risk
    assessment: never publish them with a release.
    """

    ir: np.ndarray
    ir_by_set: np.ndarray
    data_risk: np.ndarray
    r: float
    threshold: float
    known: list[str] = field(default_factory=list)
    outcome: str = ""

    @property
    def L(self) -> int:  # noqa: N802 - the paper's symbol
        return int(self.ir_by_set.shape[0])

    def summary(self, quantiles: Sequence[float] = (0.25, 0.5, 0.75, 0.9, 0.99)) -> pd.DataFrame:
        """Mean, quantiles, IQR, max and the count/share above ``threshold`` for the data risk
        (row "data") and the release risk (row "synthetic")."""
        return risk_summary({"data": self.data_risk, "synthetic": self.ir}, self.threshold, quantiles)


def risk_summary(risks: Mapping[str, np.ndarray], threshold: float, quantiles: Sequence[float]) -> pd.DataFrame:
    rows = {}
    for name, v in risks.items():
        v = np.asarray(v, dtype=float)
        qs = np.quantile(v, list(quantiles))
        row = {"mean": v.mean()}
        row.update({f"q{round(q * 100):02d}": x for q, x in zip(quantiles, qs, strict=True)})
        row["iqr"] = float(np.quantile(v, 0.75) - np.quantile(v, 0.25))
        row["max"] = v.max()
        row[f"n_above_{threshold:g}"] = int((v > threshold).sum())
        row[f"share_above_{threshold:g}"] = float((v > threshold).mean())
        rows[name] = row
    return pd.DataFrame.from_dict(rows, orient="index")


def identification_risk(
    original: Any,
    synthetic: Any,
    known: Sequence[str] | str | None,
    outcome: str,
    r: float = 0.2,
    threshold: float = 0.5,
    block_records: int = 1_000_000,
) -> IdentificationRisk:
    """Per-record identification risk of L partially synthetic data sets (seed 002 eq. 1).

    For synthetic set l and record i, the intruder knows i's pattern and true value y_i and picks
    at random among the records of the pattern whose synthetic value lies in B(y_i, r):

        IR_i^(l) = #{h in M_i: y*_h^(l) not in B(y_i, r)} / |M_i| * T_i^(l),
        T_i^(l)  = 1{y*_i^(l) in B(y_i, r)},

    and ``IR_i`` is the mean over l. The data risk IR^c (eq. 2) is returned alongside.

    Parameters
    ----------
    original : confidential DataFrame or SurveyDesign; never modified.
    synthetic : a SyntheticRelease (its ``.designs``), a list of DataFrames / designs, one
        DataFrame, or an (L, n) array of synthetic outcomes. Rows must correspond one-to-one to the
        original (partial synthesis); known columns must be unchanged.
    known, outcome, r : as in :func:`risk_weights`.
    threshold : risk level counted by the summary (seed 002 uses 0.5).
    block_records : synthetic sets are processed in blocks of about this many (set, record) pairs
        to bound memory.

    Returns
    -------
    IdentificationRisk (``.ir``, ``.ir_by_set``, ``.data_risk``, ``.summary()``).
    """
    frame, known_l, r, y, codes = risk_inputs(original, known, outcome, r, "original")
    ys = _synthetic_outcomes(synthetic, frame, known_l, outcome)
    n_pat = int(codes.max()) + 1 if codes.size else 1
    ir_c, size, _ = risk_counts(y, codes, r, pairwise=False)
    lo, hi = ball(y, r)
    n_sets = ys.shape[0]
    n = y.size
    per_block = max(1, int(block_records) // max(n, 1))
    ir_by_set = np.empty((n_sets, n))
    for b0 in range(0, n_sets, per_block):
        b1 = min(n_sets, b0 + per_block)
        nb = b1 - b0
        grp = (np.arange(nb, dtype=np.int64)[:, None] * n_pat + codes[None, :]).ravel()
        pts = ys[b0:b1].ravel()
        inside = _in_ball_counts(grp, pts, grp, np.tile(lo, nb), np.tile(hi, nb)).reshape(nb, n)
        t = (ys[b0:b1] >= lo) & (ys[b0:b1] <= hi)
        ir_by_set[b0:b1] = (size - inside) / size * t
    return IdentificationRisk(
        ir=ir_by_set.mean(axis=0),
        ir_by_set=ir_by_set,
        data_risk=ir_c,
        r=r,
        threshold=float(threshold),
        known=known_l,
        outcome=outcome,
    )


