"""The curator's identification-risk diagnostics (seed 002): never part of a release.

* :func:`whack_a_mole` — records whose risk rises by at least 0.25 under a weighted synthesizer
  against the unweighted one (seed 002 Figs. 3, 5b, 9) and counts above 0.5;
* :func:`plot_whack_a_mole`, :func:`plot_risk_violins` — the pictures of seed 002 Figs. 2, 3, 8, 9;
* :func:`bootstrap_estimates` — bootstrapped point estimates and 95% intervals of the mean, median
  and 90% quantile of the outcome, as seed 002 Tables 4 and 6 report them.

All of them compare per-record quantities of the confidential data: they belong in the
confidential part of a release (``confidential/``), for the disclosure review.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import pandas as pd

from .identification import IdentificationRisk, as_frame, outcome_values
from .randomness import secret_rng

__all__ = ["whack_a_mole", "WhackAMole", "plot_whack_a_mole", "plot_risk_violins", "bootstrap_estimates"]


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
    frame = as_frame(original, "original")
    y = outcome_values(frame, outcome, "original")
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
                ys.append(outcome_values(as_frame(d, f"synthetic[{k}]"), outcome, f"synthetic[{k}]"))
    if not ys:
        raise ValueError("synthetic holds no data sets.")
    if int(B) < 10:
        raise ValueError(f"B must be at least 10 bootstrap resamples; got {B}.")
    if not 0 < level < 1:
        raise ValueError(f"level must be in (0, 1); got {level}.")
    rng = secret_rng(seed)
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

