"""Repeated sampling of the SDR-like simulation (seed 001 Appendix B, seed 000 Appendix F).

R samples (default 100) of n = 1,000 from one population of N = 100,000 (stratified PPS, as
seed 001 Section 3.1). In every sample FBS and FBP are each tuned to two bounds,
Delta_alpha = 1.8 (seed 000) and 3.4 (seed 001), and release m = 10 synthetic sets; the first
m in {1, 3, 5, 10} sets give the releases of every (m, epsilon = 2 Delta m) the papers study
without refitting, as seed 000 does ("requires no additional model fits"). Each release is
tabulated (counts and mean salary by field x gender, the 24 cells of seed 001 Tables 8-9) and
combined by the partial-synthesis rule; the confidential sample's own design-based estimates
are scored beside them ("Sample").

The study runs in the background and resumes: every finished sample is written to
``--store`` (one Parquet file per sample, plus the fits' facts as JSON) and a rerun reads what
is there (``surveysynth.simulate.monte_carlo(store=...)``). ``--report`` renders the tables and
figures from whatever the store holds (``vignettes/output/sdr_monte_carlo.md``).

Monte Carlo choices (stated in the output): chains x draws per fit are set by ``--chains``,
``--draws``; fits that miss the release convergence gates are kept (``allow_unconverged``: a
study, not a release) and counted in the output.

Usage:
    python vignettes/sdr_monte_carlo.py --reps 100 --store .mc/sdr          # run / resume
    python vignettes/sdr_monte_carlo.py --reps 100 --store .mc/sdr --report # render
    python vignettes/sdr_monte_carlo.py --fast                              # smoke (tests)
"""

from __future__ import annotations

import argparse
import json
import sys
import time
import warnings
from pathlib import Path

import numpy as np
import pandas as pd

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

from private_tables_sdr import (  # noqa: E402
    MC_KEYS,
    MC_LABELS,
    PAPER_T8,
    PAPER_T9,
    md_table,
    parse_paper,
    tables_for,
    truths,
)

from surveysynth.combine import combine_sets  # noqa: E402
from surveysynth.datasets import sdr_population, sdr_sample  # noqa: E402
from surveysynth.simulate import monte_carlo  # noqa: E402
from surveysynth.synth import FBP, FBS  # noqa: E402
from surveysynth.synth.pseudo_posterior import TargetUnreachableError  # noqa: E402

DELTAS = (1.8, 3.4)
MS = (1, 3, 5, 10)
N_POP = 100_000


def cell_keys(kind: str) -> list[str]:
    return [f"{kind} {f}/{g}" for f, g in MC_KEYS]


def _both(source) -> tuple[np.ndarray, np.ndarray]:
    c, mn = tables_for(source).loc[MC_KEYS], tables_for(source, "salary").loc[MC_KEYS]
    return (np.r_[c["estimate"].to_numpy(float), mn["estimate"].to_numpy(float)],
            np.r_[c["se"].to_numpy(float), mn["se"].to_numpy(float)] ** 2)


def _frame(est, se, lo, hi, index) -> pd.DataFrame:
    return pd.DataFrame({"estimate": est, "se": se, "ci_low": lo, "ci_high": hi}, index=index)


def _released(fit, delta: float, keys: list[str]) -> dict[str, pd.DataFrame]:
    """The (m = 1, 3, 5, 10) releases of one fit, combined. FBP releases twice from the same
    fit: first with the paper's smoothed weights (exp(-kappa_y y*), seed 001 Section 2.2;
    labelled FBPpaper), then with the package default (the model's exp(-kappa_y y* - x
    kappa_x); labelled FBP): the smoothed weights are post-processing of the same draws."""
    variants = ([("FBPpaper", "outcome"), ("FBP", "model")] if fit.name == "FBP"
                else [(fit.name, None)])
    out = {}
    for label, sw in variants:
        if sw is not None:
            fit.set_params(smoothed_weights=sw)
        rel = fit.release()
        per = [_both(d) for d in rel.designs]
        Q = np.array([p[0] for p in per])
        U = np.array([p[1] for p in per])
        for m in MS:
            comb = combine_sets(Q[:m], U[:m], kind=rel.kind, n_syn=rel.n_syn,
                                n_original=rel.n_original)
            out[f"{label} D{delta:g} m{m}"] = _frame(
                comb["estimate"].to_numpy(float), comb["se"].to_numpy(float),
                comb["ci_low"].to_numpy(float), comb["ci_high"].to_numpy(float), keys)
    return out


def _fit_facts(fit, delta: float, secs: float) -> dict:
    w = fit.diagnostics_["weighted"]
    return {"method": fit.name, "delta_target": delta,
            "delta_alpha": float(fit.delta_alpha_),
            "delta_unweighted": float(fit.delta_unweighted_), "c": float("nan") if fit.c_ is None else float(fit.c_),
            "mean_alpha": float(fit.alpha_.mean()),
            "share_alpha_1": float(np.mean(fit.alpha_ >= 1 - 1e-12)),
            "smallest_cell_weight": float(fit.smallest_cell_weight_[0]),
            "fits": len(fit.tuning_), "max_rhat": float(w["max_rhat"]),
            "min_ess_bulk": float(w["min_ess_bulk"]),
            "divergences": int(w["divergences"]), "seconds": secs}


def _synthesizer(cls, delta: float, cfg: dict, seed: int):
    return cls("salary", ["field", "gender"], population_size=N_POP, chains=cfg["chains"],
               effects=cfg.get("effects", "cells"),
               draws=cfg["draws"], warmup=cfg["warmup"], tol=cfg["tol"], progress=False,
               target_lipschitz=delta, m=max(MS), random_state=seed,
               convergence=cfg.get("gates"), allow_unconverged=True)


def make_analyze(cfg: dict, store: Path | None):
    keys = cell_keys("count") + cell_keys("mean")

    def analyze(sample, rng):
        token, design = sample
        res = {}
        q, u = _both(design)
        se = np.sqrt(u)
        res["Sample"] = _frame(q, se, q - 1.959963984540054 * se, q + 1.959963984540054 * se,
                               keys)
        facts = []
        for delta in cfg["deltas"]:
            for cls in (FBS, FBP):
                seed = int(rng.integers(1, 2**31 - 1))   # drawn either way: the same seeds
                if cls.__name__ not in cfg.get("methods", ("FBS", "FBP")):
                    continue
                syn = _synthesizer(cls, delta, cfg, seed)
                t0 = time.perf_counter()
                try:
                    fit = syn.fit(design)
                except TargetUnreachableError as err:
                    # the package refuses this sample at this target (no release): scored as
                    # missing for the method, counted in the report
                    facts.append({"method": syn.name, "delta_target": delta,
                                  "unreachable": str(err),
                                  "seconds": time.perf_counter() - t0})
                    continue
                secs = time.perf_counter() - t0
                res.update(_released(fit, delta, keys))
                facts.append(_fit_facts(fit, delta, secs))
        if store is not None:
            tmp = store / f"fits_{token}.partial"
            tmp.write_text(json.dumps(facts))
            tmp.replace(store / f"fits_{token}.json")
        return res

    return analyze, keys


def run(cfg: dict, reps: int, seed: int, store: Path | None, progress: bool):
    pop = sdr_population(seed=seed)
    truth = run_truth(pop)
    analyze, _ = make_analyze(cfg, store)

    def sample(rng):
        token = int(rng.integers(0, 2**62))
        return token, sdr_sample(pop, n=1000, seed=rng)

    return monte_carlo(sample, analyze, truth, reps=reps, seed=seed + 30, progress=progress,
                       store=store)


def refit_fbp(cfg: dict, seed: int, store: Path, progress: bool) -> dict:
    """Rerun FBP on the samples already in ``store`` and replace its rows, keeping FBS's.

    Each sample and each fit's seed are regenerated from the study's seed exactly as the run
    drew them (the replicate's generator: sample, then FBS's seed, then FBP's, per Delta), so
    the refit is the same fit under the current code. FBP now releases twice per fit (the
    paper's smoothed weights as FBPpaper, the package default as FBP; see ``_released``); the
    FBPpaper rows are compared with the stored FBP rows (written when the paper's weights were
    the default): equal rows show the samples and fits are the ones the store was built from.
    Returns the largest relative difference found (and the samples checked)."""
    done = sorted(store.glob("rep_*.parquet"))
    pop = sdr_population(seed=seed)
    keys = cell_keys("count") + cell_keys("mean")
    truth = run_truth(pop)
    children = np.random.default_rng(seed + 30).spawn(len(done))
    worst, checked, t0 = 0.0, 0, time.perf_counter()
    for r, rng in enumerate(children):
        path = store / f"rep_{r:05d}.parquet"
        old = pd.read_parquet(path)
        if old["method"].str.startswith("FBPpaper").any():
            continue
        token = int(rng.integers(0, 2**62))
        if not (store / f"fits_{token}.json").exists():
            raise SystemExit(f"refit: sample {r} regenerates token {token}, which the store "
                             "does not hold; the seed or the sampler changed.")
        design = sdr_sample(pop, n=1000, seed=rng)
        facts = json.loads((store / f"fits_{token}.json").read_text())
        parts = []
        for delta in cfg["deltas"]:
            for cls in (FBS, FBP):
                fit_seed = int(rng.integers(1, 2**31 - 1))
                if cls is FBS:
                    continue
                t1 = time.perf_counter()
                try:
                    fit = _synthesizer(FBP, delta, cfg, fit_seed).fit(design)
                except TargetUnreachableError:
                    continue
                for label, df in _released(fit, delta, keys).items():
                    parts.append(pd.DataFrame({
                        "rep": r, "method": label, "estimand": keys,
                        "estimate": df["estimate"].to_numpy(float),
                        "se": df["se"].to_numpy(float), "ci_low": df["ci_low"].to_numpy(float),
                        "ci_high": df["ci_high"].to_numpy(float),
                        "truth": truth.reindex(keys).to_numpy(float)}))
                new_fact = _fit_facts(fit, delta, time.perf_counter() - t1)
                facts = [f for f in facts if not (f["method"] == "FBP"
                                                  and f["delta_target"] == delta)] + [new_fact]
        new = pd.concat(parts, ignore_index=True) if parts else old.iloc[:0]
        paper = new[new["method"].str.startswith("FBPpaper")].copy()
        paper["method"] = paper["method"].str.replace("FBPpaper", "FBP", regex=False)
        before = old[old["method"].str.startswith("FBP ")]
        if len(before) != len(paper):
            raise SystemExit(f"refit: sample {r}: {len(before)} stored FBP rows, "
                             f"{len(paper)} refitted (a refusal changed).")
        if len(before):
            a = before.sort_values(["method", "estimand"])["estimate"].to_numpy(float)
            b = paper.sort_values(["method", "estimand"])["estimate"].to_numpy(float)
            worst = max(worst, float(np.max(np.abs(a / b - 1))))
            checked += 1
        keep = old[~old["method"].str.startswith("FBP ")]
        out = pd.concat([keep, new], ignore_index=True)
        tmp = path.with_suffix(".partial")
        out.to_parquet(tmp)
        tmp.replace(path)
        (store / f"fits_{token}.json").write_text(json.dumps(facts))
        if progress:
            print(f"refit FBP sample {r}: max rel. diff to the stored rows so far {worst:.2e} "
                  f"({time.perf_counter() - t0:.0f} s)", flush=True)
    return {"max_relative_difference": worst, "samples_compared": checked}


def run_truth(pop: pd.DataFrame) -> pd.Series:
    tc, tm = truths(pop)
    return pd.Series(np.r_[tc.loc[MC_KEYS].to_numpy(float), tm.loc[MC_KEYS].to_numpy(float)],
                     index=cell_keys("count") + cell_keys("mean"))


def code_stamp() -> dict:
    """The commit and the SHA-256 of the code the study's numbers depend on (the ``depends`` of
    its entry in vignettes/output/PROVENANCE.json, hashed as scripts/provenance.py does)."""
    sys.path.insert(0, str(HERE.parent / "scripts"))
    import provenance

    entry = provenance.load()["vignettes/output/sdr_monte_carlo.md"]
    return {"commit": provenance._commit(), "code_sha256": provenance.code_hash(entry["depends"])}


def check_resumable(store: Path, stamp: dict) -> None:
    """A run resumes a store only when its samples come from the same code: a store of another
    code (or of code the store did not record) would mix two versions' numbers in one report.
    SystemExit naming the store, the commits and the fix."""
    if not any(store.glob("rep_*.parquet")):
        return
    saved = (json.loads((store / "config.json").read_text()).get("code")
             if (store / "config.json").exists() else None)
    if saved is None:
        raise SystemExit(
            f"{store}: its samples do not record the code they come from (a store made before "
            "code stamps); resuming it would mix them with samples of the current code "
            f"(commit {stamp['commit']}). Fix: run into a new --store, or render this one "
            "with --report-only.")
    if saved["code_sha256"] != stamp["code_sha256"]:
        raise SystemExit(
            f"{store}: its samples come from the code at commit {saved['commit']}; the code "
            f"they depend on has changed since (now commit {stamp['commit']}). Resuming would "
            "mix two versions' numbers in one report. Fix: run into a new --store (or restore "
            "that code to finish this one).")


def main(argv=None) -> Path | None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--reps", type=int, default=100)
    ap.add_argument("--store", default=str(HERE.parent / ".mc" / "sdr"))
    ap.add_argument("--seed", type=int, default=2021)
    ap.add_argument("--chains", type=int, default=2)
    ap.add_argument("--draws", type=int, default=500)
    ap.add_argument("--warmup", type=int, default=500)
    ap.add_argument("--tol", type=float, default=0.10)
    ap.add_argument("--deltas", type=float, nargs="+", default=list(DELTAS))
    ap.add_argument("--methods", nargs="+", choices=("FBS", "FBP"), default=["FBS", "FBP"],
                    help="the synthesizers fitted (each sample draws both fit seeds either "
                         "way, so a one-method store has the other store's seeds)")
    ap.add_argument("--effects", choices=("cells", "main"), default="cells",
                    help="predictor design of both synthesizers: full field x gender cells "
                         "(the package default, METHODS 7) or main effects")
    ap.add_argument("--fast", action="store_true", help="2 samples, short chains (smoke)")
    ap.add_argument("--report", action="store_true",
                    help="render vignettes/output/sdr_monte_carlo.md (runs missing samples)")
    ap.add_argument("--report-only", action="store_true",
                    help="render from the samples already in the store; run nothing")
    ap.add_argument("--refit-fbp", action="store_true",
                    help="rerun FBP on the samples in the store (keeps FBS), then report")
    ap.add_argument("--out", default=str(HERE / "output"))
    ap.add_argument("--quiet", action="store_true")
    args = ap.parse_args(argv)
    warnings.filterwarnings("ignore", category=UserWarning, module="surveysynth")
    from surveysynth.synth._stan import ConvergenceWarning

    warnings.filterwarnings("ignore", category=ConvergenceWarning)
    cfg = dict(chains=args.chains, draws=args.draws, warmup=args.warmup, tol=args.tol,
               deltas=tuple(args.deltas), effects=args.effects)
    if tuple(args.methods) != ("FBS", "FBP"):
        cfg["methods"] = tuple(args.methods)
    if args.fast:
        cfg.update(chains=2, draws=150, warmup=150, gates={"ess_bulk": 20, "rhat": 1.2})
        args.reps = min(args.reps, 2)
    store = Path(args.store)
    stamp = code_stamp()
    if not (args.report_only or args.refit_fbp or args.fast):
        check_resumable(store, stamp)
    if args.report_only or args.refit_fbp:
        done = sorted(store.glob("rep_*.parquet"))
        if not done:
            raise SystemExit(f"--report-only: no samples in {store}; run the study first.")
        saved = json.loads((store / "config.json").read_text())
        cfg = {k: (tuple(v) if k in ("deltas", "methods") else v) for k, v in saved.items()
               if k not in ("seed", "fbp_refit")}
        args.seed, args.report = saved["seed"], True
        # the samples present must be 0..k-1 (monte_carlo writes them in order)
        args.reps = len(done)
        if done[-1].name != f"rep_{len(done) - 1:05d}.parquet":
            raise SystemExit(f"--report-only: the store {store} has gaps; resume the run.")
    store.mkdir(parents=True, exist_ok=True)
    if args.refit_fbp:
        check = refit_fbp(cfg, args.seed, store, not args.quiet)
        saved = json.loads((store / "config.json").read_text())
        saved["fbp_refit"] = {**saved.get("fbp_refit", {}), **check}
        (store / "config.json").write_text(json.dumps(saved))
    config = json.loads((store / "config.json").read_text()) if (
        store / "config.json").exists() else {}
    if not (args.report_only or args.refit_fbp or args.fast) and "code" not in config:
        config["code"] = stamp       # the code the store's samples come from (check_resumable)
    (store / "config.json").write_text(json.dumps({**config, **cfg, "seed": args.seed}))
    t0 = time.perf_counter()
    mc = run(cfg, args.reps, args.seed, store, not args.quiet)
    if not args.report and not args.fast:
        return None
    return report(mc, store, cfg, args, time.perf_counter() - t0)


# ------------------------------------------------------------------------------------ report
# seed 000 supplement Tables 4-5 (Delta 1.8, m = 3, epsilon 10.8; R = 100): label, Pop., FBS
# coverage, FBS avg CI, FBP coverage, FBP avg CI (transcribed from the paper's text)
PAPER_S4 = """\
Field 1 total	27963	0.84	3560	0.99	6682
Male	14599	0.99	3705	1.00	4854
Female	13364	0.99	4298	1.00	5242
Field 2 total	2734	0.86	1416	0.86	1853
Male	1951	0.95	1287	0.88	1492
Female	783	1.00	1185	1.00	1037
Field 3 total	4035	0.92	1709	1.00	2814
Male	2918	0.97	1576	1.00	2258
Female	1117	1.00	1446	1.00	1596
Field 4 total	18109	0.90	3312	1.00	5280
Male	12381	0.98	3175	1.00	4320
Female	5728	0.99	3025	1.00	3360
Field 5 total	11197	0.85	2474	1.00	4876
Male	3861	1.00	2081	1.00	2713
Female	7336	0.98	2781	1.00	4104
Field 6 total	12842	0.88	2576	1.00	4915
Male	6433	0.99	2488	1.00	3393
Female	6409	0.98	2892	1.00	3702
Field 7 total	18131	0.92	2955	0.51	4725
Male	14358	0.95	3021	0.51	4108
Female	3773	1.00	2691	0.99	2516
Field 8 total	4989	0.79	1934	1.00	2936
Male	2033	1.00	1557	1.00	1760
Female	2956	0.99	1908	1.00	2297
"""
PAPER_S5 = """\
Field 1 total	110659	0.85	13657	0.71	13422
Male	121125	0.87	18337	0.77	17772
Female	99226	0.90	17941	0.78	16461
Field 2 total	140742	0.95	58335	0.94	64240
Male	146916	0.95	66324	0.96	71592
Female	125358	0.97	78486	0.96	78408
Field 3 total	114668	0.91	41026	0.92	41596
Male	118338	0.91	47514	0.93	46015
Female	105081	0.94	56496	0.85	53166
Field 4 total	115647	0.81	19026	0.81	16953
Male	122601	0.87	22022	0.80	20016
Female	100618	0.91	25821	0.90	23786
Field 5 total	105808	0.85	21648	0.89	22418
Male	120531	0.95	31905	0.91	33535
Female	98060	0.86	23600	0.88	24292
Field 6 total	110159	0.88	21325	0.78	18347
Male	122676	0.95	27187	0.71	25241
Female	97595	0.92	25165	0.89	21989
Field 7 total	132249	0.87	21163	0.79	20262
Male	136370	0.84	22964	0.79	22021
Female	116566	0.97	34669	0.82	34129
Field 8 total	119005	0.90	40658	0.93	39461
Male	137349	0.93	57063	0.93	54326
Female	106388	0.92	43357	0.94	40191
"""
PAPER_RATIO = {  # seed 000 supplement: mean FBP/FBS CI length ratio (counts, means)
    (1.8, 1): (1.81, 0.93), (1.8, 3): (1.38, 0.97), (1.8, 5): (1.54, 0.95),
    (1.8, 10): (1.65, 0.95), (3.4, 1): (1.71, 0.97), (3.4, 3): (1.39, 0.97),
    (3.4, 5): (1.52, 0.97), (3.4, 10): (1.60, 0.96)}


def _md(df: pd.DataFrame) -> str:
    """md_table with flattened (tuple) row labels."""
    return md_table(df.set_axis([", ".join(map(str, i)) if isinstance(i, tuple) else i
                                 for i in df.index]))


PAPER_COL = {"FBS": 0, "FBP": 1, "FBPpaper": 1}  # column pair of seed 001 Tables 8-9


def coverage_table(mc, kind: str, delta: float, m: int, paper_text: str | None,
                   methods: tuple[str, ...] = ("FBS", "FBP")):
    """Seed 001 Tables 8-9 layout with Monte Carlo z-scores against the paper's coverage
    (FBPpaper, FBP with the paper's smoothed weights, is set against the paper's FBP)."""
    s = mc.summary
    ks = cell_keys(kind)
    R = int(s.loc[(ks[0], f"{methods[0]} D{delta:g} m{m}"), "reps"])
    df = pd.DataFrame(index=MC_LABELS)
    df["Pop."] = [f"{s.loc[(k, 'Sample'), 'truth']:,.0f}" for k in ks]
    paper = parse_paper(paper_text, keys=MC_KEYS) if paper_text else None
    verdict = []
    for mth in methods:
        j = PAPER_COL[mth]
        lab = f"{mth} D{delta:g} m{m}"
        cov = np.array([s.loc[(k, lab), "coverage"] for k in ks])
        df[f"{mth} coverage"] = [f"{v:.2f}" for v in cov]
        df[f"{mth} avg CI"] = [f"{s.loc[(k, lab), 'avg_ci_length']:,.0f}" for k in ks]
        if paper is not None:
            pc = paper.iloc[:, 1 + 2 * j].astype(float).to_numpy()
            df[f"paper {('FBS', 'FBP')[j]} cov."] = [f"{v:.2f}" for v in pc]
            # both coverages are binomial proportions over R (ours) and 100 (paper) samples
            se = np.sqrt(np.clip(cov * (1 - cov), 0.0025, None) / R
                         + np.clip(pc * (1 - pc), 0.0025, None) / 100)
            z = (cov - pc) / se
            df[f"{mth} z"] = [f"{v:+.1f}" for v in z]
            verdict.append(np.abs(z) <= 2)
    if verdict:
        df["within MC error"] = ["yes" if all(v) else "no" for v in zip(*verdict, strict=True)]
        # the reason printed beside an outside row: our interval length against the paper's
        # (a paper cell covering in 100% of its samples has intervals longer than nominal)
        ratio = [np.array([s.loc[(k, f"{mth} D{delta:g} m{m}"), "avg_ci_length"]
                           for k in ks])
                 / paper.iloc[:, 2 + 2 * PAPER_COL[mth]].astype(float).to_numpy()
                 for mth in methods]
        df[f"CI length ours / paper ({', '.join(methods)})"] = [
            ", ".join(f"{v:.2f}" for v in row) for row in zip(*ratio, strict=True)]
        reasons = []
        for i, k in enumerate(ks):
            why = []
            for j, mth in enumerate(methods):
                if verdict[j][i]:
                    continue
                pc = float(paper.iloc[i, 1 + 2 * PAPER_COL[mth]])
                why.append(f"{mth}: " + _reason(mc.replicates, k, f"{mth} D{delta:g} m{m}",
                                                pc, ratio[j][i]))
            reasons.append("; ".join(why))
        df["reason (outside rows)"] = reasons
    return df, R


def _reason(rep: pd.DataFrame, key: str, label: str, paper_cov: float, ratio: float) -> str:
    """Why a cell's coverage differs from the paper's, read off the replicates: a bias of
    the estimates over samples (its z over the MC SE of the mean), SEs that under- or
    overstate the estimates' spread (mean SE / SD over samples), or intervals of another
    length than the paper's at an unbiased, calibrated cell."""
    sub = rep[(rep["method"] == label) & (rep["estimand"] == key)].dropna(subset=["estimate"])
    err = (sub["estimate"] - sub["truth"]).to_numpy(float)
    sd = float(np.std(sub["estimate"], ddof=1))
    bias_z = float(err.mean() / (sd / np.sqrt(len(err))))
    rel = 100 * float(err.mean() / sub["truth"].iloc[0])
    se_sd = float(np.sqrt(np.mean(sub["se"].to_numpy(float) ** 2)) / sd)
    parts = []
    if abs(bias_z) > 3:
        parts.append(f"biased {rel:+.1f}% (z {bias_z:+.1f})")
    if se_sd < 0.85:
        parts.append(f"SE understates the spread (SE/SD {se_sd:.2f})")
    elif se_sd > 1.25:
        parts.append(f"SE overstates the spread (SE/SD {se_sd:.2f})")
    if not parts:
        # "no bias detected", not "unbiased": a large relative error can be within MC error
        parts.append(f"bias {rel:+.1f}% within MC error (z {bias_z:+.1f}), SE/SD {se_sd:.2f}; "
                     f"paper's cell covers "
                     f"{paper_cov:.2f} at {1 / ratio:.2f}x our interval length")
    return ", ".join(parts)


def report(mc, store: Path, cfg: dict, args, seconds: float) -> Path:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    s = mc.summary.copy()
    facts = []
    for f in sorted(store.glob("fits_*.json")):
        facts.extend(json.loads(f.read_text()))
    facts = pd.DataFrame(facts)
    code = (json.loads((store / "config.json").read_text()).get("code")
            if (store / "config.json").exists() else None)
    R = int(s["reps"].max())
    # the Delta 3.4 study (seed 001 Tables 8-9) is sdr_monte_carlo.md; other bounds get their own
    effects = cfg.get("effects", "cells")
    stem = ("sdr_monte_carlo" + ("" if tuple(cfg["deltas"]) == (3.4,) else
                                 "_D" + "_".join(f"{d:g}" for d in cfg["deltas"]))
            + ("" if effects == "cells" else f"_{effects}")
            + ("_fast" if args.fast else ""))
    w = []
    w.append("# Repeated sampling: FBS and FBP coverage, CI length and bias (seed 001 "
             "Tables 8-9, seed 000 supplement Tables 4-5 and Figs. 10-17)\n")
    w.append(f"Generated by `vignettes/sdr_monte_carlo.py --store {store.as_posix()} "
             "--report-only` "
             f"(seed {args.seed}); {R} samples of n = 1,000 from one population of N = "
             f"100,000; per fit {cfg['chains']} chains x {cfg['draws']} draws after "
             f"{cfg['warmup']} warm-up; tuning tolerance {cfg['tol']:.2f}; predictors "
             + ("full field x gender cells" if effects == "cells" else
                "field + gender main effects") + ". Each sample: FBS "
             "and FBP tuned to each Delta_alpha, m = 10 synthetic sets released, the first "
             "1, 3, 5, 10 sets give the (m, epsilon = 2 Delta m) releases. Nominal 95% "
             "intervals, partial-synthesis rule. The papers use R = 100 samples; "
             f"the Monte Carlo SE of a coverage of 0.95 is {np.sqrt(0.95 * 0.05 / R):.3f} "
             f"here and {np.sqrt(0.95 * 0.05 / 100):.3f} in the papers. Rendered in "
             f"{seconds:.0f} s from the store."
             + (f" Samples from the code at commit {code['commit']} (code SHA-256 "
                f"{code['code_sha256'][:12]})." if code else "") + "\n")
    unreach = (facts[facts["unreachable"].notna()] if "unreachable" in facts
               else facts.iloc[:0])
    if len(unreach):
        reason = np.where(unreach["unreachable"].str.contains("min_cell_weight"),
                          "cell weight floor", "flat map")
        unreach = unreach.assign(reason=reason)
        w.append("## Samples the package refused\n\nOn these samples the target cannot be "
                 "reached without releasing near-prior values, so the synthesizer raises "
                 "TargetUnreachableError and the method has no estimate for that sample (the "
                 "`reps` of its cells say how many samples scored it; every other number of "
                 "this report is over the released samples only). *cell weight floor*: the "
                 "bound at the smallest c that keeps every predictor cell one record's worth "
                 "of likelihood (min_cell_weight = 1) is still above the target. *flat map*: "
                 "down-weighting widens the posterior as fast as it shrinks the weights "
                 "(the log-log slope of c -> Delta_alpha <= 0.1).\n\n"
                 + _md(unreach.groupby(["method", "delta_target", "reason"]).size()
                       .to_frame("samples"))
                 + "\n\nFirst message of each reason:\n\n"
                 + "\n".join(f"- {r}: " + unreach.loc[unreach['reason'] == r,
                                                        'unreachable'].iloc[0]
                             for r in sorted(set(reason))) + "\n")
        facts = facts[facts["unreachable"].isna()]
    if not facts.empty:
        fs = facts.groupby(["method", "delta_target"]).agg(
            fits=("delta_alpha", "size"),
            achieved_mean=("delta_alpha", "mean"), achieved_max=("delta_alpha", "max"),
            unweighted_mean=("delta_unweighted", "mean"),
            unweighted_min=("delta_unweighted", "min"),
            unweighted_max=("delta_unweighted", "max"),
            c_median=("c", "median"), mean_alpha=("mean_alpha", "mean"),
            share_alpha_1=("share_alpha_1", "mean"),
            worst_rhat=("max_rhat", "max"), min_ess=("min_ess_bulk", "min"),
            seconds_mean=("seconds", "mean"))
        w.append("## The fits\n\nAchieved bound (never above the target), the unweighted "
                 "bound (seed 001: FBS 8.64, FBP 9.95 on the paper's one sample), the "
                 "tuned c (c > 1 allowed, alpha clipped at 1), mean alpha and the share of "
                 "records that keep alpha = 1.\n\n" + _md(fs.round(3)) + "\n")
    # bias of cell means / counts
    rows = []
    present = set(mc.replicates["method"])
    for mth in ["Sample"] + [f"{a} D{d:g} m10" for d in cfg["deltas"]
                             for a in ("FBS", "FBP", "FBPpaper")
                             if f"{a} D{d:g} m10" in present]:
        for kind in ("count", "mean"):
            ks = cell_keys(kind)
            rep = mc.replicates[(mc.replicates["method"] == mth)
                                & mc.replicates["estimand"].isin(ks)]
            rel = (rep["estimate"] - rep["truth"]) / rep["truth"]
            per_cell = rel.groupby(rep["estimand"]).mean()
            per_rep = rel.groupby(rep["rep"]).mean()
            rows.append({"method": mth, "table": kind,
                         "mean relative bias %": 100 * per_cell.mean(),
                         "MC SE %": 100 * per_rep.std(ddof=1) / np.sqrt(len(per_rep)),
                         "min cell %": 100 * per_cell.min(), "max cell %": 100 * per_cell.max()})
    bias = pd.DataFrame(rows).set_index(["method", "table"]).round(2)
    w.append("## Bias over samples (the FBP bias of issue 17)\n\nMean over the 24 cells of "
             "the relative bias (mean over samples of (estimate - truth) / truth); MC SE from "
             "the per-sample averages.\n\n" + _md(bias) + "\n")
    # coverage tables (seed 001 Tables 8-9 at Delta 3.4, m = 10; seed 000 Tables 4-5 at 1.8, m 3)
    for (delta, m, title, texts) in [
            (3.4, 10, "Seed 001 Tables 8-9 (Delta 3.4, m = 10, epsilon 68)",
             (PAPER_T8, PAPER_T9)),
            (1.8, 3, "Seed 000 supplement Tables 4-5 (Delta 1.8, m = 3, epsilon 10.8)",
             (PAPER_S4, PAPER_S5))]:
        if delta not in cfg["deltas"]:
            continue
        w.append(f"## {title}\n")
        for kind, text, name in (("count", texts[0], "counts"),
                                 ("mean", texts[1], "average salary")):
            fitted = tuple(a for a in ("FBS", "FBP") if f"{a} D{delta:g} m{m}" in present)
            df, _ = coverage_table(mc, kind, delta, m, text, methods=fitted)
            w.append(f"### {name}\n\n" + _md(df) + "\n")
        if f"FBPpaper D{delta:g} m{m}" in present and texts[0] is not None:
            df, _ = coverage_table(mc, "count", delta, m, texts[0], methods=("FBPpaper",))
            w.append("### counts, FBP with the paper's smoothed weights (FBPpaper)\n\n"
                     "The same FBP fits released with seed 001's smoothed weights "
                     "exp(-kappa_y y*) (only the kappa_y y component of the pi model's mean), "
                     "set against the paper's FBP column. Without the field terms x kappa_x "
                     "the weights ignore how the inclusion probabilities' level differs "
                     "between fields (pi_i = n_h size_i / sum_h size: fields of high "
                     "salary get lower pi at the same salary), so field counts are biased "
                     "by field (field 7 low, field 5 high); the paper's field 7 under-"
                     "coverage is this.\n\n" + _md(df) + "\n")
    # mean coverage over the 24 cells vs the paper's (seed 001 Tables 8-9, Delta 3.4, m = 10)
    rows = []
    rep = mc.replicates
    for delta, m, t_count, t_mean in ((3.4, 10, PAPER_T8, PAPER_T9),
                                      (1.8, 3, PAPER_S4, PAPER_S5)):
        if delta not in cfg["deltas"]:
            continue
        for kind, text in (("count", t_count), ("mean", t_mean)):
            paper = parse_paper(text, keys=MC_KEYS)
            for mth in ("FBS", "FBP", "FBPpaper"):
                j = PAPER_COL[mth]
                lab = f"{mth} D{delta:g} m{m}"
                if lab not in present:
                    continue
                sub = rep[(rep["method"] == lab) & rep["estimand"].isin(cell_keys(kind))]
                per = sub.groupby("rep")["covered"].mean().dropna()
                R_m = len(per)
                ours, se = float(per.mean()), float(per.std(ddof=1) / np.sqrt(R_m))
                pap = float(paper.iloc[:, 1 + 2 * j].astype(float).mean())
                # the paper's own MC SE, unknown, taken as ours scaled to its R = 100
                se_p = se * np.sqrt(R_m / 100)
                z = (ours - pap) / np.hypot(se, se_p)
                rows.append({"Delta, m": f"{delta:g}, {m}", "table": kind, "method": mth,
                             "samples": R_m, "coverage (mean of 24 cells)": round(ours, 3),
                             "MC SE": round(se, 3), "paper": round(pap, 3),
                             "z": round(z, 1), "within MC error": "yes" if abs(z) <= 2 else "no"})
    if rows:
        w.append("## Mean coverage over the 24 cells against the papers\n\n"
                 "Delta 3.4, m = 10 against seed 001 Tables 8-9; Delta 1.8, m = 3 against seed "
                 "000 supplement Tables 4-5 (FBPpaper: FBP with the paper's smoothed weights, "
                 "against the paper's FBP). MC SE from the per-sample shares of covered cells "
                 "(cells of one sample are correlated, so this is wider than a binomial SE); "
                 "the paper's MC SE is taken as ours scaled to its 100 samples.\n\n"
                 + _md(pd.DataFrame(rows).set_index(["Delta, m", "table", "method"])) + "\n")
    # CI length ratios vs seed 000
    rep_ = mc.replicates
    median_len = (rep_["ci_high"] - rep_["ci_low"]).groupby(
        [rep_["estimand"], rep_["method"]]).median()
    rat = []
    for delta in cfg["deltas"]:
        if not {f"FBS D{delta:g} m10", f"FBP D{delta:g} m10"} <= present:
            continue   # one method fitted: no ratio
        for m in MS:
            row = {"Delta": delta, "m": m, "epsilon": 2 * delta * m}
            for kind, j in (("count", 0), ("mean", 1)):
                ks = cell_keys(kind)
                fbs = s.loc[[(k, f"FBS D{delta:g} m{m}") for k in ks], "avg_ci_length"].to_numpy()
                fbp = s.loc[[(k, f"FBP D{delta:g} m{m}") for k in ks], "avg_ci_length"].to_numpy()
                ours = float(np.mean(fbp / fbs))
                paper = PAPER_RATIO.get((delta, m), (np.nan, np.nan))[j]
                row[f"{kind}: FBP/FBS CI"] = round(ours, 2)
                # the same ratio from median lengths over samples: robust to a few samples
                # with near-prior cells (at low alpha), which dominate the average lengths
                row[f"{kind}: FBP/FBS CI (medians)"] = round(float(np.mean(
                    median_len.loc[[(k, f"FBP D{delta:g} m{m}") for k in ks]].to_numpy()
                    / median_len.loc[[(k, f"FBS D{delta:g} m{m}") for k in ks]].to_numpy())), 2)
                row[f"{kind}: paper"] = paper
                row[f"{kind}: within 20%"] = "yes" if abs(ours / paper - 1) <= 0.2 else "no"
                cov_fbp = s.loc[[(k, f"FBP D{delta:g} m{m}") for k in ks], "coverage"].mean()
                cov_fbs = s.loc[[(k, f"FBS D{delta:g} m{m}") for k in ks], "coverage"].mean()
                row[f"{kind}: cov FBS/FBP"] = f"{cov_fbs:.3f}/{cov_fbp:.3f}"
            rat.append(row)
    if rat:
        w.append("## CI length ratios FBP / FBS and mean coverage (seed 000 Figs. 10-17 "
                 "captions)\n\nMean over the 24 cells of avg CI length FBP / FBS (the paper's "
                 "definition; the verdict uses it); the paper's ratio is from the figure captions. "
                 "The 'medians' column uses each cell's median length over samples instead, "
                 "which a few samples with long intervals (a weakly informed cell at low alpha) "
                 "cannot move; the two agreeing says no such samples carry the average.\n\n"
                 + _md(pd.DataFrame(rat).set_index(["Delta", "m"])) + "\n")
    # coverage vs CV figures
    for delta in cfg["deltas"]:
        fig, axes = plt.subplots(len(MS), 2, figsize=(9, 3.0 * len(MS)), squeeze=False)
        for i, m in enumerate(MS):
            for j, kind in enumerate(("count", "mean")):
                ax = axes[i, j]
                for mth, colr in (("FBS", "tab:blue"), ("FBP", "tab:orange")):
                    if f"{mth} D{delta:g} m{m}" not in present:
                        continue
                    ks = cell_keys(kind)
                    sub = s.loc[[(k, f"{mth} D{delta:g} m{m}") for k in ks]]
                    ax.scatter(sub["mean_cv"], sub["coverage"], s=14, color=colr, label=mth)
                ax.axhline(0.95, color="red", ls="--", lw=0.8)
                ax.set_title(f"{kind}s, m = {m}, eps = {2 * delta * m:g}", fontsize=9)
                ax.set_xlabel("mean CV")
                ax.set_ylabel("coverage")
                ax.set_ylim(-0.02, 1.02)
        axes[0, 0].legend(fontsize=8)
        fig.tight_layout()
        name = f"{stem}_coverage_cv_D{delta:g}.png"
        fig.savefig(out / name, dpi=90)
        plt.close(fig)
        w.append(f"## Coverage vs CV, Delta {delta:g} (seed 000 Figs. "
                 f"{'10-13' if delta == 1.8 else '14-17'})\n\n![coverage vs CV]({name})\n")
    path = out / f"{stem}.md"
    path.write_text("\n".join(w))
    s.to_csv(out / f"{stem}_summary.csv")
    return path


if __name__ == "__main__":
    main()
