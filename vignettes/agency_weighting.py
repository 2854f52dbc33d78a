"""Vignette: an agency weighting chain, step by step, with SDR replicate weights carried
through every step and the final estimates beside R's.

Run: python vignettes/agency_weighting.py [--fast] [--out DIR] [--seed N]

1. Two-stage PPS selection from R's California schools population (``apipop``): districts
   by systematic PPS on their number of schools (in county order), then schools within each
   selected district by PPS on enrolment. Inclusion probabilities from
   ``surveysynth.inclusion_probabilities``, checked against R ``sampling``'s
   ``inclusionprobabilities`` (live); base weight = 1 / (pi_district * pi_school|district).
2. Successive-difference replication (``d.sdr``, svrep's ``as_sdr_design``) on the districts
   in their order of selection.
3. Simulated nonresponse; weighting-class adjustment by school type (``redistribute_weights``,
   svrep's method): nonrespondents' weight moves to the respondents of their class, in the
   full-sample weights and in every replicate.
4. Raking to the population counts of school type and school-wide target (R
   ``calibrate(calfun="raking")``), with the g-weights trimmed to [0.7, 1.4] (R's
   ``trim=``), every replicate recalibrated and trimmed too.
5. Final estimates (mean API 2000, total enrolment, ratio of tested students to enrolment,
   mean API by school type) with SDR standard errors.

R gets the same inputs (the sample, base weights, SDR factors, response flags) and runs the
same chain live through rpy2: ``svrepdesign(type="successive-difference")``, svrep's
``redistribute_weights`` formula written out in R (svrep is not in Debian's R; its own
functions are compared with ours in tests/test_nonresponse.py), ``calibrate(..., calfun=
"raking", trim=)``, ``svymean``/``svytotal``/``svyratio``/``svyby``. The script exits with an
error unless every estimate and SE equals R's to 1e-8 relative. Writes DIR/agency_weighting.md.
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
from r_bridge.sampling import inclusion_probabilities_r  # noqa: E402
from surveysynth.datasets import load_api  # noqa: E402

POP_TOTALS = {"(Intercept)": 6194, "stypeH": 755, "stypeM": 1018, "sch.wideYes": 5122}
TRIM = (0.7, 1.4)
TOL = 1e-8


def select(pop: pd.DataFrame, n_districts: int, n_schools: int, seed: int):
    """Two-stage PPS: districts by number of schools, schools by enrolment (systematic)."""
    rng = np.random.default_rng(seed)
    pop = pop.assign(enroll=pop["enroll"].fillna(pop["enroll"].median()))
    dist = (pop.groupby("dnum", sort=False)
            .agg(cname=("cname", "first"), schools=("snum", "size")).reset_index()
            .sort_values(["cname", "dnum"], kind="stable").reset_index(drop=True))
    pi1 = ss.inclusion_probabilities(dist["schools"].to_numpy(float), n_districts)
    pi1_r = inclusion_probabilities_r(dist["schools"].to_numpy(float), n_districts)
    check = float(np.max(np.abs(pi1 - pi1_r)))
    dist = dist.assign(pi1=pi1)
    chosen = dist[ss.pps_systematic(pi1, seed=rng)].reset_index(drop=True)
    chosen["sel_order"] = np.arange(1, chosen.shape[0] + 1)  # order of selection
    schools = pop.merge(chosen[["dnum", "pi1", "sel_order"]], on="dnum")
    schools = schools.sort_values(["sel_order", "snum"], kind="stable").reset_index(drop=True)
    n2 = schools.groupby("dnum")["snum"].size().clip(upper=n_schools).to_dict()
    pi2 = ss.inclusion_probabilities(schools["enroll"].to_numpy(float), n2,
                                     strata=schools["dnum"].to_numpy())
    pi2_r = inclusion_probabilities_r(schools["enroll"].to_numpy(float), n2,
                                      strata=schools["dnum"].to_numpy())
    check = max(check, float(np.max(np.abs(pi2 - pi2_r))))
    schools = schools.assign(pi2=pi2)
    sample = schools[ss.pps_systematic(pi2, strata=schools["dnum"].to_numpy(), seed=rng)]
    sample = sample.reset_index(drop=True)
    sample["w"] = 1.0 / (sample["pi1"] * sample["pi2"])
    # response: more likely in elementary schools and schools meeting their target
    p = 0.55 + 0.2 * (sample["stype"] == "E") + 0.15 * (sample["sch.wide"] == "Yes")
    sample["resp"] = (rng.random(sample.shape[0]) < p).astype(int)
    return sample, check


def chain(sample: pd.DataFrame, replicates: int):
    """The weighting chain in surveysynth; returns the designs of every step."""
    base = ss.SurveyDesign(sample, ids="dnum", weights="w")
    sdr = base.sdr(replicates, sort_variable="sel_order")
    nr = sdr.redistribute_weights("resp == 0", "resp == 1", by="stype")
    cal = nr.calibrate("~stype+sch.wide", POP_TOTALS, calfun="raking", trim=TRIM)
    return base, sdr, nr, cal


def estimates(design, resp: np.ndarray) -> pd.DataFrame:
    d = design.subset(resp)
    parts = [d.mean("api00"), d.total("enroll"), d.ratio("api.stu", "enroll")]
    by = d.mean("api00", by="stype")
    by["variable"] = "api00 [stype=" + by["stype"].astype(str) + "]"
    out = pd.concat(parts + [by], ignore_index=True)
    return out[["variable", "estimate", "se"]]


R_CHAIN = r"""
function(df, factors, trim) {
  suppressMessages(library(survey))
  rd <- svrepdesign(data = df, repweights = factors, weights = ~w, combined.weights = FALSE,
                    type = "successive-difference", mse = TRUE)
  # svrep::redistribute_weights (shift_weight), by stype: full sample and every replicate
  shift <- function(w, cls, up, down) {
    for (k in unique(cls)) {
      i <- cls == k
      U <- sum(w[i & up]); D <- sum(w[i & down])
      f <- if (U != 0) 1 + D / U else 1
      w[i & up] <- w[i & up] * f
      w[i & down] <- 0
    }
    w
  }
  up <- df$resp == 1; down <- df$resp == 0
  pw <- shift(weights(rd, "sampling"), df$stype, up, down)
  W <- apply(weights(rd, "analysis"), 2, shift, cls = df$stype, up = up, down = down)
  nr <- svrepdesign(data = df, repweights = W, weights = pw, combined.weights = TRUE,
                    type = "successive-difference", mse = TRUE)
  pop <- c(`(Intercept)` = 6194, stypeH = 755, stypeM = 1018, sch.wideYes = 5122)
  # compress = FALSE: R 4.1's default NA fails on uncompressed replicate weights
  cal <- calibrate(nr, ~stype + sch.wide, pop, calfun = "raking", trim = trim,
                   compress = FALSE)
  d <- subset(cal, resp == 1)
  m <- svymean(~api00, d); t <- svytotal(~enroll, d); r <- svyratio(~api.stu, ~enroll, d)
  b <- svyby(~api00, ~stype, d, svymean)
  list(est = c(coef(m), coef(t), coef(r), coef(b)), se = c(SE(m), SE(t), SE(r), SE(b)),
       weights = weights(cal, "sampling"), nr_weights = pw)
}
"""


def r_chain(sample: pd.DataFrame, factors: np.ndarray) -> dict:
    from r_bridge.convert import pandas_to_r

    with r_session("survey") as (ro, _):
        f = ro.r(R_CHAIN)
        mat = ro.r["matrix"](ro.FloatVector(factors.ravel(order="F")), nrow=factors.shape[0])
        cols = ["dnum", "snum", "stype", "sch.wide", "api00", "enroll", "api.stu", "w",
                "resp", "sel_order"]
        res = f(pandas_to_r(sample[cols]), mat, ro.FloatVector(TRIM))
        return {k: np.array(res.rx2(k), dtype=float)
                for k in ("est", "se", "weights", "nr_weights")}


def _md(df: pd.DataFrame, fmt: str) -> str:
    """A markdown table (no tabulate dependency)."""
    def cell(v):
        return format(v, fmt) if isinstance(v, (float, np.floating)) else str(v)
    rows = [" | ".join(map(str, df.columns)), " | ".join("---" for _ in df.columns)]
    rows += [" | ".join(cell(v) for v in r) for r in df.itertuples(index=False)]
    return "\n".join(f"| {r} |" for r in rows)


def _rel(a: np.ndarray, b: np.ndarray) -> float:
    """Largest relative difference (absolute where R's value is 0)."""
    a, b = np.asarray(a, float), np.asarray(b, float)
    return float(np.max(np.abs(a - b) / np.where(b == 0, 1.0, np.abs(b))))


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--fast", action="store_true", help="smaller sample (for the test suite)")
    ap.add_argument("--out", type=Path, default=Path("vignette-output"))
    ap.add_argument("--seed", type=int, default=2026)
    a = ap.parse_args(argv)
    n1, n2, reps = (20, 4, 16) if a.fast else (40, 5, 48)
    pop = load_api("apipop")
    sample, pik_diff = select(pop, n1, n2, a.seed)
    base, sdr, nr, cal = chain(sample, reps)
    resp = sample["resp"].to_numpy() == 1
    ours = estimates(cal, resp)
    r = r_chain(sample, sdr.replicate_weights("replication"))
    ours["R estimate"] = r["est"]
    ours["R SE"] = r["se"]
    rel = np.maximum(np.abs(ours["estimate"] / ours["R estimate"] - 1),
                     np.abs(ours["se"] / ours["R SE"] - 1))
    ours["rel. diff."] = rel
    w_diff = max(_rel(cal.full_weights, r["weights"]), _rel(nr.full_weights, r["nr_weights"]))
    g = cal.full_weights[resp] / nr.full_weights[resp]
    steps = pd.DataFrame({
        "step": ["base (two-stage PPS)", "SDR replicates", "nonresponse by stype",
                 "raked + trimmed g"],
        "sum of weights": [base.full_weights.sum(), sdr.full_weights.sum(),
                           nr.full_weights.sum(), cal.full_weights.sum()],
        "SE of mean api00": [base.subset(resp).mean("api00")["se"].iloc[0],
                             sdr.subset(resp).mean("api00")["se"].iloc[0],
                             nr.subset(resp).mean("api00")["se"].iloc[0],
                             cal.subset(resp).mean("api00")["se"].iloc[0]],
    })
    worst = float(rel.max())
    lines = [
        "# Agency weighting chain with SDR replicate weights (surveysynth vs R survey)", "",
        f"Sample: {sample['dnum'].nunique()} districts (PPS on number of schools), "
        f"{sample.shape[0]} schools (PPS on enrolment); {int(resp.sum())} respondents. "
        f"{reps} SDR replicates (Hadamard order {sdr.replicates}). Inclusion probabilities "
        f"equal R sampling's to {pik_diff:.1e} (absolute).", "",
        "## Steps", "", _md(steps, ".6g"), "",
        f"Raking g-weights after trimming to {TRIM}: range [{g.min():.4f}, {g.max():.4f}], "
        f"{int(np.sum(np.isclose(g, TRIM[0]) | np.isclose(g, TRIM[1])))} at a bound. "
        "(The first SE row uses the base weights with the with-replacement linearization.)",
        "", "## Final estimates beside R", "",
        _md(ours, ".10g"), "",
        f"Largest relative difference from R survey: {worst:.2e} (estimates and SEs); "
        f"weights {w_diff:.2e}.",
    ]
    a.out.mkdir(parents=True, exist_ok=True)
    (a.out / "agency_weighting.md").write_text("\n".join(lines) + "\n")
    print("\n".join(lines))
    if not worst < TOL or not w_diff < TOL or not pik_diff < 1e-12:
        print(f"FAILED: differences from R above {TOL}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
