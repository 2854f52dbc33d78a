"""Benchmark: one full 3-variable, 49-quantile KNG synthesis at n = 5,000 (1,000 iterations each).

Usage: python benchmarks/kng.py [--fast] [--sampler exact|mcmc] [--print-only]. Writes the "kng"
section of docs/benchmarks.md (not with --fast or --print-only). Goal (issue 8): under 30 s per
synthesis. ``--sampler exact`` (the package default) draws exactly every quantile whose model
moves only its intercept and runs MCMC for the others; ``mcmc`` runs a chain for every quantile.
"""

from __future__ import annotations

import argparse
import time

from benchmarks._report import write_section
from surveysynth.datasets.kng import kng_simulation
from surveysynth.synth.quantile_synthesizer import QuantileSynthesizer

CASES = [("stepwise", "fixed"), ("stepwise", "varying"), ("sandwich", "fixed"),
         ("sandwich", "varying"), ("kng", "varying")]


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--fast", action="store_true", help="n = 1000, 100 iterations; no doc update")
    ap.add_argument("--sampler", choices=["exact", "mcmc"], default="exact")
    ap.add_argument("--print-only", action="store_true", help="do not update docs/benchmarks.md")
    args = ap.parse_args(argv)
    n, n_iter = (1000, 100) if args.fast else (5000, 1000)
    df = kng_simulation(n, seed=1)
    rows = []
    for method, slopes in CASES:
        s = QuantileSynthesizer(
            variables=["X1", "X2", "X3"], method=method, slopes=slopes, epsilon=1.0,
            budget={"variables": [0.5, 0.25, 0.25], "median": [0.25, 0.8, 0.8],
                    "anchors": [0.6, 0.8, 0.8], "anchor_median": [0.25, 0.8, 0.8]},
            anchors=[0.01, 0.05, 0.25, 0.5, 0.75, 0.95, 0.99] if method == "sandwich" else None,
            C_X={"X2": 46, "X3": 106}, bounds={"X1": (0, 1000), "X2": (0, 1000), "X3": (0, 2000)},
            n_iter=n_iter, sampler=args.sampler, m=1, random_state=1, progress=False,
        )
        t0 = time.perf_counter()
        s.fit(df)
        s.release()
        secs = time.perf_counter() - t0
        chains = int((s.diagnostics_["sampler"] == "mcmc").sum())
        rows.append((method, slopes, chains, secs))
        print(f"{method:9s} {slopes:8s} {chains:4d} chains {secs:6.2f} s", flush=True)
    if not (args.fast or args.print_only):
        md = [
            f"One full synthesis of X1, X2, X3 (kng_simulation, n = {n}), 49 quantiles per variable, "
            f"sampler={args.sampler!r} ({n_iter} Metropolis iterations per MCMC quantile; the rest "
            "drawn exactly), fit + a release of one synthetic set. Goal: < 30 s.",
            "",
            "| method | slopes | MCMC chains | seconds |",
            "|---|---|---|---|",
            *[f"| {m} | {sl} | {c} | {t:.1f} |" for m, sl, c, t in rows],
        ]
        write_section("kng", "\n".join(md))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
