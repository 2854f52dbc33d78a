"""Linearization by domain, side by side: surveysynth native vs R survey (svyby) vs samplics.

Design: 1,000,000 rows, 600 strata, 6,000 PSUs (10 per stratum), fpc at stage 1, 100 domains
crossing the strata. Statistics: mean and total of y by domain. All three engines get the same
data in the same process; the numbers are checked to agree before the times are reported.

samplics loops over domains and, inside, over strata with a full-length mask each time, so
its cost is linear in the number of domains: it is run on the first ``--samplics-domains``
domains (default 2) and its time for 100 domains is that time scaled by 100/k, reported as an
extrapolation and labelled so in the table.

Usage: python benchmarks/taylor.py [--fast] [--no-write]
"""

from __future__ import annotations

import argparse
import sys
import time
import warnings
from pathlib import Path

import numpy as np
import pandas as pd

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import surveysynth as ss  # noqa: E402


def make_data(n: int, H: int, psu_per_stratum: int, D: int, seed: int = 1) -> pd.DataFrame:
    rng = np.random.default_rng(seed)
    K = H * psu_per_stratum
    psu = np.sort(rng.integers(0, K, n))
    psu[:K] = np.arange(K)  # every PSU has rows
    psu = np.sort(psu)
    stratum = psu // psu_per_stratum
    return pd.DataFrame({
        "stratum": stratum,
        "psu": psu,
        "fpc": (psu_per_stratum * 20.0),
        "w": rng.uniform(5, 50, n),
        "y": rng.lognormal(3, 0.7, n) + stratum * 0.01,
        "domain": rng.integers(0, D, n),
    })


def best_of(f, repeat: int = 3) -> float:
    times = []
    for _ in range(repeat):
        t0 = time.perf_counter()
        f()
        times.append(time.perf_counter() - t0)
    return min(times)


def run(n: int, H: int, P: int, D: int, samplics_domains: int, write: bool) -> str:
    df = make_data(n, H, P, D)
    design = ss.SurveyDesign(df, ids="psu", strata="stratum", weights="w", fpc="fpc")
    t_build = best_of(lambda: ss.SurveyDesign(df, ids="psu", strata="stratum", weights="w", fpc="fpc"), 1)
    res = {}
    t_native = {s: best_of(lambda s=s: getattr(design, s)("y", by="domain")) for s in ("mean", "total")}
    for s in ("mean", "total"):
        res[s] = getattr(design, s)("y", by="domain")

    # R survey, svyby, timed inside R
    from r_bridge import r_session
    from r_bridge.convert import pandas_to_r

    with r_session("survey") as (ro, _):
        ro.globalenv["bench"] = pandas_to_r(df)
        ro.r("suppressMessages(library(survey)); dbench <- svydesign(id=~psu, strata=~stratum, "
             "weights=~w, fpc=~fpc, data=bench)")
        t_r, r_out = {}, {}
        for s, fun in (("mean", "svymean"), ("total", "svytotal")):
            out = ro.r(f"local({{ t <- system.time(b <- svyby(~y, ~domain, dbench, {fun}))[['elapsed']];"
                       " c(t, coef(b), SE(b)) })")
            out = np.asarray(out, dtype=float)
            t_r[s] = out[0]
            r_out[s] = out[1:]
        ro.r("rm(bench, dbench); invisible(gc())")
    for s in ("mean", "total"):
        ours = np.r_[res[s].estimate, res[s].se]
        err = np.max(np.abs(ours - r_out[s]) / np.abs(r_out[s]))
        assert err < 1e-9, f"native and R disagree ({s}): {err}"

    # samplics on the first k domains (its cost is linear in the number of domains)
    k = min(samplics_domains, D)
    keep = design.data["domain"].to_numpy() < k
    sub = design.subset(keep)
    t_s = {}
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        sub.mean("y", engine="samplics")  # warm-up: samplics' own imports are not its speed
        for s in ("mean", "total"):
            t0 = time.perf_counter()
            out_s = getattr(sub, s)("y", by="domain", engine="samplics")
            t_s[s] = time.perf_counter() - t0
            nat = getattr(sub, s)("y", by="domain")
            err = np.max(np.abs(out_s.se.to_numpy() / nat.se.to_numpy() - 1))
            assert err < 1e-9, f"samplics and native disagree ({s}): {err}"
    scale = D / k

    lines = [
        f"Design: {n:,} rows, {H} strata, {H * P:,} PSUs, fpc at stage 1, {D} domains "
        f"(`benchmarks/taylor.py`). Design construction (native, once): {t_build:.2f} s.",
        "",
        "| statistic by domain | native | R survey `svyby` | samplics "
        + ("(measured)" if k == D else "(extrapolated)") + " | R / native | samplics / native |",
        "|---|---|---|---|---|---|",
    ]
    for s in ("mean", "total"):
        ts = t_s[s] * scale
        how = "" if k == D else f" ({t_s[s]:.2f} s for {k} domains x {scale:.0f})"
        lines.append(
            f"| {s} | {t_native[s]:.3f} s | {t_r[s]:.2f} s | {ts:.1f} s{how} | "
            f"{t_r[s] / t_native[s]:.0f}x | {ts / t_native[s]:.0f}x |"
        )
    samplics_note = (
        f"samplics' is one call on all {D} domains."
        if k == D else
        f"samplics' is one call on {k} domains (its domain loop makes the cost linear in the "
        f"number of domains), scaled to {D}."
    )
    lines += [
        "",
        "All three agree to 1e-9 relative (checked in the run). Native times are the best of 3; "
        f"R's is `system.time` of one `svyby` call inside R; {samplics_note}",
    ]
    md = "\n".join(lines)
    print(md)
    if write:
        sys.path.insert(0, str(Path(__file__).resolve().parent))
        from _report import write_section

        write_section("taylor", "### Taylor linearization by domain\n\n" + md)
    return md


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--fast", action="store_true", help="small design (seconds), for the test suite")
    ap.add_argument("--no-write", action="store_true", help="do not update docs/benchmarks.md")
    ap.add_argument("--samplics-domains", type=int, default=2)
    a = ap.parse_args(argv)
    if a.fast:
        run(50_000, 30, 10, 10, 2, write=False)
    else:
        run(1_000_000, 600, 10, 100, a.samplics_domains, write=not a.no_write)


if __name__ == "__main__":
    main()
