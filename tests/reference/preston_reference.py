"""Regenerate preston_reference.json: R survey's own Preston (mrbbootstrap) SEs.

R's ``as.svrepdesign(type="mrbbootstrap")`` loops over replicates and strata in R and takes
minutes for thousands of replicates, so tests/test_preston.py reads these stored numbers
instead of running it. Run from the repository root::

    .venv/bin/python tests/reference/preston_reference.py [--replicates 10000]

Each entry records the statistic, R's full-sample estimate, R's mrbbootstrap SE, its Monte
Carlo standard error (delta method from R's own replicate estimates: the SE of a variance
estimate sum (theta_r - mean)^2/(R-1) is sd((theta_r - mean)^2)/sqrt(R), and
mcse(SE) = mcse(V) / (2 SE)), and R's linearization SE for comparison, with the R and
survey versions, the seed and the number of replicates.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent.parent))

CASES = {
    # name: (data, svydesign arguments, statistic expression on design `d`/replicate `r`)
    "apiclus2_mean_api00": ("apiclus2", "id=~dnum+snum, fpc=~fpc1+fpc2", "svymean(~api00, {d})"),
    "apiclus2_total_enroll": ("apiclus2", "id=~dnum+snum, fpc=~fpc1+fpc2",
                              "svytotal(~enroll, {d}, na.rm=TRUE)"),
    "apistrat_mean_api00": ("apistrat", "id=~1, strata=~stype, weights=~pw, fpc=~fpc",
                            "svymean(~api00, {d})"),
    "apistrat_total_enroll": ("apistrat", "id=~1, strata=~stype, weights=~pw, fpc=~fpc",
                              "svytotal(~enroll, {d})"),
}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--replicates", type=int, default=10000)
    ap.add_argument("--seed", type=int, default=20240601)
    ap.add_argument("--out", default=str(HERE / "preston_reference.json"))
    args = ap.parse_args()
    from r_bridge import r_session

    out = {"replicates": args.replicates, "seed": args.seed, "cases": {}}
    with r_session("survey") as (ro, _):
        ro.r("suppressMessages(library(survey)); data(api)")
        out["R_version"] = str(ro.r("R.version.string")[0])
        out["survey_version"] = str(ro.r("as.character(packageVersion('survey'))")[0])
        designs = {}
        for name, (data, dargs, stat) in CASES.items():
            key = (data, dargs)
            t0 = time.time()
            if key not in designs:
                rname = f"rep_{len(designs)}"
                ro.r(
                    f"set.seed({args.seed}); d_{rname} <- svydesign({dargs}, data={data}); "
                    f"{rname} <- as.svrepdesign(d_{rname}, type='mrbbootstrap', "
                    f"replicates={args.replicates})"
                )
                designs[key] = rname
            rname = designs[key]
            vals = list(ro.r(
                f"local({{ s <- {stat.format(d=rname)}; "
                f"s2 <- {stat.replace('svymean(', 'svymean(return.replicates=TRUE, x=').replace('svytotal(', 'svytotal(return.replicates=TRUE, x=').format(d=rname)}; "
                "th <- as.numeric(s2$replicates); dev2 <- (th - mean(th))^2; "
                "v <- sum(dev2)/(length(th) - 1); "
                f"lin <- {stat.format(d='d_' + rname)}; "
                "c(coef(s), SE(s), sqrt(v), sd(dev2)/sqrt(length(th))/(2*sqrt(v)), SE(lin)) })"
            ))
            out["cases"][name] = {
                "data": data, "design": dargs, "statistic": stat.format(d="design"),
                "estimate": vals[0], "se_mrb": vals[1], "se_mrb_check": vals[2],
                "mcse_se_mrb": vals[3], "se_linearization": vals[4],
                "seconds": round(time.time() - t0, 1),
            }
            print(name, out["cases"][name], flush=True)
    Path(args.out).write_text(json.dumps(out, indent=2) + "\n")
    print("wrote", args.out)


if __name__ == "__main__":
    main()
