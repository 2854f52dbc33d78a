"""Wall time of one full FBS pipeline at n = 1,000 and n = 10,000 (warm Stan cache).

Pipeline: unweighted fit -> per-record bounds and alpha -> tuning refits to Delta_alpha = 3.4
-> weighted fit -> release of m = 10 synthetic designs -> counts and means tables by
field x gender. Default settings: 4 chains x 1000 draws after 1000 warm-up (refits warm-started
from the unweighted fit's last draws). The Stan model is compiled once before timing.

    python benchmarks/fbs_pipeline.py          # writes the "pseudo_posterior" section of
                                               # docs/benchmarks.md
    python benchmarks/fbs_pipeline.py --fast   # short chains, n = 1,000 only, prints only
"""

from __future__ import annotations

import argparse
import time
import warnings

import pandas as pd


def pipeline(design, chains, draws, warmup, refit_warmup, seed):
    import surveysynth as ss
    from surveysynth.synth import FBS

    t = {}
    t0 = time.perf_counter()
    syn = FBS("salary", ["field", "gender"], population_size=100_000, chains=chains,
              draws=draws, warmup=warmup, refit_warmup=refit_warmup, progress=False)
    fit = syn.fit(design, target_lipschitz=3.4, m=10, seed=seed)
    t["fit (unweighted + tuning + weighted)"] = time.perf_counter() - t0
    t1 = time.perf_counter()
    rel = fit.release()
    t["release m = 10"] = time.perf_counter() - t1
    t2 = time.perf_counter()
    ss.tabulate(rel, rows="field", cols="gender")
    ss.tabulate(rel, rows="field", cols="gender", value="salary", stat="mean")
    t["tables (counts + means)"] = time.perf_counter() - t2
    t["total"] = time.perf_counter() - t0
    return fit, t


def _md(df: pd.DataFrame) -> str:
    cols = list(df.columns)
    out = ["| " + " | ".join(map(str, cols)) + " |", "|" + "---|" * len(cols)]
    out += ["| " + " | ".join(str(v) for v in row) + " |" for row in df.itertuples(index=False)]
    return "\n".join(out)


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--fast", action="store_true")
    ap.add_argument("--seed", type=int, default=1)
    args = ap.parse_args(argv)
    warnings.filterwarnings("ignore")
    from surveysynth.datasets import sdr_population, sdr_sample
    from surveysynth.synth import FBS
    from surveysynth.synth._stan import run_stan  # noqa: F401  (import cost outside timing)

    pop = sdr_population(seed=args.seed)
    # n = 1,000 three times: the number of refits is random (Delta_alpha is a noisy max over
    # draws), so one run says little about the typical time.
    runs = [(1000, args.seed)] if args.fast else [(1000, args.seed), (1000, args.seed + 1),
                                                  (1000, args.seed + 2), (10_000, args.seed)]
    chains, draws, warmup = (2, 200, 200) if args.fast else (4, 1000, 1000)
    refit_warmup = 200 if args.fast else None  # None: the default, max(200, warmup // 4)
    # warm the cache: compile (or load) the model once
    d0 = sdr_sample(pop, n=300, seed=0)
    FBS("salary", ["field", "gender"], chains=1, draws=20, warmup=20, progress=False).fit(
        d0, seed=0)

    rows, stage_rows = [], []
    for n, seed in runs:
        design = sdr_sample(pop, n=n, seed=seed + n)
        fit, t = pipeline(design, chains, draws, warmup, refit_warmup, seed)
        tun = fit.tuning_
        unw = fit.diagnostics_["unweighted"]
        rows.append({
            "n": n, "sample seed": seed + n, "total s": round(t["total"], 1),
            "unweighted fit s": round(fit.timings_["unweighted_fit"], 1),
            "weighted refits": len(tun),
            "refit s (mean)": round(float(tun["seconds"].mean()), 1),
            "release s": round(t["release m = 10"], 2),
            "tables s": round(t["tables (counts + means)"], 2),
            "Delta_alpha": round(fit.delta_alpha_, 3),
            "unweighted bound": round(fit.delta_unweighted_, 2),
            "log-lik": fit._prep["loglik_mode"],
        })
        path = ", ".join(f"{r.c:.3g}:{r.delta_alpha:.2f}" for r in tun.itertuples())
        stage_rows.append({"n": n, "sample seed": seed + n,
                           "stan sampling s (unweighted)": round(unw["seconds_sample"], 1),
                           "leapfrog steps / iteration (unweighted)":
                               round(unw.get("mean_leapfrog") or float("nan"), 1),
                           "draw extraction s (unweighted)": round(unw["seconds_extract"], 2),
                           "min bulk ESS (weighted)":
                               round(fit.diagnostics_["weighted"]["min_ess_bulk"]),
                           "max R-hat (weighted)":
                               round(fit.diagnostics_["weighted"]["max_rhat"], 3),
                           "tuning path c:Delta_alpha": path})
        print(rows[-1], flush=True)
    table = pd.DataFrame(rows)
    stages = pd.DataFrame(stage_rows)
    md = (
        "### FBS pipeline (fit, tune to Delta_alpha = 3.4, weighted fit, m = 10 release, "
        "tables)\n\n"
        f"Settings: {chains} chains x {draws} draws after {warmup} warm-up (refits: "
        f"{refit_warmup or max(200, warmup // 4)} warm-up, warm-started), per-record log "
        "densities in numpy from the draws, warm Stan cache, SDR-like samples.\n\n"
        + _md(table) + "\n\n" + _md(stages) + "\n\n"
        "Where the time goes: MCMC. The likelihood is evaluated from per-cell sufficient "
        "statistics, so one gradient costs the same at n = 1,000 and n = 10,000; the "
        "remaining n-dependence is the per-record log density for the bounds (numpy from the "
        "parameter draws) and synthesis. One FBS fit costs ~20 leapfrog steps per iteration "
        "(the 16 x 16 LKJ prior on the cell effects dominates a gradient) x 4 chains x "
        "1,000-2,000 iterations on 2 cores. The number of weighted refits multiplies that: "
        "Delta_alpha is a max over 4,000 draws and varies by several per cent between refits "
        "at the same c (see the tuning paths), so landing within the 1% tolerance is a "
        "repeated draw; each refit is a fresh chance.\n"
    )
    print(md)
    if not args.fast:
        import sys
        from pathlib import Path

        sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
        from benchmarks._report import write_section

        write_section("pseudo_posterior", md)


if __name__ == "__main__":
    main()
