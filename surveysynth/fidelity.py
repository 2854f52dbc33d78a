"""Fidelity flags of a release: pile-up at public bounds, moved quantiles, moved correlations.

CONFIDENTIAL: every number here compares the release with the confidential data, so it goes to
the disclosure-review report (``confidential/report.html``) and never to ``public/``.

Issue 18, item 3: a KNG release of R's api data gave values piled up at the declared bounds and
corr(api99, api00) falling from 0.97 to 0.01, with nothing in the report to say so. A reviewer
reads three checks, each flagged against a stated threshold:

* **Bounds and types** (per synthesized variable and declared public bound): the share of
  synthetic values at the bound (within ``rtol`` relative of it, absolute ``rtol`` for a bound
  of 0), flagged when it exceeds ``bound_share`` (default 5%) *and* ``bound_ratio`` (default 3)
  times the confidential data's own share at that bound (data that truly sit at a bound, such as
  zero counts, are not a pile-up). Any synthetic value beyond a declared bound, and any
  non-whole synthetic value of an integer column, is flagged too (the synthesizers promise
  neither happens).
* **Quantiles** q10, q50, q90, q99 of each synthesized variable, synthetic against confidential:
  flagged when ``|q_syn - q_conf| / |q_conf|`` exceeds ``quantile_tol`` (default 25%; a
  confidential quantile of exactly 0 gives an infinite relative difference unless the synthetic
  one is 0 too, and the absolute difference is shown beside it).
* **Correlations** (Pearson) of every pair of synthesized variables and of every synthesized
  variable with every released numeric variable that was not synthesized: flagged when the
  synthetic correlation moves by more than ``corr_tol`` (default 0.2) from the confidential one.

Everything is weighted: the confidential data by the design weights, each synthetic set by its
released weights, so the numbers are the population estimates a user of the release would make.
The m synthetic sets are pooled (each set's weights sum to N, so every set counts equally);
pooling estimates the release's distribution, which is what a user's combined estimate targets.
Missing values are left out pair by pair (correlations) or variable by variable.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pandas as pd

from ._format import number

__all__ = ["PROBS", "Fidelity", "fidelity_flags", "release_fidelity", "weighted_corr",
           "weighted_quantile"]

#: the quantiles compared (the tails matter: issue 18 is about them)
PROBS = (0.10, 0.50, 0.90, 0.99)


@dataclass
class Fidelity:
    """The three checks as tables (each with a boolean ``flag`` column) and the warnings, one
    sentence per flag, for the top of the report."""

    bounds: pd.DataFrame
    quantiles: pd.DataFrame
    correlations: pd.DataFrame
    warnings: list[str] = field(default_factory=list)
    settings: dict[str, float] = field(default_factory=dict)

    @property
    def n_flags(self) -> int:
        return len(self.warnings)


def weighted_quantile(x: np.ndarray, w: np.ndarray, probs: Sequence[float]) -> np.ndarray:
    """Weighted quantiles: for each p the smallest x whose cumulative weight share is >= p
    (the inverse of the weighted ECDF; R's type 1 with equal weights). Non-finite x are left
    out; an empty column gives NaN."""
    x = np.asarray(x, dtype=float)
    w = np.asarray(w, dtype=float)
    ok = np.isfinite(x) & np.isfinite(w) & (w > 0)
    x, w = x[ok], w[ok]
    p = np.asarray(probs, dtype=float)
    if x.size == 0:
        return np.full(p.shape, np.nan)
    order = np.argsort(x, kind="stable")
    x, w = x[order], w[order]
    cum = np.cumsum(w) / w.sum()
    # guard the round-off of the cumulative sum: p = 1 must reach the last value
    idx = np.searchsorted(cum, p - 1e-12, side="left")
    return x[np.minimum(idx, x.size - 1)]


def weighted_corr(a: np.ndarray, b: np.ndarray, w: np.ndarray) -> float:
    """Weighted Pearson correlation over the records where a, b and w are finite; NaN when
    either variable is constant there or fewer than 2 records remain."""
    a = np.asarray(a, dtype=float)
    b = np.asarray(b, dtype=float)
    w = np.asarray(w, dtype=float)
    ok = np.isfinite(a) & np.isfinite(b) & np.isfinite(w) & (w > 0)
    if ok.sum() < 2:
        return float("nan")
    a, b, w = a[ok], b[ok], w[ok] / w[ok].sum()
    da, db = a - w @ a, b - w @ b
    va, vb = w @ (da * da), w @ (db * db)
    if va <= 0 or vb <= 0:
        return float("nan")
    return float(np.clip((w @ (da * db)) / math.sqrt(va * vb), -1.0, 1.0))


def _positive(value: Any, name: str, upper: float | None = None) -> float:
    try:
        v = float(value)
    except (TypeError, ValueError):
        raise ValueError(f"{name} must be a number; got {value!r}.") from None
    if not (v > 0 and math.isfinite(v)) or (upper is not None and v > upper):
        rng = f"(0, {upper:g}]" if upper is not None else "(0, inf)"
        raise ValueError(f"{name} = {value!r} is outside {rng}. Fix: a threshold in {rng}.")
    return v


def _numeric(frame: pd.DataFrame, col: str, what: str) -> np.ndarray:
    if col not in frame.columns:
        raise ValueError(f"{what}: column {col!r} is missing (columns: {list(frame.columns)[:15]}). "
                         "Fix: pass variables present in every frame.")
    x = frame[col]
    if pd.api.types.is_bool_dtype(x) or not pd.api.types.is_numeric_dtype(x):
        raise ValueError(f"{what}: column {col!r} is not numeric (dtype {x.dtype}). Fix: pass "
                         "numeric variables only.")
    return pd.to_numeric(x, errors="coerce").to_numpy(dtype=float, na_value=np.nan)


def _weights(w: Any, n: int, what: str) -> np.ndarray:
    if w is None:
        return np.ones(n)
    arr = np.asarray(w, dtype=float).ravel()
    if arr.size != n:
        raise ValueError(f"{what}: {arr.size} weights for {n} records. Fix: one weight per record.")
    bad = ~np.isfinite(arr) | (arr < 0)
    if bad.any():
        raise ValueError(f"{what}: weights must be finite and >= 0; not at rows "
                         f"{np.flatnonzero(bad)[:5].tolist()}.")
    return arr


def _pct(x: float) -> str:
    return f"{100 * x:.1f}%"


def fidelity_flags(
    confidential: pd.DataFrame,
    synthetic: Sequence[pd.DataFrame],
    synthesized: Sequence[str],
    *,
    weights: Any = None,
    synthetic_weights: Sequence[Any] | None = None,
    bounds: Mapping[str, tuple[float, float]] | None = None,
    integer: Sequence[str] = (),
    others: Sequence[str] = (),
    bound_share: float = 0.05,
    bound_ratio: float = 3.0,
    quantile_tol: float = 0.25,
    corr_tol: float = 0.2,
    probs: Sequence[float] = PROBS,
    rtol: float = 1e-9,
) -> Fidelity:
    """Compare a release with its confidential data (module docstring: the checks, thresholds
    and weighting). CONFIDENTIAL output.

    ``confidential``: the confidential records; ``synthetic``: the m synthetic sets;
    ``synthesized``: the numeric variables the synthesizer modelled; ``weights`` /
    ``synthetic_weights``: design weights of the confidential records and released weights of
    each set (None: equal); ``bounds``: the declared public bounds {variable: (lb, ub)};
    ``integer``: synthesized variables that are integer columns; ``others``: released numeric
    variables that were not synthesized (correlated with the synthesized ones). The inputs are
    not modified.
    """
    bound_share = _positive(bound_share, "bound_share", 1.0)
    bound_ratio = _positive(bound_ratio, "bound_ratio")
    quantile_tol = _positive(quantile_tol, "quantile_tol")
    corr_tol = _positive(corr_tol, "corr_tol", 2.0)
    rtol = _positive(rtol, "rtol")
    sets = list(synthetic)
    if not sets:
        raise ValueError("synthetic: no synthetic set given. Fix: pass the release's m frames.")
    synthesized = list(dict.fromkeys(synthesized))
    others = [c for c in dict.fromkeys(others) if c not in synthesized]
    bounds = dict(bounds or {})
    unknown = sorted(set(bounds) - set(synthesized))
    if unknown:
        raise ValueError(f"bounds given for {unknown}, which are not synthesized variables "
                         f"{synthesized}. Fix: bounds of synthesized variables only.")
    w_c = _weights(weights, len(confidential), "weights")
    sw = [None] * len(sets) if synthetic_weights is None else list(synthetic_weights)
    if len(sw) != len(sets):
        raise ValueError(f"synthetic_weights: {len(sw)} weight vectors for {len(sets)} sets.")
    w_s = np.concatenate([_weights(w, len(s), f"synthetic_weights[{k}]")
                          for k, (s, w) in enumerate(zip(sets, sw, strict=True))])
    cols = synthesized + others
    conf = {c: _numeric(confidential, c, "confidential") for c in cols}
    syn = {c: np.concatenate([_numeric(s, c, f"synthetic[{k}]") for k, s in enumerate(sets)])
           for c in cols}
    warns: list[str] = []

    bound_table = _bound_checks(conf, syn, w_c, w_s, synthesized, bounds, set(integer),
                                bound_share, bound_ratio, rtol, warns)
    q_table = _quantile_checks(conf, syn, w_c, w_s, synthesized, probs, quantile_tol, warns)
    c_table = _corr_checks(conf, syn, w_c, w_s, synthesized, others, corr_tol, warns)
    return Fidelity(bounds=bound_table, quantiles=q_table, correlations=c_table, warnings=warns,
                    settings={"bound_share": bound_share, "bound_ratio": bound_ratio,
                              "quantile_tol": quantile_tol, "corr_tol": corr_tol, "rtol": rtol})


def _bound_checks(conf, syn, w_c, w_s, synthesized, bounds, integer, bound_share, bound_ratio,
                  rtol, warns) -> pd.DataFrame:
    """Pile-up at, and values beyond, the declared bounds; non-whole values of integer columns."""
    rows = []
    for v in synthesized:
        xs, xc = syn[v], conf[v]
        fin_s, fin_c = np.isfinite(xs), np.isfinite(xc)
        tot_s, tot_c = w_s[fin_s].sum(), w_c[fin_c].sum()
        if v in integer:
            frac = fin_s & (xs != np.round(xs))
            if frac.any():
                warns.append(f"{v} is an integer column but {int(frac.sum()):,} synthetic values "
                             "are not whole numbers.")
        if v not in bounds:
            continue
        lb, ub = (float(b) for b in bounds[v])
        for side, b in (("lower", lb), ("upper", ub)):
            tol = rtol * max(abs(b), 1.0)
            at_s = w_s[fin_s & (np.abs(xs - b) <= tol)].sum() / tot_s if tot_s > 0 else np.nan
            at_c = w_c[fin_c & (np.abs(xc - b) <= tol)].sum() / tot_c if tot_c > 0 else np.nan
            beyond = (xs < b - tol) if side == "lower" else (xs > b + tol)
            out_s = w_s[fin_s & beyond].sum() / tot_s if tot_s > 0 else np.nan
            pile = bool(at_s > bound_share and at_s > bound_ratio * at_c)
            flag = pile or bool(out_s > 0)
            rows.append({"variable": v, "bound": side, "value": b, "confidential_at_bound": at_c,
                         "synthetic_at_bound": at_s, "synthetic_beyond_bound": out_s,
                         "flag": flag})
            if pile:
                warns.append(f"{_pct(at_s)} of the synthetic {v} values are at the declared "
                             f"{side} bound {number(b)} (confidential data: {_pct(at_c)}): values pile "
                             f"up at the bound (threshold {_pct(bound_share)} and "
                             f"{bound_ratio:g}x the data's share).")
            if out_s > 0:
                warns.append(f"{_pct(out_s)} of the synthetic {v} values lie beyond the "
                             f"declared {side} bound {number(b)}.")
    return pd.DataFrame(rows, columns=["variable", "bound", "value", "confidential_at_bound",
                                       "synthetic_at_bound", "synthetic_beyond_bound", "flag"])


def _quantile_checks(conf, syn, w_c, w_s, synthesized, probs, quantile_tol, warns) -> pd.DataFrame:
    """Weighted quantiles, synthetic against confidential."""
    rows = []
    p = np.asarray(probs, dtype=float)
    for v in synthesized:
        qc = weighted_quantile(conf[v], w_c, p)
        qs = weighted_quantile(syn[v], w_s, p)
        diff = qs - qc
        with np.errstate(divide="ignore", invalid="ignore"):
            rel = np.where(diff == 0, 0.0, np.abs(diff) / np.abs(qc))
        for k, pk in enumerate(p):
            flag = bool(rel[k] > quantile_tol)
            name = f"q{round(100 * pk):d}"
            rows.append({"variable": v, "quantile": name, "confidential": qc[k], "synthetic": qs[k],
                         "difference": diff[k], "relative_difference": rel[k], "flag": flag})
            if flag:
                warns.append(f"{name} of {v} is {number(qs[k])} in the release against {number(qc[k])} in "
                             f"the confidential data (relative difference {_pct(rel[k])} > "
                             f"{_pct(quantile_tol)}).")
    return pd.DataFrame(rows, columns=["variable", "quantile", "confidential", "synthetic",
                                       "difference", "relative_difference", "flag"])


def _corr_checks(conf, syn, w_c, w_s, synthesized, others, corr_tol, warns) -> pd.DataFrame:
    """Weighted correlations of the synthesized variables (with each other and the others)."""
    pairs = [(a, b) for i, a in enumerate(synthesized) for b in synthesized[i + 1:]]
    pairs += [(a, b) for a in synthesized for b in others]
    rows = []
    for a, b in pairs:
        rc = weighted_corr(conf[a], conf[b], w_c)
        rs = weighted_corr(syn[a], syn[b], w_s)
        drift = rs - rc
        flag = bool(abs(drift) > corr_tol)  # NaN (a constant variable) is not flagged
        rows.append({"variable_1": a, "variable_2": b,
                     "synthesized": "both" if b in synthesized else "first only",
                     "confidential": rc, "synthetic": rs, "change": drift, "flag": flag})
        if flag:
            warns.append(f"corr({a}, {b}) is {rs:.3f} in the release against {rc:.3f} in the "
                         f"confidential data (moved by {drift:+.3f}; threshold {corr_tol:g}).")
    return pd.DataFrame(rows, columns=["variable_1", "variable_2", "synthesized", "confidential",
                                       "synthetic", "change", "flag"])


def _is_number(col: pd.Series) -> bool:
    return pd.api.types.is_numeric_dtype(col) and not pd.api.types.is_bool_dtype(col)


def design_columns(design: Any) -> set[str]:
    """The columns that describe the sampling design (ids, strata, fpc, probabilities,
    weights, replicate weights): not survey variables, so not among the correlations."""
    out: set[str] = set()
    for attr in ("ids_vars", "strata_vars", "fpc_vars", "probs_vars", "repweights_vars"):
        v = getattr(design, attr, None)
        if isinstance(v, str):
            out.add(v)
        elif v is not None:
            out.update(str(x) for x in v)
    w = getattr(design, "weights_var", None)
    if isinstance(w, str):
        out.add(w)
    return out


def release_fidelity(design: Any, release: Any, modelled: Sequence[str],
                     bounds: Mapping[str, Any] | None = None, **thresholds: Any) -> Fidelity:
    """:func:`fidelity_flags` of a release against its confidential design.

    ``modelled``: the variables the synthesizer modelled (the numeric ones among them are
    checked, except the design's columns: a synthesized stratum code, PBP's, is design
    structure, not a quantity with quantiles and correlations); ``bounds``: the
    synthesizer's declared public bounds (entries for other variables are ignored). The integer columns are the checked variables with an integer dtype in the
    confidential data; the other released numeric variables enter the correlations, except
    the design's columns (:func:`design_columns`: ids, strata, fpc, weights, which are not
    survey variables: a correlation of salary with an fpc says nothing). ``thresholds``: ``bound_share``, ``bound_ratio``, ``quantile_tol``,
    ``corr_tol``, ``probs``, ``rtol``.
    """
    data = design.data
    frames = [d.data for d in release.designs]

    def numeric(c: str) -> bool:
        return (c in data.columns and _is_number(data[c])
                and all(c in f.columns and _is_number(f[c]) for f in frames))

    design_cols = design_columns(design)
    synthesized = [c for c in dict.fromkeys(modelled) if numeric(c) and c not in design_cols]
    weight_cols = {w for w in [getattr(design, "weights_var", None),
                               *(getattr(d, "weights_var", None) for d in release.designs)]
                   if isinstance(w, str)}
    others = [c for c in data.columns if c not in synthesized and c not in weight_cols
              and c not in design_cols and numeric(c)]
    declared = dict(bounds or {})
    checked = {v: tuple(declared[v]) for v in synthesized if v in declared}
    integer = [v for v in synthesized if pd.api.types.is_integer_dtype(data[v])]
    return fidelity_flags(data, frames, synthesized, weights=np.asarray(design.weights, float),
                          synthetic_weights=[np.asarray(d.weights, float) for d in release.designs],
                          bounds=checked, integer=integer, others=others, **thresholds)
