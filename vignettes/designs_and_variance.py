"""Vignette: survey designs and linearization variance, side by side with R survey.

Run: python vignettes/designs_and_variance.py [--fast] [--out DIR]

Builds the designs of R's survey tutorial on the api data (stratified, one- and two-stage
cluster samples, with and without fpc, nest=TRUE, lonely PSUs), computes totals, means,
ratios, quantiles and domain estimates natively, and prints each beside R's own number (live
through rpy2) with the relative difference. Writes DIR/designs_and_variance.md.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import numpy as np
import pandas as pd

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import surveysynth as ss  # noqa: E402
from r_bridge import r_session  # noqa: E402
from surveysynth.datasets import load_api  # noqa: E402

CASES = [
    ("apistrat", "id=~1, strata=~stype, weights=~pw, fpc=~fpc",
     dict(strata="stype", weights="pw", fpc="fpc"), "fail"),
    ("apiclus1", "id=~dnum, weights=~pw, fpc=~fpc", dict(ids="dnum", weights="pw", fpc="fpc"), "fail"),
    ("apiclus2", "id=~dnum+snum, fpc=~fpc1+fpc2", dict(ids="~dnum+snum", fpc="~fpc1+fpc2"), "fail"),
    ("apiclus2", "id=~dnum+snum, weights=~pw", dict(ids="~dnum+snum", weights="pw"), "fail"),
    ("apistrat", "id=~dnum, strata=~stype, weights=~pw, nest=TRUE",
     dict(ids="dnum", strata="stype", weights="pw", nest=True), "fail"),
    ("apiclus1", "id=~1, strata=~dnum, weights=~pw", dict(strata="dnum", weights="pw"), "adjust"),
    ("apiclus1", "id=~1, strata=~dnum, weights=~pw", dict(strata="dnum", weights="pw"), "average"),
]

STATS = [
    ("mean api00", lambda d: d.mean("api00"), "svymean(~api00, d)"),
    ("total enroll", lambda d: d.total("enroll", na_rm=True), "svytotal(~enroll, d, na.rm=TRUE)"),
    ("ratio api.stu/enroll", lambda d: d.ratio("api.stu", "enroll", na_rm=True),
     "svyratio(~api.stu, ~enroll, d, na.rm=TRUE)"),
    ("median api00", lambda d: d.quantile("api00", 0.5), "svyquantile(~api00, d, 0.5)"),
    ("mean api00 by stype", lambda d: d.mean("api00", by="stype"), "svyby(~api00, ~stype, d, svymean)"),
]


def r_numbers(table: str, args: str, lonely: str, expr: str) -> np.ndarray:
    with r_session("survey") as (ro, _):
        code = (f"local({{ options(survey.lonely.psu='{lonely}'); data(api); "
                f"d <- svydesign({args}, data={table}); s <- {expr}; "
                "r <- if (inherits(s, 'newsvyquantile')) c(s[[1]][,1], s[[1]][,4]) else "
                "c(as.numeric(unlist(coef(s))), as.numeric(unlist(SE(s)))); "
                "options(survey.lonely.psu='fail'); r })")
        return np.array(ro.r(code), dtype=float)


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--fast", action="store_true", help="fewer designs (for the test suite)")
    ap.add_argument("--out", type=Path, default=Path("vignette-output"))
    a = ap.parse_args(argv)
    cases = CASES[:3] + CASES[5:6] if a.fast else CASES
    rows = []
    data = {}
    for table, r_args, kwargs, lonely in cases:
        if table not in data:
            data[table] = load_api(table)
        # compared with Debian's R survey 4.1.1 live, so its lonely.psu="adjust" rule (R 4.5
        # centres a lonely PSU on the mean over all strata; docs/r_survey_functions.md)
        d = ss.SurveyDesign(data[table], lonely_psu=lonely, survey_version="4.1", **kwargs)
        for label, f, expr in STATS:
            ours = f(d)
            r = r_numbers(table, r_args, lonely, expr)
            k = r.shape[0] // 2
            for i in range(ours.shape[0]):
                dom = f" [{ours['stype'].iloc[i]}]" if "stype" in ours else ""
                rows.append({
                    "design": f"svydesign({r_args}, data={table}); lonely.psu={lonely}",
                    "statistic": label + dom,
                    "estimate": ours.estimate.iloc[i], "R estimate": r[i],
                    "SE": ours.se.iloc[i], "R SE": r[k + i],
                })
    df = pd.DataFrame(rows)
    df["max rel. diff"] = np.maximum(np.abs(df["estimate"] / df["R estimate"] - 1),
                                     np.abs(df["SE"] / df["R SE"] - 1))
    worst = df["max rel. diff"].max()
    with pd.option_context("display.width", 200, "display.max_colwidth", 70):
        print(df.to_string(index=False, float_format=lambda v: f"{v:.6g}"))
    print(f"\nlargest relative difference from R survey: {worst:.2e}")
    a.out.mkdir(parents=True, exist_ok=True)
    md = ["# Survey designs and linearization variance, beside R survey", "",
          "Every number on the left is surveysynth's native engine; on the right R `survey` "
          "4.1 computed live in the same run.", "",
          df.to_markdown(index=False, floatfmt=".6g") if _has_tabulate() else df.to_string(index=False),
          "", f"Largest relative difference: **{worst:.2e}**."]
    (a.out / "designs_and_variance.md").write_text("\n".join(md))
    if worst > 1e-9:
        raise SystemExit(f"disagreement with R: {worst:.3g}")


def _has_tabulate() -> bool:
    try:
        import tabulate  # noqa: F401

        return True
    except ImportError:
        return False


if __name__ == "__main__":
    main()
