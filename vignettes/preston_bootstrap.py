"""Vignette: Preston's multistage rescaled bootstrap and other replicate designs.

Runs on R survey's api data (read through rpy2) and writes DIR/preston_bootstrap.md:

1. how the bootstrap SE of totals approaches the linearization SE as replicates grow
   (Preston's rescaling is unbiased for linear statistics), with Monte Carlo errors;
2. the mean api00 on apiclus2, a ratio, where the bootstrap SE differs from linearization,
   compared with R's own mrbbootstrap (tests/reference/preston_reference.json);
3. jackknife, BRR and Rao-Wu designs, quantiles, domains and ``with_replicates``.

Usage: python vignettes/preston_bootstrap.py [--fast] [--out DIR]
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

import surveysynth as ss  # noqa: E402
from surveysynth.datasets import load_api  # noqa: E402

REF = ROOT / "tests" / "reference" / "preston_reference.json"


def mc_se_of_se(theta: np.ndarray) -> float:
    """Monte Carlo SE of the bootstrap SE, by the delta method from the replicates."""
    dev2 = (theta - theta.mean()) ** 2
    v = dev2.sum() / (theta.shape[0] - 1)
    return float(dev2.std() / np.sqrt(theta.shape[0]) / (2 * np.sqrt(v)))


def replicate_stats(rd, var: str, ratio: bool) -> np.ndarray:
    A = rd.replicate_weights("analysis")
    y = np.nan_to_num(rd.data[var].to_numpy(dtype=float))
    num = (A * y[:, None]).sum(axis=0)
    return num / A.sum(axis=0) if ratio else num


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--fast", action="store_true")
    ap.add_argument("--out", default=str(ROOT / "vignettes" / "output"))
    args = ap.parse_args()
    out_dir = Path(args.out)
    out_dir.mkdir(parents=True, exist_ok=True)
    sizes = [100, 1000] if args.fast else [100, 1000, 5000, 20000]

    strat = load_api("apistrat")
    clus2 = load_api("apiclus2")
    designs = {
        "apistrat": ss.SurveyDesign(strat, strata="stype", weights="pw", fpc="fpc"),
        "apiclus2": ss.SurveyDesign(clus2, ids="~dnum+snum", fpc="~fpc1+fpc2"),
    }
    lines = [
        "# Preston's multistage rescaled bootstrap",
        "",
        "`SurveyDesign.bootstrap(replicates, method=\"preston\", seed=)` draws Preston's (2009)",
        "rescaled bootstrap, stage by stage, exactly as R's `as.svrepdesign(type=\"mrbbootstrap\")`",
        "(METHODS.md section 2), vectorized over replicates, strata and clusters. The result is a",
        "`ReplicateDesign` with every estimator of a `SurveyDesign`.",
        "",
        "```python",
        "d = ss.SurveyDesign(apiclus2, ids=\"~dnum+snum\", fpc=\"~fpc1+fpc2\")",
        "rd = d.bootstrap(2000, seed=1)",
        "rd.mean(\"api00\"); rd.total(\"enroll\", na_rm=True); rd.quantile(\"api00\", 0.5)",
        "```",
        "",
        "## 1. Totals: the bootstrap SE converges to the linearization SE",
        "",
        "For totals (linear statistics) Preston's rescaling reproduces the unbiased multistage",
        "variance, so the bootstrap SE tends to the linearization SE (R `svytotal` on the",
        "`svydesign`). MC SE: Monte Carlo standard error of the bootstrap SE.",
        "",
        "| design | statistic | replicates | bootstrap SE | MC SE | linearization SE | ratio | seconds |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for name, d in designs.items():
        lin = d.total("enroll", na_rm=True).se[0]
        for R in sizes:
            t0 = time.perf_counter()
            rd = d.bootstrap(R, seed=R, progress=False, dtype=np.float32)
            se = rd.total("enroll", na_rm=True).se[0]
            sec = time.perf_counter() - t0
            mc = mc_se_of_se(replicate_stats(rd, "enroll", ratio=False))
            lines.append(f"| {name} | total enroll | {R:,} | {se:,.0f} | {mc:,.0f} | {lin:,.0f} | "
                         f"{se / lin:.3f} | {sec:.2f} |")
    lines += [
        "",
        "## 2. A ratio: mean api00 on apiclus2",
        "",
        "A mean is a ratio of totals; there the bootstrap and linearization differ. R's own",
        "mrbbootstrap gives the reference (stored by `tests/reference/preston_reference.py`,",
        "R is slow: minutes for 10,000 replicates).",
        "",
    ]
    d = designs["apiclus2"]
    R = sizes[-1]
    rd = d.bootstrap(R, seed=99, progress=False, dtype=np.float32)
    se = rd.mean("api00").se[0]
    mc = mc_se_of_se(replicate_stats(rd, "api00", ratio=True))
    lin = d.mean("api00").se[0]
    lines += ["| source | replicates | SE of mean api00 | MC SE |", "|---|---|---|---|",
              f"| surveysynth Preston | {R:,} | {se:.3f} | {mc:.3f} |"]
    if REF.exists():
        ref = json.loads(REF.read_text())
        c = ref["cases"]["apiclus2_mean_api00"]
        lines.append(f"| R mrbbootstrap ({ref['survey_version']}) | {ref['replicates']:,} | "
                     f"{c['se_mrb']:.3f} | {c['mcse_se_mrb']:.3f} |")
    lines += [f"| linearization | - | {lin:.3f} | - |", ""]

    lines += ["## 3. Other replicate designs, quantiles, domains, any statistic", ""]
    ds = designs["apistrat"]
    jk = ds.jackknife()
    rw = ds.bootstrap(sizes[-1] // 4, method="rao-wu", seed=3, progress=False)
    pb = ds.bootstrap(sizes[-1] // 4, seed=4, progress=False)
    rows = ["| design | replicates | mean api00 SE | median api00 (95% CI) | degf |",
            "|---|---|---|---|---|"]
    for label, r in [("linearization", ds), ("JKn jackknife", jk), ("Rao-Wu bootstrap", rw),
                     ("Preston bootstrap", pb)]:
        m = r.mean("api00")
        q = r.quantile("api00", 0.5)
        nrep = getattr(r, "replicates", "-")
        rows.append(f"| {label} | {nrep} | {m.se[0]:.3f} | {q.estimate[0]:.0f} "
                    f"({q.ci_low[0]:.0f}, {q.ci_high[0]:.0f}) | {m.df[0]:.0f} |")
    lines += ["apistrat (stratified, fpc):", ""] + rows + [""]
    by = pb.mean("api00", by="stype")
    lines += ["Domains (`by=\"stype\"`) on the Preston design:", "",
              "| stype | mean api00 | SE | df |", "|---|---|---|---|"]
    lines += [f"| {r.stype} | {r.estimate:.2f} | {r.se:.3f} | {r.df:.0f} |"
              for r in by.itertuples()] + [""]
    wr = pb.with_replicates(
        lambda w, x: np.sum(w * x["api00"]) / np.sum(w * x["api99"]))
    lines += ["Any statistic with `with_replicates(func)` (R `withReplicates`), here",
              "sum(w api00)/sum(w api99):", "",
              f"estimate {wr.estimate[0]:.5f}, SE {wr.se[0]:.5f} (equals "
              f"`ratio(\"api00\", \"api99\")`: SE {pb.ratio('api00', 'api99').se[0]:.5f}).", ""]
    (out_dir / "preston_bootstrap.md").write_text("\n".join(lines) + "\n")
    print(f"wrote {out_dir / 'preston_bootstrap.md'}")


if __name__ == "__main__":
    main()
