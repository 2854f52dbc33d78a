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
from scipy.stats import norm


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


def window_noise(fit, windows: int = 4) -> list[float]:
    """Delta_alpha of consecutive windows of one long run at the fit's tuned c.

    One warm-started fit with ``windows`` x draws per chain at alpha(c); each window of
    ``draws`` consecutive draws per chain is a set of the same size as a refit's, so the
    spread of the window values is the noise every refit faces at a fixed c.
    """
    import numpy as np

    from surveysynth.synth._stan import load_program, run_stan

    syn, prep = fit.synthesizer, fit._prep
    res0 = fit.weighted_fit_
    d = res0.draws_per_chain
    res = run_stan(load_program(syn.program), syn._stan_data(prep, fit.alpha_, False),
                   chains=res0.chains, draws=windows * d, warmup=250, seed=12345,
                   progress=False, init=res0.last_inits(), warn=False)
    ll = np.abs(syn._record_loglik(prep, res, slice(None)))  # (chains * windows * d, n)
    ll = ll.reshape(res0.chains, windows, d, -1)
    return [float((fit.alpha_ * ll[:, k].reshape(-1, ll.shape[-1]).max(axis=0)).max())
            for k in range(windows)]


def output_cost(design, seed: int) -> dict:
    """Wall and main-process CPU seconds of one unweighted fit, writing every draw vs 1 in 10.

    Same chains, warm-up and iterations; ``num_thin = 10`` writes a tenth of the draws. The
    difference is what writing, sending, compressing and parsing the draws costs: httpstan's
    worker writes every kept draw as JSON (the draw plus, from its diagnostic writer, the
    unconstrained parameters, momenta and gradients) and the main process compresses it.
    """
    import numpy as np

    from surveysynth.synth import FBS
    from surveysynth.synth._stan import _run, load_program

    syn = FBS("salary", ["field", "gender"], population_size=100_000, progress=False)
    prep = syn._prepare(design)
    data = syn._stan_data(prep, np.ones(prep["n"]), save_log_lik=False)
    init = syn._inits(prep, np.random.default_rng(seed))
    out = {}
    for thin in (1, 10):
        t0, c0 = time.perf_counter(), time.process_time()
        _run(load_program("fbs"), data, 4, 1000, 1000, seed, False, init, {"num_thin": thin})
        out[thin] = (time.perf_counter() - t0, time.process_time() - c0)
    return out


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
    # The number of refits is random (Delta_alpha is a noisy max over draws), so one run says
    # little about the typical time. (n, seed, tol): n = 1,000 on four samples at the default 1% tolerance, the same four at
    # 5% (what a looser tolerance buys), n = 10,000 once.
    runs = ([(1000, args.seed, 0.01)] if args.fast else
            [(1000, args.seed + k, 0.01) for k in range(4)]
            + [(1000, args.seed + k, 0.05) for k in range(4)]
            + [(10_000, args.seed, 0.01)])
    chains, draws, warmup = (2, 200, 200) if args.fast else (4, 1000, 1000)
    refit_warmup = 200 if args.fast else None  # None: the default, max(200, warmup // 4)
    # warm the cache: compile (or load) the model once
    d0 = sdr_sample(pop, n=300, seed=0)
    FBS("salary", ["field", "gender"], chains=1, draws=20, warmup=20, progress=False).fit(
        d0, seed=0)

    rows, stage_rows, noise_rows = [], [], []
    for n, seed, tol in runs:
        design = sdr_sample(pop, n=n, seed=seed + n)
        fit, t = pipeline(design, chains, draws, warmup, refit_warmup, seed, tol)
        if not args.fast and tol == 0.01 and (seed == args.seed):
            w = window_noise(fit)
            noise_rows.append({"n": n, "sample seed": seed + n, "c": round(fit.c_, 4),
                               "Delta_alpha of 4 windows": ", ".join(f"{v:.3f}" for v in w),
                               "relative SD": round(float(pd.Series(w).std() /
                                                          pd.Series(w).mean()), 3)})
            print(noise_rows[-1], flush=True)
        tun = fit.tuning_
        unw = fit.diagnostics_["unweighted"]
        rows.append({
            "n": n, "sample seed": seed + n, "tol": f"{100 * tol:g}%",
            "total s": round(t["total"], 1),
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
        stage_rows.append({"n": n, "sample seed": seed + n, "tol": f"{100 * tol:g}%",
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
    cost_md = "(fast mode)\n"
    if not args.fast:
        cost = output_cost(sdr_sample(pop, n=1000, seed=args.seed + 1000), args.seed)
        cost_md = (
            "| draws written | wall s | main-process CPU s |\n|---|---|---|\n"
            f"| all 4 x 1000 | {cost[1][0]:.1f} | {cost[1][1]:.1f} |\n"
            f"| 1 in 10 (num_thin = 10) | {cost[10][0]:.1f} | {cost[10][1]:.1f} |\n")
    k1 = table[(table["n"] == 1000) & (table["tol"] == "1%")]
    k5 = table[(table["n"] == 1000) & (table["tol"] == "5%")]
    summary = (
        f"n = 1,000, tolerance 1%: totals {', '.join(f'{v:.0f}' for v in k1['total s'])} s "
        f"(median {k1['total s'].median():.0f} s), refits "
        f"{', '.join(str(v) for v in k1['weighted refits'])}; tolerance 5%: totals "
        f"{', '.join(f'{v:.0f}' for v in k5['total s'])} s (median "
        f"{k5['total s'].median():.0f} s), refits "
        f"{', '.join(str(v) for v in k5['weighted refits'])}.\n\n"
        if len(k1) and len(k5) else "")
    md = (
        "### FBS pipeline (fit, tune to Delta_alpha = 3.4, weighted fit, m = 10 release, "
        "tables)\n\n"
        f"Settings: {chains} chains x {draws} draws after {warmup} warm-up (refits: "
        f"{refit_warmup or max(200, warmup // 4)} warm-up, warm-started), per-record log "
        "densities in numpy from the draws, warm Stan cache, SDR-like samples.\n\n"
        + _md(table) + "\n\n" + summary + _md(stages) + "\n\n"
        "Noise of Delta_alpha at a fixed c (`window_noise`: one run of 4 x 4,000 draws at the "
        "tuned c, cut into four consecutive windows of 4 x 1,000 draws, each the size of a "
        "refit):\n\n" + (_md(pd.DataFrame(noise_rows)) if noise_rows else "(fast mode)")
        + "\n\nCost of writing the draws (one unweighted fit, n = 1,000, same iterations):"
        "\n\n" + cost_md + "\n"
        "Where the time goes: MCMC. The likelihood is evaluated from per-cell sufficient "
        "statistics, so one gradient costs the same at n = 1,000 and n = 10,000; the "
        "remaining n-dependence is the per-record log density for the bounds (numpy from the "
        "parameter draws) and synthesis. One fit is 4 chains x 1,000 kept draws x ~20 "
        "leapfrog steps on 2 cores, plus httpstan's output: every kept draw is written as JSON "
        "together with the 3 x 218 unconstrained values, momenta and gradients of its "
        "diagnostic writer, and compressed by the main process (table above). The total is "
        "(unweighted fit) + (number of refits) x (refit), and the number of refits is set by "
        "noise, not by the root finder: Delta_alpha is a max over 4,000 draws, and at "
        "n = 1,000 its spread between sets of draws at the SAME c (window table) is several "
        "times the 1% tolerance, so a refit at the root lands within 1% with probability "
        "p = 2 Phi(0.01 / SD) - 1 (normal approximation) and the expected number of refits is "
        "at least 1/p: " + "; ".join(
            f"n = {r['n']:,}: SD {100 * r['relative SD']:.1f}%, p = "
            f"{2 * norm.cdf(0.01 / r['relative SD']) - 1:.2f}, 1/p = "
            f"{1 / (2 * norm.cdf(0.01 / r['relative SD']) - 1):.1f}" for r in noise_rows)
        + ". A faster root finder cannot beat that; only cheaper fits, less noise (more "
        "data per cell) or a looser tolerance can (the 5% rows).\n"
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
