"""Wall time of one full FBS pipeline at n = 1,000 and n = 10,000 (warm Stan cache).

Pipeline: unweighted fit -> per-record bounds and alpha -> tuning fits -> a final fit whose
bound is reported (never above the target 3.4) -> release of m = 10 synthetic designs -> counts and means tables by
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


def pipeline(design, chains, draws, warmup, refit_warmup, seed, tol=0.10):
    import surveysynth as ss
    from surveysynth.synth import FBS

    t = {}
    t0 = time.perf_counter()
    syn = FBS("salary", ["field", "gender"], population_size=100_000, chains=chains,
              draws=draws, warmup=warmup, refit_warmup=refit_warmup, tol=tol, progress=False,
              target_lipschitz=3.4, m=10, random_state=seed)
    fit = syn.fit(design)
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

    pop = sdr_population(seed=args.seed)
    # the number of fits is random (Delta_alpha is a noisy max over draws): four samples at
    # n = 1,000 and two at n = 10,000, each tuned to 3.4 with the default band (tol 10%)
    runs = ([(1000, args.seed)] if args.fast else
            [(1000, args.seed + k) for k in range(4)] + [(10_000, args.seed + k) for k in range(2)])
    chains, draws, warmup = (2, 200, 200) if args.fast else (4, 1000, 1000)
    refit_warmup = 200 if args.fast else None  # None: the default, max(200, warmup // 4)
    d0 = sdr_sample(pop, n=300, seed=0)  # warm the cache: compile (or load) the model once
    FBS("salary", ["field", "gender"], chains=1, draws=20, warmup=20, progress=False,
        random_state=0).fit(d0)
    rows = []
    for n, seed in runs:
        design = sdr_sample(pop, n=n, seed=seed + n)
        fit, t = pipeline(design, chains, draws, warmup, refit_warmup, seed)
        tun = fit.tuning_
        ch = fit.delta_alpha_chains_
        rows.append({
            "n": n, "sample seed": seed + n, "total s": round(t["total"], 1),
            "unweighted fit s": round(fit.timings_["unweighted_fit"], 1),
            "tuning fits": int((tun["role"] == "tuning").sum()),
            "final fits": int((tun["role"] == "final").sum()),
            "fit s (mean)": round(float(tun["seconds"].mean()), 1),
            "Delta_alpha (final)": round(fit.delta_alpha_, 3),
            "<= 3.4": bool(fit.delta_alpha_ <= 3.4),
            "in band [3.06, 3.4]": bool(3.06 <= fit.delta_alpha_ <= 3.4),
            "per-chain max": f"{min(ch):.2f}-{max(ch):.2f}",
            "margin": round(fit.bound_spread_["margin"], 3),
            "mean alpha": round(float(fit.alpha_.mean()), 3),
            "max R-hat": round(fit.convergence_["max_rhat"], 3),
            "path c:Delta": ", ".join(f"{r.c:.3g}:{r.delta_alpha:.2f}{'*' if r.role == 'final' else ''}"
                                      for r in tun.itertuples()),
        })
        print(rows[-1], flush=True)
    table = pd.DataFrame(rows)
    k1 = table[table["n"] == 1000]
    md = (
        "### FBS pipeline (fit, tune, final fit, m = 10 release, tables)\n\n"
        f"Settings: target Delta_alpha = 3.4, tol = 0.10 (band [3.06, 3.4]); {chains} chains x "
        f"{draws} draws after {warmup} warm-up (refits: {refit_warmup or max(200, warmup // 4)} "
        "warm-up, warm-started), per-record log densities in numpy, warm Stan cache, SDR-like "
        "samples. The reported bound is the final fit's (fresh draws, `*` in the path); a final "
        "fit above 3.4 is never released.\n\n" + _md(table) + "\n\n"
        f"n = 1,000: totals {', '.join(f'{v:.0f}' for v in k1['total s'])} s, median "
        f"{k1['total s'].median():.0f} s; released bounds "
        f"{', '.join(f'{v:.2f}' for v in k1['Delta_alpha (final)'])} (all <= 3.4: "
        f"{bool(table['<= 3.4'].all())}).\n"
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
