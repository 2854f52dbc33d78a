"""Shared pieces of the public-use studies (issue 22): metrics, the CART baseline, binning.

Used by ``vignettes/public_use_simulation.py``, ``vignettes/public_use_agency.py`` and
``benchmarks/sequential.py``; tested in ``tests/test_public_use_studies.py``.

* :func:`cart_synthesize` -- synthpop's default method written with scikit-learn's trees: the
  first variable is drawn from its observed marginal ("sample"), each later variable from the
  donors of the leaf its synthetic predictors fall in (a tree fitted on the confidential data,
  ``min_samples_leaf=5`` and ``min_samples_split=15`` as rpart's ``minbucket = 5``; leaves of
  the tree grown to them, rpart's ``cp = 1e-8``). No privacy guarantee: every synthetic value is
  a confidential value.
* :func:`bin_codes` / :func:`unbin` -- continuous columns to public quantile bins and back
  (a uniform draw inside the bin; integer columns stay integers), for the DP baselines that
  model only categorical data.
* :func:`k_marginal` -- NIST CRC k-marginal score on binned (coded) columns:
  ``1000 * (1 - TVD / 2 ...)`` averaged over every k-subset (see its docstring).
* :func:`pmse_with_ratio` -- pMSE with pairwise interactions
  (:func:`surveysynth.synthetic_utility.pmse`) and the pMSE ratio of Snoke et al. (2018).
* :func:`combined_means` -- means and their combined inference over m synthetic designs.

Existing measures are reused (``surveysynth.synthetic_utility``: ``pmse``, ``ci_overlap``);
``k_marginal_score`` there bins every column at the original's quartiles, which merges the
categories of a coded column, so the coded version is here.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from itertools import combinations
from typing import Any

import numpy as np
import pandas as pd

from surveysynth.combine import combine_sets
from surveysynth.synthetic_utility import ci_overlap, pmse

__all__ = ["cart_synthesize", "bin_codes", "unbin", "k_marginal", "numeric_matrix",
           "pmse_with_ratio", "combined_means", "overlap", "md_table"]


# ------------------------------------------------------------------------------ formatting
def md_table(df: pd.DataFrame, index: bool = False, digits: int = 4) -> str:
    """A GitHub pipe table; floats to ``digits`` significant digits."""
    d = df.reset_index() if index else df

    def fmt(v: Any) -> str:
        if isinstance(v, (float, np.floating)):
            return "" if np.isnan(v) else f"{v:.{digits}g}"
        return str(v)

    lines = ["| " + " | ".join(map(str, d.columns)) + " |", "|" + "---|" * d.shape[1]]
    lines += ["| " + " | ".join(fmt(v) for v in row) + " |" for row in d.itertuples(index=False)]
    return "\n".join(lines)


# ------------------------------------------------------------------------------ CART baseline
def _encode(frame: pd.DataFrame, cols: Sequence[str], categories: Mapping[str, list]) -> np.ndarray:
    """Predictor matrix for a tree: numeric columns as floats, categorical ones one-hot on the
    confidential data's categories (fixed, so original and synthetic matrices line up)."""
    parts = []
    for c in cols:
        if c in categories:
            codes = pd.Index(categories[c]).get_indexer(frame[c].to_numpy())
            parts.append((codes[:, None] == np.arange(len(categories[c]))[None, :]).astype(float))
        else:
            parts.append(frame[c].to_numpy(dtype=float)[:, None])
    return np.hstack(parts) if parts else np.empty((len(frame), 0))


def _leaf_donors(leaf_orig: np.ndarray, leaf_syn: np.ndarray, rng: np.random.Generator) -> np.ndarray:
    """For each synthetic record, the index of a confidential record drawn uniformly from the
    records of the same leaf (vectorized: records sorted by leaf, one uniform per draw)."""
    order = np.argsort(leaf_orig, kind="stable")
    uniq, start, count = np.unique(leaf_orig[order], return_index=True, return_counts=True)
    pos = np.searchsorted(uniq, leaf_syn)
    if np.any(pos >= len(uniq)) or np.any(uniq[np.minimum(pos, len(uniq) - 1)] != leaf_syn):
        raise RuntimeError("a synthetic record fell in a leaf with no confidential donor.")
    draw = np.floor(rng.random(len(leaf_syn)) * count[pos]).astype(np.int64)
    return order[start[pos] + draw]


def cart_synthesize(data: pd.DataFrame, columns: Sequence[str], categorical: Sequence[str],
                    rng: np.random.Generator, m: int = 5, min_leaf: int = 5,
                    n: int | None = None) -> list[pd.DataFrame]:
    """m fully synthetic copies of ``data[columns]`` by sequential CART (synthpop's default).

    Visit sequence = ``columns``. Column 1: a bootstrap draw of its observed values. Column j:
    a tree (classifier for categorical, regressor otherwise) of the confidential column j on the
    confidential columns before it; each synthetic record goes down the tree with its
    *synthetic* earlier values and takes the value of a donor drawn uniformly from its leaf.
    Why donors and not the leaf mean: synthpop's ``syn.cart`` does so (the leaf's empirical
    distribution, so within-leaf spread is kept). No privacy: values are confidential values.
    """
    from sklearn.tree import DecisionTreeClassifier, DecisionTreeRegressor

    missing = [c for c in columns if c not in data.columns]
    if missing:
        raise ValueError(f"cart_synthesize: columns {missing} are not in the data.")
    nas = data[list(columns)].isna().any(axis=1)
    if nas.any():
        raise ValueError(f"cart_synthesize: missing values in rows {np.flatnonzero(nas)[:5].tolist()}; "
                         "drop or impute them first (CART here does not model missingness).")
    n = len(data) if n is None else int(n)
    cats = {c: list(pd.Categorical(data[c]).categories) for c in categorical}
    out = []
    for _ in range(m):
        syn = pd.DataFrame(index=range(n))
        first = columns[0]
        syn[first] = data[first].to_numpy()[rng.integers(0, len(data), n)]
        for j, col in enumerate(columns[1:], start=1):
            prev = list(columns[:j])
            X_o, X_s = _encode(data, prev, cats), _encode(syn, prev, cats)
            Tree = DecisionTreeClassifier if col in cats else DecisionTreeRegressor
            y = data[col].astype(str).to_numpy() if col in cats else data[col].to_numpy(dtype=float)
            tree = Tree(min_samples_leaf=min_leaf, min_samples_split=3 * min_leaf,
                        random_state=int(rng.integers(2**31 - 1))).fit(X_o, y)
            donors = _leaf_donors(tree.apply(X_o), tree.apply(X_s), rng)
            syn[col] = data[col].to_numpy()[donors]
        for c in cats:
            syn[c] = pd.Categorical(syn[c], categories=cats[c])
        out.append(syn)
    return out


# ------------------------------------------------------------------------------ binning
def bin_codes(frame: pd.DataFrame, edges: Mapping[str, np.ndarray],
              categories: Mapping[str, list]) -> pd.DataFrame:
    """Integer codes of each column: categorical columns by their fixed category list,
    continuous columns by the public ``edges`` (bins ``[e_k, e_{k+1})``, the last one closed;
    values outside the outer edges go to the outer bins)."""
    out = {}
    for c, cat in categories.items():
        codes = pd.Index([str(x) for x in cat]).get_indexer(frame[c].astype(str).to_numpy())
        if (codes < 0).any():
            bad = np.flatnonzero(codes < 0)[:5].tolist()
            raise ValueError(f"bin_codes: column {c!r} has values outside {cat} in rows {bad}.")
        out[c] = codes.astype(np.int64)
    for c, e in edges.items():
        x = frame[c].to_numpy(dtype=float)
        out[c] = np.clip(np.searchsorted(np.asarray(e)[1:-1], x, side="right"), 0, len(e) - 2)
    return pd.DataFrame(out, index=frame.index)[[c for c in frame.columns if c in out]]


def unbin(codes: pd.DataFrame, edges: Mapping[str, np.ndarray], integer: Sequence[str],
          rng: np.random.Generator,
          reference: Mapping[str, np.ndarray] | None = None) -> pd.DataFrame:
    """Values from bin codes: a uniform draw inside each record's bin ``[lo, hi)`` (integer
    columns: a uniform integer in ``lo .. hi - 1``, the last bin including ``hi``); or, for the
    columns in ``reference`` (public values, e.g. a population frame), a draw from the
    reference values that fall in the record's bin (uniform where a bin holds none)."""
    out = codes.copy()
    for c, e in edges.items():
        e = np.asarray(e, dtype=float)
        k = codes[c].to_numpy(dtype=np.int64)
        lo, hi = e[k], e[k + 1]
        if reference is not None and c in reference:
            ref = np.sort(np.asarray(reference[c], dtype=float))
            rk = np.clip(np.searchsorted(e[1:-1], ref, side="right"), 0, len(e) - 2)
            start = np.searchsorted(rk, np.arange(len(e) - 1), side="left")
            count = np.bincount(rk, minlength=len(e) - 1)
            pick = start[k] + np.floor(rng.random(len(k)) * count[k]).astype(np.int64)
            has = count[k] > 0
            vals = lo + rng.random(len(k)) * (hi - lo)
            vals[has] = ref[pick[has]]
            out[c] = np.round(vals).astype(np.int64) if c in integer else vals
        elif c in integer:
            top = hi + (k == len(e) - 2)  # the last bin is closed: its upper edge is a value
            out[c] = (lo + np.floor(rng.random(len(k)) * (top - lo))).astype(np.int64)
        else:
            out[c] = lo + rng.random(len(k)) * (hi - lo)
    return out


# ------------------------------------------------------------------------------ metrics
def k_marginal(orig_codes: pd.DataFrame, syn_codes: pd.DataFrame | Sequence[pd.DataFrame],
               k: int = 2) -> dict[str, Any]:
    """NIST CRC k-marginal score on coded columns (Task et al. 2021).

    For every k-subset of columns, the cell shares of the k-way table in the original (p) and
    the synthetic data (q) give ``score = 1000 * (1 - sum |p - q| / 2)``; averaged over the
    subsets, then over the synthetic sets. 1000: identical tables; 0: disjoint. Unweighted
    (record shares), as NIST scores it.
    """
    syns = [syn_codes] if isinstance(syn_codes, pd.DataFrame) else list(syn_codes)
    cols = list(orig_codes.columns)
    o = orig_codes[cols].to_numpy(dtype=np.int64)
    size = np.max([o.max(axis=0)] + [s[cols].to_numpy(dtype=np.int64).max(axis=0) for s in syns],
                  axis=0) + 1
    per_set = []
    for s in syns:
        sv = s[cols].to_numpy(dtype=np.int64)
        scores = []
        for sub in combinations(range(len(cols)), k):
            sub = list(sub)
            radix = np.cumprod(np.r_[1, size[sub][:-1]])
            cells = int(np.prod(size[sub]))
            p = np.bincount(o[:, sub] @ radix, minlength=cells) / len(o)
            q = np.bincount(sv[:, sub] @ radix, minlength=cells) / len(sv)
            scores.append(1000.0 * (1.0 - 0.5 * np.abs(p - q).sum()))
        per_set.append(float(np.mean(scores)))
    return {"score": float(np.mean(per_set)), "score_each": per_set}


def numeric_matrix(frame: pd.DataFrame, columns: Sequence[str],
                   categories: Mapping[str, list]) -> np.ndarray:
    """Numeric columns as floats and categorical ones one-hot without their first category."""
    parts = []
    for c in columns:
        if c in categories:
            cat = [str(x) for x in categories[c]]
            codes = pd.Index(cat).get_indexer(frame[c].astype(str).to_numpy())
            parts.append((codes[:, None] == np.arange(1, len(cat))[None, :]).astype(float))
        else:
            parts.append(frame[c].to_numpy(dtype=float)[:, None])
    return np.hstack(parts)


def pmse_with_ratio(orig: np.ndarray, syns: Sequence[np.ndarray]) -> dict[str, Any]:
    """pMSE with all pairwise interactions and its ratio to the null expectation.

    pMSE from :func:`surveysynth.synthetic_utility.pmse` (``interactions=True``). Under the null
    (synthetic and original from the same distribution) a logistic model with k coefficients
    has E[pMSE] = (k - 1) (1 - c)^2 c / N (Snoke et al. 2018), N = n_orig + n_syn,
    c = n_syn / N; k is the rank of the propensity model's design matrix (intercept, main
    effects, pairwise products; products of dummies of one variable are 0 and drop). Ratio 1 =
    indistinguishable from the original as far as this model can tell.
    """
    res = pmse(orig, list(syns), interactions=True)
    ratios = []
    for s, val in zip(syns, res["pMSE_each"], strict=True):
        Y = np.vstack([orig, s])
        sd = Y.std(axis=0)
        sd[sd == 0] = 1.0
        S = (Y - Y.mean(axis=0)) / sd
        cols = [np.ones(len(S)), *S.T] + [S[:, a] * S[:, b] for a, b in
                                          combinations(range(S.shape[1]), 2)]
        k = np.linalg.matrix_rank(np.column_stack(cols))
        N = len(Y)
        c = len(s) / N
        ratios.append(val / ((k - 1) * (1 - c) ** 2 * c / N))
    return {"pMSE": res["pMSE"], "ratio": float(np.mean(ratios)), "converged": res["converged"]}


def combined_means(designs: Sequence[Any], variables: Sequence[str], kind: str,
                   n_original: int) -> pd.DataFrame:
    """Each variable's mean on every synthetic design and the combined inference under the
    release rule ``kind`` (partial or full synthesis); ``se_per_set`` is the mean over the
    sets of each set's own design-based SE (what one synthetic file tells its analyst)."""
    est = [d.mean(list(variables)) for d in designs]
    q = np.array([e["estimate"].to_numpy(float) for e in est])
    se = np.array([e["se"].to_numpy(float) for e in est])
    n_syn = float(np.mean([d.n for d in designs]))
    out = combine_sets(q, se**2, kind=kind, n_syn=n_syn, n_original=n_original)
    out.insert(0, "variable", list(variables))
    out["se_per_set"] = se.mean(axis=0)
    return out


def overlap(lo_o: Any, hi_o: Any, lo_s: Any, hi_s: Any) -> np.ndarray:
    """Karr et al. CI overlap (:func:`surveysynth.synthetic_utility.ci_overlap`); NaN where an
    interval has no length."""
    lo_o, hi_o, lo_s, hi_s = (np.asarray(a, float) for a in (lo_o, hi_o, lo_s, hi_s))
    ok = (hi_o > lo_o) & (hi_s > lo_s)
    out = np.full(lo_o.shape, np.nan)
    if ok.any():
        out[ok] = ci_overlap(lo_o[ok], hi_o[ok], lo_s[ok], hi_s[ok])
    return out
