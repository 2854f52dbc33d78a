"""Weighting-class nonresponse adjustment cells (R survey's ``nonresponse``, ``sparseCells``,
``neighbours``, ``joinCells`` and ``weights.nonresponse``; R/weightconstruction.R).

A cross-classification (strata x ... ) of sample weights, sample counts and population counts
is held as n-dimensional arrays. Each cell's nonresponse weight is population / sum of sample
weights; cells with few respondents, a large adjustment or a large total weight are found
(``sparse_cells``), their neighbours in the table looked up (``neighbours``) and cells joined
(``join_cells``) until the weights are acceptable; ``nr_weights()`` gives the final
adjustment for each original cell.

Cells are numbered as R numbers them, so R code ports with the same numbers: 1-based
positions in the table read column-major (the first variable varies fastest), e.g. cell 3 of
a 2 x 2 x 3 table is (1, 2, 1). A joined group keeps the smallest number of its cells.
Objects are not modified: ``join_cells`` returns a new one. ``nonresponse`` itself is not a
top-level ``surveysynth`` name (``surveysynth.nonresponse`` is the module of
``redistribute_weights``): import it from here.
"""

from __future__ import annotations

import warnings
from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from typing import Any

import numpy as np
import pandas as pd

__all__ = ["NonResponse", "joinCells", "join_cells", "neighbours", "nonresponse",
           "nonresponse_weights", "sparseCells", "sparse_cells"]


def _flat(a: np.ndarray) -> np.ndarray:
    return np.asarray(a).ravel(order="F")


def _groups(obj: NonResponse) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """Per cell (column-major): its group's count, NR weight, total weight per respondent,
    and the group position of each cell (R's ``rowsum`` over ``index``)."""
    idx = _flat(obj.index)
    _, pos = np.unique(idx, return_inverse=True)
    pop = np.bincount(pos, weights=_flat(obj.population).astype(float))
    w = np.bincount(pos, weights=_flat(obj.weights).astype(float))
    n = np.bincount(pos, weights=_flat(obj.counts).astype(float))
    with np.errstate(divide="ignore", invalid="ignore"):
        ratios, totals = pop / w, pop / n
    return n[pos], ratios[pos], totals[pos], pos


@dataclass(frozen=True)
class NonResponse:
    """A table of weighting classes (R's ``nonresponse`` object): ``weights`` (sum of sample
    weights per cell), ``counts`` (sample counts), ``population`` (population counts), the
    axis ``dimnames`` (``[(name, labels), ...]``), ``index`` (each cell's group number, R's
    numbering) and ``joins`` (the cell numbers of each join, in order)."""

    weights: np.ndarray
    counts: np.ndarray
    population: np.ndarray
    dimnames: tuple[tuple[str, tuple[Any, ...]], ...]
    index: np.ndarray
    joins: tuple[tuple[int, ...], ...] = field(default=())

    def cells(self, cells: Sequence[int] | int) -> pd.DataFrame:
        """Summary of the given cells (R ``object[i]``): one row per cell number, its labels,
        ``nr_weight`` (population / sample weights of its group), ``total_weight``
        (population / respondents of its group), ``n`` (respondents of its group) and its
        ``group`` number."""
        i = np.atleast_1d(np.asarray(cells, dtype=np.int64))
        K = self.index.size
        bad = (i < 1) | (i > K)
        if bad.any():
            raise ValueError(f"cells {i[bad][:5].tolist()}: cell numbers run from 1 to {K} "
                             "(R's column-major numbering).")
        n, ratios, totals, _ = _groups(self)
        subs = np.unravel_index(i - 1, self.index.shape, order="F")
        out = {name: [labels[s] for s in sub] for (name, labels), sub in
               zip(self.dimnames, subs, strict=True)}
        out.update(nr_weight=ratios[i - 1], total_weight=totals[i - 1], n=n[i - 1],
                   group=_flat(self.index)[i - 1])
        return pd.DataFrame(out, index=pd.Index(i, name="cell"))

    def nr_weights(self) -> np.ndarray:
        """The nonresponse weight of every original cell, shaped as the table (R
        ``weights(nonresponse)``): population / sample weights summed over its group."""
        _, ratios, _, _ = _groups(self)
        return ratios.reshape(self.index.shape, order="F")

    def __repr__(self) -> str:
        k = self.index.size
        g = np.unique(self.index).size
        return (f"NonResponse: {k} original cells, {g} distinct cells remaining"
                + (f"; joins {[list(j) for j in self.joins]}" if self.joins else ""))


def _as_table(x: Any, what: str, dimnames: Any) -> tuple[np.ndarray, Any]:
    if isinstance(x, pd.Series) and isinstance(x.index, pd.MultiIndex):
        levels = [sorted(pd.unique(x.index.get_level_values(k)).tolist())
                  for k in range(x.index.nlevels)]
        return x, [(str(n), tuple(lv)) for n, lv in zip(x.index.names, levels, strict=True)]
    if isinstance(x, pd.Series):
        return x, [(str(x.index.name), tuple(sorted(x.index.tolist())))]
    a = np.asarray(x, dtype=float)
    if dimnames is None:
        dimnames = [(f"dim{k + 1}", tuple(range(1, s + 1))) for k, s in enumerate(a.shape)]
    return a, [(str(n), tuple(lv)) for n, lv in dimnames]


def _align(x: Any, dn: list[tuple[str, tuple]], what: str) -> np.ndarray:
    if isinstance(x, pd.Series):
        full = pd.MultiIndex.from_product([list(lv) for _, lv in dn]) if len(dn) > 1 else \
            pd.Index(list(dn[0][1]))
        s = x.copy()
        s.index = s.index if len(dn) > 1 else pd.Index(list(s.index))
        return s.reindex(full, fill_value=0).to_numpy(float).reshape(
            [len(lv) for _, lv in dn])
    a = np.asarray(x, dtype=float)
    if a.shape != tuple(len(lv) for _, lv in dn):
        raise ValueError(f"nonresponse: {what} has shape {a.shape}, the table "
                         f"{tuple(len(lv) for _, lv in dn)} (R: 'dimensions do not match').")
    return a


def nonresponse(sample_weights: Any, sample_counts: Any, population: Any,
                dimnames: Sequence[tuple[str, Sequence[Any]]] | None = None) -> NonResponse:
    """A table of weighting classes (R ``nonresponse(sample.weights, sample.counts,
    population)``).

    Each argument is an n-dimensional array (R's ``xtabs``; give ``dimnames=[(name,
    labels), ...]``, in the arrays' axis order) or a pandas Series indexed by a MultiIndex
    of the class variables (``sample.groupby(["a", "b"])["pw"].sum()``; absent combinations
    count 0, levels sorted as R's factors). The three must describe the same table.
    """
    tabs = [_as_table(x, w, dimnames) for x, w in ((sample_weights, "sample_weights"),
                                                     (sample_counts, "sample_counts"),
                                                     (population, "population"))]
    if dimnames is None and any(isinstance(t[0], pd.Series) for t in tabs):
        names = [n for n, _ in tabs[2][1]]
        for t, what in zip(tabs, ("sample_weights", "sample_counts", "population"), strict=True):
            if [n for n, _ in t[1]] != names:
                raise ValueError(f"nonresponse: {what} is classified by "
                                 f"{[n for n, _ in t[1]]}, the population by {names} (R: "
                                 "'sample and population dimensions do not match').")
        dn = [(n, tuple(sorted(set().union(*(set(t[1][k][1]) for t in tabs)))))
              for k, n in enumerate(names)]
    else:
        dn = tabs[2][1]
    arrays = [_align(t[0], dn, w) for t, w in zip(
        tabs, ("sample_weights", "sample_counts", "population"), strict=True)]
    if arrays[0].shape != arrays[1].shape:
        raise ValueError("nonresponse: counts and weights have different dimensions (R's "
                         "message).")
    K = arrays[0].size
    index = np.arange(1, K + 1).reshape(arrays[0].shape, order="F")
    return NonResponse(arrays[0], arrays[1], arrays[2],
                       tuple((n, tuple(lv)) for n, lv in dn), index)


def sparse_cells(obj: NonResponse, count: float = 0, totalweight: float = np.inf,
                 nrweight: float = 1.5) -> pd.DataFrame | None:
    """Cells needing a join (R ``sparseCells``): groups with fewer than ``count`` respondents,
    a nonresponse weight above ``nrweight`` or a total weight per respondent above
    ``totalweight``; one row per such group (its first cell), as :meth:`NonResponse.cells`,
    or None when there is none (as R)."""
    n, ratios, totals, _ = _groups(obj)
    idx = _flat(obj.index)
    _, first_pos = np.unique(idx, return_index=True)
    first = np.zeros(idx.size, bool)
    first[first_pos] = True
    with np.errstate(invalid="ignore"):
        bad = (ratios > nrweight) | (n < count) | (totals > totalweight)
    i = np.flatnonzero(bad & first) + 1
    return None if i.size == 0 else obj.cells(i)


def _position(obj: NonResponse, cell: Any) -> int:
    """A cell number from a number or a tuple of 1-based subscripts (R's two forms)."""
    if np.ndim(cell) == 0:
        return int(cell)
    sub = [int(s) - 1 for s in cell]
    if len(sub) != obj.index.ndim:
        raise ValueError(f"cell {tuple(cell)}: give {obj.index.ndim} subscripts (1-based) or "
                         "a cell number.")
    return int(np.ravel_multi_index(sub, obj.index.shape, order="F")) + 1


def neighbours(cell: int | Sequence[int], obj: NonResponse) -> pd.DataFrame:
    """The cells adjacent in the table (one step along one variable) to the group of
    ``cell`` and not in it (R ``neighbours``), as :meth:`NonResponse.cells`: candidates to
    join it with. ``cell``: a number, or a tuple of 1-based subscripts."""
    pos = _position(obj, cell)
    if not 1 <= pos <= obj.index.size:
        raise ValueError(f"cell {cell}: cell numbers run from 1 to {obj.index.size}.")
    flat = _flat(obj.index)
    group = flat[pos - 1] if np.ndim(cell) != 0 else flat[int(cell) - 1]
    members = np.flatnonzero(flat == group)
    shape = np.array(obj.index.shape)
    subs = np.column_stack(np.unravel_index(members, obj.index.shape, order="F"))
    nd = shape.size
    steps = np.vstack([np.eye(nd, dtype=np.int64), -np.eye(nd, dtype=np.int64)])
    cand = (subs[:, None, :] + steps[None, :, :]).reshape(-1, nd)
    keep = ((cand >= 0) & (cand < shape)).all(axis=1)
    cand = cand[keep]
    _, first = np.unique(cand, axis=0, return_index=True)
    cand = cand[np.sort(first)]
    lin = np.ravel_multi_index(tuple(cand.T), obj.index.shape, order="F") if cand.size else \
        np.array([], dtype=np.int64)
    lin = lin[flat[lin] != group]
    return obj.cells(lin + 1)


def join_cells(obj: NonResponse, *cells: Any) -> NonResponse:
    """Join cells into one weighting class (R ``joinCells(object, a, ...)``): every cell of
    the groups of ``cells`` (numbers, or tuples of 1-based subscripts) gets the smallest of
    their group numbers. Returns a new object; joining one cell, or cells already joined,
    returns the object unchanged with a warning, as R."""
    pos = [_position(obj, c) for c in cells]
    if len(pos) < 2:
        warnings.warn("join_cells: can't join a single cell (R's warning).", UserWarning,
                      stacklevel=2)
        return obj
    flat = _flat(obj.index).copy()
    groups = flat[np.asarray(pos) - 1]
    if np.unique(groups).size < 2:
        warnings.warn("join_cells: these cells are already joined (R's warning).",
                      UserWarning, stacklevel=2)
        return obj
    members = np.isin(flat, groups)
    flat[members] = groups.min()
    joined = tuple(int(k) for k in np.flatnonzero(members) + 1)
    return replace(obj, index=flat.reshape(obj.index.shape, order="F"),
                   joins=(*obj.joins, joined))


def nonresponse_weights(obj: NonResponse) -> np.ndarray:
    """R ``weights(nonresponse)``: :meth:`NonResponse.nr_weights`."""
    return obj.nr_weights()


sparseCells = sparse_cells  # noqa: N816 - R's names
joinCells = join_cells  # noqa: N816
