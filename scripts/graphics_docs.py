"""Draw the pictures of docs/graphics.md (docs/img/*.png) from R's man-page examples.

Run from the repository root: ``python scripts/graphics_docs.py``. Uses R's api data as the
package ships it (``surveysynth.datasets.load_api``); no R needed. Deterministic (no randomness).
"""

from __future__ import annotations

from pathlib import Path

import matplotlib

matplotlib.use("Agg")

import matplotlib.pyplot as plt  # noqa: E402

import surveysynth as ss  # noqa: E402
from surveysynth.analysis import (  # noqa: E402
    svyboxplot,
    svycdf,
    svyhist,
    svyplot,
    svyqqmath,
    svyqqplot,
    svysmooth,
)
from surveysynth.datasets import load_api  # noqa: E402

OUT = Path(__file__).resolve().parents[1] / "docs" / "img"


def main() -> None:
    OUT.mkdir(parents=True, exist_ok=True)
    strat = load_api("apistrat")
    dstrat = ss.SurveyDesign(strat, strata="stype", weights="pw", fpc="fpc")
    dclus1 = ss.SurveyDesign(load_api("apiclus1"), ids="dnum", weights="pw", fpc="fpc")
    figs = {}

    fig, ax = plt.subplots(figsize=(5, 4))
    svyhist("enroll", dstrat, ax=ax)
    dens = svysmooth("enroll", dstrat)
    dens.plot(ax=ax, color="purple", lw=2)
    ax.set_title("svyhist(~enroll, dstrat) + svysmooth density")
    figs["svyhist"] = fig

    fig, ax = plt.subplots(figsize=(5, 4))
    svyboxplot("enroll", dstrat, by="stype", all_outliers=True, ax=ax)
    ax.set_title("svyboxplot(enroll ~ stype, dstrat, all.outliers=TRUE)")
    figs["svyboxplot"] = fig

    for style in ("bubble", "transparent", "hex"):
        fig, ax = plt.subplots(figsize=(5, 4))
        svyplot("api00", "api99", dstrat, style=style, ax=ax)
        if style != "hex":
            s = svysmooth("api99", dstrat, y="api00")
            s.plot(ax=ax, color="red")
        ax.set_title(f"svyplot(api00 ~ api99, dstrat, style='{style}')")
        figs[f"svyplot_{style}"] = fig

    fig, axes = plt.subplots(1, 2, figsize=(9, 4))
    svyqqmath("api99", dstrat, ax=axes[0])
    axes[0].set_title("svyqqmath(~api99, dstrat)")
    q = svyqqplot("enroll", "enroll", dstrat, designx=dclus1, ax=axes[1])
    lim = [min(q.x.min(), q.y.min()), max(q.x.max(), q.y.max())]
    axes[1].plot(lim, lim, color="grey")
    axes[1].set_xlabel("enroll (dclus1)")
    axes[1].set_ylabel("enroll (dstrat)")
    axes[1].set_title("svyqqplot(enroll~enroll, dstrat, designx=dclus1)")
    figs["svyqqplot"] = fig

    fig, ax = plt.subplots(figsize=(5, 4))
    svycdf(["enroll"], dstrat)["enroll"].plot(ax=ax)
    ax.set_title("svycdf(~enroll, dstrat)")
    figs["svycdf"] = fig

    cp = ss.svycoplot("api00", "api99", "stype", dstrat)
    cp.fig.suptitle("svycoplot(api00 ~ api99 | stype, dstrat, style='transparent')")
    figs["svycoplot"] = cp.fig

    for name, f in figs.items():
        f.tight_layout()
        f.savefig(OUT / f"{name}.png", dpi=80)
        plt.close(f)
        print(OUT / f"{name}.png")


if __name__ == "__main__":
    main()
