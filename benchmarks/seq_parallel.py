"""Sequential's step fits serially vs in worker processes vs on a Dask LocalCluster (issue 39
item 3): wall time of ``fit`` and whether the seeded releases are the same bytes.

    python benchmarks/seq_parallel.py --n-jobs 2 [--dask] [--chains 4 --draws 500]

R's apistrat (200 records), four variables of three types (two binary, a count, a bounded
score), stype public, target epsilon 40, m = 5. The machine's load average is printed with the
times (the machine is shared: a speed-up measured under load is a lower bound).
"""

from __future__ import annotations

import argparse
import os
import sys
import time
import warnings
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from surveysynth.datasets import load_api  # noqa: E402
from surveysynth.design import SurveyDesign  # noqa: E402
from surveysynth.synth import Sequential  # noqa: E402

VARIABLES = [{"name": "sch.wide", "type": "binary"},
             {"name": "awards", "type": "binary"},
             {"name": "meals", "type": "count", "bounds": (0, 100)},
             {"name": "api00", "type": "bounded", "bounds": (200, 1000)}]


def fit(kw: dict, a: argparse.Namespace) -> tuple[float, list[str], Sequential]:
    d = load_api("apistrat")
    des = SurveyDesign(d, strata="stype", weights="pw", fpc="fpc")
    syn = Sequential(variables=VARIABLES, public=["stype"], target_epsilon=40.0, m=5,
                     random_state=a.seed, chains=a.chains, draws=a.draws, warmup=a.draws,
                     progress=False, allow_unconverged=True, **kw)
    t0 = time.perf_counter()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        syn.fit(des)
        wall = time.perf_counter() - t0
        rel = syn.release()
    return wall, [x.data.to_csv(index=False) for x in rel.designs], syn


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--n-jobs", type=int, default=2)
    ap.add_argument("--dask", action="store_true")
    ap.add_argument("--chains", type=int, default=4)
    ap.add_argument("--draws", type=int, default=500)
    ap.add_argument("--seed", type=int, default=1)
    a = ap.parse_args()
    print(f"load average before: {os.getloadavg()}", flush=True)
    t_s, out_s, syn = fit({}, a)
    fits = sum(len(r["tuning"]) + 1 for r in syn.step_fits_)
    print(f"serial: {t_s:.1f} s ({fits} Stan fits; load {os.getloadavg()[0]:.1f})", flush=True)
    t_p, out_p, _ = fit({"n_jobs": a.n_jobs}, a)
    print(f"n_jobs={a.n_jobs}: {t_p:.1f} s, speed-up {t_s / t_p:.2f}x, same release: "
          f"{out_p == out_s} (load {os.getloadavg()[0]:.1f})", flush=True)
    if a.dask:
        import dask
        import distributed

        with dask.config.set({"distributed.worker.daemon": False}):  # pystan forks per chain
            cluster = distributed.LocalCluster(n_workers=a.n_jobs, threads_per_worker=1,
                                               processes=True, dashboard_address=None)
        with cluster, distributed.Client(cluster) as client:
            t_d, out_d, _ = fit({"client": client}, a)
        print(f"dask ({a.n_jobs} worker processes): {t_d:.1f} s, speed-up {t_s / t_d:.2f}x, "
              f"same release: {out_d == out_s} (load {os.getloadavg()[0]:.1f})", flush=True)


if __name__ == "__main__":
    main()
