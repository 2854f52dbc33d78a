"""Differentially private official tables from a survey design (issue 40, item 1; docs/dp_tables.md).

:func:`dp_tabulate` publishes counts, totals, means or proportions by cells, with every margin,
under a formal guarantee (pure epsilon-DP with OpenDP's Laplace measurement, or rho-zCDP with its
Gaussian measurement), with standard errors and confidence intervals that combine the sampling
variance and the noise variance, and tables whose margins equal the sum of their cells.

The mechanism, in order (each step is a decision stated in docs/dp_tables.md):

1. **Neighbours: add/remove one record** (unbounded DP). A record carries its own sampling weight
   w_i (a design weight fixed for the record: weights recomputed from the whole sample, as
   calibration or nonresponse adjustments do, are outside the guarantee, Drechsler & Bailie
   2024) and its value.
2. **Public bounds.** Each weight is trimmed to the public ``weight_cap`` (w_i -> min(w_i, cap);
   no redistribution, which would make the other records' weights depend on the trimmed one);
   each value is clipped to the public ``bounds = (lo, hi)``. How many weights and values moved,
   and how much weight, go to the confidential report only (:attr:`DPTables.confidential`).
3. **Random groups.** Every primary sampling unit is put in one of G groups independently and
   uniformly at random (never by dealing, which would let one record move the others). The
   measured statistic is the vector of every group's interior-cell weighted counts
   sum w_i 1{cell} and / or weighted totals sum w_i y_i 1{cell}. A record lies in one group and
   one cell, so under add/remove it changes one coordinate by at most ``cap`` (counts) or
   ``cap * max(|lo|, |hi|)`` (totals): these are the global L1 and L2 sensitivities.
4. **Noise** from OpenDP 0.16 (``make_laplace`` for pure DP, ``make_gaussian`` for zCDP) on a
   float vector domain of known size with an explicit grid exponent k (outputs are integer
   multiples of 2^k, a public grid chosen from the public scale: the set of outputs does not
   depend on the data; OpenDP's privacy map includes the rounding to the grid). Each
   measurement's scale is found by OpenDP's ``binary_search_param`` so that its own privacy map
   at the sensitivity equals its share of the budget; the shares compose sequentially (pure DP:
   epsilons add; zCDP: rhos add), and the release's privacy record books each measurement in its
   ledger with the value of OpenDP's map.
5. **Consistency**: margins are sums of the interior cells (``margin_share = 0``, default), or
   also measured with ``margin_share`` of the budget and combined with the interior by
   generalised least squares (the linear, unbiased projection onto the consistency constraints,
   as TopDown's L2 step); then, for counts and for totals with ``lo >= 0``, the interior is
   projected onto the non-negative orthant in the noise-covariance metric (non-negative least
   squares) and every margin is the sum of its projected cells. Intervals are centred on the
   linear (unbiased) estimate and truncated at 0 (the population value is >= 0, so truncation
   cannot lose coverage); the published point is the projected one. Both are public.
6. **Variance by post-processing**: random groups (Wolter 2007, ch. 2) on the noisy group
   sums, linearised for means and proportions: within each stratum, the between-group mean
   square of the group means (noisy PSU counts per stratum x group, a small share of the
   budget) when the cells nest in the strata, else the plain random-group estimator
   (conservative). The noise in the group sums is known exactly (public scales) and
   subtracted: ``se_sampling``; the published estimate's own noise variance gives
   ``se_noise``; ``se = sqrt(se_sampling^2 + se_noise^2)``; the CI is t with Satterthwaite df.
   No confidential variance is published; no budget is spent on a separate variance release.
"""

from __future__ import annotations

import itertools
from collections.abc import Sequence
from dataclasses import dataclass, field
from functools import lru_cache
from importlib.metadata import version
from typing import Any

import numpy as np
import pandas as pd
from scipy import stats

from ._validate import as_list, require_columns
from .privacy.randomness import RandomState, secret_rng
from .privacy.record import PrivacyRecord, build_record
from .tables import Table, reliability

__all__ = ["dp_tabulate", "DPTables", "Odometer", "BudgetExceededError", "table_sensitivity",
           "SAMPLERS", "MEASURES", "STATISTICS"]

MEASURES = ("pure", "zcdp")
STATISTICS = ("count", "total", "mean", "proportion")
SAMPLERS = {
    "pure": f"OpenDP {version('opendp')} make_laplace on a float vector domain with an explicit "
            "grid 2^k (exact discrete Laplace on a public grid, OpenDP's CSPRNG)",
    "zcdp": f"OpenDP {version('opendp')} make_gaussian on a float vector domain with an explicit "
            "grid 2^k (exact discrete Gaussian on a public grid, OpenDP's CSPRNG)",
}
#: the grid of a measurement: 2^k at most 2^-GRID_MARGIN of the sensitivity over the vector's
#: size, so the rounding term of OpenDP's map is below 2^-GRID_MARGIN of the sensitivity
GRID_MARGIN = 24


class BudgetExceededError(ValueError):
    """A table release would take an :class:`Odometer` above its declared total."""


@dataclass
class Odometer:
    """A budget account shared by several table releases (a privacy filter).

    ``measure`` ("pure": epsilons add; "zcdp": rhos add) and an optional declared ``total``:
    a release whose charges would exceed it is refused before anything is measured. Every
    release booked here states the account's total and all its entries in its privacy record.
    """

    measure: str = "pure"
    total: float | None = None
    entries: list[dict[str, Any]] = field(default_factory=list)

    @property
    def spent(self) -> float:
        return float(sum(e["budget"] for e in self.entries))

    def check(self, new: float, what: str) -> None:
        if self.total is not None and self.spent + new > self.total * (1 + 1e-12):
            unit = "epsilon" if self.measure == "pure" else "rho"
            raise BudgetExceededError(
                f"{what} would spend {unit} {new:.6g} on top of {self.spent:.6g} already spent "
                f"({len(self.entries)} ledger entries), a total of {self.spent + new:.6g} > the "
                f"declared total {self.total:.6g}; nothing was measured. Fix: a smaller budget "
                "for this table, or declare a larger total if the disclosure review allows it.")


# ------------------------------------------------------------------------------- sensitivity
def table_sensitivity(kind: str, weight_cap: float, bounds: tuple[float, float] | None) -> float:
    """Global sensitivity of one measured vector of group x cell sums under add/remove-one.

    A record lies in exactly one group and one cell, so it changes one coordinate, by its
    trimmed weight (``kind="count"``: at most ``weight_cap``) or by its trimmed weight times its
    clipped value (``kind="total"``: at most ``weight_cap * max(|lo|, |hi|)``). One coordinate,
    so the L1 and L2 sensitivities are equal. (Replace-one neighbours would double it.)
    """
    if kind == "count":
        return float(weight_cap)
    if kind == "total":
        lo, hi = bounds
        return float(weight_cap) * max(abs(float(lo)), abs(float(hi)))
    raise ValueError(f"kind={kind!r}: 'count' or 'total'.")


@lru_cache(maxsize=256)
def opendp_measurement(measure: str, size: int, scale: float, k: int) -> Any:
    """OpenDP's vector Laplace ("pure") or Gaussian ("zcdp") measurement on ``size`` floats at
    ``scale`` with outputs on the grid 2^k (built once per setting)."""
    import opendp.prelude as dp

    dp.enable_features("contrib")
    dom = dp.vector_domain(dp.atom_domain(T=float, nan=False), size=size)
    if measure == "pure":
        return dp.m.make_laplace(dom, dp.l1_distance(T=float), scale=scale, k=k)
    return dp.m.make_gaussian(dom, dp.l2_distance(T=float), scale=scale, k=k)


def _grid_k(sensitivity: float, size: int) -> int:
    return int(np.floor(np.log2(sensitivity / size))) - GRID_MARGIN


def calibrate(measure: str, sensitivity: float, budget: float, size: int) -> dict[str, Any]:
    """The measurement of a vector of ``size`` with ``sensitivity`` whose OpenDP privacy map
    equals ``budget`` (epsilon for "pure", rho for "zcdp"): scale by OpenDP's binary search,
    then the map's value at the sensitivity (at most the budget)."""
    return dict(_calibrate(measure, float(sensitivity), float(budget), int(size)))


@lru_cache(maxsize=256)
def _calibrate(measure: str, sensitivity: float, budget: float, size: int) -> dict[str, Any]:
    """:func:`calibrate`, cached: the scale depends on public numbers only."""
    import opendp.prelude as dp

    k = _grid_k(sensitivity, size)
    scale = dp.binary_search_param(lambda s: opendp_measurement(measure, size, float(s), k),
                                   d_in=float(sensitivity), d_out=float(budget), T=float)
    meas = opendp_measurement(measure, size, float(scale), k)
    spent = float(meas.map(float(sensitivity)))
    if spent > budget * (1 + 1e-9):
        raise AssertionError(f"calibrated measurement spends {spent} > {budget}")
    var = 2 * scale**2 if measure == "pure" else scale**2
    return {"scale": float(scale), "k": k, "spent": spent, "variance": float(var), "size": size,
            "sensitivity": float(sensitivity), "measurement": meas}


# ------------------------------------------------------------------------------- result
@dataclass
class DPTables:
    """A DP table release: ``table`` (public), the consistent ``counts`` / ``totals`` it was
    computed from (public, None when not measured), ``measurements`` (public: each OpenDP
    measurement's level, kind, sensitivity, scale, grid exponent and budget), ``privacy`` (the
    public record) and ``confidential`` (trimming and clipping effects: never published)."""

    table: Table
    counts: Table | None
    totals: Table | None
    measurements: pd.DataFrame
    privacy: PrivacyRecord
    confidential: dict[str, Any] = field(repr=False)


# ------------------------------------------------------------------------------- helpers
def _levels(design: Any, var: str, given: dict[str, Sequence[Any]] | None) -> tuple[list, bool]:
    if given and var in given:
        return list(given[var]), True
    vals = pd.Series(design.data[var]).dropna().unique().tolist()
    try:
        vals = sorted(vals)
    except TypeError:
        pass
    return vals, False


def _codes(data: pd.DataFrame, var: str, levels: list) -> np.ndarray:
    idx = pd.Index(levels).get_indexer(data[var])
    bad = np.flatnonzero(idx < 0)
    if bad.size:
        raise ValueError(
            f"dp_tabulate: column {var!r} has value(s) outside the public levels {levels[:10]} "
            f"in rows {bad[:5].tolist()} (e.g. {data[var].iloc[bad[0]]!r}). Fix: give the full "
            f"public level set in levels={{{var!r}: [...]}}, or recode / drop those rows.")
    return idx


def _group_of_records(design: Any, groups: int,
                      rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray]:
    """Each stage-1 PSU in one of ``groups`` groups, independently and uniformly (so adding or
    removing a record never moves another record's group). Returns (group of each record,
    group of each PSU)."""
    cl = np.asarray(design.stages[0].cluster)
    g_of_psu = rng.integers(0, groups, size=int(cl.max()) + 1)
    return g_of_psu[cl], g_of_psu


def _level_matrices(shape: tuple[int, ...]) -> list[tuple[tuple[int, ...], np.ndarray]]:
    """(kept axes, aggregation matrix M: (K_level, K)) for every subset of the axes, interior
    first, grand total last."""
    K = int(np.prod(shape))
    idx = np.arange(K).reshape(shape)
    out = []
    d = len(shape)
    for r in range(d, -1, -1):
        for keep in itertools.combinations(range(d), r):
            sub = [shape[a] for a in keep]
            Kl = int(np.prod(sub)) if sub else 1
            M = np.zeros((Kl, K))
            coords = np.unravel_index(idx.ravel(), shape)
            row = (np.ravel_multi_index([coords[a] for a in keep], sub) if keep
                   else np.zeros(K, dtype=int))
            M[row, np.arange(K)] = 1.0
            out.append((keep, M))
    return out


def _nnls_project(x: np.ndarray, C: np.ndarray) -> np.ndarray:
    """argmin_{z >= 0} (z - x)' C^-1 (z - x) (x itself when already non-negative)."""
    if (x >= 0).all():
        return x.copy()
    from scipy.optimize import nnls

    R = np.linalg.cholesky(np.linalg.inv(C)).T  # C^-1 = R'R
    z, _ = nnls(R, R @ x)
    return z


# ------------------------------------------------------------------------------- main
#: share of the budget spent on the noisy numbers of PSUs per stratum x random group (the
#: within-stratum random-group variance, see :func:`_variance`), when the table classifies by
#: the strata (or the design has none)
PSU_COUNT_SHARE = 0.10
#: floor the estimated sampling variance at 0 before adding the noise variance (True:
#: conservative when the noise dominates, 0.97-0.99 coverage at epsilon 10), or not (False,
#: the default: the total variance estimate is unbiased, coverage at the nominal rate; a
#: total that comes out <= 0 gives no interval and a flag). docs/dp_tables.md has both studies.
FLOOR_SAMPLING = False


def _check_budget(measure: str, epsilon: Any, rho: Any) -> tuple[float, str]:
    budget, other = (epsilon, rho) if measure == "pure" else (rho, epsilon)
    name = "epsilon" if measure == "pure" else "rho"
    if other is not None:
        raise ValueError(f"measure={measure!r} takes {name}=; drop "
                         f"{'rho' if measure == 'pure' else 'epsilon'}=.")
    if budget is None or isinstance(budget, bool) or not np.isfinite(budget) or budget <= 0:
        raise ValueError(f"{name}={budget!r}: give a positive finite budget for measure={measure!r}.")
    return float(budget), name


def _check_args(design: Any, cells: Any, values: Any, statistic: str, measure: str,
                epsilon: Any, rho: Any, bounds: Any, weight_cap: Any, groups: Any,
                margin_share: float, count_share: float) -> tuple:
    from .design import SurveyDesign

    if not isinstance(design, SurveyDesign):
        raise ValueError(f"dp_tabulate(design=...): expected the confidential SurveyDesign, got "
                         f"{type(design).__name__}.")
    cells = as_list(cells, "cells")
    if not cells:
        raise ValueError("cells: give at least one classification variable.")
    if statistic not in STATISTICS:
        raise ValueError(f"statistic={statistic!r}: one of {STATISTICS}.")
    if measure not in MEASURES:
        raise ValueError(f"measure={measure!r}: 'pure' (epsilon) or 'zcdp' (rho).")
    budget, name = _check_budget(measure, epsilon, rho)
    if weight_cap is None or isinstance(weight_cap, bool) or not np.isfinite(weight_cap) \
            or weight_cap <= 0:
        raise ValueError(f"weight_cap={weight_cap!r}: a positive public number (weights above it "
                         "are trimmed to it; it is the count sensitivity).")
    if int(groups) != groups or groups < 2:
        raise ValueError(f"groups={groups!r}: an integer >= 2 (the CI has groups - 1 df).")
    if not 0 <= margin_share < 1:
        raise ValueError(f"margin_share={margin_share!r}: in [0, 1).")
    if not 0 < count_share < 1:
        raise ValueError(f"count_share={count_share!r}: in (0, 1).")
    if statistic == "count" and values is not None:
        raise ValueError("statistic='count' takes no values=; drop it.")
    if statistic != "count" and not isinstance(values, str):
        raise ValueError(f"statistic={statistic!r}: name the column in values=.")
    if statistic in ("total", "mean"):
        if bounds is None or len(bounds) != 2 or not (np.isfinite(bounds[0]) and np.isfinite(
                bounds[1]) and bounds[0] < bounds[1]):
            raise ValueError(f"bounds={bounds!r}: statistic={statistic!r} needs public bounds "
                             "(lo, hi) with lo < hi on the values (they set the sensitivity).")
        bounds = (float(bounds[0]), float(bounds[1]))
    else:
        bounds = None
    if values in cells:
        raise ValueError(f"values={values!r} is also in cells={cells}.")
    require_columns(design.full_data, cells + ([values] if values else []), "dp_tabulate")
    return cells, float(budget), name, bounds, int(groups)


def _bounded(design: Any, values: str | None, bounds: Any, weight_cap: float,
             inside: np.ndarray) -> tuple:
    """Trimmed weights (0 outside a subset's domain), clipped values and their effect (for
    the confidential report)."""
    w_raw = np.where(inside, np.asarray(design.full_weights, float), 0.0)
    w = np.minimum(w_raw, weight_cap)
    conf = {"weights_trimmed": int(np.count_nonzero(w_raw > weight_cap)),
            "weight_moved": float(np.sum(w_raw - w)),
            "weight_moved_share": float(np.sum(w_raw - w) / np.sum(w_raw)),
            "max_weight": float(w_raw.max()), "weight_cap": float(weight_cap)}
    if bounds is None:
        return w, None, conf
    y_raw = pd.to_numeric(design.full_data[values], errors="coerce").to_numpy(float)
    bad = np.flatnonzero(~np.isfinite(y_raw) & inside)
    if bad.size:
        raise ValueError(f"dp_tabulate: column {values!r} is missing or not numeric in rows "
                         f"{bad[:5].tolist()}. Fix: impute or drop those rows first (a DP "
                         "table counts every record).")
    y = np.where(inside, np.clip(np.nan_to_num(y_raw), *bounds), 0.0)
    conf.update(values_clipped=int(np.count_nonzero((y != y_raw) & inside)),
                value_moved=float(np.sum(np.abs(y - np.nan_to_num(y_raw)) * w)))
    return w, y, conf


def _strata_axis(design: Any, classif: list[str]) -> int | None:
    """The classification axis holding the stage-1 strata (-1: unstratified; None: the strata
    cross the cells, and the groups' ratio adjustment is not available)."""
    if not design.has_strata:
        return -1
    s = design.strata_vars[0]
    return classif.index(s) if s in classif else None


def _measure_all(plan: list[tuple], measure: str, name: str, groups: int,
                 true: dict[str, np.ndarray], classif: list[str], shape: tuple) -> tuple:
    """Run every planned OpenDP measurement: noisy levels per kind, ledger entries, the
    public measurement table."""
    rows, entries = [], []
    noisy: dict[str, list] = {}
    for kind, keep, M, sens, b in plan:
        if kind == "psu":
            size, z_true, lvl = M.shape[0], true["psu"], "PSUs per stratum x random group"
        else:
            size = groups * M.shape[0]
            z_true = (true[kind] @ M.T).ravel()
            lvl = "cells" if len(keep) == len(shape) else (
                "grand total" if not keep else "margin by " + ", ".join(classif[a] for a in keep))
        cal = calibrate(measure, sens, b, size)
        z = np.asarray(cal["measurement"](np.asarray(z_true, float).tolist()), float)
        noisy.setdefault(kind, []).append((M, z if kind == "psu" else z.reshape(groups, -1),
                                           cal["variance"]))
        rows.append({"kind": kind, "level": lvl, "coordinates": size,
                     "sensitivity": cal["sensitivity"], "scale": cal["scale"],
                     "grid_exponent_k": cal["k"], name: cal["spent"]})
        entries.append({"step": f"{kind} {lvl}" + ("" if kind == "psu" else
                                                  f" ({groups} random groups)"),
                        "charge": name, "budget": cal["spent"], name: cal["spent"],
                        "sensitivity": cal["sensitivity"], "scale": cal["scale"]})
    return noisy, entries, pd.DataFrame(rows)


def dp_tabulate(
    design: Any,
    cells: str | Sequence[str],
    values: str | None = None,
    statistic: str = "count",
    *,
    measure: str = "pure",
    epsilon: float | None = None,
    rho: float | None = None,
    bounds: tuple[float, float] | None = None,
    weight_cap: float,
    margins: bool = True,
    groups: int = 10,
    margin_share: float = 0.0,
    count_share: float = 0.3,
    levels: dict[str, Sequence[Any]] | None = None,
    level: float = 0.95,
    cv_max: float | None = 0.30,
    nonnegative: bool | None = None,
    odometer: Odometer | None = None,
    seed: RandomState = None,
    margin_label: str = "All",
) -> DPTables:
    """A differentially private table of a survey design (module docstring; docs/dp_tables.md).

    Parameters
    ----------
    design : the confidential SurveyDesign (its stage-1 PSUs form the random groups).
    cells : classification variable(s); the first is the table's rows, the others its columns.
    values : the numeric variable (``total``, ``mean``) or the categorical variable whose level
        shares are published in each cell (``proportion``); None for ``count``.
    statistic : "count" (weighted counts), "total", "mean" (ratio of the noisy total to the
        noisy count: post-processing) or "proportion" (noisy counts of cells x level over
        their sum over levels).
    measure : "pure" (``epsilon``; Laplace) or "zcdp" (``rho``; Gaussian).
    bounds : public (lo, hi) of ``values`` for totals and means (values are clipped to them).
    weight_cap : public cap on the weights (weights above it are trimmed to it).
    margins : publish every margin (each sum over a subset of ``cells``) beside the cells.
    groups : G, the number of random groups (the CI has G - 1 df).
    margin_share : share of each table's budget spent measuring the margins (0: margins are
        sums of the measured cells); the rest measures the cells; GLS combines them.
    count_share : share of the budget spent on counts for a mean (the rest on totals).
    levels : public level sets of the classification variables ({var: [...]}); a variable
        not given takes the data's levels, and the record declares that as published without
        budget.
    nonnegative : project counts (and totals, when lo >= 0) onto non-negative values (default:
        True where the quantity cannot be negative).
    odometer : an :class:`Odometer` the release is booked in (and refused by, above its total).
    seed : the random groups' assignment only (None: secret OS entropy). OpenDP's noise comes
        from its own CSPRNG and cannot be seeded; the seed is never recorded.

    Returns
    -------
    :class:`DPTables`: ``table`` (estimate, estimate_linear, se, se_sampling, se_noise,
    ci_low, ci_high, df, cv, flag per cell and margin), ``counts`` / ``totals`` (the consistent
    tables a mean or proportion comes from), ``measurements``, ``privacy``, ``confidential``.

    Example
    -------
    >>> from surveysynth.datasets import sdr_population, sdr_sample
    >>> d = sdr_sample(sdr_population(seed=1), n=1000, seed=2)
    >>> r = dp_tabulate(d, ["field", "gender"], "salary", "mean", epsilon=50.0,
    ...                 bounds=(0, 500_000), weight_cap=1000.0)
    >>> r.privacy.guarantee_class, round(r.privacy.epsilon, 9)
    ('formal pure DP', 50.0)
    """
    cells, budget, name, bounds, groups = _check_args(
        design, cells, values, statistic, measure, epsilon, rho, bounds, weight_cap, groups,
        margin_share, count_share)
    data = design.full_data
    classif = cells + ([values] if statistic == "proportion" else [])
    lev, declared = {}, []
    for v in classif:
        lev[v], public = _levels(design, v, levels)
        if not public:
            declared.append(v)
    shape = tuple(len(lev[v]) for v in classif)
    K = int(np.prod(shape))
    # a subset (domain) design: records outside the domain add nothing but keep their PSUs
    inside = np.asarray(design.in_subset, dtype=bool)
    cell = np.zeros(len(data), dtype=np.int64)
    cell[inside] = np.ravel_multi_index([_codes(data.loc[inside], v, lev[v]) for v in classif],
                                        shape)
    w, y, conf = _bounded(design, values, bounds, weight_cap, inside)

    # --- random groups and the noiseless group x cell sums
    rng = secret_rng(seed)
    g, g_of_psu = _group_of_records(design, groups, rng)
    kinds = {"count": ["count"], "total": ["total"], "mean": ["count", "total"],
             "proportion": ["count"]}[statistic]
    true = {k: np.bincount(g * K + cell, weights=w if k == "count" else w * y,
                           minlength=groups * K).reshape(groups, K) for k in kinds}

    # --- PSU counts per stratum x group (ratio adjustment) when the cells nest in the strata
    s_axis = _strata_axis(design, classif)
    stratum_of_cell, plan, psu_b = None, [], 0.0
    if s_axis is not None:
        st = design.stages[0]
        if s_axis == -1:
            stratum_of_cell, n_strata = np.zeros(K, dtype=int), 1
            psu_stratum = np.zeros(st.n_clusters, dtype=int)
        else:
            n_strata = shape[s_axis]
            stratum_of_cell = np.unravel_index(np.arange(K), shape)[s_axis]
            # the stratum level of each PSU (a PSU lies in one stratum)
            rec_level = _codes(data, classif[s_axis], lev[classif[s_axis]])
            psu_stratum = np.zeros(st.n_clusters, dtype=int)
            psu_stratum[np.asarray(st.cluster)] = rec_level
        true["psu"] = np.bincount(psu_stratum * groups + g_of_psu[:st.n_clusters],
                                  minlength=n_strata * groups).astype(float)
        psu_b = budget * PSU_COUNT_SHARE
        plan.append(("psu", (), np.eye(n_strata * groups), 1.0, psu_b))
    rest = budget - psu_b

    # --- budget: shares per kind and level, each a calibrated OpenDP measurement
    kind_share = ({"count": count_share, "total": 1 - count_share} if len(kinds) == 2
                  else {kinds[0]: 1.0})
    mats = _level_matrices(shape)
    measured = mats if margin_share > 0 else mats[:1]
    level_share = ([1.0] if len(measured) == 1 else
                   [1 - margin_share] + [margin_share / (len(measured) - 1)] * (len(measured) - 1))
    for kind in kinds:
        sens = table_sensitivity(kind, weight_cap, bounds)
        for (keep, M), share in zip(measured, level_share, strict=True):
            plan.append((kind, keep, M, sens, rest * kind_share[kind] * share))
    if odometer is not None:
        if odometer.measure != measure:
            raise ValueError(f"odometer.measure={odometer.measure!r} but measure={measure!r}: "
                             "one account composes one kind of budget.")
        odometer.check(float(sum(p[4] for p in plan)), f"dp_tabulate({statistic} by {cells})")
    noisy, entries, meas_table = _measure_all(plan, measure, name, groups, true, classif, shape)
    n_hg = _psu_counts(noisy, groups)

    # --- GLS per group (linear: unbiased, known noise covariance), then sum over groups
    est_g, Cnoise = {}, {}
    for kind in kinds:
        P = np.linalg.inv(sum(Mt.T @ Mt / v for Mt, _, v in noisy[kind]))
        est_g[kind] = sum((z @ Mt) / v for Mt, z, v in noisy[kind]) @ P.T  # (groups, K)
        Cnoise[kind] = groups * P  # noise covariance of the summed interior estimate
    lin = {k: est_g[k].sum(axis=0) for k in kinds}
    nonneg = {"count": True if nonnegative is None else bool(nonnegative),
              "total": (bounds is not None and bounds[0] >= 0) if nonnegative is None
              else bool(nonnegative)}
    proj = {k: (_nnls_project(lin[k], Cnoise[k]) if nonneg[k] else lin[k].copy()) for k in kinds}

    ctx = dict(measure=measure, shape=shape, classif=classif, lev=lev, groups=groups, lin=lin, proj=proj,
               est_g=est_g, Cnoise=Cnoise, nonneg=nonneg, level=level, cv_max=cv_max,
               margin_label=margin_label, statistic=statistic, values=values,
               n_hg=n_hg, stratum_of_cell=stratum_of_cell,
               note=f"{name} = {budget:g} ({measure}); OpenDP noise, global sensitivity from "
                    "public bounds; margins are sums of their cells; SE = sampling (random "
                    "groups) + noise.")
    out_levels = mats if margins else mats[:1]
    if statistic == "proportion":  # the value's axis is never summed over
        out_levels = [(keep, M) for keep, M in out_levels if len(shape) - 1 in keep]
    tables = {}
    if statistic in ("count", "mean", "proportion"):
        tables["count"] = _publish("count", out_levels, ctx)
    if statistic in ("total", "mean"):
        tables["total"] = _publish("total", out_levels, ctx)
    table = tables[statistic] if statistic in tables else _publish(statistic, out_levels, ctx)

    # --- the record and the odometer
    if odometer is not None:
        odometer.entries.extend(entries)
        ledger, total = odometer.entries, odometer.spent
    else:
        ledger, total = entries, float(sum(e["budget"] for e in entries))
    conf["within_stratum_group_variance"] = (
        "yes (cells nested in the strata)" if stratum_of_cell is not None else
        "no (strata cross the cells): SEs of counts and totals conservative")
    record = _record(measure, total, ledger, groups, weight_cap, bounds, declared, statistic,
                     margin_share)
    return DPTables(table, tables.get("count"), tables.get("total"), meas_table, record, conf)


def _gradient(kind_stat: str, a: np.ndarray, ctx: dict) -> tuple:
    """(published estimate, linear estimate, gradient per kind or None) of one row ``a``."""
    lin, proj, shape = ctx["lin"], ctx["proj"], ctx["shape"]
    if kind_stat in ("count", "total"):
        return a @ proj[kind_stat], a @ lin[kind_stat], {kind_stat: a}
    if kind_stat == "mean":
        N, T = a @ lin["count"], a @ lin["total"]
        Np, Tp = a @ proj["count"], a @ proj["total"]
        e_lin = T / N if N > 0 else np.nan
        e_pub = Tp / Np if Np > 0 else np.nan
        return e_pub, e_lin, ({"count": -e_lin * a / N, "total": a / N} if N > 0 else None)
    va = len(shape) - 1  # proportion: the row's cells over the same cells summed over levels
    den = np.broadcast_to(a.reshape(shape).sum(axis=va, keepdims=True), shape).ravel()
    Dn, Nm, Dp = den @ lin["count"], a @ lin["count"], den @ proj["count"]
    e_lin = Nm / Dn if Dn > 0 else np.nan
    e_pub = (a @ proj["count"]) / Dp if Dp > 0 else np.nan
    return e_pub, e_lin, ({"count": (a - e_lin * den) / Dn} if Dn > 0 else None)


def _psu_counts(noisy: dict, groups: int) -> np.ndarray | None:
    """The noisy PSU counts per stratum x group, rounded (None when not measured)."""
    return np.rint(noisy["psu"][0][1].reshape(-1, groups)) if "psu" in noisy else None


def _variance(grad: dict | None, ctx: dict) -> tuple[float, float, float]:
    """(sampling variance, noise variance, df) of one linearised statistic.

    PSUs fall in the G groups independently, so a group's share of a stratum is random; the
    plain random-group estimator then also measures that share's variation (its expectation
    over the assignment is sum_i z_i^2, not the with-replacement sum_h [sum_i z_hi^2 -
    T_h^2 / n_h]; for a stratum's count, most of it is the size term). When the cells nest in
    the strata (or there are none), the variance is estimated within each stratum h from the
    group means m_hg = S_hg / n_hg of its noisy group sums S_hg and noisy PSU counts n_hg
    (groups with n_hg >= 1): the between-group mean square
    B_h = sum_g n_hg (m_hg - m_h)^2 / (J_h - 1) has expectation s_h^2 (the PSU-level variance)
    for a random partition, whatever the sizes; its noise part sum_g q (1/n_hg - 1/n_h) /
    (J_h - 1) (q: one group's known noise variance) is subtracted, and
    v = sum_h n_h B_h is the with-replacement variance (Wolter 2007, ch. 2). df by
    Satterthwaite over the strata. Otherwise (strata crossing the cells) the plain estimator
    over the whole sample, conservative for counts and totals, with G - 1 df. The noise
    variance of the published (summed) estimate is a' C a, known exactly."""
    if grad is None:
        return np.nan, np.nan, np.nan
    G = ctx["groups"]
    noise = float(sum(grad[k] @ ctx["Cnoise"][k] @ grad[k] for k in grad))
    sg = {k: ctx["est_g"][k] @ np.diag(grad[k]) for k in grad}  # (G, K) per-cell group values
    soc, n_hg = ctx["stratum_of_cell"], ctx["n_hg"]
    if n_hg is None:
        lg = sum(v.sum(axis=1) for v in sg.values())
        v_rg = float(np.sum((G * lg - lg.sum()) ** 2) / (G * (G - 1)))
        return (max(v_rg - noise, 0.0) if FLOOR_SAMPLING else v_rg - noise), noise, float(G - 1)
    parts, dfs = [], []
    for h in range(n_hg.shape[0]):
        at = soc == h
        if not any(np.any(grad[k][at]) for k in grad):
            continue
        S = sum(v[:, at].sum(axis=1) for v in sg.values())  # (G,)
        q = float(sum((grad[k] * at) @ (ctx["Cnoise"][k] / G) @ (grad[k] * at) for k in grad))
        n = n_hg[h]
        J = n >= 1
        if J.sum() < 2:  # a stratum in fewer than 2 groups: the plain, conservative estimator
            v_h = float(np.sum((G * S - S.sum()) ** 2) / (G * (G - 1))) - G * q
            parts.append(v_h)
            dfs.append((max(v_h, 0.0), G - 1))
            continue
        nJ, SJ = n[J], S[J]
        nh = nJ.sum()
        m = SJ / nJ
        B = float(np.sum(nJ * (m - SJ.sum() / nh) ** 2) / (J.sum() - 1))
        noise_B = q * float(np.sum(1 / nJ - 1 / nh)) / (J.sum() - 1)
        parts.append(nh * (B - noise_B))
        dfs.append((nh * B, J.sum() - 1))
    v = float(np.sum(parts))
    if FLOOR_SAMPLING:
        v = max(v, 0.0)
    # Satterthwaite: the published noise variance is known; each stratum's n_h B_h (sampling
    # and the noise of its group means) is estimated on J_h - 1 df
    den = sum(b * b / d for b, d in dfs)
    df = float((v + noise) ** 2 / den) if den > 0 else float(G - 1)
    return v, noise, max(df, 1.0)


def _publish(kind_stat: str, out_levels: list, ctx: dict) -> Table:
    """The public table of one statistic: every published cell's estimate, SE parts, CI."""
    shape, classif, lev = ctx["shape"], ctx["classif"], ctx["lev"]
    floor0 = kind_stat in ("count", "proportion") or (
        kind_stat in ("total", "mean") and ctx["nonneg"]["total"])
    n_top = 1 if ctx["statistic"] == "proportion" else 0
    recs = []
    for keep, M in out_levels:
        sub = [shape[ax] for ax in keep]
        for r in range(M.shape[0]):
            lab = {v: ctx["margin_label"] for v in classif}
            for ax, i in zip(keep, np.unravel_index(r, sub) if keep else (), strict=True):
                lab[classif[ax]] = lev[classif[ax]][i]
            e_pub, e_lin, grad = _gradient(kind_stat, M[r], ctx)
            samp, noise, df = _variance(grad, ctx)
            if FLOOR_SAMPLING:
                samp = max(samp, 0.0)
            # the unbiased total variance; not positive (the noise made the sampling part
            # come out below minus the noise): no interval, flagged
            se = np.sqrt(samp + noise) if samp + noise > 0 else np.nan
            t_q = stats.t.ppf((1 + ctx["level"]) / 2, df) if np.isfinite(df) else np.nan
            lo, hi = e_lin - t_q * se, e_lin + t_q * se
            if floor0 and np.isfinite(lo):
                lo = max(lo, 0.0)
            if kind_stat == "proportion" and np.isfinite(hi):
                hi = min(hi, 1.0)
            recs.append({**lab, "cell": ("interior" if len(keep) == len(shape) else
                                         "grand total" if len(keep) == n_top else "margin"),
                         "estimate": e_pub, "estimate_linear": e_lin, "se": se,
                         "var_sampling": samp, "se_sampling": np.sqrt(max(samp, 0.0)),
                         "se_noise": np.sqrt(noise),
                         "ci_low": lo, "ci_high": hi, "df": df})
    long = pd.DataFrame(recs)
    cv, reason, flag = reliability(long["estimate"].to_numpy(float), long["se"].to_numpy(float),
                                   np.full(len(long), np.nan), ctx["cv_max"], None)
    novar = np.isfinite(long["estimate"].to_numpy(float)) & ~np.isfinite(long["se"].to_numpy(float))
    reason = np.where(novar, "no positive variance estimate", reason)
    long = long.assign(cv=cv, n_unweighted=np.nan, flag=flag | novar, flag_reason=reason)
    meta = {"cv_max": ctx["cv_max"], "n_min": None, "level": ctx["level"],
            "source": "dp_tables", "source_note": ctx["note"]}
    stat_name = "total" if kind_stat == "count" else kind_stat
    return Table(long, classif[:1], classif[1:], stat_name,
                 None if kind_stat == "count" else ctx["values"], ctx["margin_label"], meta)


def _record(measure: str, total: float, ledger: list[dict[str, Any]], groups: int,
            weight_cap: float, bounds: tuple[float, float] | None, declared: list[str],
            statistic: str, margin_share: float) -> PrivacyRecord:
    facts = {"measure": measure, "sampler": SAMPLERS[measure], "neighbours": "add/remove one record",
             "weight_cap": float(weight_cap), "groups": groups, "statistic": statistic,
             "consistency": ("GLS of measured cells and margins, then non-negative projection"
                             if margin_share > 0 else
                             "margins are sums of the measured cells; non-negative projection")}
    if bounds is not None:
        facts["bound_low"], facts["bound_high"] = bounds
    if measure == "zcdp":
        facts["rho"] = total
    pwb = [{"item": f"the level set of {v!r} (every level the data hold)",
            "reason": "taken from the data because no public level set was given (levels=); "
                      "a level present in the data is then visible even when its cell is empty "
                      "after noise"} for v in declared]
    return build_record(
        "dp_tables",
        "DP survey tables: noisy random-group cell sums (OpenDP), consistent margins, "
        "random-group variance",
        m=1, epsilon=total if measure == "pure" else None, seeded=False, facts=facts,
        ledger=[dict(e) for e in ledger], published_without_budget=pwb,
        notes=["the seed, if any, fixed only the random groups; OpenDP's noise cannot be "
               "replayed by anyone"])
