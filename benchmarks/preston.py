"""Benchmark: Preston's multistage rescaled bootstrap, package vs R survey.

1. Scale: 500 replicates on a two-stage design with 1,000,000 rows, 1,000 strata, fpc at
   both stages (10 of 40 PSUs per stratum, 100 of 500 units per PSU): time to generate,
   time for estimates, memory held by the replicate weights and peak traced memory.
2. Shared design R can finish (20,000 rows, 200 strata, same shape): R's
   ``as.svrepdesign(type="mrbbootstrap")`` per-replicate time (a few replicates, Rscript in a
   subprocess) against ours (500 replicates), and the speed-up.

Writes the "preston" section of docs/benchmarks.md. ``--fast`` shrinks everything (a smoke
run, numbers not representative).
"""

from __future__ import annotations

import argparse
import os
import resource
import subprocess
import sys
import tempfile
import time
import tracemalloc
from pathlib import Path

import numpy as np
import pandas as pd

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

import surveysynth as ss  # noqa: E402
from benchmarks._report import write_section  # noqa: E402


def make_design_frame(H: int, n1: int, N1: int, n2: int, N2: int, seed: int = 0) -> pd.DataFrame:
    """Two-stage stratified sample: H strata, n1 of N1 PSUs each, n2 of N2 units per PSU."""
    rng = np.random.default_rng(seed)
    n = H * n1 * n2
    stratum = np.repeat(np.arange(H), n1 * n2)
    psu = np.repeat(np.arange(H * n1), n2)
    u_psu = rng.normal(0, 10, H * n1)[psu]
    y = 100 + stratum % 17 + u_psu + rng.gamma(2.0, 10.0, n)
    return pd.DataFrame({"stratum": stratum, "psu": psu, "unit": np.arange(n),
                         "N1": float(N1), "N2": float(N2), "y": y,
                         "g": (rng.random(n) < 0.3).astype(np.int64)})


def design_of(df: pd.DataFrame) -> ss.SurveyDesign:
    return ss.SurveyDesign(df, ids="~psu+unit", strata="stratum", fpc="~N1+N2")


def big_run(H: int, replicates: int) -> dict:
    df = make_design_frame(H, 10, 40, 100, 500)
    t0 = time.perf_counter()
    d = design_of(df)
    t_design = time.perf_counter() - t0
    tracemalloc.start()
    t0 = time.perf_counter()
    rd = d.bootstrap(replicates, seed=1, dtype=np.float32, progress=False)
    t_gen = time.perf_counter() - t0
    _, peak_gen = tracemalloc.get_traced_memory()
    tracemalloc.reset_peak()
    t0 = time.perf_counter()
    tot = rd.total("y")
    t_total = time.perf_counter() - t0
    t0 = time.perf_counter()
    mean = rd.mean("y")
    t_mean = time.perf_counter() - t0
    t0 = time.perf_counter()
    rd.mean("y", by="g")
    t_by = time.perf_counter() - t0
    _, peak_est = tracemalloc.get_traced_memory()
    tracemalloc.stop()
    lin = d.total("y")
    return dict(rows=df.shape[0], strata=H, replicates=replicates, t_design=t_design,
                t_gen=t_gen, t_total=t_total, t_mean=t_mean, t_by=t_by,
                held=rd.nbytes, peak_gen=peak_gen, peak_est=peak_est,
                se_total=tot.se[0], se_lin=lin.se[0], se_mean=mean.se[0],
                maxrss=resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024)


def r_run(df: pd.DataFrame, r_reps: int) -> dict:
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "d.csv"
        df.to_csv(path, index=False)
        code = (
            "suppressMessages(library(survey)); x <- read.csv('" + str(path) + "'); "
            "d <- svydesign(id=~psu+unit, strata=~stratum, fpc=~N1+N2, data=x); "
            f"set.seed(1); tm <- system.time(r <- as.svrepdesign(d, type='mrbbootstrap', "
            f"replicates={r_reps}))[['elapsed']]; "
            "te <- system.time(s <- svytotal(~y, r))[['elapsed']]; "
            "cat(tm, te, SE(s), SE(svytotal(~y, d)), R.version.string, "
            "as.character(packageVersion('survey')), sep='\\n')"
        )
        res = subprocess.run(["Rscript", "-e", code], capture_output=True, text=True,
                             check=True)
    lines = res.stdout.strip().splitlines()
    return dict(t_gen=float(lines[0]), t_est=float(lines[1]), se=float(lines[2]),
                se_lin=float(lines[3]), version=f"{lines[4]}, survey {lines[5]}",
                replicates=r_reps)


def shared_run(H: int, replicates: int, r_reps: int) -> dict:
    df = make_design_frame(H, 10, 40, 10, 50, seed=2)
    d = design_of(df)
    t0 = time.perf_counter()
    rd = d.bootstrap(replicates, seed=1, progress=False)
    t_gen = time.perf_counter() - t0
    t0 = time.perf_counter()
    se = rd.total("y").se[0]
    t_est = time.perf_counter() - t0
    r = r_run(df, r_reps)
    return dict(rows=df.shape[0], strata=H, replicates=replicates, t_gen=t_gen, t_est=t_est,
                se=se, se_lin=d.total("y").se[0], R=r)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--fast", action="store_true", help="small smoke run")
    ap.add_argument("--replicates", type=int, default=500)
    ap.add_argument("--r-replicates", type=int, default=3)
    ap.add_argument("--no-write", action="store_true", help="print only")
    args = ap.parse_args()
    H_big, H_shared = (50, 20) if args.fast else (1000, 200)
    reps = 50 if args.fast else args.replicates
    r_reps = 2 if args.fast else args.r_replicates

    big = big_run(H_big, reps)
    print(big, flush=True)
    sh = shared_run(H_shared, reps, r_reps)
    print(sh, flush=True)
    ours_per = sh["t_gen"] / sh["replicates"]
    r_per = sh["R"]["t_gen"] / sh["R"]["replicates"]
    mib = 2**20
    md = f"""
### Preston multistage rescaled bootstrap (`SurveyDesign.bootstrap(method="preston")`)
{"**--fast smoke run: numbers not representative.**" if args.fast else ""}

**Scale.** Two-stage stratified design, {big['rows']:,} rows, {big['strata']:,} strata,
10 of 40 PSUs per stratum, 100 of 500 units per PSU, fpc at both stages; {big['replicates']}
replicates stored as float32 (one row of factors per last-stage unit).

| step | time (s) |
|---|---|
| build `SurveyDesign` | {big['t_design']:.1f} |
| generate {big['replicates']} Preston replicates | {big['t_gen']:.1f} |
| first `total("y")` (includes the rank for `degf`) | {big['t_total']:.1f} |
| `mean("y")` | {big['t_mean']:.1f} |
| `mean("y", by="g")` (2 domains, new `degf`) | {big['t_by']:.1f} |

Memory: replicate factors held {big['held'] / mib:,.0f} MiB; peak traced (numpy) memory
{big['peak_gen'] / mib:,.0f} MiB while generating and {big['peak_est'] / mib:,.0f} MiB while
estimating; process peak RSS {big['maxrss'] / mib:,.0f} MiB. SE of the total: bootstrap
{big['se_total']:,.1f} vs linearization {big['se_lin']:,.1f}.

**Package vs R on a shared design** ({sh['rows']:,} rows, {sh['strata']} strata, 10 of 40 PSUs
per stratum, 10 of 50 units per PSU, fpc at both stages; {sh['R']['version']}):

| | replicates | generation (s) | per replicate (s) |
|---|---|---|---|
| R `as.svrepdesign(type="mrbbootstrap")` | {sh['R']['replicates']} | {sh['R']['t_gen']:.1f} | {r_per:.3g} |
| surveysynth `bootstrap(method="preston")` | {sh['replicates']} | {sh['t_gen']:.2f} | {ours_per:.3g} |

Speed-up per replicate: **{r_per / ours_per:,.0f}x** (goal: at least 1,000x; both run
single-threaded on the same shared machine, 1-minute load average at the end
{os.getloadavg()[0]:.1f}). Variance of
the total from our {sh['replicates']} replicates, then: SE {sh['se']:,.1f} (estimate in
{sh['t_est']:.2f} s) vs linearization {sh['se_lin']:,.1f}.
"""
    print(md)
    if not args.no_write:
        write_section("preston", md)


if __name__ == "__main__":
    main()
