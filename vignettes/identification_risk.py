"""Vignette: identification-risk weighted synthesis of CE-like family income.

Seed 002 (Hu, Savitsky & Williams) synthesizes the Consumer Expenditure Surveys' family income
with a finite mixture of regressions and downweights risky records in the likelihood. The CE
data are confidential, so this vignette uses ``surveysynth.datasets.ce_like``: ten categorical
predictors and a skewed income with a few losses; the intruder knows {gender, age, region}
(40 patterns) and r = 20%.

Three synthesizers, as in seed 002 Sections 2.3 and 3.2:
  Synthesizer  unweighted mixture (alpha = 1)
  Marginal     alpha^m  = 1 - IR^c                  (marginal identification-risk weights)
  Pairwise     alpha^pw = 1 - mean_j IR^c_ij        (pairwise weights)

Outputs (in --out DIR): identification_risk.md with the risk and utility tables side by side,
risk_violins.png (seed 002 Figs. 2/8) and whack_a_mole_{marginal,pairwise}.png (Figs. 3/9).

Run:  python vignettes/identification_risk.py [--fast] [--out DIR]
"""

from __future__ import annotations

import argparse
import time
import warnings
from pathlib import Path

import numpy as np
import pandas as pd
from tqdm.auto import tqdm

from surveysynth.datasets.risk import CE_KNOWN, ce_like
from surveysynth.privacy.identification_report import (
    bootstrap_estimates,
    plot_risk_violins,
    plot_whack_a_mole,
    whack_a_mole,
)
from surveysynth.privacy.identification_weights import risk_weights
from surveysynth.synth import MixtureSynthesizer
from surveysynth.synthetic_utility import ecdf_utility


def md_table(df: pd.DataFrame, floatfmt: str = "{:.4f}") -> str:
    """A GitHub-markdown table (no extra dependency)."""
    cols = [str(df.index.name or "")] + [str(c) for c in df.columns]
    lines = ["| " + " | ".join(cols) + " |", "|" + "---|" * len(cols)]
    for idx, row in df.iterrows():
        cells = [str(idx)]
        for v in row:
            if isinstance(v, (float, np.floating)):
                cells.append(floatfmt.format(v))
            else:
                cells.append(str(v))
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> Path:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--fast", action="store_true", help="small data and short chains (about a minute)")
    ap.add_argument("--out", default=str(Path(__file__).resolve().parent / "out" / "identification_risk"))
    ap.add_argument("--seed", type=int, default=2017)
    ap.add_argument("--allow-unconverged", action="store_true",
                    help="release fits that fail the convergence gates (implied by --fast)")
    args = ap.parse_args(argv)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    t0 = time.perf_counter()

    if args.fast:
        n, L, K, chains, draws, warmup = 400, 10, 3, 2, 100, 150
        predictors = ["education", "earner", "age"]
    else:
        n, L, K, chains, draws, warmup = 3000, 20, 4, 2, 400, 400
        predictors = ["education", "earner", "age", "region", "urban", "family_size"]
    r = 0.2
    data = ce_like(n, seed=args.seed)
    y = data["income"].to_numpy()

    alpha_m = risk_weights(data, CE_KNOWN, "income", r, kind="marginal")
    alpha_pw = risk_weights(data, CE_KNOWN, "income", r, kind="pairwise", on_singleton="marginal")

    # the short --fast chains cannot pass the release gates (R-hat <= 1.01, bulk ESS >= 400):
    # its releases are made with allow_unconverged=True, and their manifests say so
    allow = bool(args.fast or args.allow_unconverged)
    fits, risks, releases = {}, {}, {}
    labels = {"Synthesizer": None, "Marginal": "marginal", "Pairwise": "pairwise"}
    for name, a in tqdm(labels.items(), desc="fits"):
        syn = MixtureSynthesizer(
            outcome="income", predictors=predictors, categorical=["education", "earner"], K=K,
            transform="log", shift=10_000.0, alpha=a, known=CE_KNOWN, r=r, on_singleton="marginal",
            m=L, chains=chains, draws=draws, warmup=warmup, allow_unconverged=allow,
            random_state=args.seed, progress=False,
        )
        with warnings.catch_warnings():
            warnings.filterwarnings("ignore", message=".*allow_unconverged=True.*")
            fits[name] = syn.fit(data)
            releases[name] = syn.release()  # publishes exactly syn.synthetic_ (rows shuffled)
        risks[name] = syn.identification_risk()

    # ---- risk ---------------------------------------------------------------------------
    ir_data = risks["Synthesizer"].data_risk
    vectors = {"Data": ir_data, **{k: v.ir for k, v in risks.items()}}
    fig = plot_risk_violins(vectors, title=f"Identification risk, r = {r:.0%}")
    fig.savefig(out / "risk_violins.png", dpi=110)
    rows = {}
    for name, v in vectors.items():
        row = {"mean": v.mean(), "IQR": np.subtract(*np.quantile(v, [0.75, 0.25])), "max": v.max(),
               "n > 0.5": int((v > 0.5).sum())}
        if name in ("Marginal", "Pairwise"):
            wm = whack_a_mole(risks[name], risks["Synthesizer"])
            row["n rise >= 0.25"] = wm.n_rise
            fig = plot_whack_a_mole(risks[name], risks["Synthesizer"], labels=("Synthesizer", name))
            fig.savefig(out / f"whack_a_mole_{name.lower()}.png", dpi=110)
        else:
            row["n rise >= 0.25"] = "-"
        rows[name] = row
    risk_tab = pd.DataFrame.from_dict(rows, orient="index")
    risk_tab.index.name = "source"

    # ---- utility ------------------------------------------------------------------------
    util_rows = {}
    for name, f in fits.items():
        u = ecdf_utility(y, list(f.synthetic_))
        util_rows[name] = {"U_m": u["U_m"], "U_a": u["U_a"], "mean alpha": f.alpha_.mean()}
    util_tab = pd.DataFrame.from_dict(util_rows, orient="index")
    util_tab.index.name = "synthesizer"

    boot = []
    for i, (name, f) in enumerate(fits.items()):
        b = bootstrap_estimates(data, f.synthetic_, "income", B=200 if args.fast else 1000,
                                seed=args.seed + i, labels=("Data", name))
        boot.append(b if i == 0 else b[b.source != "Data"])
    boot_tab = pd.concat(boot, ignore_index=True).set_index(["statistic", "source"]).sort_index()
    boot_tab = boot_tab[["estimate", "ci_low", "ci_high", "length"]]
    boot_tab.index = [f"{s} / {src}" for s, src in boot_tab.index]
    boot_tab.index.name = "statistic / source"

    rel_rows, conv_rows = {}, {}
    for name, f in fits.items():
        est = releases[name].mean("income").iloc[0]
        rel_rows[name] = {"estimate": est["estimate"], "se": est["se"], "ci_low": est["ci_low"], "ci_high": est["ci_high"]}
        c = f.convergence_
        conv_rows[name] = {"max R-hat (gated)": c["max_rhat"], "min bulk ESS (gated)": c["min_ess_bulk"],
                           "divergent": c["divergent"], "passed": c["passed"],
                           "guarantee": releases[name].privacy.guarantee}
    rel_tab = pd.DataFrame.from_dict(rel_rows, orient="index")
    rel_tab.index.name = "release"
    conv_tab = pd.DataFrame.from_dict(conv_rows, orient="index")
    conv_tab.index.name = "fit"

    elapsed = time.perf_counter() - t0
    md = f"""# Identification-risk weighted synthesis of CE-like income

Generated by `python vignettes/identification_risk.py{' --fast' if args.fast else ''}` in {elapsed:.0f} s.
Data: `ce_like(n={n}, seed={args.seed})`; known pattern {CE_KNOWN} (40 patterns); r = {r:.0%};
mixture synthesizer with K = {K} components on log(income + 10,000) (a public shift below the largest loss), predictors {predictors};
{chains} chains x {draws} draws (after {warmup} warm-up); L = {L} synthetic sets.
{'This is the --fast run: small data and short chains, so the numbers are noisy.' if args.fast else ''}

## Weights

Mean marginal weight {alpha_m.mean():.3f}, mean pairwise weight {alpha_pw.mean():.3f};
alpha_pw >= alpha_m for {int((alpha_pw >= alpha_m - 1e-12).sum())} of {n} records.

## Risk (per-record IR over the L sets; Data is IR^c)

{md_table(risk_tab)}

"n rise >= 0.25" is the whack-a-mole count: records whose IR rose by at least 0.25 from the
unweighted Synthesizer to the weighted one (highlighted in the scatter plots).

![risk violins](risk_violins.png)

![whack-a-mole, Marginal](whack_a_mole_marginal.png) ![whack-a-mole, Pairwise](whack_a_mole_pairwise.png)

## Utility

ECDF utility (Woo et al. 2009; smaller is better), averaged over the L sets:

{md_table(util_tab)}

Bootstrapped estimates and 95% intervals (seed 002 Table 4 style: mean over the sets, percentile
interval of pooled bootstrap replicates):

{md_table(boot_tab, "{:,.0f}")}

Mean income from each release with the partial-synthesis combining rule (Reiter 2003); the
released weights are equal and sum to the population size (here the confidential weight sum,
listed in each public manifest as published without budget):

{md_table(rel_tab, "{:,.0f}")}

## MCMC convergence and the public label

Release gates on identified quantities (lp__ and label-invariant functionals of the mixture;
the component parameters switch labels): R-hat <= 1.01, bulk ESS >= 400.
{'The --fast chains are far too short to pass them: released with allow_unconverged=True, and the label says so.' if allow else ''}

{md_table(conv_tab, "{:.3f}")}
"""
    (out / "identification_risk.md").write_text(md)
    print(f"wrote {out / 'identification_risk.md'} in {elapsed:.0f} s")
    return out


if __name__ == "__main__":
    main()
