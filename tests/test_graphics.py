"""svyhist, svyboxplot, svyplot, svyqqplot, svyqqmath and the svycdf plot: the values each
draws equal R's.

R's plotting functions are called with the drawing primitive replaced by one returning its
arguments (``bxp``, ``symbols``, ``plot``, ``hexbin::gplot.hexbin``), so the values compared
are exactly those R draws; ``svyhist`` returns its histogram itself. Live against R survey
4.1.1 through rpy2 (R/svyhist.R, surveygraph.R, svyqq.R are unchanged in 4.5), except
svyboxplot, whose quantiles follow R 4.5's rule at p = 0 and whose per-group quantiles
4.1.1 gets wrong (svyby of svyquantile gives each group the last group's): stored R 4.5
output (tests/reference/r_survey45/graphics.R), and 4.1.1 live for one group under
``survey_version="4.1"``. On R's man-page examples, a replicate and a calibrated design.
"""

from __future__ import annotations

import json
from pathlib import Path

import matplotlib
import numpy as np
import pytest
from conftest import replicate_design_from_r

import surveysynth as ss
from r_bridge import r_session
from surveysynth.analysis import make_panel_svysmooth, svycdf
from surveysynth.analysis.graphics import (
    dotchart,
    hexbin_cells,
    r_pretty,
    svyboxplot,
    svycoplot,
    svyhist,
    svyplot,
    svyqqmath,
    svyqqplot,
)
from tests.conftest import assert_rel

matplotlib.use("Agg")

TOL = 1e-8
REF45 = json.loads((Path(__file__).parent / "reference" / "r_survey45" / "graphics.json")
                   .read_text())
POP_API = {"(Intercept)": 6194, "stypeH": 755, "stypeM": 1018, "api99": 3914069}
R_SETUP = """
suppressMessages(library(survey)); data(api); pdf(NULL)
gr_dstrat <- svydesign(id=~1, strata=~stype, weights=~pw, data=apistrat, fpc=~fpc)
gr_dclus1 <- svydesign(id=~dnum, weights=~pw, data=apiclus1, fpc=~fpc)
gr_rstrat <- as.svrepdesign(gr_dstrat)
gr_cal <- calibrate(gr_dstrat, ~stype+api99,
                    c(`(Intercept)`=6194, stypeH=755, stypeM=1018, api99=3914069))
gr_cap <- function(f, ...) {
  environment(f) <- list2env(list(...), parent=asNamespace("survey")); f }
gr_box <- gr_cap(survey:::svyboxplot.default, bxp=function(z, ...) z)
gr_bubble <- gr_cap(survey:::svyplot.default,
                    symbols=function(x, y, circles, ...) list(x=x, y=y, r=circles))
gr_transp <- gr_cap(survey:::svyplot.default, plot=function(X, Y, col, ...) list(col=col))
gr_hex <- gr_cap(survey:::svyplot.default, `::`=function(pkg, name) {
  n <- as.character(substitute(name))
  if (n == "gplot.hexbin") function(x, ...) x else getExportedValue(as.character(substitute(pkg)), n)
})
gr_qq <- gr_cap(survey:::svyqqplot, plot=function(x, y, ...) list(x=x, y=y))
gr_qqenv <- new.env()
gr_qqmath <- gr_cap(survey:::svyqqmath, plot=function(x, y, ...) {
  gr_qqenv$x <- x; gr_qqenv$y <- y })
"""


@pytest.fixture(autouse=True)
def _close_figures():
    yield
    import matplotlib.pyplot as plt

    plt.close("all")


def _r(code: str) -> np.ndarray:
    with r_session("survey") as (ro, _):
        return np.array(ro.r(code), dtype=float)


def _r_str(code: str) -> list[str]:
    with r_session("survey") as (ro, _):
        return [str(s) for s in ro.r(code)]


@pytest.fixture(scope="module")
def designs(R, api):
    with r_session("survey") as (ro, _):
        ro.r(R_SETUP)
    strat = ss.SurveyDesign(api["apistrat"], strata="stype", weights="pw", fpc="fpc")
    rstrat = replicate_design_from_r(api["apistrat"], "gr_rstrat")
    return {
        "gr_dstrat": strat,
        "gr_dclus1": ss.SurveyDesign(api["apiclus1"], ids="dnum", weights="pw", fpc="fpc"),
        "gr_rstrat": rstrat,
        "gr_cal": strat.calibrate("~stype+api99", POP_API),
    }


# ------------------------------------------------------------------------------ svyhist
def test_pretty_equals_R_on_random_ranges(R):
    """hist's breaks come from R's pretty(): 200 random ranges and cell counts, exact."""
    rng = np.random.default_rng(20261127)
    cases = []
    for _ in range(200):
        a = float(rng.normal() * 10.0 ** rng.integers(-3, 6))
        b = float(a + abs(rng.normal()) * 10.0 ** rng.integers(-5, 6))
        cases.append((a, b, int(rng.integers(1, 40))))
    code = "unlist(lapply(list(" + ",".join(f"c({a!r},{b!r},{n})" for a, b, n in cases) + \
        "), function(z) c(length(p <- pretty(z[1:2], n=z[3], min.n=1)), p)))"
    flat = _r(code)
    k = 0
    for a, b, n in cases:
        m = int(flat[k])
        assert np.array_equal(r_pretty(a, b, n, 1), flat[k + 1:k + 1 + m]), (a, b, n)
        k += 1 + m


@pytest.mark.parametrize("design,var,extra,kw", [
    ("gr_dstrat", "enroll", "", {}),
    ("gr_dstrat", "api00", ", breaks=12, probability=FALSE", {"breaks": 12,
                                                              "probability": False}),
    ("gr_dclus1", "acs.k3", "", {}),  # missing values
    ("gr_rstrat", "enroll", "", {}),
    ("gr_cal", "api99", ", breaks=c(300, 500, 700, 800, 1000)",
     {"breaks": [300, 500, 700, 800, 1000]}),
])
def test_svyhist_equals_R(designs, design, var, extra, kw):
    """?svyhist: svyhist(~enroll, dstrat) and others: breaks, densities, counts, mids."""
    h = svyhist(var, designs[design], plot=False, **kw)
    _r(f"gr_h <- svyhist(~{var}, {design}{extra}); 0")
    assert np.array_equal(h.breaks, _r("gr_h$breaks"))
    assert_rel(h.density, _r("gr_h$density"), TOL, "density")
    assert_rel(h.counts, _r("gr_h$counts"), TOL, "counts")
    assert_rel(h.mids, _r("gr_h$mids"), TOL, "mids")
    if not kw.get("probability", True):
        assert_rel(h.count_scale, _r("gr_h$count_scale"), TOL, "count_scale")


def test_svyhist_subsets(designs):
    """A domain: breaks from its rows (R drops them from an uncalibrated design), and from
    every row of a calibrated design's subset (R keeps them with weight 0)."""
    for name in ("gr_dstrat", "gr_cal"):
        d = designs[name]
        h = svyhist("api00", d.subset(d.data["stype"] == "H"), plot=False)
        _r(f"gr_h <- svyhist(~api00, subset({name}, stype == 'H')); 0")
        assert np.array_equal(h.breaks, _r("gr_h$breaks")), name
        assert_rel(h.density, _r("gr_h$density"), TOL, f"{name} density")


def test_svyhist_draws_its_heights(designs):
    h = svyhist("enroll", designs["gr_dstrat"])
    heights = [p.get_height() for p in h.ax.patches]
    assert_rel(heights, h.density, 1e-12, "bar heights")


# ------------------------------------------------------------------------------ svyboxplot
@pytest.mark.parametrize("case,call", [
    ("dstrat_stype_all", lambda ds: svyboxplot("enroll", ds["gr_dstrat"], by="stype",
                                               all_outliers=True, plot=False)),
    ("dstrat_stype", lambda ds: svyboxplot("enroll", ds["gr_dstrat"], by="stype",
                                           plot=False)),
    ("dstrat_one", lambda ds: svyboxplot("enroll", ds["gr_dstrat"], plot=False)),
    ("dclus1_stype_all", lambda ds: svyboxplot("api00", ds["gr_dclus1"], by="stype",
                                               all_outliers=True, plot=False)),
    ("rstrat_stype", lambda ds: svyboxplot("enroll", ds["gr_rstrat"], by="stype",
                                           plot=False)),
    ("cal_stype_all", lambda ds: svyboxplot("api00", ds["gr_cal"], by="stype",
                                            all_outliers=True, plot=False)),
    ("cal_subset_one", lambda ds: svyboxplot(
        "api00", ds["gr_cal"].subset(ds["gr_cal"].data["sch.wide"] == "Yes"),
        all_outliers=True, plot=False)),
])
def test_svyboxplot_equals_R45(designs, case, call):
    """?svyhist's svyboxplot(enroll~stype, dstrat, all.outliers=TRUE) and svyboxplot(
    enroll~1, dstrat), against stored R 4.5: box statistics, group sizes, outliers."""
    ref = REF45["svyboxplot"][case]
    b = call(designs)
    assert_rel(b.stats.ravel(order="F"), ref["stats"], TOL, "stats")
    assert_rel(b.n, ref["n"], TOL, "n")
    assert_rel(b.out, ref["out"], TOL, "out")
    assert list(b.group) == list(ref["group"])


def test_svyboxplot_41_rule_equals_R411_and_differs(designs):
    """survey_version='4.1': 4.1.1's quantile at p = 0 (the second smallest value), equal to
    R 4.1.1 live on one group; the 4.5 default differs there (the mutant the switch keeps)."""
    old = svyboxplot("enroll", designs["gr_dstrat"], survey_version="4.1", plot=False)
    _r("gr_z <- gr_box(enroll~1, gr_dstrat, all.outliers=TRUE); 0")
    assert_rel(old.stats.ravel(), _r("gr_z$stats"), TOL, "4.1 stats")
    assert_rel(old.n, _r("gr_z$n"), TOL, "4.1 n")
    new = svyboxplot("enroll", designs["gr_dstrat"], plot=False)
    assert new.stats[0, 0] == 119 and old.stats[0, 0] == 143


def test_svyboxplot_draws_its_boxes(designs):
    b = svyboxplot("enroll", designs["gr_dstrat"], by="stype", all_outliers=True)
    medians = [line.get_ydata()[0] for line in b.artists["medians"]]
    assert_rel(medians, b.stats[2], 1e-12, "drawn medians")


# ------------------------------------------------------------------------------ svyplot
@pytest.mark.parametrize("design", ["gr_dstrat", "gr_rstrat", "gr_cal"])
def test_svyplot_bubble_and_transparent_equal_R(designs, design):
    """?svyplot: svyplot(api00~api99, dstrat, style='bubble') (R's circles = sqrt(w)) and
    style='transparent' (R's colours' alpha channel, 0-255; not on the replicate design,
    where R's ``weights(design)`` is the replicate-weight matrix and its opacities are
    meaningless: ours use the sampling weights)."""
    d = designs[design]
    s = svyplot("api00", "api99", d, style="bubble", plot=False)
    _r(f"gr_s <- gr_bubble(api00~api99, design={design}, style='bubble'); 0")
    assert_rel(s.radius, _r("gr_s$r"), TOL, "radius")
    assert_rel(s.x, _r("gr_s$x"), 0, "x")
    assert_rel(s.y, _r("gr_s$y"), 0, "y")
    if design == "gr_rstrat":  # R's weights() of a replicate design is the replicate matrix
        return
    t = svyplot("api00", "api99", d, style="transparent", plot=False)
    cols = _r_str(f"gr_transp(api00~api99, design={design}, style='transparent')$col")
    assert np.array_equal(np.round(t.alpha * 255), [int(c[7:9], 16) for c in cols])


@pytest.mark.parametrize("design,xbins", [("gr_dstrat", 30), ("gr_dclus1", 10),
                                          ("gr_cal", 20)])
def test_svyplot_hex_equals_R(designs, design, xbins):
    """style='hex': hexbin's cells (each point's cell ID), the weights summed per cell, the
    weighted centroids, and the cell centres (hexbin's hcell2xy)."""
    s = svyplot("api00", "api99", designs[design], style="hex", xbins=xbins, plot=False)
    _r(f"gr_s <- gr_hex(api00~api99, design={design}, style='hex', xbins={xbins}); 0")
    assert np.array_equal(s.cid, _r("gr_s@cID"))
    assert np.array_equal(s.cell, _r("gr_s@cell"))
    assert_rel(s.count, _r("gr_s@count"), TOL, "count")
    assert_rel(s.xcm, _r("gr_s@xcm"), TOL, "xcm")
    assert_rel(s.ycm, _r("gr_s@ycm"), TOL, "ycm")
    assert_rel(s.xcenter, _r("hexbin::hcell2xy(gr_s)$x"), TOL, "xcenter")
    assert_rel(s.ycenter, _r("hexbin::hcell2xy(gr_s)$y"), TOL, "ycenter")


def test_hexbin_cells_on_points_near_cell_edges(R):
    """Points on and near the boundaries between hexagons (where hbin.f's single-precision
    constants decide): cell IDs equal hexbin's."""
    rng = np.random.default_rng(5)
    x = np.round(rng.uniform(0, 10, 400), 1)
    y = np.round(rng.uniform(0, 10, 400), 1)
    vec = ",".join(map(repr, x.tolist())), ",".join(map(repr, y.tolist()))
    ref = _r(f"hexbin::hexbin(c({vec[0]}), c({vec[1]}), xbins=10, IDs=TRUE)@cID")
    assert np.array_equal(hexbin_cells(x, y, 10)[0], ref)


def test_svyplot_grayhex_equals_R(designs):
    """style='grayhex': summed weights per cell, hexbin's own (unweighted) centroids."""
    s = svyplot("api00", "api99", designs["gr_dstrat"], style="grayhex", plot=False)
    _r("gr_s <- gr_hex(api00~api99, design=gr_dstrat, style='grayhex'); 0")
    assert np.array_equal(s.cell, _r("gr_s@cell"))
    assert_rel(s.count, _r("gr_s@count"), TOL, "count")
    assert_rel(s.xcm, _r("gr_s@xcm"), TOL, "xcm")
    assert_rel(s.ycm, _r("gr_s@ycm"), TOL, "ycm")


def test_svyplot_subsample_jitter_and_draws(designs, api):
    """style='subsample': the jitter half-width equals R's jitter(factor=3) on the same draws
    (R's runif replaced by its upper bound), amount= as R's; the rows are drawn with
    probability proportional to the weight (200,000 draws: each stratum's share within 4
    binomial SDs of its weight share; a uniform draw would be off by >100 SDs)."""
    d = designs["gr_dstrat"]
    s = svyplot("api00", "api99", d, style="subsample", seed=3, plot=False)
    xs = api["apistrat"]["api99"].to_numpy(dtype=float)[s.index]
    vec = "c(" + ",".join(map(repr, xs.tolist())) + ")"
    amt = _r(f"gr_j <- jitter; environment(gr_j) <- list2env(list(`::`=function(p, n) "
             f"function(k, a, b) rep(b, k)), parent=baseenv()); (gr_j({vec}, factor=3) - "
             f"{vec})[1]")[0]
    assert_rel(s.jitter_amount[0], amt, 1e-12, "jitter amount")
    assert np.all(np.abs(s.x - xs) <= s.jitter_amount[0])
    s2 = svyplot("api00", "api99", d, style="subsample", amount=(25, 0), seed=3, plot=False)
    assert s2.jitter_amount[0] == 25
    big = svyplot("api00", "api99", d, style="subsample", sample_size=200_000, seed=1,
                  plot=False)
    w = d.weights
    stype = d.data["stype"].to_numpy()
    for lev in ("E", "H", "M"):
        p = w[stype == lev].sum() / w.sum()
        share = np.mean(stype[big.index] == lev)
        assert abs(share - p) < 4 * np.sqrt(p * (1 - p) / 200_000), lev


def test_svyplot_draws(designs):
    for style in ("bubble", "transparent", "hex", "grayhex", "subsample"):
        s = svyplot("api00", "api99", designs["gr_dstrat"], style=style, seed=1)
        assert s.ax.collections or s.ax.patches
    with pytest.raises(ValueError, match="grayhex"):
        svyplot("api00", "api99", designs["gr_dstrat"], style="greyhex")


# ------------------------------------------------------------------------------ qq plots
def test_svyqqplot_equals_R(designs):
    """?svyqqplot: svyqqplot(api00~api99, dstrat) and svyqqplot(enroll~enroll, dstrat,
    designx=dclus1, qrule=hf8) (dclus1 shorter: dstrat's quantiles at i/n)."""
    q = svyqqplot("api00", "api99", designs["gr_dstrat"], plot=False)
    _r("gr_q <- gr_qq(api00~api99, design=gr_dstrat); 0")
    assert_rel(q.x, _r("gr_q$x"), 0, "x")
    assert_rel(q.y, _r("gr_q$y"), 0, "y")
    q = svyqqplot("enroll", "enroll", designs["gr_dstrat"], designx=designs["gr_dclus1"],
                  plot=False)
    _r("gr_q <- gr_qq(enroll~enroll, design=gr_dstrat, designx=gr_dclus1, "
       "qrule=survey:::qrule_hf8); 0")
    assert_rel(q.x, _r("gr_q$x"), TOL, "x")
    assert_rel(q.y, _r("gr_q$y"), TOL, "y")
    q = svyqqplot("enroll", "enroll", designs["gr_dclus1"], designx=designs["gr_cal"],
                  plot=False, qrule="math")
    _r("gr_q <- gr_qq(enroll~enroll, design=gr_dclus1, designx=gr_cal, qrule='math'); 0")
    assert_rel(q.x, _r("gr_q$x"), TOL, "x (calibrated designx)")


@pytest.mark.parametrize("design,var", [("gr_dstrat", "api99"), ("gr_rstrat", "enroll"),
                                        ("gr_cal", "api00"), ("gr_dclus1", "acs.k3")])
def test_svyqqmath_equals_R(designs, design, var):
    """?svyqqplot: svyqqmath(~api99, dstrat): normal quantiles at the weighted cumulative
    shares times n / (n + 1); missing values dropped (apiclus1's acs.k3)."""
    q = svyqqmath(var, designs[design], plot=False)
    _r(f"gr_qqmath(~{var}, design={design}); 0")
    assert_rel(q.x, _r("gr_qqenv$x"), TOL, "expected")
    assert_rel(q.y, _r("gr_qqenv$y"), 0, "observed")


# ------------------------------------------------------------------------------ svycdf plot
def test_svycdf_plot_draws_the_steps(designs):
    cdf = svycdf(["enroll"], designs["gr_dstrat"])["enroll"]
    ax = cdf.plot()
    xs, ys = ax.lines[0].get_data()
    assert_rel(ys[1:-1], cdf.y, 0, "drawn step heights")
    assert_rel(xs[1:-1], cdf.x, 0, "drawn step positions")


# ------------------------------------------------------------------------------ dotchart, coplot
def test_dotchart_values_equal_R_coef(designs):
    """dotchart.svystat / dotchart.svyby draw coef(): svymean(~api00+api99) and svyby(~api00,
    ~stype, svymean)."""
    d = designs["gr_dstrat"]
    v = dotchart(d.mean(["api00", "api99"]))
    assert_rel(v.to_numpy(), _r("coef(svymean(~api00+api99, gr_dstrat))"), TOL, "svymean")
    assert list(v.index) == ["api00", "api99"]
    v = dotchart(d.mean("api00", by="stype"), plot=False)
    assert_rel(v.to_numpy(), _r("coef(svyby(~api00, ~stype, gr_dstrat, svymean))"), TOL,
               "svyby")
    with pytest.raises(ValueError, match="estimate"):
        dotchart(d.data)


@pytest.mark.parametrize("design", ["gr_dstrat", "gr_cal"])
def test_svycoplot_transparent_equals_R(designs, design, api):
    """svycoplot(api00~api99|stype, style='transparent'): R's colours (alpha from the whole
    design's weights), split into lattice's panels by level."""
    res = svycoplot("api00", "api99", "stype", designs[design], style="transparent")
    cols = _r_str(f"gr_cp <- survey:::svycoplot.default; environment(gr_cp) <- list2env(list("
                  "xyplot=function(formula, data, panel, ...) environment(panel)$cols), "
                  f"parent=asNamespace('survey')); gr_cp(api00~api99|stype, {design}, "
                  "style='transparent')")
    alpha = np.array([int(c[7:9], 16) for c in cols])
    stype = api["apistrat"]["stype"].astype(str).to_numpy()
    for lev, p in res.panels.items():
        assert np.array_equal(np.round(p["alpha"] * 255), alpha[stype == lev]), lev
    assert len(res.fig.axes) == 3
    hx = svycoplot("api00", "api99", "stype", designs[design], style="hexbin", plot=False)
    total = sum(p["count"].sum() for p in hx.panels.values())
    assert_rel(total, designs[design].weights.sum(), 1e-12, "hexbin weights")


def test_make_panel_svysmooth_equals_R(designs, api):
    """make.panel.svysmooth(dstrat)(x, y): the smooth R's termplot draws (lines() captured),
    with the default dpill bandwidth and with span=."""
    panel = make_panel_svysmooth(designs["gr_dstrat"])
    x = api["apistrat"]["api99"].to_numpy(dtype=float)
    y = api["apistrat"]["api00"].to_numpy(dtype=float) - 0.5 * x
    _r("gr_p <- make.panel.svysmooth(gr_dstrat); environment(gr_p) <- list2env(list("
       "design=gr_dstrat, bandwidth=NULL, points=function(...) NULL, "
       "lines=function(s, ...) s), parent=asNamespace('survey')); "
       "gr_y <- apistrat$api00 - 0.5 * apistrat$api99; 0")
    for span, arg in ((None, ""), (0.3, ", span=0.3")):
        s = panel(x, y, span=span)
        assert_rel(s.y["x"], _r(f"gr_p(apistrat$api99, gr_y{arg})$y"), TOL, f"span {span}")
    with pytest.raises(ValueError, match="one value per row"):
        panel(x[:10], y[:10])
