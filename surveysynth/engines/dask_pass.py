"""The Dask engine's one pass: per-partition weighted sums per group, added in a tree.

Data that do not fit one machine are estimated with one pass over the partitions: each
partition is reduced on a worker to weighted sums per (domain, stratum, PSU, ...) group --
a bincount-style partial aggregate whose size is set by the design, not by the rows -- and
the partials are added in a tree on the cluster and returned to the client. Every
linearization statistic here is a ratio of weighted totals, and its linearized value summed
over a PSU is ``(sum w y - R sum w x) / T_x``: so the per-(domain, PSU) sums are all the
variance needs. Replicate weights given as columns add, per group, the replicate totals and,
per domain, the Gram matrix of the replicate weights (for R's ``degf``).

What the client does with the sums (a small ``SurveyDesign`` over the groups, or R's
``svrVar``) is in :mod:`surveysynth.engines.dask_design`; where the pass runs (a given client,
the default one, or a LocalCluster started here) in :mod:`surveysynth.engines.dask_cluster`.
This module changes when the reduction changes (what is summed per group, how partials merge).
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pandas as pd
from scipy import sparse

#: the statistics the pass can serve (ratios of weighted sums)
STATS = ("total", "mean", "ratio", "proportion")
#: key column of the aggregate: the group's rows have a missing analysis value
NA_FLAG = "__na__"
#: 0/1 column marking the rows inside the scope of an engine call (engine="dask")
IN_SCOPE = "__in__"


class UnsupportedByDask(NotImplementedError):
    """A statistic or design option the Dask engine does not compute (the message says why)."""


# ------------------------------------------------------------------------ the one pass
def first_labels(index: pd.Index, mask: np.ndarray) -> list:
    return index[np.flatnonzero(mask)[:5]].tolist()


def partition_problems(pdf: pd.DataFrame, spec: dict, w: np.ndarray) -> dict:
    """Data errors found in a partition: {what: (count, first row labels)}."""
    out: dict[str, tuple[int, list]] = {}
    bad_w = ~np.isfinite(w) | (w <= 0) if spec["positive_w"] else ~np.isfinite(w) | (w < 0)
    if bad_w.any():
        out[f"weights:{spec['weights']}"] = (int(bad_w.sum()), first_labels(pdf.index, bad_w))
    for c in spec["no_na"]:
        na = pdf[c].isna().to_numpy()
        if na.any():
            out[f"na:{c}"] = (int(na.sum()), first_labels(pdf.index, na))
    if spec["rep"]:
        bad = ~np.isfinite(pdf[spec["rep"]].to_numpy(dtype=float, na_value=np.nan))
        for j in np.flatnonzero(bad.any(axis=0)):
            out[f"rep:{spec['rep'][j]}"] = (int(bad[:, j].sum()),
                                             first_labels(pdf.index, bad[:, j]))
    return out


def group_codes(pdf: pd.DataFrame, keys: list[str], na: np.ndarray) -> tuple[np.ndarray, int]:
    """Group number of every row by (keys, NA flag), in order of first appearance (missing
    key values are a group of their own): one hash factorization of a mixed-radix code of
    the per-column codes, or pandas' multi-key groupby when that code would overflow."""
    n = pdf.shape[0]
    if n == 0:
        return np.zeros(0, dtype=np.int64), 0
    combined = np.zeros(n, dtype=np.int64)
    radix = 1
    for c in keys:
        code, uniq = pd.factorize(pdf[c], use_na_sentinel=False)
        size = max(len(uniq), 1)
        if radix * size * 2 >= 2**62:
            frame = pdf[keys].reset_index(drop=True).assign(**{NA_FLAG: na})
            group = frame.groupby(keys + [NA_FLAG], observed=True, dropna=False,
                                  sort=False).ngroup().to_numpy()
            return group, int(group.max()) + 1
        combined += code.astype(np.int64) * radix
        radix *= size
    combined += na.astype(np.int64) * radix
    group, uniq = pd.factorize(combined)
    return group.astype(np.int64), len(uniq)


def partial_sums(pdf: pd.DataFrame, spec: dict) -> tuple[pd.DataFrame, dict, dict]:
    """One partition's weighted sums per group (runs on a worker)."""
    w = pdf[spec["weights"]].to_numpy(dtype=float, na_value=np.nan)
    problems = partition_problems(pdf, spec, w)
    n = pdf.shape[0]
    na = np.zeros(n, dtype=bool)
    values = {}
    for c in spec["numeric"]:
        v = pdf[c].to_numpy(dtype=float, na_value=np.nan)
        values[c] = v
        na |= np.isnan(v)
    for c in spec["categorical"]:
        na |= pdf[c].isna().to_numpy()
    for c in spec["analysis"]:
        miss = pdf[c].isna().to_numpy()
        if miss.any():
            problems[f"value:{c}"] = (int(miss.sum()), first_labels(pdf.index, miss))
    ok = ~na
    wz = np.where(ok, w, 0.0)
    keys = spec["keys"]
    group, G = group_codes(pdf, keys, na)
    first = np.full(G, -1, dtype=np.int64)
    first[group[::-1]] = np.arange(n - 1, -1, -1)
    keyframe = pdf[keys].iloc[first].reset_index(drop=True)
    keyframe[NA_FLAG] = na[first]
    index = pd.MultiIndex.from_frame(keyframe)

    def add(vec: np.ndarray) -> np.ndarray:
        return np.bincount(group, weights=vec, minlength=G)

    # one weighted bincount per sum column, each computed and reduced in turn (the
    # partition's memory is the data plus a few columns)
    sums: dict[str, np.ndarray] = {"_n": add(ok.astype(float)), "_w": add(wz)}
    for c, v in values.items():
        sums[f"y:{c}"] = add(wz * np.where(ok, v, 0.0))
    rep = spec["rep"]
    A = None
    if rep:
        A = pdf[rep].to_numpy(dtype=float)
        if not spec["combined"]:
            A = A * w[:, None]
        Az = np.where(ok[:, None], A, 0.0)
        # replicate columns at once: a (groups x rows) 0/1 matrix times the (rows x R) values
        onehot = sparse.csr_matrix((np.ones(n), (group, np.arange(n))), shape=(G, n))
        T = {"": np.asarray(onehot @ Az)}
        for c, v in values.items():
            T[c] = np.asarray(onehot @ (Az * np.where(ok, v, 0.0)[:, None]))
        for r in range(A.shape[1]):
            sums[f"_w@{r}"] = T[""][:, r]
            for c in values:
                sums[f"y:{c}@{r}"] = T[c][:, r]
    agg = pd.DataFrame(sums, index=index)
    gram = replicate_grams(pdf, A, ok, spec["gram_by"]) if rep and spec["gram_by"] is not None else {}
    return agg, problems, gram


def replicate_grams(pdf: pd.DataFrame, A: np.ndarray, ok: np.ndarray, gkeys: list[str]) -> dict:
    """Per domain (``gkeys`` values, rows without NA), the Gram matrix A'A of the analysis
    replicate weights: its rank is R's degf of the domain."""
    if gkeys:
        codes, uniq = pd.MultiIndex.from_frame(pdf[gkeys].reset_index(drop=True)).factorize()
        labels = list(uniq)
    else:
        codes, labels = np.zeros(pdf.shape[0], dtype=np.int64), [()]
    gram: dict = {}
    for g, lab in enumerate(labels):
        rows = (codes == g) & ok
        if rows.any():
            B = A[rows]
            gram[lab if isinstance(lab, tuple) else (lab,)] = B.T @ B
    return gram


def merge_partials(parts: list[tuple[pd.DataFrame, dict, dict]]) -> tuple[pd.DataFrame, dict, dict]:
    """Add partial aggregates (a node of the reduction tree)."""
    frames = [p[0] for p in parts]
    agg = pd.concat(frames).groupby(level=list(range(frames[0].index.nlevels)), observed=True,
                                    dropna=False, sort=False).sum()
    problems: dict[str, tuple[int, list]] = {}
    gram: dict = {}
    for _, pr, gr in parts:
        for k, (cnt, rows) in pr.items():
            c0, r0 = problems.get(k, (0, []))
            problems[k] = (c0 + cnt, (r0 + rows)[:5])
        for k, g in gr.items():
            gram[k] = gram[k] + g if k in gram else g
    return agg, problems, gram


def one_pass(ddf: Any, spec: dict, client: Any, split_every: int, progress: bool = False):
    """Partials per partition, added in a tree of ``split_every`` fan-in, on the scheduler.

    Only the columns the call needs are read (a Parquet dataset reads those columns only).
    ``progress``: a text progress bar of the pass (``distributed.progress``) on stdout."""
    from dask import delayed

    need = list(dict.fromkeys(spec["keys"] + spec["numeric"] + spec["categorical"]
                              + [spec["weights"]] + list(spec["rep"])))
    nodes = [delayed(partial_sums)(part, spec) for part in ddf[need].to_delayed()]
    while len(nodes) > 1:
        nodes = [delayed(merge_partials)(nodes[i:i + split_every])
                 for i in range(0, len(nodes), split_every)]
    if client is not None:
        future = client.compute(nodes[0])
        if progress:  # blocks until the pass is done, redrawing one line on stdout
            from distributed.diagnostics.progressbar import TextProgressBar

            TextProgressBar([future], scheduler=client.scheduler.address)
        return future.result()
    return nodes[0].compute()


def raise_problems(problems: dict, what: str) -> None:
    for key in sorted(problems):
        kind, col = key.split(":", 1)
        cnt, rows = problems[key]
        if kind == "weights":
            raise ValueError(f"weights: column {col!r} has {cnt} row(s) with missing, infinite or "
                             f"non-positive values (first: {rows}). Fix: correct or drop them.")
        if kind == "na":
            raise ValueError(f"column {col!r} (a design or by= column) has {cnt} missing "
                             f"value(s) (first rows: {rows}). Fix: fill or drop them first.")
        if kind == "rep":
            raise ValueError(f"repweights: column {col!r} has {cnt} missing or infinite value(s) "
                             f"(first rows: {rows}). Replicate weights cannot be missing.")
        if kind == "value":
            raise ValueError(f"{what}: column {col!r} has {cnt} missing value(s) (first rows: "
                             f"{rows}). Fix: na_rm=True to drop them from the estimate (the "
                             "design keeps them for variance), or impute them.")
