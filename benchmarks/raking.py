"""Raking to three margins of 50 levels each, side by side: surveysynth vs R survey ``rake``
vs the Python package ``svy`` (``Sample.weighting.rake``), in one run.

Data: 1,000,000 rows (``--fast``: 20,000), three categorical margins ``a``, ``b``, ``c`` with
50 levels each (unequal level frequencies, ``b`` and ``c`` related to ``a``), design weights
uniform on [5, 50], no clusters. Population margins: the sample's weighted margins tilted by
a random factor per level and rescaled to one population size N = 1.2 x the weight total, so
the margins agree with each other and raking has work to do (``b`` and ``c`` each follow
``a`` in 30% of the rows).

All three rake to convergence (surveysynth and R: ``epsilon = 1e-14`` of the total weight on
the joint table, R's rule, up to 100 sweeps; svy: ``tol = 1e-11`` on the margins' relative
error, 1e-14 being below the rounding of its sums at 1,000,000 rows) and the
final weights are checked to agree to 1e-8 relative, row by row, before any time is
reported. The times are the raking call itself: surveysynth's ``design.rake``, R's ``rake``
timed inside R with ``system.time`` (the data cross to R before), and svy's
``sample.weighting.rake``; the design construction is timed separately for each. svy is not
a project dependency: install it into the venv for this benchmark (``pip install svy``);
without it, or if its raking fails, the table says so.

Usage: python benchmarks/raking.py [--fast] [--no-write]
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import time
import warnings
from pathlib import Path

import numpy as np
import pandas as pd

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import surveysynth as ss  # noqa: E402

MARGINS = ("a", "b", "c")
LEVELS = 50
EPS = 1e-14
MAXIT = 100
SVY_TOL = 1e-11  # svy stops on the margins' relative error; 1e-14 is below the rounding of
# a sum of 1,000,000 weights, so svy 0.35 cannot reach it (it reports non-convergence)


def make_data(n: int, seed: int = 1) -> tuple[pd.DataFrame, list[pd.DataFrame]]:
    """The sample and one population table (level, Freq) per margin."""
    rng = np.random.default_rng(seed)
    p = rng.dirichlet(np.full(LEVELS, 2.0))
    a = rng.choice(LEVELS, n, p=p)
    b = np.where(rng.random(n) < 0.3, a, rng.integers(0, LEVELS, n))  # b, c depend on a
    c = np.where(rng.random(n) < 0.3, (a + 1) % LEVELS, rng.integers(0, LEVELS, n))
    labels = np.array([f"L{k:02d}" for k in range(LEVELS)])
    df = pd.DataFrame({"a": labels[a], "b": labels[b], "c": labels[c],
                       "w": rng.uniform(5, 50, n)})
    N = 1.2 * df["w"].sum()
    pops = []
    for m in MARGINS:
        tot = df.groupby(m)["w"].sum()
        tilt = tot * rng.uniform(0.8, 1.2, tot.shape[0])
        pops.append(pd.DataFrame({m: tot.index.to_numpy(), "Freq": (tilt / tilt.sum() * N)
                                  .to_numpy()}))
    return df, pops


def run_ours(df: pd.DataFrame, pops: list[pd.DataFrame]) -> dict:
    t0 = time.perf_counter()
    d = ss.SurveyDesign(df, weights="w")
    t1 = time.perf_counter()
    r = d.rake(list(MARGINS), pops, maxit=MAXIT, epsilon=EPS)
    t2 = time.perf_counter()
    return {"weights": r.weights, "build": t1 - t0, "rake": t2 - t1}


R_CODE = r"""
function(df, pa, pb, pc, eps, maxit) {
  t0 <- system.time(d <- svydesign(ids = ~1, weights = ~w, data = df))[["elapsed"]]
  it <- 0
  t1 <- system.time(r <- rake(d, list(~a, ~b, ~c), list(pa, pb, pc),
                             control = list(maxit = maxit, epsilon = eps)))[["elapsed"]]
  list(weights = as.numeric(weights(r)), build = t0, rake = t1)
}"""


def run_r(df: pd.DataFrame, pops: list[pd.DataFrame]) -> dict:
    from r_bridge import r_session
    from r_bridge.convert import pandas_to_r

    with r_session("survey") as (ro, _):
        f = ro.r(R_CODE)
        out = f(pandas_to_r(df), *[pandas_to_r(p) for p in pops], EPS, MAXIT)
        return {"weights": np.array(out.rx2("weights"), dtype=float),
                "build": float(out.rx2("build")[0]), "rake": float(out.rx2("rake")[0])}


def run_svy(df: pd.DataFrame, pops: list[pd.DataFrame]) -> dict:
    try:
        import polars as pl
        import svy
    except ImportError as exc:
        return {"error": f"svy not installed ({exc}); pip install svy"}
    try:
        version = svy.__version__
        t0 = time.perf_counter()
        sample = svy.Sample(pl.from_pandas(df), svy.Design(wgt="w"))
        t1 = time.perf_counter()
        controls = {m: dict(zip(p[m], p["Freq"].astype(float), strict=True))
                    for m, p in zip(MARGINS, pops, strict=True)}
        out = sample.weighting.rake(controls=controls, tol=SVY_TOL, max_iter=MAXIT)
        t2 = time.perf_counter()
        w = out.data.get_column("rk_wgt").to_numpy().astype(float)
    except Exception as exc:  # report, do not hide: the table says it failed and why
        msg = " ".join(str(exc).split())[:200].replace("|", "/")
        return {"error": f"svy {getattr(svy, '__version__', '?')} rake failed: "
                         f"{type(exc).__name__}: {msg}"}
    return {"weights": w, "build": t1 - t0, "rake": t2 - t1, "version": version}


def check(ours: np.ndarray, other: np.ndarray, name: str, tol: float = 1e-8) -> float:
    err = float(np.max(np.abs(other - ours) / np.abs(ours)))
    if not err <= tol:
        raise AssertionError(f"{name}: raked weights differ from surveysynth's by {err:.3g} "
                             f"relative (tolerance {tol:g})")
    return err


def load() -> str:
    try:
        return subprocess.run(["uptime"], capture_output=True, text=True).stdout.strip()
    except OSError:
        return "uptime unavailable"


def main(argv: list[str] | None = None) -> str:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--fast", action="store_true", help="20,000 rows; docs not rewritten")
    ap.add_argument("--no-write", action="store_true", help="do not rewrite docs/benchmarks.md")
    args = ap.parse_args(argv)
    n = 20_000 if args.fast else 1_000_000
    df, pops = make_data(n)
    before = load()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        ours = run_ours(df, pops)
    r = run_r(df, pops)
    sv = run_svy(df, pops)
    after = load()
    err_r = check(ours["weights"], r["weights"], "R rake")
    w = ours["weights"]
    for m, p in zip(MARGINS, pops, strict=True):  # the margins are met
        got = pd.Series(w).groupby(df[m].to_numpy()).sum().reindex(p[m]).to_numpy()
        np.testing.assert_allclose(got, p["Freq"].to_numpy(), rtol=1e-9)
    rows = [f"| surveysynth `design.rake` | {ours['build']:.3f} s | {ours['rake']:.3f} s | 1.0x "
            "| reference |",
            f"| R survey `rake` (system.time in R) | {r['build']:.3f} s | {r['rake']:.3f} s | "
            f"{r['rake'] / ours['rake']:.1f}x | {err_r:.1e} |"]
    if "error" in sv:
        rows.append(f"| svy `Sample.weighting.rake` | — | — | — | {sv['error']} |")
    else:
        err_s = check(ours["weights"], sv["weights"], "svy rake")
        rows.append(f"| svy {sv['version']} `Sample.weighting.rake` | {sv['build']:.3f} s | "
                    f"{sv['rake']:.3f} s | {sv['rake'] / ours['rake']:.1f}x | {err_s:.1e} |")
    cmd = "python benchmarks/raking.py" + (" --fast" if args.fast else "")
    body = "\n".join([
        "### Raking",
        "",
        f"{n:,} rows, 3 margins of {LEVELS} levels each, design weights only, raked to "
        f"convergence (epsilon {EPS:g} of the total weight, at most {MAXIT} sweeps; svy: "
        f"tol {SVY_TOL:g} on the margins' relative error, as 1e-14 is below the rounding of "
        f"its sums) (`{cmd}`).",
        "",
        "| implementation | design | rake | rake / ours | max relative weight difference to ours |",
        "|---|---|---|---|---|",
        *rows,
        "",
        "Weights agree to 1e-8 relative row by row (checked in the run, which fails otherwise); "
        "every margin is met to 1e-9. One run each. Machine load (`uptime`) before: "
        f"`{before}`; after: `{after}`.",
    ])
    print(body)
    if not args.fast and not args.no_write:
        from benchmarks._report import write_section

        write_section("raking", body)
    return body


if __name__ == "__main__":
    main()
