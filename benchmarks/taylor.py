"""Linearization by domain, side by side: surveysynth native vs a plain numpy floor vs the
Python package svy vs R survey (svyby) vs samplics vs the Dask engine.

Design: 1,000,000 rows, 600 strata, 6,000 PSUs (10 per stratum), fpc at stage 1, 100 domains
crossing the strata. Statistics by domain: mean, total, ratio y/x, and the proportions of the
levels of a 3-level categorical. All engines get the same data in the same process; the
numbers are checked to agree before the times are reported.

svy (Rust core; ``pip install svy``, for this benchmark only) is optional: without it its
column reads n/a and the reason is printed.

samplics loops over domains and, inside, over strata with a full-length mask each time, so
its cost is linear in the number of domains: it is run on the first ``--samplics-domains``
domains (default 2) and its time for 100 domains is that time scaled by 100/k, reported as an
extrapolation and labelled so in the table.

The numpy floor (:func:`numpy_floor`) is the least work the same numbers need once the columns
are integer codes: one bincount of w and w*y over (PSU, domain), the domain estimates, the
linearized PSU totals, per-stratum sums and sums of squares (zero totals included), and the
domain df from the same (PSU, domain) counts. It does no validation, no label handling, no
lonely-PSU rules, one stage only: a floor, not an engine.

The Dask engine (``DaskSurveyDesign``) runs on an in-process LocalCluster (2 workers, 1 thread
each) over the same frame split in 8 partitions; its time includes the one pass, the reduction
and the client-side variance.

Usage: python benchmarks/taylor.py [--fast] [--no-write]
"""

from __future__ import annotations

import argparse
import os
import sys
import time
import warnings
from pathlib import Path

import numpy as np
import pandas as pd

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import surveysynth as ss  # noqa: E402

LEVELS = ["low", "mid", "high"]
STATS = ("mean", "total", "ratio", "proportion")


def make_data(n: int, H: int, psu_per_stratum: int, D: int, seed: int = 1) -> pd.DataFrame:
    rng = np.random.default_rng(seed)
    K = H * psu_per_stratum
    psu = np.sort(rng.integers(0, K, n))
    psu[:K] = np.arange(K)  # every PSU has rows
    psu = np.sort(psu)
    stratum = psu // psu_per_stratum
    y = rng.lognormal(3, 0.7, n) + stratum * 0.01
    return pd.DataFrame({
        "stratum": stratum,
        "psu": psu,
        "fpc": (psu_per_stratum * 20.0),
        "w": rng.uniform(5, 50, n),
        "y": y,
        "x": y * rng.uniform(0.3, 0.7, n) + rng.uniform(1, 5, n),
        "g": pd.Categorical.from_codes(np.digitize(y, [15.0, 30.0]), LEVELS),
        "domain": rng.integers(0, D, n),
    })


def native(design, stat: str, **kw) -> pd.DataFrame:
    """The statistic by domain from a surveysynth design (native, Dask or samplics)."""
    if stat == "ratio":
        return design.ratio("y", "x", by="domain", **kw)
    if stat == "proportion":
        return design.proportion("g", by="domain", **kw)
    return getattr(design, stat)("y", by="domain", **kw)


def numpy_floor(psu: np.ndarray, stratum: np.ndarray, dom: np.ndarray, w: np.ndarray,
                y: np.ndarray, N_h: np.ndarray, D: int, stat: str = "mean",
                x: np.ndarray | None = None, n_levels: int = 0):
    """Domain means, totals, ratios y/x or proportions of the levels of y (integer codes
    0..n_levels-1), their one-stage linearization SEs with fpc and the domain df, from
    integer codes (PSUs 0..K-1 nested in strata 0..H-1, domains 0..D-1): the plain numpy
    computation the native engine is measured against. Estimates and SEs are (D, V) arrays
    (V = n_levels for proportions, else 1)."""
    K = int(psu.max()) + 1
    H = int(stratum.max()) + 1
    key = psu * D + dom
    cnt = np.bincount(key, minlength=K * D).reshape(K, D)
    if stat == "proportion":  # all levels' weight totals by one bincount over (pair, level)
        L = n_levels
        ty = np.bincount(key * L + y, weights=w, minlength=K * D * L).reshape(K, D, L)
        tx = ty.sum(2, keepdims=True)
    else:
        ty = np.bincount(key, weights=w * y, minlength=K * D).reshape(K, D, 1)
        tx = None if stat == "total" else np.bincount(
            key, weights=w if x is None else w * x, minlength=K * D).reshape(K, D, 1)
    Ty = ty.sum(0)
    if tx is None:
        est, zt = Ty, ty
    else:
        Tx = tx.sum(0)
        est = Ty / Tx
        zt = (ty - est * tx) / Tx
    V = zt.shape[2]
    zt = zt.reshape(K, D * V)
    h_of_k = np.zeros(K, np.int64)
    h_of_k[psu] = stratum
    order = np.argsort(h_of_k, kind="stable")
    n_h = np.bincount(h_of_k, minlength=H).astype(float)
    starts = np.r_[0, np.cumsum(n_h)[:-1]].astype(np.int64)
    zs = zt[order]
    S = np.add.reduceat(zs, starts, axis=0)
    U = np.add.reduceat(zs**2, starts, axis=0)
    f = 1 - n_h / N_h
    var = ((f * n_h / (n_h - 1))[:, None] * (U - S**2 / n_h[:, None])).sum(0).reshape(D, V)
    reach = cnt > 0
    strata_reached = (np.add.reduceat(reach[order].astype(np.int64), starts, axis=0) > 0).sum(0)
    return est, np.sqrt(var), (reach.sum(0) - strata_reached).astype(float)


def best_of(f, repeat: int = 3) -> float:
    times = []
    for _ in range(repeat):
        t0 = time.perf_counter()
        f()
        times.append(time.perf_counter() - t0)
    return min(times)


def svy_engine(df: pd.DataFrame, res: dict, repeat: int) -> tuple[dict, str]:
    """Times of the Python package svy (Rust core) for each statistic, after checking its
    estimates and SEs against native's; ``({}, reason)`` when svy is not installed."""
    try:
        import polars as pl
        import svy
    except ImportError as exc:
        return {}, f"svy not installed ({exc}); pip install svy"
    sample = svy.Sample(pl.from_pandas(df[["stratum", "psu", "fpc", "w", "y", "x", "g",
                                             "domain"]]),
                        svy.Design(stratum="stratum", psu="psu", wgt="w", pop_size="fpc"))
    est = sample.estimation
    calls = {
        "mean": lambda: est.mean("y", by="domain"),
        "total": lambda: est.total("y", by="domain"),
        "ratio": lambda: est.ratio("y", "x", by="domain"),
        "proportion": lambda: est.prop("g", by="domain"),
    }
    times = {}
    for s in STATS:
        out = calls[s]().to_polars().to_pandas()
        ref = res[s]
        keys = ["domain"] + (["g"] if s == "proportion" else [])
        ref_keys = ["domain"] + (["level"] if s == "proportion" else [])
        got = out.assign(domain=out["domain"].astype(np.int64),
                         **({"g": out["g"].astype(str)} if s == "proportion" else {}))
        got = got.set_index(keys)[["est", "se"]]
        want = ref.assign(domain=ref["domain"].astype(np.int64),
                          **({"level": ref["level"].astype(str)} if s == "proportion" else {}))
        want = want.set_index(ref_keys)[["estimate", "se"]]
        got = got.reindex(want.index)
        err = np.nanmax(np.abs(got.to_numpy() / want.to_numpy() - 1))
        assert err < 1e-9, f"svy and native disagree ({s}): {err}"
        times[s] = best_of(calls[s], repeat)
    return times, f"svy {svy.__version__}"


def r_engine(df: pd.DataFrame, res: dict) -> dict:
    """R survey's svyby times (``system.time`` inside R), after checking against native."""
    from r_bridge import r_session
    from r_bridge.convert import pandas_to_r

    funs = {"mean": "svyby(~y, ~domain, dbench, svymean)",
            "total": "svyby(~y, ~domain, dbench, svytotal)",
            "ratio": "svyby(~y, ~domain, dbench, svyratio, denominator = ~x)",
            "proportion": "svyby(~g, ~domain, dbench, svymean)"}
    t_r = {}
    with r_session("survey") as (ro, _):
        ro.globalenv["bench"] = pandas_to_r(df)
        ro.r("suppressMessages(library(survey)); dbench <- svydesign(id=~psu, strata=~stratum, "
             "weights=~w, fpc=~fpc, data=bench)")
        for s in STATS:
            out = ro.r(f"local({{ t <- system.time(b <- {funs[s]})[['elapsed']];"
                       " c(t, as.numeric(coef(b)), as.numeric(as.matrix(SE(b)))) })")
            out = np.asarray(out, dtype=float)
            t_r[s] = out[0]
            D = res[s]["domain"].nunique()
            V = (out.shape[0] - 1) // 2 // D
            # coef(svyby) runs level-major (all domains of level 1, then level 2, ...)
            r_est = out[1:1 + D * V].reshape(V, D).T.ravel()
            r_se = out[1 + D * V:].reshape(V, D).T.ravel()
            ours = np.r_[res[s].estimate, res[s].se]
            theirs = np.r_[r_est, r_se]
            err = np.max(np.abs(ours - theirs) / np.abs(theirs))
            assert err < 1e-9, f"native and R disagree ({s}): {err}"
        ro.r("rm(bench, dbench); invisible(gc())")
    return t_r


def _load() -> float:
    return os.getloadavg()[0] if hasattr(os, "getloadavg") else float("nan")


def run(n: int, H: int, P: int, D: int, samplics_domains: int, write: bool) -> str:
    load_start = _load()
    df = make_data(n, H, P, D)
    design = ss.SurveyDesign(df, ids="psu", strata="stratum", weights="w", fpc="fpc")
    t_build = best_of(lambda: ss.SurveyDesign(df, ids="psu", strata="stratum", weights="w", fpc="fpc"), 1)
    res = {s: native(design, s) for s in STATS}
    t_native = {s: best_of(lambda s=s: native(design, s), 5) for s in STATS}

    # the numpy floor on integer codes (the benchmark's codes are already 0..K-1, 0..H-1)
    codes = [df[c].to_numpy() for c in ("psu", "stratum", "domain", "w")]
    y, x, g = df["y"].to_numpy(), df["x"].to_numpy(), df["g"].cat.codes.to_numpy().astype(np.int64)
    N_h = np.full(H, P * 20.0)
    floor_args = {"mean": (y, N_h, D, "mean"), "total": (y, N_h, D, "total"),
                  "ratio": (y, N_h, D, "ratio", x),
                  "proportion": (g, N_h, D, "proportion", None, len(LEVELS))}
    t_floor = {}
    for s in STATS:
        est, se, dfs = numpy_floor(*codes, *floor_args[s])
        ref = res[s]
        err = max(np.max(np.abs(est.ravel() / ref.estimate.to_numpy() - 1)),
                  np.max(np.abs(se.ravel() / ref.se.to_numpy() - 1)))
        V = est.shape[1]
        assert err < 1e-9 and np.array_equal(np.repeat(dfs, V), ref.df.to_numpy()), \
            f"floor differs ({s})"
        t_floor[s] = best_of(lambda s=s: numpy_floor(*codes, *floor_args[s]), 5)

    t_svy, svy_note = svy_engine(df, res, 3)

    # the Dask engine on an in-process LocalCluster
    import dask.dataframe as dd
    from distributed import Client, LocalCluster

    with LocalCluster(n_workers=2, threads_per_worker=1, processes=False,
                      dashboard_address="127.0.0.1:0") as cluster, Client(cluster) as client:
        dk = ss.DaskSurveyDesign(dd.from_pandas(df, npartitions=8).persist(), ids="psu",
                                 strata="stratum", weights="w", fpc="fpc", client=client)
        t_dask = {}
        for s in STATS:
            out = native(dk, s)
            err = np.max(np.abs(out.se.to_numpy() / res[s].se.to_numpy() - 1))
            assert err < 1e-12, f"dask and native disagree ({s}): {err}"
            t_dask[s] = best_of(lambda s=s: native(dk, s))

    t_r = r_engine(df, res)

    # samplics on the first k domains (its cost is linear in the number of domains)
    k = min(samplics_domains, D)
    keep = design.data["domain"].to_numpy() < k
    sub = design.subset(keep)
    t_s = {}
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        sub.mean("y", engine="samplics")  # warm-up: samplics' own imports are not its speed
        for s in STATS:
            t0 = time.perf_counter()
            out_s = native(sub, s, engine="samplics")
            t_s[s] = time.perf_counter() - t0
            nat = native(sub, s)
            err = np.max(np.abs(out_s.se.to_numpy() / nat.se.to_numpy() - 1))
            assert err < 1e-9, f"samplics and native disagree ({s}): {err}"
    scale = D / k

    load = _load()
    shared = (" The machine was shared during the run (load above its cores): every absolute "
              "time is inflated; the ratios, measured side by side in one process, are the "
              "figures to compare." if max(load, load_start) > (os.cpu_count() or 1) else "")
    svy_head = "svy (Rust core)" if t_svy else "svy"
    lines = [
        f"Design: {n:,} rows, {H} strata, {H * P:,} PSUs, fpc at stage 1, {D} domains; "
        f"proportions of a {len(LEVELS)}-level categorical (`benchmarks/taylor.py`). Design "
        f"construction (native, once): {t_build:.2f} s. Load average (1 min) at the start and "
        f"end of the run: {load_start:.1f} and {load:.1f} on {os.cpu_count()} cores.{shared}",
        "",
        f"| statistic by domain | numpy floor | native | native / floor | {svy_head} | "
        "Dask (LocalCluster) | R survey `svyby` | samplics "
        + ("(measured)" if k == D else "(extrapolated)")
        + " | svy / native | R / native | samplics / native |",
        "|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for s in STATS:
        ts = t_s[s] * scale
        how = "" if k == D else f" ({t_s[s]:.2f} s for {k} domains x {scale:.0f})"
        sv = f"{t_svy[s]:.2f} s" if t_svy else "n/a"
        svr = f"{t_svy[s] / t_native[s]:.0f}x" if t_svy else "n/a"
        lines.append(
            f"| {s} | {t_floor[s]:.3f} s | {t_native[s]:.3f} s | "
            f"{t_native[s] / t_floor[s]:.1f}x | {sv} | {t_dask[s]:.2f} s | {t_r[s]:.2f} s | "
            f"{ts:.1f} s{how} | {svr} | {t_r[s] / t_native[s]:.0f}x | {ts / t_native[s]:.0f}x |"
        )
    samplics_note = (
        f"samplics' is one call on all {D} domains."
        if k == D else
        f"samplics' is one call on {k} domains (its domain loop makes the cost linear in the "
        f"number of domains), scaled to {D}."
    )
    lines += [
        "",
        "All agree to 1e-9 relative (Dask to native: 1e-12; checked in the run"
        + (f"; {svy_note}" if t_svy else f"; svy column empty: {svy_note}") + "). The numpy "
        "floor (`numpy_floor`: bincounts over (PSU, domain) -- over (PSU, domain, level) for "
        "proportions -- then strata, domain df included, integer codes given, no validation or "
        "lonely-PSU rules) and native are the best of 5; svy and Dask the best of 3 (Dask: 8 "
        "partitions on 2 in-process workers, one pass each call); R's is `system.time` of one "
        f"`svyby` call inside R; {samplics_note}",
        "",
        "Native does what the floor does plus the engine's work: by-variable coding, missing-"
        "value checks, lonely-PSU rules, per-domain df and row counts, the output table. It "
        "reads the rows once per stage with one bincount per column of `w y` and `w x` over "
        "(PSU, domain) -- one over (PSU, domain, level) for all the levels of a proportion -- "
        "and works on the PSU x domain grid from there (domain ratio `(ty - R tx) / X` per "
        "cell, per-stratum sums with the PSUs without domain rows as zeros); row-level "
        "influence values are only formed when asked for (`domain_ratios`, `deff`, `covmat`).",
    ]
    md = "\n".join(lines)
    print(md)
    if not t_svy:
        print(f"note: {svy_note}", file=sys.stderr)
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
