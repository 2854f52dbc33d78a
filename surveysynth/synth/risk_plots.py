"""Risk diagnostics of a fitted pseudo posterior synthesizer as pictures (seed 001 Figs. 1-3).

They show per-record bounds, risk weights and confidential values: for the curator and the
disclosure review (the confidential report), never for publication.
"""

from __future__ import annotations

from typing import Any

import numpy as np

__all__ = ["plot_fit_risk", "plot_fit_weights", "plot_risk_violins"]


def plot_fit_risk(fit: Any, ax=None):
    """Violins of Delta_i (unweighted), Delta_alpha,i (weighted) and alpha_i (seed 001 Fig 1)."""
    import matplotlib.pyplot as plt

    if ax is None:
        fig, ax = plt.subplots(1, 2, figsize=(8, 3.5))
    else:
        fig = np.atleast_1d(ax)[0].figure
    ax = np.atleast_1d(ax)
    d = [fit.delta_[np.isfinite(fit.delta_)], fit.delta_alpha_i_]
    ax[0].violinplot(d, showmedians=True)
    ax[0].set_xticks([1, 2], ["unweighted", "weighted"])
    ax[0].set_ylabel("record Lipschitz bound")
    ax[0].set_title(f"{fit.name}: max {fit.delta_unweighted_:.2f} -> "
                    f"{fit.delta_alpha_:.2f}")
    if len(ax) > 1:
        ax[1].violinplot([fit.alpha_], showmedians=True)
        ax[1].set_xticks([1], [fit.name])
        ax[1].set_ylabel("alpha")
        ax[1].set_ylim(-0.02, 1.02)
    fig.tight_layout()
    return fig


def plot_fit_weights(fit: Any, index: int = 0):
    """Outcome vs weight: confidential, synthesized and smoothed weights (seed 001 Figs 2-3).

    The left panel shows confidential values: a diagnostic for the data holder only.
    """
    import matplotlib.pyplot as plt

    if fit.name == "PBP":
        raise ValueError("PBP does not model or release weights; nothing to plot.")
    frames = fit.synthesize(m=max(fit.m, index + 1), include_synthetic_weights=True)
    f = frames[index]
    prep = fit._prep_
    wname, y = prep["weights_name"], fit.outcome
    fig, ax = plt.subplots(1, 3, figsize=(11, 3.5), sharey=True)
    panels = [(prep["y_raw"], prep["w_raw"], "confidential"),
              (f[y].to_numpy(), f[f"{wname}_synthetic"].to_numpy(), "synthesized weights"),
              (f[y].to_numpy(), f[wname].to_numpy(), "smoothed weights")]
    for a, (yy, ww, title) in zip(ax, panels, strict=False):
        a.scatter(ww, yy, s=4, alpha=0.5)
        a.set_title(f"{fit.name}: {title}")
        a.set_xlabel("weight")
    ax[0].set_ylabel(y)
    fig.tight_layout()
    return fig


def plot_risk_violins(fits: dict[str, Any]):
    """Seed 001 Fig. 1: violins of Delta_alpha,i (a) and alpha_i (b) for several fits."""
    import matplotlib.pyplot as plt

    names = list(fits)
    fig, ax = plt.subplots(1, 2, figsize=(9, 3.5))
    ax[0].violinplot([fits[k].delta_alpha_i_ for k in names], showmedians=True)
    ax[0].set_xticks(range(1, len(names) + 1), names)
    ax[0].set_title("record-level Lipschitz bounds (weighted)")
    ax[1].violinplot([fits[k].alpha_ for k in names], showmedians=True)
    ax[1].set_xticks(range(1, len(names) + 1), names)
    ax[1].set_title("risk weights alpha")
    fig.tight_layout()
    return fig
