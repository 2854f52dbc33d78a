"""Coverage of synthetic designs on clustered samples (issue 36 item 4).

A repeated-sampling study: does an analyst who runs ``svymean``/``svyglm`` on the m synthetic
designs of a release, combined by the release's rule, get 95% intervals that cover the
population value as often as the confidential design's own intervals do, when the sample is
clustered?

Population (one per intra-cluster correlation, fixed over the samples): H = 2 strata of 150
PSUs each, PSU sizes uniform on 20..60 units (N about 12,000); a unit-level binary predictor
x ~ Bernoulli(0.35 | 0.55 by stratum), independent of the clusters; a positive outcome

    log y = mu_h + 0.3 x + u_j + e,    u_j ~ N(0, ICC s^2),  e ~ N(0, (1 - ICC) s^2),  s = 0.5,

mu = (3.0, 3.3) by stratum, so the intra-cluster correlation of log y within a stratum is the
ICC (0.05 and 0.2). FBS/FBP model log y; predictors are categorical for them (x is binary).

Sample: stratified two-stage, SRS of 15 PSUs per stratum (30 PSUs), then SRS of 8 units per
PSU (n = 240); weights (N_h / 15)(M_j / 8); fpc as population counts at both stages. The
confidential design is ``SurveyDesign(ids="~psu+unit", strata="stratum", fpc="~Nh+M",
weights="w")`` (R: ``svydesign(id=~psu+unit, strata=~stratum, fpc=~Nh+M, weights=~w)``).

Estimands (population values computed from the population): the mean of y, the domain mean of
y where x == 1, and the census regression slope of y on x (``svyglm(y ~ x)``'s coefficient of
x; with a binary x the difference of the two domain means). Intervals: the confidential design's
own 95% intervals as the package (and R) give them (``svymean``: normal, as R's ``confint``;
``svyglm``: t on the residual design df, as R's ``confint.svyglm``); for each synthesizer the
combined 95% interval of its release (``SyntheticRelease.mean`` / ``.glm``: the release's rule
and df, computed by the package, not here).

Synthesizers and their privacy settings (each fit a few seconds at the study's MCMC settings):

* FBS, FBP, PBP: ``target_lipschitz=3.4`` (seed 001's Delta_alpha per released draw; the SDR
  study's setting), so a release of m = 5 sets has epsilon = 2 x 3.4 x 5 = 34; ``tol=0.10``;
  predictor cells of x; ``population_size=N``.
* Sequential: y ``positive`` given the public x, Lipschitz risk weights, ``target_epsilon=34``
  (the same account as FBS's); the design weights (constant within stratum x fpc cells) are
  released as collected.
* QuantileSynthesizer: ``method="jointexp"``, variables x then y, ``epsilon=5`` (the issue's
  apiclus2 example), public bounds x in [0, 1], y in [0, 500], C_X = 1.
* m = 5 for all; MCMC as the SDR Monte Carlo (vignettes/sdr_monte_carlo.py): 2 chains x 500
  draws after 500 warm-up, fits missing the release gates kept (``allow_unconverged``; a study,
  not a release). ``--fast``: 2 chains x 100 draws after 100 warm-up, gates ess 20 / R-hat 1.2.

A synthesizer that refuses the design (a ValueError at fit or release, e.g. a synthesizer that
cannot carry the design effect, issue 36 D6) gives rows with status ``refused: <reason>``; a
privacy target it cannot reach gives ``unreachable: <reason>``; any other exception
``error: <type>: <message>`` (kept, counted in the report, so a long run is not lost).

Resumable like the SDR Monte Carlo: every finished sample is written to ``--store``
(``icc<ICC>/rep_<r>.parquet``, written to a temporary name and renamed); a rerun reads what is
there and runs the rest. Each sample's generator is spawned from the study seed and its index
only (as ``surveysynth.simulate.monte_carlo``, which scores the store), so samples can run in any
order: ``--workers 2`` runs them in two processes (each its own Stan). A store is resumed only by
the same configuration and the same code (SHA-256 of the package sources and this file):
otherwise a SystemExit names the fix (a new ``--store``).

Usage:
    python vignettes/clustered_coverage.py --reps 100 --workers 2     # run / resume, then report
    python vignettes/clustered_coverage.py --reps 100 --report-only   # render from the store
    python vignettes/clustered_coverage.py --methods FBS Sequential --reps 10
    python vignettes/clustered_coverage.py --fast --store /tmp/cc --out /tmp/cc.md   # smoke
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import platform
import subprocess
import sys
import time
import warnings
from datetime import datetime, timezone
from functools import lru_cache
from pathlib import Path

import numpy as np
import pandas as pd

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent

ICCS = (0.05, 0.2)
METHODS = ("FBS", "FBP", "PBP", "Sequential", "Quantile")
CONFIDENTIAL = "Confidential"
ESTIMANDS = ("mean y", "mean y | x=1", "slope y~x")
M_SETS = 5
STRATUM_MU = (3.0, 3.3)
STRATUM_PX = (0.35, 0.55)
SLOPE_LOG = 0.3
SD_LOG = 0.5
PSUS_PER_STRATUM = 150
PSU_SIZE = (20, 60)
SAMPLE_PSUS = 15           # per stratum
SAMPLE_UNITS = 8           # per sampled PSU
TARGET_LIPSCHITZ = 3.4
SEQ_EPSILON = 2 * TARGET_LIPSCHITZ * M_SETS
QUANTILE_EPSILON = 5.0
Y_BOUNDS = (0.0, 500.0)


# ------------------------------------------------------------------------- population, sample
def two_stage_population(icc: float, seed: int) -> pd.DataFrame:
    """The finite population of one ICC: columns stratum, psu (unique overall), unit (within
    PSU), x (0/1), y (> 0), M (PSU size), Nh (PSUs in the stratum). Deterministic in seed."""
    if not 0 <= icc < 1:
        raise ValueError(f"icc={icc}: the intra-cluster correlation must be in [0, 1).")
    rng = np.random.default_rng(seed)
    parts, psu = [], 0
    for h, (mu, px) in enumerate(zip(STRATUM_MU, STRATUM_PX, strict=True)):
        sizes = rng.integers(PSU_SIZE[0], PSU_SIZE[1] + 1, PSUS_PER_STRATUM)
        u = rng.normal(0.0, np.sqrt(icc) * SD_LOG, PSUS_PER_STRATUM)
        for size, uj in zip(sizes, u, strict=True):
            psu += 1
            x = rng.binomial(1, px, size)
            e = rng.normal(0.0, np.sqrt(1 - icc) * SD_LOG, size)
            parts.append(pd.DataFrame({
                "stratum": h + 1, "psu": psu, "unit": np.arange(1, size + 1), "x": x,
                "y": np.exp(mu + SLOPE_LOG * x + uj + e), "M": int(size)}))
    pop = pd.concat(parts, ignore_index=True)
    pop["Nh"] = pop.groupby("stratum")["psu"].transform("nunique").astype(int)
    return pop


def two_stage_sample(pop: pd.DataFrame, rng: np.random.Generator) -> pd.DataFrame:
    """Stratified two-stage sample: SRS of SAMPLE_PSUS PSUs per stratum, SRS of SAMPLE_UNITS
    units in each; weight w = (Nh / n_h)(M / k). A new DataFrame (pop is not modified)."""
    rows = []
    for _, g in pop.groupby("stratum", sort=True):
        psus = np.sort(g["psu"].unique())
        chosen = np.sort(rng.choice(psus, SAMPLE_PSUS, replace=False))
        for p in chosen:
            idx = g.index[g["psu"].to_numpy() == p]
            rows.append(np.sort(rng.choice(idx, SAMPLE_UNITS, replace=False)))
    s = pop.loc[np.concatenate(rows)].reset_index(drop=True)
    s["w"] = s["Nh"] / SAMPLE_PSUS * s["M"] / SAMPLE_UNITS
    return s


def confidential_design(sample: pd.DataFrame):
    """The confidential design of a sample (two stages, strata, fpc, weights)."""
    import surveysynth as ss

    return ss.SurveyDesign(sample, ids="~psu+unit", strata="stratum", fpc="~Nh+M",
                           weights="w")


def truths(pop: pd.DataFrame) -> pd.Series:
    """Population values of the estimands: mean y, mean y where x == 1, and the census least
    squares slope of y on x (cov / var over the population)."""
    y, x = pop["y"].to_numpy(float), pop["x"].to_numpy(float)
    slope = float(np.sum((x - x.mean()) * (y - y.mean())) / np.sum((x - x.mean()) ** 2))
    return pd.Series([y.mean(), y[x == 1].mean(), slope], index=list(ESTIMANDS))


@lru_cache(maxsize=4)
def population_for(icc: float, seed: int) -> pd.DataFrame:
    return two_stage_population(icc, seed)


def population_seed(seed: int, icc: float) -> int:
    return int(seed) + 1000 * ICCS.index(icc) if icc in ICCS else int(seed) + int(icc * 1e6)


# --------------------------------------------------------------------------------- estimates
_COLS = ("estimate", "se", "ci_low", "ci_high", "df")


def _row(frame: pd.DataFrame, mask=None) -> dict:
    sub = frame if mask is None else frame[mask]
    if len(sub) != 1:
        raise ValueError(f"expected one row, got {len(sub)}")
    return {c: float(sub[c].iloc[0]) for c in _COLS}


def confidential_estimates(design) -> pd.DataFrame:
    """The confidential design's estimates and 95% intervals (the package's own, as R)."""
    from surveysynth.analysis import svyglm

    out = {"mean y": _row(design.mean("y"))}
    dom = design.mean("y", by="x")
    out["mean y | x=1"] = _row(dom, dom["x"].astype(float).to_numpy() == 1)
    g = svyglm("y ~ x", design)
    ci = g.conf_int(level=0.95)
    out["slope y~x"] = {"estimate": float(g.params["x"]), "se": float(g.bse["x"]),
                        "ci_low": float(ci.loc["x", "lower"]),
                        "ci_high": float(ci.loc["x", "upper"]), "df": float(g.df_resid)}
    return pd.DataFrame(out).T


def release_estimates(rel) -> tuple[pd.DataFrame, dict]:
    """Combined estimates of a release (``SyntheticRelease.mean`` / ``.glm``: the release's rule
    and df). Returns the frame (NaN where an estimate failed) and {estimand: failure}."""
    out, failed = {}, {}
    calls = {
        "mean y": lambda: _row(rel.mean("y")),
        "mean y | x=1": lambda: (lambda f: _row(f, f["x"].astype(float).to_numpy() == 1))(
            rel.mean("y", by="x")),
        "slope y~x": lambda: (lambda f: _row(f, f["term"].to_numpy() == "x"))(
            rel.glm("y ~ x")),
    }
    for k, call in calls.items():
        try:
            out[k] = call()
        except Exception as err:  # noqa: BLE001 - a failed estimate is a result row
            out[k] = dict.fromkeys(_COLS, np.nan)
            failed[k] = f"estimate failed: {type(err).__name__}: {_short(err)}"
    return pd.DataFrame(out).T, failed


def _short(err: Exception, k: int = 400) -> str:
    text = " ".join(str(err).split())
    return text if len(text) <= k else text[:k] + " ..."


# ------------------------------------------------------------------------------ synthesizers
def make_synthesizer(name: str, cfg: dict, N: int, seed: int):
    """One synthesizer at the study's privacy setting and MCMC settings (module docstring)."""
    from surveysynth.synth import FBP, FBS, PBP, QuantileSynthesizer, Sequential

    mcmc = dict(chains=cfg["chains"], draws=cfg["draws"], warmup=cfg["warmup"],
                tol=cfg["tol"], convergence=cfg.get("gates"), allow_unconverged=True,
                progress=False, random_state=seed, m=M_SETS, population_size=N)
    if name in ("FBS", "FBP", "PBP"):
        cls = {"FBS": FBS, "FBP": FBP, "PBP": PBP}[name]
        return cls(outcome="y", predictors=["x"], log=True,
                   target_lipschitz=TARGET_LIPSCHITZ, **mcmc)
    if name == "Sequential":
        return Sequential(variables=[{"name": "y", "type": "positive"}], public=["x"],
                          target_epsilon=SEQ_EPSILON, **mcmc)
    if name == "Quantile":
        return QuantileSynthesizer(variables=["x", "y"], method="jointexp",
                                   epsilon=QUANTILE_EPSILON,
                                   bounds={"x": (0, 1), "y": Y_BOUNDS}, C_X={"y": 1.0},
                                   m=M_SETS, population_size=N, random_state=seed,
                                   progress=False)
    raise ValueError(f"unknown synthesizer {name!r}; choose from {METHODS}.")


def run_method(name: str, design, cfg: dict, N: int, seed: int) -> tuple[pd.DataFrame, dict,
                                                                          float]:
    """Fit, release and estimate one synthesizer on one sample: (estimates, {estimand: status}
    for the estimands that are not "ok", seconds)."""
    from surveysynth.synth.pseudo_posterior import TargetUnreachableError

    t0 = time.perf_counter()
    try:
        rel = make_synthesizer(name, cfg, N, seed).fit(design).release()
    except TargetUnreachableError as err:
        status = f"unreachable: {_short(err)}"
    except ValueError as err:
        status = f"refused: {_short(err)}"
    except Exception as err:  # noqa: BLE001 - recorded, counted in the report
        status = f"error: {type(err).__name__}: {_short(err)}"
    else:
        est, failed = release_estimates(rel)
        return est, failed, time.perf_counter() - t0
    nan = pd.DataFrame(np.nan, index=list(ESTIMANDS), columns=list(_COLS))
    return nan, dict.fromkeys(ESTIMANDS, status), time.perf_counter() - t0


def analyze_sample(icc: float, r: int, rng: np.random.Generator, cfg: dict) -> pd.DataFrame:
    """One sample: draw it, score the confidential design and every synthesizer in ``cfg``.
    Rows in ``surveysynth.simulate.monte_carlo``'s store format plus status, df, seconds."""
    pop = population_for(icc, population_seed(cfg["seed"], icc))
    truth = truths(pop)
    sample = two_stage_sample(pop, rng)
    design = confidential_design(sample)
    # one fit seed per synthesizer, drawn whichever are run (a subset has the same seeds)
    seeds = {m: int(rng.integers(1, 2**31 - 1)) for m in METHODS}
    parts = []

    def add(method, est, status, secs):
        parts.append(pd.DataFrame({
            "rep": r, "method": method, "estimand": list(ESTIMANDS),
            **{c: est.loc[list(ESTIMANDS), c].to_numpy(float) for c in _COLS},
            "truth": truth.loc[list(ESTIMANDS)].to_numpy(float),
            "status": [status.get(k, "ok") for k in ESTIMANDS], "seconds": secs}))

    t0 = time.perf_counter()
    add(CONFIDENTIAL, confidential_estimates(design), {}, time.perf_counter() - t0)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        for method in cfg["methods"]:
            est, status, secs = run_method(method, design, cfg, len(pop), seeds[method])
            add(method, est, status, secs)
    return pd.concat(parts, ignore_index=True)


def _rep_path(store: Path, icc: float, r: int) -> Path:
    return store / f"icc{icc:g}" / f"rep_{r:05d}.parquet"


def _run_one(job: tuple) -> tuple[float, int, float]:
    """Worker entry: one (icc, r) sample, written atomically to the store."""
    icc, r, rng, cfg, store = job
    warnings.filterwarnings("ignore")
    t0 = time.perf_counter()
    rows = analyze_sample(icc, r, rng, cfg)
    path = _rep_path(Path(store), icc, r)
    tmp = path.with_suffix(".partial")
    rows.to_parquet(tmp, index=False)
    os.replace(tmp, path)
    return icc, r, time.perf_counter() - t0


def sample_generators(seed: int, icc: float, reps: int) -> list[np.random.Generator]:
    """The per-sample generators of one ICC cell: exactly monte_carlo's (its seed = cell seed),
    so the store it scores is the store it would have written."""
    return np.random.default_rng(cell_seed(seed, icc)).spawn(int(reps))


def cell_seed(seed: int, icc: float) -> int:
    return population_seed(seed, icc) + 30


def pending(cfg: dict, reps: int, store: Path,
            shard: tuple[int, int] | None = None) -> list[tuple]:
    """The samples (icc, r, generator, cfg, store) not yet in the store; with ``shard=(k, n)``
    those of share k of n, assigned by the sample's identity (ICC, index), never by position
    in the list, so two processes listing at different moments split the same way."""
    jobs = []
    for i, icc in enumerate(cfg["iccs"]):
        (store / f"icc{icc:g}").mkdir(parents=True, exist_ok=True)
        for r, rng in enumerate(sample_generators(cfg["seed"], icc, reps)):
            if shard is not None and (r * len(cfg["iccs"]) + i) % shard[1] != shard[0]:
                continue
            if not _rep_path(store, icc, r).exists():
                jobs.append((icc, r, rng, cfg, str(store)))
    return jobs


def run(cfg: dict, reps: int, store: Path, workers: int = 1, progress: bool = True,
        shard: tuple[int, int] | None = None) -> None:
    """Run the samples missing from the store (all ICCs).

    ``workers=2``: two child processes of this script (``--shard 0/2`` and ``1/2``), each a
    plain Python process with its own Stan, each running the samples assigned to it by the
    sample's identity (ICC, index), so the split does not depend on which samples are done.
    (Not a multiprocessing pool: pystan's own process pool inside a pool worker keeps the
    worker from exiting.) ``shard=(k, n)``: run only this process's share, in this process.
    """
    jobs = pending(cfg, reps, store, shard)
    if not jobs:
        return
    if workers > 1 and shard is None:
        cmd = [sys.executable, str(Path(__file__).resolve()), "--store", str(store),
               "--reps", str(reps)] + (["--quiet"] if not progress else [])
        procs = [subprocess.Popen([*cmd, "--shard", f"{k}/{workers}"]) for k in range(workers)]
        try:
            codes = [p.wait() for p in procs]
        except BaseException:
            for p in procs:
                p.terminate()
            raise
        if any(codes):
            raise SystemExit(f"a worker process failed (exit codes {codes}); the samples it "
                             "finished are in the store: rerun to resume.")
        return
    t0 = time.perf_counter()
    for done, job in enumerate(jobs, 1):
        icc, r, secs = _run_one(job)
        if progress:
            tag = "" if shard is None else f"worker {shard[0]}: "
            print(f"{tag}[{done}/{len(jobs)}] ICC {icc:g} sample {r}: {secs:.1f} s "
                  f"({time.perf_counter() - t0:.0f} s elapsed)", flush=True)


def score(cfg: dict, reps: int, store: Path):
    """``surveysynth.simulate.monte_carlo`` over the (complete) store of each ICC: its summary
    (coverage, MC SE, lengths, bias) plus the stored rows with status, df, seconds."""
    from surveysynth.simulate import monte_carlo

    def never(*_):
        raise SystemExit(f"{store}: a sample is missing from the store; run without "
                         "--report-only to complete it.")

    out = {}
    for icc in cfg["iccs"]:
        pop = population_for(icc, population_seed(cfg["seed"], icc))
        mc = monte_carlo(never, never, truths(pop), reps=reps, seed=cell_seed(cfg["seed"], icc),
                         progress=False, store=store / f"icc{icc:g}")
        out[icc] = mc
    return out


# ------------------------------------------------------------------------------------- report
def summarize(results: dict) -> pd.DataFrame:
    """One row per ICC x estimand x method: samples scored, coverage and its MC SE, mean CI
    length over the confidential design's on the same samples, bias (absolute and % of the
    truth, with its MC SE), mean df, mean seconds, and the confidential coverage beside."""
    rows = []
    for icc, mc in results.items():
        rep = mc.replicates
        conf = rep[rep["method"] == CONFIDENTIAL].set_index(["rep", "estimand"])
        for est in ESTIMANDS:
            c_sub = rep[(rep["method"] == CONFIDENTIAL) & (rep["estimand"] == est)]
            c_cov = float(c_sub["covered"].mean())
            for method in [CONFIDENTIAL] + [m for m in METHODS if m in set(rep["method"])]:
                sub = rep[(rep["method"] == method) & (rep["estimand"] == est)]
                ok = sub[sub["estimate"].notna()]
                R = len(ok)
                row = {"ICC": icc, "estimand": est, "method": method, "samples": R,
                       "not scored": len(sub) - R}
                if R:
                    cov = float(ok["covered"].mean())
                    c_len = conf.loc[list(zip(ok["rep"], ok["estimand"], strict=True)),
                                     "ci_length"]
                    err = (ok["estimate"] - ok["truth"]).to_numpy(float)
                    truth = float(ok["truth"].iloc[0])
                    row.update({
                        "coverage": cov, "MC SE": float(np.sqrt(cov * (1 - cov) / R)),
                        "length / confidential": float(ok["ci_length"].mean()
                                                       / c_len.mean()),
                        "median length ratio": float(np.median(
                            ok["ci_length"].to_numpy(float) / c_len.to_numpy(float))),
                        "bias": float(err.mean()),
                        "bias %": 100 * float(err.mean()) / truth,
                        "bias MC SE %": (100 * float(err.std(ddof=1)) / np.sqrt(R) / abs(truth)
                                         if R > 1 else np.nan),
                        "mean df": _mean_df(ok["df"].to_numpy(float)),
                        "share df < 2": float(np.mean(ok["df"].to_numpy(float) < 2)),
                        "seconds": float(sub["seconds"].mean())})
                row["confidential coverage"] = c_cov
                rows.append(row)
    return pd.DataFrame(rows)


def _mean_df(df: np.ndarray) -> float:
    """Mean of the finite df; inf when every interval is normal (infinite df)."""
    fin = df[np.isfinite(df)]
    return float(fin.mean()) if fin.size else float("inf")


def status_table(results: dict) -> pd.DataFrame:
    """Per ICC x method x status kind (ok, refused, unreachable, error, estimate failed): the
    samples and rows of that kind and the first message."""
    parts = []
    for icc, mc in results.items():
        rep = mc.replicates
        rep = rep[rep["method"] != CONFIDENTIAL]
        parts.append(rep.assign(ICC=f"{icc:g}", kind=rep["status"].str.split(":").str[0]))
    cols = ["ICC", "method", "status", "samples", "rows", "message"]
    if not parts or not sum(map(len, parts)):
        return pd.DataFrame(columns=cols)
    rep = pd.concat(parts, ignore_index=True)
    t = (rep.groupby(["ICC", "method", "kind"], sort=False)
         .agg(samples=("rep", "nunique"), rows=("rep", "size"), message=("status", "first"))
         .reset_index().rename(columns={"kind": "status"}))
    t.loc[t["status"] == "ok", "message"] = ""
    return t[cols]


def _md(df: pd.DataFrame) -> str:
    cols = list(df.columns)
    lines = ["| " + " | ".join(map(str, cols)) + " |", "|" + "---|" * len(cols)]
    for _, r in df.iterrows():
        cells = []
        for c in cols:
            v = r[c]
            if isinstance(v, float):
                cells.append("" if np.isnan(v) else (f"{v:.3f}" if abs(v) < 1000 else f"{v:.4g}"))
            else:
                cells.append(str(v).replace("|", "\\|"))
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)


def machine() -> dict:
    load = os.getloadavg() if hasattr(os, "getloadavg") else (np.nan,) * 3
    return {"host": platform.node(), "platform": platform.platform(),
            "cpus": os.cpu_count(), "python": platform.python_version(),
            "load": [round(x, 2) for x in load]}


def report(results: dict, cfg: dict, reps: int, store: Path, out: Path, meta: dict) -> Path:
    """Write the coverage table (markdown) to ``out`` and its numbers to the store's
    summary.csv; returns the markdown's path."""
    s = summarize(results)
    st = status_table(results)
    now = datetime.now(timezone.utc).strftime("%Y-%m-%d %H:%M UTC")
    w = ["# Coverage of synthetic designs on clustered samples (issue 36 item 4)\n",
         f"Generated by `vignettes/clustered_coverage.py` on {now}; machine {meta['host']} "
         f"({meta['cpus']} CPUs, {meta['platform']}), load average "
         f"{', '.join(map(str, meta['load']))} at the start of the run and "
         f"{', '.join(map(str, machine()['load']))} at rendering; "
         f"{reps} samples per ICC{' (FAST MODE: a smoke run, not a study)' if cfg['fast'] else ''}"
         f"; store `{store.as_posix()}`; code at commit {cfg['code']['commit']} "
         f"(sources SHA-256 {cfg['code']['sha256'][:12]}).\n",
         "Population per ICC (fixed over the samples): 2 strata x 150 PSUs of 20-60 units, "
         "log y = mu_h + 0.3 x + u_j + e with ICC of log y 0.05 or 0.2, x binary. Sample: 15 "
         "PSUs per stratum by SRS, 8 units per PSU by SRS (n = 240), weights and fpc at both "
         "stages; confidential design `SurveyDesign(ids=\"~psu+unit\", strata=\"stratum\", "
         "fpc=\"~Nh+M\", weights=\"w\")`. Estimands: mean of y, mean of y where x = 1, slope of "
         "`svyglm(y ~ x)`. Synthesizers: FBS, FBP, PBP at target Delta_alpha "
         f"{TARGET_LIPSCHITZ} (epsilon {SEQ_EPSILON:g} for m = {M_SETS}); Sequential at "
         f"target epsilon {SEQ_EPSILON:g}; QuantileSynthesizer jointexp at epsilon "
         f"{QUANTILE_EPSILON:g}; m = {M_SETS}; MCMC {cfg['chains']} chains x {cfg['draws']} "
         f"draws after {cfg['warmup']} warm-up (tuning tolerance {cfg['tol']}). Intervals: "
         "nominal 95%; the confidential design's own (svymean normal, svyglm t on the "
         "residual df, as R's confint), the synthesizers' combined by the release's rule "
         "(`SyntheticRelease.mean` / `.glm`).\n",
         "Columns: *coverage* of the truth and its binomial Monte Carlo SE; *length / "
         "confidential*: mean interval length over the confidential design's mean length on "
         "the same samples; *median length ratio*: median over samples of the two lengths' "
         "ratio (robust to a few samples with near-zero combined df); *bias* (estimate - truth) in units of y and in % of the truth "
         "with its MC SE; *mean df* of the intervals (finite ones); *share df < 2*: samples whose interval has fewer than 2 df (a t quantile above 4.3, and without bound as df -> 0: these make the mean length ratio explode); *seconds*: mean fit + "
         "release + estimates time per sample; *confidential coverage* beside. A method "
         "that refused has no scored samples (see the status table).\n"]
    for icc in cfg["iccs"]:
        sub = s[s["ICC"] == icc].drop(columns=["ICC"])
        w.append(f"## ICC {icc:g}\n\n" + _md(sub) + "\n")
    w.append("## Status of every synthesizer-sample\n\nok: released and estimated; refused: "
             "a ValueError at fit or release (the synthesizer declines this design); "
             "unreachable: the privacy target cannot be reached; error: any other exception; "
             "estimate failed: the release exists but the estimator raised.\n\n"
             + _md(st) + "\n")
    timing = s[(s["method"] != CONFIDENTIAL) & s["seconds"].notna()].groupby("method")[
        "seconds"].mean()
    if len(timing):
        w.append("## Seconds per synthesizer-sample\n\nMean wall time of fit + release + the "
                 f"three combined estimates, over all ICCs ({meta.get('workers', 1)} worker "
                 "process(es); with 2 workers each sample shares the machine with the "
                 "other).\n\n" + _md(timing.round(2).to_frame("seconds").reset_index()) + "\n")
    methods = " ".join(cfg["methods"])
    w.append("## Rerun\n\n```\n"
             f"python vignettes/clustered_coverage.py --reps {reps} --methods {methods} "
             f"--seed {cfg['seed']} --workers 2 --store <new store>   # run / resume\n"
             f"python vignettes/clustered_coverage.py --store {store.as_posix()} "
             "--report-only                      # render this table again\n```\n\n"
             "A store is resumed only by the same settings and code (else a new --store is "
             "asked for). Per-sample rows (estimate, se, interval, df, status, seconds) are "
             "the store's icc<ICC>/rep_<r>.parquet; this table's numbers are its summary.csv.\n")
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text("\n".join(w))
    s.to_csv(store / "summary.csv", index=False)
    return out


# ------------------------------------------------------------------------------- store checks
def code_stamp() -> dict:
    """Commit and SHA-256 of the code the numbers depend on: every .py and .stan file of the
    surveysynth package that is imported (wherever PYTHONPATH puts it: a branch's worktree
    counts as its own code) and this file (path and content, sorted)."""
    import importlib.util

    pkg = Path(importlib.util.find_spec("surveysynth").origin).resolve().parent
    h = hashlib.sha256()
    files = sorted(p for p in pkg.rglob("*")
                   if p.suffix in (".py", ".stan") and "__pycache__" not in p.parts)
    for f in files:
        h.update(f.relative_to(pkg.parent).as_posix().encode() + b"\0" + f.read_bytes())
    h.update(b"vignettes/clustered_coverage.py\0" + Path(__file__).resolve().read_bytes())
    commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=pkg.parent,
                            capture_output=True, text=True).stdout.strip() or "unknown"
    return {"commit": commit, "sha256": h.hexdigest(), "package": str(pkg.parent)}


_SAME = ("seed", "chains", "draws", "warmup", "tol", "gates", "methods", "fast")


def check_store(store: Path, cfg: dict) -> None:
    """A store is resumed only by the same settings and the same code; SystemExit naming the
    difference and the fix otherwise (two code versions in one table would be meaningless:
    e.g. main's FBS and the random-effects FBS)."""
    path = store / "config.json"
    if not any(store.glob("icc*/rep_*.parquet")):
        return
    if not path.exists():
        raise SystemExit(f"{store}: holds samples but no config.json; run into a new --store.")
    saved = json.loads(path.read_text())
    diff = [k for k in _SAME if json.dumps(saved.get(k)) != json.dumps(cfg.get(k))]
    if diff:
        raise SystemExit(
            f"{store}: its samples were made with other settings ({', '.join(diff)}: "
            f"{[saved.get(k) for k in diff]} vs now {[cfg.get(k) for k in diff]}). Fix: run "
            "into a new --store, or use the store's settings.")
    if saved.get("code", {}).get("sha256") != cfg["code"]["sha256"]:
        raise SystemExit(
            f"{store}: its samples come from the code at commit "
            f"{saved.get('code', {}).get('commit')}; the package or this study has changed "
            f"since (now commit {cfg['code']['commit']}). Resuming would mix two versions' "
            "numbers in one table. Fix: run into a new --store (or --report-only to render "
            "this one).")


def main(argv: list[str] | None = None) -> Path:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--reps", type=int, default=100, help="samples per ICC")
    ap.add_argument("--methods", nargs="+", choices=METHODS, default=list(METHODS),
                    help="the synthesizers run (each sample draws every fit seed either way)")
    ap.add_argument("--iccs", type=float, nargs="+", default=list(ICCS))
    ap.add_argument("--store", default=str(ROOT / ".mc" / "clustered_coverage"))
    ap.add_argument("--out", default=str(ROOT / "docs" / "clustered_coverage.md"))
    ap.add_argument("--seed", type=int, default=36)
    ap.add_argument("--chains", type=int, default=2)
    ap.add_argument("--draws", type=int, default=500)
    ap.add_argument("--warmup", type=int, default=500)
    ap.add_argument("--tol", type=float, default=0.10)
    ap.add_argument("--workers", type=int, default=1, choices=(1, 2),
                    help="processes running samples (2: each its own Stan)")
    ap.add_argument("--fast", action="store_true",
                    help="smoke run for the tests: 1 sample per ICC, 2 chains x 100 draws")
    ap.add_argument("--report-only", action="store_true",
                    help="render from the samples in the store; run nothing")
    ap.add_argument("--quiet", action="store_true")
    ap.add_argument("--shard", default=None,
                    help="internal (--workers): K/N runs this process's share of the samples "
                         "with the store's config.json, and writes no report")
    args = ap.parse_args(argv)
    bad = [i for i in args.iccs if not 0 <= i < 1]
    if bad:
        ap.error(f"--iccs {bad}: an intra-cluster correlation is in [0, 1).")
    store = Path(args.store)
    if args.shard is not None:
        k, n = (int(v) for v in args.shard.split("/"))
        cfg = json.loads((store / "config.json").read_text())
        if cfg["code"]["sha256"] != code_stamp()["sha256"]:
            raise SystemExit(f"--shard: the code changed since {store}/config.json was written.")
        warnings.filterwarnings("ignore")
        run(cfg, args.reps, store, progress=not args.quiet, shard=(k, n))
        return store
    if args.report_only:
        path = store / "config.json"
        if not path.exists():
            raise SystemExit(f"--report-only: {store} has no config.json; run the study first.")
        cfg = json.loads(path.read_text())
        counts = [len(list((store / f"icc{i:g}").glob("rep_*.parquet"))) for i in cfg["iccs"]]
        reps = min(counts)
        if reps == 0:
            raise SystemExit(f"--report-only: no samples in {store}; run the study first.")
        results = score(cfg, reps, store)
        return report(results, cfg, reps, store, Path(args.out), cfg["machine"])
    cfg = dict(seed=args.seed, chains=args.chains, draws=args.draws, warmup=args.warmup,
               tol=args.tol, gates=None, methods=list(args.methods), fast=args.fast,
               iccs=[float(i) for i in args.iccs])
    if args.fast:
        cfg.update(chains=2, draws=100, warmup=100, gates={"ess_bulk": 20, "rhat": 1.2})
        args.reps = min(args.reps, 1)
    cfg["code"] = code_stamp()
    check_store(store, cfg)
    store.mkdir(parents=True, exist_ok=True)
    meta = {**machine(), "workers": args.workers}
    saved = json.loads((store / "config.json").read_text()) if (
        store / "config.json").exists() else {}
    (store / "config.json").write_text(json.dumps({**saved, **cfg, "machine": meta}, indent=1))
    run(cfg, args.reps, store, workers=args.workers, progress=not args.quiet)
    results = score(cfg, args.reps, store)
    return report(results, cfg, args.reps, store, Path(args.out), meta)


if __name__ == "__main__":
    print(main())
