"""Predictor cells: the cross-classification of categorical predictors, its design rows, and
alpha-weighted per-cell sufficient statistics (what the pseudo posterior Stan programs read, so a
gradient costs O(cells), not O(records))."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pandas as pd

from ..encoding import Factor, r_label

__all__ = ["Cells", "build_cells", "cell_moments", "weight_groupings"]


@dataclass
class Cells:
    codes: np.ndarray  # (n,) 0-based cell of each record
    table: pd.DataFrame  # (C, predictors) the level combination of each cell
    Xc: np.ndarray  # (C, K) design row of each cell
    columns: list[str]  # names of the K design columns


def build_cells(data: pd.DataFrame, predictors: list[str], effects: str,
                 coding: str = "intercept") -> Cells:
    if not predictors:
        table = pd.DataFrame(index=range(1))
        return Cells(np.zeros(len(data), dtype=np.int64), table, np.ones((1, 1)), ["(Intercept)"])
    factors = [Factor.learn(data[p], name=p) for p in predictors]  # R's levels (encoding.py)
    levels = [list(f.levels) for f in factors]
    full = pd.MultiIndex.from_product(levels, names=predictors)
    obs = pd.MultiIndex.from_frame(data[predictors].astype(object))
    codes = full.get_indexer(obs)
    counts = np.bincount(codes, minlength=len(full))
    if effects == "cells" and (counts == 0).any():
        empty = [dict(zip(predictors, full[i], strict=False)) for i in np.flatnonzero(counts == 0)[:5]]
        raise ValueError(
            f"predictors {predictors}: {int((counts == 0).sum())} cell(s) of the full "
            f"cross-classification have no records, e.g. {empty}. Full cell effects are not "
            "identified there. Fix: use effects='main', collapse levels, or drop unused "
            "categories (Series.cat.remove_unused_categories())."
        )
    if effects == "main":
        for p, lev in zip(predictors, levels, strict=False):
            seen = set(pd.unique(data[p]).tolist())
            unused = [v for v in lev if v not in seen]
            if unused:
                raise ValueError(
                    f"predictor {p!r} has categories with no records: {unused[:5]}. Fix: drop "
                    "unused categories (Series.cat.remove_unused_categories())."
                )
    table = full.to_frame(index=False)
    C = len(full)
    cell_names = [":".join(f"{p}{r_label(v)}" for p, v in zip(predictors, full[i], strict=False))
                  for i in range(C)]  # R's names of the interaction (fieldA:gendermale)
    if effects == "cells" and coding == "cellmeans":
        Xc = np.eye(C)
        names = cell_names
    elif effects == "cells":
        Xc = np.eye(C)
        Xc[:, 0] = 1.0
        names = ["(Intercept)"] + cell_names[1:]
    else:
        # treatment contrasts of each predictor on the cells, R's names (stypeH)
        Xc = np.hstack([np.ones((C, 1)), *(f.matrix(table[f.name]) for f in factors)])
        names = ["(Intercept)", *(n for f in factors for n in f.names())]
    return Cells(codes.astype(np.int64), table, Xc, names)


def cell_moments(codes: np.ndarray, C: int, a: np.ndarray, cols: list[np.ndarray]):
    """Weighted count, means and centred cross-products of ``cols`` per cell (weights a)."""
    w = np.bincount(codes, weights=a, minlength=C)
    safe = np.where(w > 0, w, 1.0)
    means = [np.where(w > 0, np.bincount(codes, weights=a * v, minlength=C) / safe, 0.0)
             for v in cols]
    cent = [v - mu[codes] for v, mu in zip(cols, means, strict=False)]
    cross = {}
    for i in range(len(cols)):
        for j in range(i, len(cols)):
            cross[(i, j)] = np.bincount(codes, weights=a * cent[i] * cent[j], minlength=C)
    return w, means, cross


def weight_groupings(data: pd.DataFrame, predictors: list[str], effects: str,
                     cells: Cells) -> list[tuple[list[str], np.ndarray]]:
    """The record groups whose parameters only their own records inform, for the minimum
    likelihood weight of the tuning (:class:`~surveysynth.synth.tuning.CellWeightFloor`).

    ``effects="cells"``: one group per cell of the cross-classification (each cell has its own
    mean). ``effects="main"``: one grouping per predictor, a group per level (each level's
    effect is informed by its records, whatever their other predictors). Labels carry the
    group's record count for the refusal message. No predictors: no groups (the intercept is
    informed by every record)."""
    if not predictors:
        return []
    if effects == "cells":
        counts = np.bincount(cells.codes, minlength=len(cells.table))
        labels = [":".join(f"{p}={v}" for p, v in zip(predictors, row, strict=True))
                  + f" ({int(k)} records)"
                  for row, k in zip(cells.table.itertuples(index=False), counts, strict=True)]
        return [(labels, cells.codes)]
    out = []
    for p in predictors:
        lev = cells.table[p].drop_duplicates().tolist()
        codes = pd.Index(lev).get_indexer(data[p].astype(object))
        counts = np.bincount(codes, minlength=len(lev))
        out.append(([f"{p}={v} ({int(k)} records)" for v, k in zip(lev, counts, strict=True)],
                    codes.astype(np.int64)))
    return out
