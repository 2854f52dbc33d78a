"""Identification risk of partially synthetic data and identification-risk weights.

Implements METHODS.md section 11 (Hu, Savitsky & Williams, "Risk-Efficient Bayesian Data
Synthesis for Privacy Protection", seed 002):

* :func:`risk_weights` — per-record weights alpha in [0, 1] from the identification risk of the
  CONFIDENTIAL data: marginal ``alpha^m_i = 1 - IR^c_i`` (seed 002 eq. 3) or pairwise
  ``alpha^pw_i = 1 - sum_{j != i} IR^c_ij / (|M| - 1)`` (eqs. 6-9);
* :func:`data_risk` — the data risk ``IR^c_i`` itself (eq. 2);
* :func:`identification_risk` — the risk ``IR_i`` of a release of L synthetic sets (eq. 1, averaged
  over the sets), together with ``IR^c`` and a summary;
* :func:`whack_a_mole` — records whose risk rises by at least 0.25 under a weighted synthesizer
  against the unweighted one (seed 002 Figs. 3, 5b, 9) and counts above 0.5;
* :func:`plot_whack_a_mole`, :func:`plot_risk_violins` — the pictures of seed 002 Figs. 2, 3, 8, 9;
* :func:`bootstrap_estimates` — bootstrapped point estimates and 95% intervals of the mean, median
  and 90% quantile of the outcome, as seed 002 Tables 4 and 6 report them.

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
from typing import Any, Literal

import numpy as np
import pandas as pd

__all__ = [
    "risk_weights",
    "data_risk",
    "identification_risk",
    "IdentificationRisk",
    "whack_a_mole",
    "WhackAMole",
    "plot_whack_a_mole",
    "plot_risk_violins",
    "bootstrap_estimates",
]


# --------------------------------------------------------------------------------------------
# input handling
# --------------------------------------------------------------------------------------------


def _frame(data: Any, name: str) -> pd.DataFrame:
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


def _known_list(known: Any) -> list[str]:
    if known is None:
        return []
    if isinstance(known, str):
        return [known]
    known = list(known)
    for k in known:
        if not isinstance(k, str):
            raise ValueError(f"known must be column names (str); got {k!r} of type {type(k).__name__}.")
    return known


def _check_r(r: Any) -> float:
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


def _outcome_values(frame: pd.DataFrame, outcome: str, name: str) -> np.ndarray:
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


def _check_known_present(frame: pd.DataFrame, known: list[str], name: str) -> None:
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


def _pattern_codes(frame: pd.DataFrame, known: list[str]) -> np.ndarray:
    """Integer pattern code 0..P-1 per record (one pattern when ``known`` is empty)."""
    if not known:
        return np.zeros(len(frame), dtype=np.int64)
    codes = frame.groupby(known, sort=True, observed=True, dropna=False).ngroup()
    return codes.to_numpy(dtype=np.int64)


def _ball(y: np.ndarray, r: float) -> tuple[np.ndarray, np.ndarray]:
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


def _core(y: np.ndarray, codes: np.ndarray, r: float, pairwise: bool):
    """IR^c, pattern sizes and (optionally) the pairwise sums S_i = sum_{j != i} |M| IR^c_ij."""
    lo, hi = _ball(y, r)
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
    frame = _frame(data, "data")
    known_l = _known_list(known)
    r = _check_r(r)
    _check_known_present(frame, known_l, "data")
    y = _outcome_values(frame, outcome, "data")
    codes = _pattern_codes(frame, known_l)
    return _core(y, codes, r, pairwise=False)[0]


def risk_weights(
    data: Any,
    known: Sequence[str] | str | None,
    outcome: str,
    r: float = 0.2,
    kind: Literal["marginal", "pairwise"] = "marginal",
    scale: float = 1.0,
    shift: float = 0.0,
    on_singleton: Literal["raise", "marginal"] = "raise",
) -> np.ndarray:
    """Identification-risk weights alpha_i in [0, 1] for a risk-weighted pseudo posterior.

    ``kind="marginal"``: ``alpha^m_i = 1 - IR^c_i`` (seed 002 eq. 3).
    ``kind="pairwise"``: ``alpha^pw_i = 1 - sum_{j in M_i, j != i} IR^c_ij / (|M_i| - 1)`` with the
    joint risk ``IR^c_ij = #{h in M: y_h outside both B(y_i) and B(y_j)} / |M|`` (eqs. 6-9). The
    pairwise weight ties records together (a risky record whose neighbours are also risky is
    downweighted less) and always satisfies ``alpha^pw_i >= alpha^m_i``.

    Both are then adjusted as ``alpha = clip(scale * alpha + shift, 0, 1)`` (METHODS.md section 11;
    defaults leave them unchanged; seed 002's supplement uses such adjustments to trade utility
    for risk).

    A pattern with a single record has ``IR^c = 0`` (alpha^m = 1) but no pairs, so its pairwise
    weight is undefined (0/0). ``on_singleton="raise"`` (default) raises a ValueError naming those
    records; ``on_singleton="marginal"`` gives them the marginal weight (1, before adjustment) —
    the record is alone in its pattern, so the intruder's guess is certain anyway; downweighting its
    outcome cannot change that, which is why the paper's CE patterns have no singletons.

    Parameters
    ----------
    data : DataFrame or SurveyDesign; never modified.
    known : intruder-known pattern columns ([] or None: all records form one pattern).
    outcome : numeric column, original scale.
    r : ball radius as a fraction of |y_i|; must be > 0.
    kind, scale, shift, on_singleton : see above.

    Returns
    -------
    float array alpha of length n, in record order. Keep it on the fit object: it must never be
    released.
    """
    if kind not in ("marginal", "pairwise"):
        raise ValueError(f"kind must be 'marginal' or 'pairwise'; got {kind!r}.")
    if on_singleton not in ("raise", "marginal"):
        raise ValueError(f"on_singleton must be 'raise' or 'marginal'; got {on_singleton!r}.")
    scale_f, shift_f = float(scale), float(shift)
    if not (np.isfinite(scale_f) and np.isfinite(shift_f)):
        raise ValueError(f"scale and shift must be finite numbers; got scale={scale!r}, shift={shift!r}.")
    frame = _frame(data, "data")
    known_l = _known_list(known)
    r = _check_r(r)
    _check_known_present(frame, known_l, "data")
    y = _outcome_values(frame, outcome, "data")
    codes = _pattern_codes(frame, known_l)
    ir_c, size, s = _core(y, codes, r, pairwise=(kind == "pairwise"))
    if kind == "marginal":
        alpha = 1.0 - ir_c
    else:
        single = size == 1
        if single.any() and on_singleton == "raise":
            rows = frame.index[single][:5].tolist()
            pats = frame.loc[single, known_l].head(3).to_dict("records") if known_l else []
            raise ValueError(
                f"{int(single.sum())} record(s) are alone in their known pattern (rows {rows}, first shown; "
                f"patterns {pats}): the pairwise weight needs at least one other record in the pattern "
                "and is undefined (0/0) for them. Use kind='marginal', or on_singleton='marginal' to give "
                "these records their marginal weight, or coarsen the known variables."
            )
        denom = size * (size - 1.0)
        with np.errstate(divide="ignore", invalid="ignore"):
            alpha = np.where(single, 1.0 - ir_c, 1.0 - s / np.where(single, 1.0, denom))
    return np.clip(scale_f * alpha + shift_f, 0.0, 1.0)


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
        frames = [_frame(d, f"synthetic.designs[{k}]") for k, d in enumerate(designs)]
    elif isinstance(synthetic, (list, tuple)):
        frames = [_frame(d, f"synthetic[{k}]") for k, d in enumerate(synthetic)]
    else:
        frames = [_frame(synthetic, "synthetic")]
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
        _check_known_present(f, known, nm)
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
        out[k] = _outcome_values(f, outcome, nm)
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
        return _risk_summary({"data": self.data_risk, "synthetic": self.ir}, self.threshold, quantiles)


def _risk_summary(risks: Mapping[str, np.ndarray], threshold: float, quantiles: Sequence[float]) -> pd.DataFrame:
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
    frame = _frame(original, "original")
    known_l = _known_list(known)
    r = _check_r(r)
    _check_known_present(frame, known_l, "original")
    y = _outcome_values(frame, outcome, "original")
    ys = _synthetic_outcomes(synthetic, frame, known_l, outcome)
    codes = _pattern_codes(frame, known_l)
    n_pat = int(codes.max()) + 1 if codes.size else 1
    ir_c, size, _ = _core(y, codes, r, pairwise=False)
    lo, hi = _ball(y, r)
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


# --------------------------------------------------------------------------------------------
# whack-a-mole
# --------------------------------------------------------------------------------------------


def _risk_vector(x: Any, name: str) -> np.ndarray:
    v = x.ir if isinstance(x, IdentificationRisk) else np.asarray(x, dtype=float)
    if v.ndim != 1:
        raise ValueError(f"{name} must be a 1-D per-record risk vector or an IdentificationRisk.")
    if not np.isfinite(v).all():
        raise ValueError(f"{name} has non-finite risks at positions {np.flatnonzero(~np.isfinite(v))[:5].tolist()}.")
    return v


@dataclass
class WhackAMole:
    """Whack-a-mole diagnostic (seed 002 Section 2.3.2): records made riskier by weighting.

    Attributes
    ----------
    rise_records : positions of records whose IR rose by at least ``rise`` from the unweighted to
        the weighted synthesizer.
    n_rise : their number.
    n_above_weighted / n_above_unweighted : records with IR > ``threshold`` under each.
    mean_weighted / mean_unweighted : mean IR.
    n_below_diagonal : records whose IR fell (weighted < unweighted).
    """

    weighted: np.ndarray
    unweighted: np.ndarray
    rise: float
    threshold: float
    rise_records: np.ndarray
    n_rise: int
    n_above_weighted: int
    n_above_unweighted: int
    mean_weighted: float
    mean_unweighted: float
    n_below_diagonal: int

    def as_dict(self) -> dict[str, float]:
        """The numbers (no per-record values)."""
        return {
            "rise": self.rise,
            "threshold": self.threshold,
            "n_rise": self.n_rise,
            "n_above_weighted": self.n_above_weighted,
            "n_above_unweighted": self.n_above_unweighted,
            "mean_weighted": self.mean_weighted,
            "mean_unweighted": self.mean_unweighted,
            "n_below_diagonal": self.n_below_diagonal,
        }

    def plot(self, ax: Any = None, labels: tuple[str, str] = ("Synthesizer", "Marginal")) -> Any:
        """Scatter plot of seed 002 Figs. 3 / 9 (see :func:`plot_whack_a_mole`)."""
        return plot_whack_a_mole(self.weighted, self.unweighted, self.rise, self.threshold, ax=ax, labels=labels)


def whack_a_mole(weighted: Any, unweighted: Any, rise: float = 0.25, threshold: float = 0.5) -> WhackAMole:
    """Compare per-record risks of a weighted synthesizer with the unweighted one.

    ``weighted`` / ``unweighted``: per-record IR vectors (same records, same order) or
    :class:`IdentificationRisk` objects. Counts the records whose risk rises by at least ``rise``
    (seed 002 highlights a rise of 0.25) and those above ``threshold`` (0.5 in the paper).
    """
    w = _risk_vector(weighted, "weighted")
    u = _risk_vector(unweighted, "unweighted")
    if w.shape != u.shape:
        raise ValueError(f"weighted and unweighted risks must have the same length; got {w.size} and {u.size}.")
    # tolerance so that a rise of exactly 0.25 (e.g. 0.5 - 0.25 in floating point) counts
    up = np.flatnonzero(w - u >= rise - 1e-12)
    return WhackAMole(
        weighted=w,
        unweighted=u,
        rise=float(rise),
        threshold=float(threshold),
        rise_records=up,
        n_rise=int(up.size),
        n_above_weighted=int((w > threshold).sum()),
        n_above_unweighted=int((u > threshold).sum()),
        mean_weighted=float(w.mean()),
        mean_unweighted=float(u.mean()),
        n_below_diagonal=int((w < u).sum()),
    )


# --------------------------------------------------------------------------------------------
# plots (matplotlib Figure objects, no pyplot state)
# --------------------------------------------------------------------------------------------


def _new_axes(ax: Any, figsize: tuple[float, float]):
    if ax is not None:
        return ax.figure, ax
    from matplotlib.figure import Figure

    fig = Figure(figsize=figsize, layout="constrained")
    return fig, fig.subplots()


def plot_whack_a_mole(
    weighted: Any,
    unweighted: Any,
    rise: float = 0.25,
    threshold: float = 0.5,
    ax: Any = None,
    labels: tuple[str, str] = ("Synthesizer", "Marginal"),
) -> Any:
    """Scatter of per-record IR, weighted (y) against unweighted (x), as seed 002 Figs. 3 and 9:
    the y = x line, records whose risk rose by >= ``rise`` enlarged and highlighted, and the
    ``threshold`` line. Returns the matplotlib Figure."""
    wm = whack_a_mole(weighted, unweighted, rise, threshold)
    fig, ax = _new_axes(ax, (5.0, 5.0))
    hit = np.zeros(wm.weighted.size, dtype=bool)
    hit[wm.rise_records] = True
    ax.scatter(wm.unweighted[~hit], wm.weighted[~hit], s=6, c="0.35", alpha=0.5, label="records")
    ax.scatter(
        wm.unweighted[hit], wm.weighted[hit], s=28, c="gold", edgecolors="k", linewidths=0.4,
        label=f"rise >= {rise:g} ({wm.n_rise})",
    )
    ax.plot([0, 1], [0, 1], color="tab:blue", lw=1)
    ax.axhline(threshold, color="tab:red", lw=0.8, ls="--", label=f"IR = {threshold:g} ({wm.n_above_weighted} above)")
    ax.set_xlim(-0.02, 1.02)
    ax.set_ylim(-0.02, 1.02)
    ax.set_xlabel(f"IR, {labels[0]}")
    ax.set_ylabel(f"IR, {labels[1]}")
    ax.legend(loc="upper left", fontsize=8)
    return fig


def plot_risk_violins(risks: Mapping[str, Any], ax: Any = None, title: str | None = None) -> Any:
    """Violin plots of per-record risk distributions (seed 002 Figs. 2, 5a, 8) with a horizontal
    bar at the mean. ``risks``: label -> per-record IR vector or IdentificationRisk."""
    if not risks:
        raise ValueError("risks is empty; pass e.g. {'Data': ..., 'Synthesizer': ..., 'Marginal': ...}.")
    vals = [_risk_vector(v, f"risks[{k!r}]") for k, v in risks.items()]
    fig, ax = _new_axes(ax, (1.6 + 1.3 * len(vals), 4.0))
    pos = np.arange(1, len(vals) + 1)
    parts = ax.violinplot(vals, positions=pos, showextrema=False, widths=0.8)
    for body in parts["bodies"]:
        body.set_alpha(0.6)
    means = [v.mean() for v in vals]
    ax.hlines(means, pos - 0.3, pos + 0.3, colors="k", lw=2)
    ax.set_xticks(pos, list(risks.keys()))
    ax.set_ylabel("identification risk")
    ax.set_ylim(-0.02, 1.02)
    if title:
        ax.set_title(title)
    return fig


# --------------------------------------------------------------------------------------------
# bootstrapped utility estimates (seed 002 Tables 4 and 6)
# --------------------------------------------------------------------------------------------

_STATS = {
    "mean": lambda a: a.mean(axis=-1),
    "median": lambda a: np.median(a, axis=-1),
}


def _stat_fn(name: str):
    if name in _STATS:
        return _STATS[name]
    if name.startswith("q"):
        try:
            q = float(name[1:]) / 100.0
        except ValueError:
            q = -1.0
        if 0.0 < q < 1.0:
            return lambda a: np.quantile(a, q, axis=-1)
    raise ValueError(f"unknown statistic {name!r}; use 'mean', 'median' or 'qNN' (e.g. 'q90').")


def bootstrap_estimates(
    original: Any,
    synthetic: Any,
    outcome: str,
    statistics: Sequence[str] = ("mean", "median", "q90"),
    B: int = 1000,  # noqa: N803 - the usual symbol
    level: float = 0.95,
    seed: int | np.random.Generator | None = None,
    labels: tuple[str, str] = ("Data", "Synthetic"),
) -> pd.DataFrame:
    """Bootstrapped point estimates and percentile intervals, as seed 002 Tables 4 and 6.

    Data: the statistic on the original outcome, with the percentile interval of ``B`` bootstrap
    resamples of records. Synthetic (L sets): the point estimate is the mean of the statistic over
    the L sets (seed 002 Section 2.4.4); the interval is the percentile interval of the pooled
    bootstrap replicates, ``B`` resamples of each set (**Decision**: the paper says only "obtained
    through bootstrapping"; pooling the sets' bootstrap distributions carries the between-set
    variability into the interval, which matches its Table 6 where L = 1 gives data-like lengths and
    larger L longer ones). Unweighted (simple random) resampling of records, as the paper's tables.

    Returns a DataFrame with columns ``source, statistic, estimate, ci_low, ci_high, length``.
    """
    frame = _frame(original, "original")
    y = _outcome_values(frame, outcome, "original")
    if isinstance(synthetic, np.ndarray):
        ys = list(np.atleast_2d(np.asarray(synthetic, dtype=float)))
    else:
        if getattr(synthetic, "designs", None) is not None and not isinstance(synthetic, (list, tuple, pd.DataFrame)):
            items = list(synthetic.designs)
        elif isinstance(synthetic, (list, tuple)):
            items = list(synthetic)
        else:
            items = [synthetic]
        ys = []
        for k, d in enumerate(items):
            if isinstance(d, (np.ndarray, pd.Series)):
                v = np.asarray(d, dtype=float)
                if v.ndim != 1 or not np.isfinite(v).all():
                    raise ValueError(f"synthetic[{k}] must be a finite 1-D array of outcome values.")
                ys.append(v)
            else:
                ys.append(_outcome_values(_frame(d, f"synthetic[{k}]"), outcome, f"synthetic[{k}]"))
    if not ys:
        raise ValueError("synthetic holds no data sets.")
    if int(B) < 10:
        raise ValueError(f"B must be at least 10 bootstrap resamples; got {B}.")
    if not 0 < level < 1:
        raise ValueError(f"level must be in (0, 1); got {level}.")
    rng = np.random.default_rng(seed)
    fns = {s: _stat_fn(s) for s in statistics}
    a = (1 - level) / 2
    rows = []

    def boot(v: np.ndarray) -> dict[str, np.ndarray]:
        idx = rng.integers(0, v.size, size=(int(B), v.size))
        res = v[idx]
        return {s: f(res) for s, f in fns.items()}

    bd = boot(y)
    for s, f in fns.items():
        lo_, hi_ = np.quantile(bd[s], [a, 1 - a])
        rows.append((labels[0], s, float(f(y)), lo_, hi_))
    pooled = {s: [] for s in fns}
    point = {s: [] for s in fns}
    for v in ys:
        v = np.asarray(v, dtype=float)
        b = boot(v)
        for s, f in fns.items():
            pooled[s].append(b[s])
            point[s].append(float(f(v)))
    for s in fns:
        lo_, hi_ = np.quantile(np.concatenate(pooled[s]), [a, 1 - a])
        rows.append((labels[1], s, float(np.mean(point[s])), lo_, hi_))
    out = pd.DataFrame(rows, columns=["source", "statistic", "estimate", "ci_low", "ci_high"])
    out["length"] = out["ci_high"] - out["ci_low"]
    return out
