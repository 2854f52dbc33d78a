"""PPS without replacement (issue 19 item 4) against R survey's svydesign(pps=...), live.

Designs (all built by R here, samples drawn by R ``sampling``):

* ``election_pps``: R's own example, 40 counties, joint probabilities ``election_jointprob``;
* ``strat``: apipop schools, strata by stype (first 40/30/25 schools of each), a maximum
  entropy PPS sample on enroll (12/8/6) per stratum, joint probabilities UPmaxentropypi2;
* ``clus``: one-stage stratified PPS cluster sample of (stype, district) clusters by
  enrollment (UPtille, joints UPtillepi2), every school of a sampled cluster;
* ``two``: the same PSUs, then a simple random sample of up to 3 schools in each: a
  stratified two-stage design (Brewer at stage 1, fpc m/M at stage 2, as R's multistage).

Each method is compared on totals, means, ratios, domain totals and means (svyby, or the
domain-indicator totals where R's ``[.pps`` cannot subset clustered matrices), vcov of
totals and the design df, to 1e-9.
"""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

import surveysynth as ss
from r_bridge import r_session
from r_bridge.convert import r_to_pandas
from surveysynth.variance.pps import HR, ppsmat
from tests.conftest import assert_rel

TOL = 1e-9

R_SETUP = r"""
suppressMessages({library(survey); library(sampling)}); data(api); data(election)
local({
  pop <- apipop[!is.na(apipop$enroll), ]
  pop <- pop[order(pop$snum), ]
  lv <- c("E", "M", "H"); Nh <- c(40, 30, 25); nh <- c(12, 8, 6)
  set.seed(20240)
  parts <- list(); J <- list()
  for (h in 1:3) {
    P <- pop[pop$stype == lv[h], ][1:Nh[h], ]
    pik <- inclusionprobabilities(P$enroll, nh[h])
    s <- UPmaxentropy(pik)
    S <- P[s == 1, c("snum", "stype", "enroll", "api00", "api99", "sch.wide", "meals")]
    S$pi <- pik[s == 1]; S$st <- h; S$p2 <- sum(pik^2) / nh[h]
    parts[[h]] <- S; J[[h]] <- UPmaxentropypi2(pik)[s == 1, s == 1]
  }
  samp <- do.call(rbind, parts); rownames(samp) <- NULL
  assign("pps_strat", samp, globalenv()); assign("pps_strat_J", J, globalenv())
  Jfull <- outer(samp$pi, samp$pi)
  for (h in 1:3) Jfull[samp$st == h, samp$st == h] <- J[[h]]
  assign("pps_strat_Jfull", Jfull, globalenv())

  # clusters: (stype, district), the first 30/25/20 of each type, sampled by enrollment
  cl <- aggregate(enroll ~ stype + dnum, data = pop, FUN = sum)
  cl <- cl[order(cl$stype, cl$dnum), ]
  Kh <- c(30, 25, 20); kh <- c(8, 6, 5)
  set.seed(7)
  rows <- list(); rows2 <- list(); JC <- list()
  for (h in 1:3) {
    C <- cl[cl$stype == lv[h], ][1:Kh[h], ]
    pik <- inclusionprobabilities(C$enroll, kh[h])
    s <- UPtille(pik)
    P2 <- UPtillepi2(pik)  # 0 in the rows of certainty units: their pi_ij is pi_j
    for (i in which(pik >= 1)) { P2[i, ] <- pik; P2[, i] <- pik }
    JC[[h]] <- P2[s == 1, s == 1]
    for (k in which(s == 1)) {
      S <- pop[pop$stype == lv[h] & pop$dnum == C$dnum[k],
               c("snum", "dnum", "stype", "enroll", "api00", "api99", "sch.wide", "meals")]
      S$pi <- pik[k]; S$st <- h; S$M <- nrow(S); S$psu <- h * 10000 + C$dnum[k]
      rows[[length(rows) + 1]] <- S
      m <- min(3, nrow(S)); S2 <- S[sort(sample.int(nrow(S), m)), ]; S2$f2 <- m / nrow(S)
      rows2[[length(rows2) + 1]] <- S2
    }
  }
  clus <- do.call(rbind, rows); rownames(clus) <- NULL
  two <- do.call(rbind, rows2); rownames(two) <- NULL
  assign("pps_clus", clus, globalenv()); assign("pps_clus_J", JC, globalenv())
  assign("pps_two", two, globalenv())
})
"""


def _R(code: str) -> np.ndarray:
    with r_session("survey") as (ro, _):
        return np.array(ro.r(code), dtype=float)


def _frame(name: str) -> pd.DataFrame:
    with r_session("survey") as (ro, _):
        return r_to_pandas(ro.r(name))


def _matrix(code: str) -> np.ndarray:
    n = int(_R(f"nrow({code})")[0])
    return _R(f"as.vector({code})").reshape(n, n, order="F")


@pytest.fixture(scope="module")
def data():
    with r_session("survey") as (ro, _):
        ro.r(R_SETUP)
    out = {
        "election": _frame("election_pps"),
        "strat": _frame("pps_strat"),
        "clus": _frame("pps_clus"),
        "two": _frame("pps_two"),
        "J_election": _matrix("election_jointprob"),
        "J_strat": {h: _matrix(f"pps_strat_J[[{h}]]") for h in (1, 2, 3)},
        "J_strat_full": _matrix("pps_strat_Jfull"),
        "J_clus": {h: _matrix(f"pps_clus_J[[{h}]]") for h in (1, 2, 3)},
    }
    # the designs are interesting: probabilities far from 0, strata of several PSUs,
    # clusters of several rows, and no PSU ids out of order (R's Brewer needs sorted ids)
    assert out["strat"].pi.max() > 0.5 and out["clus"].pi.max() > 0.5
    assert out["clus"].groupby("psu").size().max() > 3
    assert out["two"].f2.min() < 1
    return out


# (name, our pps=, our variance=, R's pps= / variance= arguments)
def _methods(J, p2):
    return [
        ("brewer", "brewer", "HT", 'pps="brewer"'),
        ("overton", "overton", "HT", 'pps="overton"'),
        ("overton-YG", "overton", "YG", 'pps="overton", variance="YG"'),
        ("HR()", HR(), "HT", "pps=HR()"),
        ("HR()-YG", HR(), "YG", 'pps=HR(), variance="YG"'),
        ("HR(psum)", HR(p2[0]) if p2 is not None else None, "HT", None),
        ("HT", ppsmat(J[0]), "HT", f"pps=ppsmat({J[1]})"),
        ("YG", ppsmat(J[0]), "YG", f'pps=ppsmat({J[1]}), variance="YG"'),
    ]


def _compare(d: ss.SurveyDesign, rdesign: str, by: str, domain_via_svyby: bool,
             what: str, rplain: str = "") -> None:
    """Totals, means, a ratio, vcov, domains and df of ``d`` against R's ``rdesign``."""
    t = d.total(["api00", "meals"], covmat=True)
    m = d.mean(["api99", "meals"])
    r = d.ratio("api00", "api99")
    ref = _R(f"local({{ d <- {rdesign}; a <- svytotal(~api00+meals, d); "
             "b <- svymean(~api99+meals, d); r <- svyratio(~api00, ~api99, d); "
             "c(coef(a), SE(a), as.vector(vcov(a)), coef(b), SE(b), coef(r), SE(r), "
             "degf(d)) })")
    ours = np.r_[t.estimate, t.se, t.attrs["covmat"]["vcov"].ravel(order="F"), m.estimate,
                 m.se, r.estimate, r.se, d.degf]
    assert_rel(ours, ref, TOL, what)
    assert (t.df == ref[-1]).all()
    # domains (R's svyby orders domains by sorted level: No, Yes)
    dt = d.total("api00", by=by)
    dm = d.mean("meals", by=by)
    if domain_via_svyby:
        ref = _R(f"local({{ d <- {rdesign}; a <- svyby(~api00, ~{by}, d, svytotal); "
                 f"b <- svyby(~meals, ~{by}, d, svymean); "
                 f"dfs <- sapply(c('No', 'Yes'), function(l) degf(subset(d, {by} == l))); "
                 "c(coef(a), SE(a), coef(b), SE(b), dfs) })")
    else:  # domain totals = totals of y * 1{domain}; domain means = ratios of those
        ref = _R(f"local({{ d <- {rdesign}; "
                 f"d <- update(d, no = as.numeric({by} == 'No'), yes = as.numeric({by} == 'Yes'),"
                 " y1 = api00 * no, y2 = api00 * yes, m1 = meals * no, m2 = meals * yes); "
                 "a <- svytotal(~y1+y2, d); r1 <- svyratio(~m1, ~no, d); "
                 "r2 <- svyratio(~m2, ~yes, d); "
                 # R's [.pps cannot subset a clustered matrix design: the df of the same
                 # clusters and strata from the plain design (R's degf ignores pps)
                 f"p <- {rplain}; "
                 f"dfs <- sapply(c('No', 'Yes'), function(l) degf(subset(p, {by} == l))); "
                 "c(coef(a), SE(a), coef(r1), coef(r2), SE(r1), SE(r2), dfs) })")
    assert list(dt[by]) == ["No", "Yes"]
    assert_rel(np.r_[dt.estimate, dt.se, dm.estimate, dm.se, dt.df], ref, TOL,
               what + " domains")


@pytest.mark.parametrize("k", range(8))
def test_election_every_method_as_R(data, k):
    """R's own example (unstratified, one county per PSU)."""
    el = data["election"]
    J = data["J_election"]
    p2 = _R("sum(election$p^2)/40")
    name, pps, variance, rarg = _methods((J, "election_jointprob"), p2)[k]
    if rarg is None:
        rarg = "pps=HR(sum(election$p^2)/40)"
    d = ss.SurveyDesign(el, fpc="p", pps=pps, variance=variance)
    t = d.total(["Bush", "Kerry"], covmat=True)
    m = d.mean(["Bush", "Nader"])
    r = d.ratio("Bush", "votes")
    e2 = el.assign(bushwin=np.where(el.Bush > el.Kerry, "Yes", "No"))
    d2 = ss.SurveyDesign(e2, fpc="p", pps=pps, variance=variance)
    dm = d2.mean("Nader", by="bushwin")
    ref = _R("local({ d <- svydesign(id=~1, fpc=~p, data=election_pps, " + rarg + "); "
             "d <- update(d, bushwin = ifelse(Bush > Kerry, 'Yes', 'No')); "
             "a <- svytotal(~Bush+Kerry, d); b <- svymean(~Bush+Nader, d); "
             "r <- svyratio(~Bush, ~votes, d); s <- svyby(~Nader, ~bushwin, d, svymean); "
             "c(coef(a), SE(a), as.vector(vcov(a)), coef(b), SE(b), coef(r), SE(r), "
             "coef(s), SE(s), degf(d)) })")
    ours = np.r_[t.estimate, t.se, t.attrs["covmat"]["vcov"].ravel(order="F"), m.estimate,
                 m.se, r.estimate, r.se, dm.estimate, dm.se, d.degf]
    assert_rel(ours, ref, TOL, f"election {name}")


STRAT_R = "svydesign(id=~1, strata=~st, fpc=~pi, data=pps_strat, {})"


@pytest.mark.parametrize("k", range(8))
def test_stratified_every_method_as_R(data, k):
    s = data["strat"]
    J = data["J_strat"]
    name, pps, variance, rarg = _methods((J, "pps_strat_Jfull"), (dict(zip(
        [1, 2, 3], s.groupby("st").p2.first(), strict=True)),))[k]
    if rarg is None:  # R's HR(psum, strata) indexes psum by the stratum value (1, 2, 3)
        rarg = 'pps=HR(pps_strat[, "p2", drop=FALSE], pps_strat[, "st", drop=FALSE])'
    d = ss.SurveyDesign(s, strata="st", fpc="pi", pps=pps, variance=variance)
    _compare(d, STRAT_R.format(rarg), "sch.wide", True, f"strat {name}")


def test_joint_matrix_forms_agree(data):
    """Per-stratum mapping, full matrix and PSU-labelled DataFrame give the same design."""
    s = data["strat"]
    full = ss.SurveyDesign(s, strata="st", fpc="pi", pps=ppsmat(data["J_strat_full"]))
    per = ss.SurveyDesign(s, strata="st", fpc="pi", pps=ppsmat(data["J_strat"]))
    lab = pd.DataFrame(data["J_strat_full"], index=s.index, columns=s.index)
    perm = np.random.default_rng(3).permutation(s.shape[0])
    shuffled = lab.iloc[perm, perm]  # labels carry the order
    framed = ss.SurveyDesign(s, strata="st", fpc="pi", pps=ppsmat(shuffled))
    a = [x.total(["api00", "meals"]) for x in (full, per, framed)]
    for b in a[1:]:
        assert_rel(b.se, a[0].se, 1e-12, "joint forms")


@pytest.mark.parametrize("k", [1, 2, 3, 4, 6, 7])
def test_clustered_one_stage_as_R(data, k):
    """One-stage cluster sample: several schools per PSU, joint probabilities UPtillepi2."""
    c = data["clus"]
    J = data["J_clus"]
    name, pps, variance, rarg = _methods((J, "pps_clus_Jfull"), None)[k]
    if "ppsmat" in rarg:  # R's ppsmat is indexed by row: give it the row-level matrix
        rarg = rarg.replace("pps_clus_Jfull", "pps_clus_Jrows")
        _R("local({ u <- !duplicated(pps_clus$psu); Jf <- outer(pps_clus$pi[u], "
           "pps_clus$pi[u]); st <- pps_clus$st[u]; for (h in 1:3) "
           "Jf[st == h, st == h] <- pps_clus_J[[h]]; "
           "assign('pps_clus_Jfull', Jf, globalenv()); 1 })")
    d = ss.SurveyDesign(c, ids="psu", strata="st", fpc="pi", pps=pps, variance=variance)
    rdes = f"svydesign(id=~psu, strata=~st, fpc=~pi, data=pps_clus, {rarg})"
    if "ppsmat" in rarg:
        # R's ppsvar sums rows by 1..nrow(pij): one row per PSU only. Compare the PSU-level
        # R design on cluster totals (same variance: totals are sums of PSU totals)
        agg = c.groupby("psu", sort=False).agg(
            st=("st", "first"), pi=("pi", "first"), api00=("api00", "sum"),
            meals=("meals", "sum"), api99=("api99", "sum")).reset_index()
        t = d.total(["api00", "meals"])
        r = d.ratio("api00", "api99")
        _R("local({ x <- pps_clus; g <- factor(x$psu, levels=unique(x$psu)); "
           "a <- data.frame(psu=levels(g), st=tapply(x$st, g, `[`, 1), "
           "pi=tapply(x$pi, g, `[`, 1), api00=tapply(x$api00, g, sum), "
           "meals=tapply(x$meals, g, sum), api99=tapply(x$api99, g, sum)); "
           "assign('pps_clus_agg', a, globalenv()); 1 })")
        ref = _R(f"local({{ d <- svydesign(id=~1, strata=~st, fpc=~pi, data=pps_clus_agg, "
                 f"{rarg.replace('pps_clus_Jrows', 'pps_clus_Jfull')}); "
                 "a <- svytotal(~api00+meals, d); r <- svyratio(~api00, ~api99, d); "
                 "c(coef(a), SE(a), coef(r), SE(r)) })")
        assert agg.shape[0] == d.stages[0].n_clusters
        assert_rel(np.r_[t.estimate, t.se, r.estimate, r.se], ref, TOL, f"clus {name}")
        return
    _compare(d, rdes, "sch.wide", False, f"clus {name}",
             "svydesign(id=~psu, strata=~st, probs=~pi, data=pps_clus)")


def test_clustered_brewer_as_R(data):
    c = data["clus"]
    d = ss.SurveyDesign(c, ids="psu", strata="st", fpc="pi", pps="brewer")
    _compare(d, 'svydesign(id=~psu, strata=~st, fpc=~pi, data=pps_clus, pps="brewer")',
             "sch.wide", True, "clus brewer")


TWO_R = 'svydesign(id=~psu+snum, strata=~st, fpc=~pi+f2, data=pps_two, pps="brewer")'


def test_two_stage_brewer_as_R(data):
    """Stratified two-stage: Brewer at stage 1, stage-2 SRS variance times pi of the PSU."""
    t = data["two"]
    d = ss.SurveyDesign(t, ids=["psu", "snum"], strata="st", fpc=["pi", "f2"], pps="brewer")
    _compare(d, TWO_R, "sch.wide", True, "two-stage brewer")
    # the second stage matters: without it the SE is R's one-stage (ultimate cluster) one
    one = ss.SurveyDesign(t, ids="psu", strata="st", fpc="pi", pps="brewer")
    se1 = one.total("api00").se[0]
    ref1 = _R('local({ d <- svydesign(id=~psu, strata=~st, fpc=~pi, data=pps_two, '
              'pps="brewer"); SE(svytotal(~api00, d)) })')
    assert_rel(se1, ref1, TOL, "one-stage view")
    assert d.total("api00").se[0] > se1 * (1 + 1e-3)


def test_brewer_factors_follow_the_psu_not_the_row_order(data):
    """R pairs 1 - pi_i with PSU totals in sorted-id order but the factors in row order (its
    Brewer SE changes when a stratum's rows are not sorted by PSU); ours follows the PSU."""
    s = data["strat"].assign(psu=lambda x: x.snum)
    rev = s.iloc[::-1].reset_index(drop=True)
    ours = ss.SurveyDesign(rev, ids="psu", strata="st", fpc="pi", pps="brewer").total("api00")
    _R("local({ assign('pps_rev', pps_strat[nrow(pps_strat):1, ], globalenv()); 1 })")
    sorted_ref = _R('local({ d <- svydesign(id=~snum, strata=~st, fpc=~pi, data=pps_strat, '
                    'pps="brewer"); SE(svytotal(~api00, d)) })')
    rev_ref = _R('local({ d <- svydesign(id=~snum, strata=~st, fpc=~pi, data=pps_rev, '
                 'pps="brewer"); SE(svytotal(~api00, d)) })')
    assert_rel(ours.se, sorted_ref, TOL, "reversed rows vs R sorted")
    assert abs(rev_ref[0] / sorted_ref[0] - 1) > 1e-3  # R's order dependence (documented)


@pytest.mark.parametrize("lonely", ["certainty", "remove", "adjust", "average"])
def test_brewer_lonely_psu_as_R(data, lonely):
    s = data["strat"]
    one = s[(s.st != 3) | (s.index == s.index[s.st == 3][0])].reset_index(drop=True)
    d = ss.SurveyDesign(one, strata="st", fpc="pi", pps="brewer", lonely_psu=lonely,
                        survey_version="4.1")  # live R 4.1.1's "adjust"
    t = d.total(["api00", "meals"])
    with r_session("survey") as (ro, _):
        ro.r("assign('pps_one', local({ s <- pps_strat; "
             "s[s$st != 3 | seq_len(nrow(s)) == which(s$st == 3)[1], ] }), globalenv())")
        old = ro.r("getOption('survey.lonely.psu')")
        try:
            ro.r(f"options(survey.lonely.psu='{lonely}')")
            ref = np.array(ro.r('local({ d <- svydesign(id=~1, strata=~st, fpc=~pi, '
                                'data=pps_one, pps="brewer"); SE(svytotal(~api00+meals, d)) })'),
                           dtype=float)
        finally:
            ro.r.options(**{"survey.lonely.psu": old})
    assert_rel(t.se, ref, TOL, f"lonely {lonely}")
    with pytest.raises(ValueError, match="only one PSU"):
        ss.SurveyDesign(one, strata="st", fpc="pi", pps="brewer").total("api00")


# ------------------------------------------------------------------------------ bad input
def test_bad_input_errors_name_the_argument(data):
    s = data["strat"]
    base = {"strata": "st", "fpc": "pi"}
    with pytest.raises(ValueError, match="fpc= as the PSUs' inclusion probabilities"):
        ss.SurveyDesign(s, strata="st", probs="pi", pps="brewer")
    with pytest.raises(ValueError, match="no Yates-Grundy"):
        ss.SurveyDesign(s, **base, pps="brewer", variance="YG")
    with pytest.raises(ValueError, match="variance='YG' needs pps="):
        ss.SurveyDesign(s, **base, variance="YG")
    with pytest.raises(ValueError, match="pps='sampford'"):
        ss.SurveyDesign(s, **base, pps="sampford")
    with pytest.raises(ValueError, match=r"fpc column 'N'.*\(0, 1\].*rows 0, 1"):
        ss.SurveyDesign(s.assign(N=100.0), strata="st", fpc="N", pps="overton")
    bad = s.assign(pi=s.pi.where(s.index != 4, 0.0))
    with pytest.raises(ValueError, match=r"fpc column 'pi'.*rows 4"):
        ss.SurveyDesign(bad, **base, pps="overton")
    with pytest.raises(ValueError, match=r"probs.*\(0, 1\].*rows 4"):
        ss.SurveyDesign(s.assign(pi=s.pi.where(s.index != 4, 1.5)), strata="st", probs="pi",
                        pps="overton")
    c = data["clus"]
    varies = c.assign(pi=c.pi * (1 - np.arange(c.shape[0]) * 1e-6))
    with pytest.raises(ValueError, match="varies within a stage-1 cluster"):
        ss.SurveyDesign(varies, ids="psu", strata="st", fpc="pi", pps="brewer")
    with pytest.raises(ValueError, match="varies within a PSU of 'psu'"):
        ss.SurveyDesign(varies, ids="psu", strata="st", probs="pi", pps="overton")
    with pytest.raises(ValueError, match="one-stage designs"):
        ss.SurveyDesign(data["two"], ids=["psu", "snum"], strata="st", fpc=["pi", "f2"],
                        pps="overton")
    with pytest.raises(ValueError, match="HR\\(psum\\): no value for strata \\[3\\]"):
        ss.SurveyDesign(s, **base, pps=HR({1: 0.2, 2: 0.2}))


def test_bad_joint_matrices(data):
    s = data["strat"]
    J = data["J_strat"]
    base = {"strata": "st", "fpc": "pi"}

    def with_block(h, M):
        return {**J, h: M}

    asym = J[1].copy()
    asym[0, 1] *= 0.9
    with pytest.raises(ValueError, match=r"stratum 1 is not symmetric at PSU pairs \(0, 1\)"):
        ss.SurveyDesign(s, **base, pps=ppsmat(with_block(1, asym)))
    diag = J[2].copy()
    np.fill_diagonal(diag, np.diag(diag) * 1.01)
    with pytest.raises(ValueError, match="diagonal of stratum 2 must be the PSUs' inclusion"):
        ss.SurveyDesign(s, **base, pps=ppsmat(with_block(2, diag)))
    perm = J[1][::-1, ::-1]  # misaligned PSU order: the diagonal no longer matches
    with pytest.raises(ValueError, match="diagonal"):
        ss.SurveyDesign(s, **base, pps=ppsmat(with_block(1, perm)))
    zero = J[3].copy()
    zero[0, 1] = zero[1, 0] = 0.0
    with pytest.raises(ValueError, match=r"outside \(0, 1\]"):
        ss.SurveyDesign(s, **base, pps=ppsmat(with_block(3, zero)))
    big = J[3].copy()
    big[0, 1] = big[1, 0] = min(big[0, 0], big[1, 1]) * 1.1
    with pytest.raises(ValueError, match="pi_ij > min"):
        ss.SurveyDesign(s, **base, pps=ppsmat(with_block(3, big)))
    with pytest.raises(ValueError, match="is 12 x 12 for 26 PSUs"):
        ss.SurveyDesign(s, **base, pps=ppsmat(J[1]))
    with pytest.raises(ValueError, match=r"missing \[3\]"):
        ss.SurveyDesign(s, **base, pps=ppsmat({1: J[1], 2: J[2]}))
    lab = pd.DataFrame(data["J_strat_full"], index=s.index, columns=s.index).iloc[1:, 1:]
    with pytest.raises(ValueError, match=r"no row/column for PSU\(s\) \[0\]"):
        ss.SurveyDesign(s, **base, pps=ppsmat(lab))


def test_caller_data_untouched_and_engines_refused(data):
    s = data["strat"]
    before = s.copy(deep=True)
    d = ss.SurveyDesign(s, strata="st", fpc="pi", pps=ppsmat(data["J_strat"]), variance="YG")
    d.mean("api00", by="sch.wide")
    pd.testing.assert_frame_equal(s, before)
    with pytest.raises(ValueError, match="PPS-without-replacement design"):
        d.total("api00", engine="samplics")
    assert "PPS without replacement: joint probabilities (YG)" in repr(d)
    # calibration of a PPS design is not wired to the PPS variance: refused, not ignored
    pop = {"(Intercept)": float(d.weights.sum()), "meals": float(d.total("meals").estimate[0])}
    c = d.calibrate(["meals"], pop)
    with pytest.raises(ValueError, match="calibrated PPS-without-replacement design"):
        c.total("api00")


def test_ppsmat_tolerance_as_R(data):
    """R zeroes Dcheck entries below ppsmat's tolerance: a coarse tolerance changes the SE,
    and ours follows R's at both tolerances."""
    s = data["strat"]
    ses = {}
    for tol in (0.0, 0.05):
        d = ss.SurveyDesign(s, strata="st", fpc="pi", pps=ppsmat(data["J_strat"], tol))
        ses[tol] = d.total(["api00", "meals"]).se.to_numpy()
        ref = _R(f"local({{ d <- {STRAT_R.format(f'pps=ppsmat(pps_strat_Jfull, {tol})')}; "
                 "SE(svytotal(~api00+meals, d)) })")
        assert_rel(ses[tol], ref, TOL, f"tolerance {tol}")
    assert np.all(np.abs(ses[0.05] / ses[0.0] - 1) > 1e-4)


@pytest.mark.parametrize("k", [0, 7])
def test_quantiles_and_proportions_as_R(data, k):
    """Woodruff intervals and factor shares go through the same PPS variance (Brewer, YG)."""
    s = data["strat"]
    name, pps, variance, rarg = _methods((data["J_strat"], "pps_strat_Jfull"), None)[k]
    d = ss.SurveyDesign(s, strata="st", fpc="pi", pps=pps, variance=variance)
    q = d.quantile("api00", [0.25, 0.5])
    p = d.proportion("sch.wide")
    ref = _R(f"local({{ d <- {STRAT_R.format(rarg)}; q <- svyquantile(~api00, d, c(.25, .5)); "
             "p <- svymean(~sch.wide, d); c(q[[1]][, 1:3], coef(p), SE(p)) })")
    assert_rel(np.r_[q.estimate, q.ci_low, q.ci_high, p.estimate, p.se], ref, TOL,
               f"quantiles {name}")
    assert np.isfinite(q.ci_high).all()


def test_subset_and_replicates(data):
    """subset() is the by= domain (full design kept); replicate weights are refused."""
    s = data["strat"]
    d = ss.SurveyDesign(s, strata="st", fpc="pi", pps="brewer")
    sub = d.subset(s["sch.wide"] == "Yes").mean("meals")
    dom = d.mean("meals", by="sch.wide")
    assert_rel([sub.estimate[0], sub.se[0], sub.df[0]],
               [dom.estimate[1], dom.se[1], dom.df[1]], 1e-12, "subset vs by")
    for method in ("jackknife", "bootstrap", "brr"):
        with pytest.raises(ValueError, match=f"{method}\\(\\) of a PPS-without-replacement"):
            getattr(d, method)()
