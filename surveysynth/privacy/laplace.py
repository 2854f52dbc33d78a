"""The Laplace baseline for survey tables (seed 001 Section 2.5; METHODS.md section 5).

Instead of synthesizing microdata, noise is added directly to the tables computed from the
confidential sample: a counts table (sums of weights) and a means table (Hajek means of
``value``) by ``rows`` x ``cols``, with row margins, column margins and the grand total.

* Local sensitivities on each interior cell S_fg (seed 001 eqs. 12-13):
  count ``D_c = max w - min w``; mean ``D_a = (max wy - min wy) / (sum w - (max w - min w))``.
  The maximum over interior cells, ``D_*``, is used for every cell. **Decision** (METHODS
  section 5): margins and the grand total also use the interior maximum ``D_*``; the paper says
  margins are "calculated in a similar fashion" without saying whether their own sensitivities
  enter the maximum.
* Budget: each record sits in 4 cells (interior, row margin, column margin, grand total) of 2
  tables, and each cell has a point and a variance release, so with an equal split
  ``epsilon = 8 eps_pc + 8 eps_vc`` and ``eps_pc = eps_vc = epsilon/16``; the variance release
  uses R replicates, ``eps_rep = eps_vc / R`` (epsilon = 80, R = 10: 5 and 0.5). Without
  ``cols`` a record sits in 2 cells and the same rule gives ``epsilon/8``.
* Point release: ``theta + Laplace(0, D_*/eps_pc)``. Variance release: R half-sample replicates
  (Preston's rescaled bootstrap at stage 1 without fpc: weights 0 or 2w when a stratum has an
  even number of PSUs), each replicate estimate noised with ``Laplace(0, D_*/eps_rep)``, and
  ``V = sum_r (theta_r - theta_noisy)^2 / R`` (METHODS section 5). A replicate whose half-sample
  drops every record of a cell has no mean there; V then averages the replicates that have one
  (and is NaN if none has).
* No consistency post-processing: the noisy tables are not additive (cells do not sum to
  margins); that is part of the comparison with synthetic data.
* The unweighted cell sizes are treated as public (seed 001: "we assume that the unweighted
  sample sizes n_fg are not sensitive") and reported for the reliability flags.

The guarantee is ``laplace_local`` (local sensitivity, no worst-case epsilon-DP). The
sensitivities are computed from confidential data: they are kept on the result for the
curator (``sensitivity``) and are not part of the published tables.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pandas as pd

from .._validate import as_list, require_columns
from ..tables import Table, _cell_labels, _union_levels, reliability
from .guarantees import GUARANTEES


@dataclass
class LaplaceTables:
    """Noisy counts and means tables with their budget and privacy record.

    ``counts`` and ``means`` are :class:`~surveysynth.tables.Table` objects (publishable);
    ``sensitivity`` (``{"count": D_c*, "mean": D_a*}``) is derived from confidential data and is
    for the curator only.
    """

    counts: Table
    means: Table
    budget: dict[str, float]
    privacy: dict[str, Any]
    sensitivity: dict[str, float] = field(repr=False)


def budget_split(epsilon: float, replicates: int = 10, cells_per_record: int = 4,
                 tables: int = 2) -> dict[str, float]:
    """Equal split of ``epsilon`` over point and variance releases (seed 001 Section 2.5).

    Returns ``eps_point`` (per cell point estimate), ``eps_variance`` (per cell variance
    release) and ``eps_replicate`` (per noised replicate, ``eps_variance / replicates``).
    """
    if not epsilon > 0 or not np.isfinite(epsilon):
        raise ValueError(f"epsilon={epsilon!r}: must be a positive finite number.")
    if int(replicates) != replicates or replicates < 2:
        raise ValueError(f"replicates={replicates!r}: need an integer >= 2.")
    releases = cells_per_record * tables  # point releases; as many variance releases
    eps_point = epsilon / (2 * releases)
    return {
        "epsilon": float(epsilon),
        "eps_point": eps_point,
        "eps_variance": eps_point,
        "eps_replicate": eps_point / replicates,
        "replicates": int(replicates),
        "point_releases": releases,
        "variance_releases": releases,
    }


def _cell_sensitivity(dom: np.ndarray, D: int, w: np.ndarray, y: np.ndarray) -> tuple[float, float]:
    """Maximum over non-empty cells of the count and mean local sensitivities (eqs. 12-13)."""
    sel = dom >= 0
    ds, ws, wy = dom[sel], w[sel], w[sel] * y[sel]
    wmax = np.full(D, -np.inf)
    wmin = np.full(D, np.inf)
    ymax = np.full(D, -np.inf)
    ymin = np.full(D, np.inf)
    np.maximum.at(wmax, ds, ws)
    np.minimum.at(wmin, ds, ws)
    np.maximum.at(ymax, ds, wy)
    np.minimum.at(ymin, ds, wy)
    wsum = np.bincount(ds, weights=ws, minlength=D)
    present = np.bincount(ds, minlength=D) > 0
    d_c = (wmax - wmin)[present]
    d_a = ((ymax - ymin) / (wsum - (wmax - wmin)))[present]
    return float(d_c.max()), float(d_a.max())


def _core(design: Any, row_vars: list[str], col_vars: list[str], value: str, epsilon: float,
          replicates: int, rng: np.random.Generator, na_rm: bool, margin_label: str):
    """All arrays of the mechanism (noisy and true estimates, replicates, labels)."""
    from ..variance.replicate_weights import preston_factors

    na_rows = design._na_rows([value], na_rm, "laplace_tables")
    y = design._numeric(value)
    y = np.where(np.isnan(y), 0.0, y)
    w = np.asarray(design._w, float)
    levels = {v: _union_levels([design], v) for v in row_vars + col_vars}
    blocks = [("interior", row_vars + col_vars)]
    if col_vars:
        blocks += [("row margin", row_vars), ("column margin", col_vars)]
    blocks.append(("grand total", []))
    doms, labels, offsets = [], [], [0]
    for cell, by in blocks:
        dom, D, by_df = design._domains(by or None, na_rows)
        if by:
            grid = pd.MultiIndex.from_product([levels[v] for v in by], names=by)
            have = pd.MultiIndex.from_frame(by_df[by].astype(object))
            # map present domains to grid positions so empty cells stay in the table
            gpos = grid.get_indexer(have)
            dom = np.where(dom >= 0, gpos[np.maximum(dom, 0)], -1)
            K = len(grid)
        else:
            grid, K = None, 1
        labels.append(_cell_labels(row_vars + col_vars, by, grid, K, cell, margin_label))
        doms.append(dom)
        offsets.append(offsets[-1] + K)
    K_all = offsets[-1]
    d_c, d_a = _cell_sensitivity(doms[0], offsets[1], w, y)
    # stacked cell membership: one (row, cell) pair per block
    rows_idx = np.concatenate([np.flatnonzero(d >= 0) for d in doms])
    cell_idx = np.concatenate([d[d >= 0] + off for d, off in zip(doms, offsets, strict=False)])
    fac, index = preston_factors(design._stages, has_fpc=False, replicates=replicates, seed=rng)
    F = fac[index]  # (n_rows, R) half-sample factors: 0 or 2 in strata with even PSU counts

    def sums(weights_rows: np.ndarray) -> np.ndarray:
        """(K_all, C) cell sums of weights_rows (n_rows, C)."""
        out = np.zeros((K_all, weights_rows.shape[1]))
        np.add.at(out, cell_idx, weights_rows[rows_idx])
        return out

    WR = np.column_stack([w, w[:, None] * F])  # full sample + replicates
    cnt = sums(WR)
    tot = sums(WR * y[:, None])
    with np.errstate(invalid="ignore", divide="ignore"):
        mean = tot / cnt
    n_unw = np.bincount(cell_idx, minlength=K_all).astype(float)
    b = budget_split(epsilon, replicates, cells_per_record=len(blocks), tables=2)
    # draws: point noise then replicate noise, counts then means (fixed order: reproducible)
    noise_c = rng.laplace(0.0, 1.0, size=(K_all, 1 + replicates))
    noise_a = rng.laplace(0.0, 1.0, size=(K_all, 1 + replicates))
    scale_c = np.array([d_c / b["eps_point"]] + [d_c / b["eps_replicate"]] * replicates)
    scale_a = np.array([d_a / b["eps_point"]] + [d_a / b["eps_replicate"]] * replicates)
    noisy_c = cnt + noise_c * scale_c[None, :]
    noisy_a = mean + noise_a * scale_a[None, :]
    return dict(labels=pd.concat(labels, ignore_index=True), cnt=cnt, mean=mean,
                noisy_c=noisy_c, noisy_a=noisy_a, n_unw=n_unw, budget=b,
                sensitivity={"count": d_c, "mean": d_a}, factors=F,
                scale_c=scale_c, scale_a=scale_a)


def _variance(noisy: np.ndarray) -> np.ndarray:
    """V = sum_r (theta_r - theta_noisy)^2 / R over the replicates with an estimate."""
    dev2 = (noisy[:, 1:] - noisy[:, :1]) ** 2
    with np.errstate(invalid="ignore"):
        return np.nanmean(dev2, axis=1) if np.isnan(dev2).any() else dev2.mean(axis=1)


def laplace_tables(
    design: Any,
    rows: str | Sequence[str],
    cols: str | Sequence[str] | None,
    value: str,
    epsilon: float,
    replicates: int = 10,
    seed: int | np.random.Generator | None = None,
    cv_max: float | None = 0.30,
    n_min: float | None = 30,
    level: float = 0.95,
    na_rm: bool = False,
    margin_label: str = "All",
) -> LaplaceTables:
    """Counts and means tables of the confidential ``design`` with Laplace noise (seed 001 2.5).

    Parameters
    ----------
    design : the confidential SurveyDesign (its stage-1 strata and PSUs give the half-samples).
    rows, cols : classification variables (``cols`` may be None: interior cells and total).
    value : numeric variable of the means table.
    epsilon : total privacy budget of both tables (split as in :func:`budget_split`).
    replicates : half-sample replicates for the variance (the paper's R = 10).
    seed : int or numpy Generator; same seed, same tables.
    cv_max, n_min, level : reliability flags and normal-interval level, as in ``tabulate``.

    Returns
    -------
    :class:`LaplaceTables` with ``counts`` and ``means`` tables of the same shape as
    :func:`surveysynth.tabulate` (estimate, se, cv, ci_low, ci_high, n_unweighted, flag).
    """
    from ..design import SurveyDesign

    if not isinstance(design, SurveyDesign):
        raise ValueError(
            f"laplace_tables(design=...): expected the confidential SurveyDesign, got "
            f"{type(design).__name__} (half-sample replicates are drawn from its strata and PSUs)."
        )
    row_vars, col_vars = as_list(rows), as_list(cols)
    if not row_vars:
        raise ValueError("rows: give at least one classification variable.")
    if set(row_vars) & set(col_vars):
        raise ValueError(f"rows={row_vars}, cols={col_vars}: a variable may appear only once.")
    if not isinstance(value, str):
        raise ValueError("value: name the numeric column of the means table.")
    require_columns(design._frame, row_vars + col_vars + [value], "laplace_tables")
    rng = seed if isinstance(seed, np.random.Generator) else np.random.default_rng(seed)
    core = _core(design, row_vars, col_vars, value, epsilon, replicates, rng, na_rm,
                 margin_label)
    from scipy import stats

    z = stats.norm.ppf((1 + level) / 2)
    tables = {}
    for name, noisy, stat, val in (("counts", core["noisy_c"], "total", None),
                                   ("means", core["noisy_a"], "mean", value)):
        est = noisy[:, 0]
        se = np.sqrt(_variance(noisy))
        cv, reason, flag = reliability(est, se, core["n_unw"], cv_max, n_min)
        long = core["labels"].assign(
            estimate=est, se=se, cv=cv, ci_low=est - z * se, ci_high=est + z * se,
            df=np.inf, n_unweighted=core["n_unw"], flag=flag, flag_reason=reason,
        )
        meta = {"cv_max": cv_max, "n_min": n_min, "level": level, "source": "laplace",
                "source_note": f"Laplace noise, local sensitivity, epsilon = {epsilon:g} in all; "
                "cells are not additive."}
        tables[name] = Table(long, row_vars, col_vars, stat, val, margin_label, meta)
    b = core["budget"]
    privacy = {
        "mechanism": "Laplace mechanism on tables, local sensitivity maximized over cells",
        "guarantee": "laplace_local",
        "guarantee_text": GUARANTEES["laplace_local"],
        "epsilon": float(epsilon),
        "delta_alpha": None,
        "m": 1,
        "seed": seed if isinstance(seed, (int, np.integer)) or seed is None else str(seed),
        "notes": [
            f"eps per cell point estimate {b['eps_point']:g}, per replicate "
            f"{b['eps_replicate']:g} ({replicates} replicates)",
            "sensitivities: maximum over interior cells, used for margins too (METHODS 5)",
            "no consistency post-processing: tables are not additive",
        ],
    }
    return LaplaceTables(tables["counts"], tables["means"], b, privacy, core["sensitivity"])
