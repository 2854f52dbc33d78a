"""Issue 37, item 2: useful defaults for quantile synthesis, and printed release estimates that
show their df and CI and explain a df below 2.

* The README's settings (apistrat's api00, bounds 200-1000, epsilon 5, m = 3, the default
  method) put under 5% of synthetic values on a bound on each of three seeds (the data have
  none there). Mutant kept: the former default ``method="stepwise"`` fails the same check.
  (apiclus2 until issue 36: the quantile synthesizers now refuse clustered designs, and
  synthesize a stratified design within each stratum.)
* A release's combined estimate prints df, ci_low and ci_high and, for df < 2, one line with
  the full-synthesis rule's numbers, checked against a hand computation of Raghunathan, Reiter
  & Rubin's T_f and df (mutants kept: the df without the 1 + 1/m factor, and the partial rule).
* The console of ``surveysynth release`` lists the report's fidelity flags.
"""

from __future__ import annotations

import re

import numpy as np
import pandas as pd
import pytest

import surveysynth as ss
from surveysynth.combine import low_df_note
from surveysynth.privacy.record import build_record
from surveysynth.release import ReleaseEstimate, SyntheticRelease

BOUNDS = (200, 1000)


@pytest.fixture(scope="module")
def apistrat_design():
    from surveysynth.datasets import load_api

    return ss.SurveyDesign(load_api("apistrat"), strata="stype", weights="pw", fpc="fpc")


def _share_on_bound(rel: SyntheticRelease) -> float:
    x = np.concatenate([d.data["api00"].to_numpy(float) for d in rel.designs])
    return float(np.mean((x <= BOUNDS[0]) | (x >= BOUNDS[1])))


def _readme_release(design, seed: int, **kw) -> SyntheticRelease:
    syn = ss.synth.QuantileSynthesizer(variables="api00", bounds={"api00": BOUNDS}, epsilon=5,
                                       m=3, random_state=seed, progress=False, **kw)
    return syn.fit(design).release()


def test_readme_settings_no_pile_up_at_the_bounds(apistrat_design):
    y = apistrat_design.data["api00"].to_numpy(float)
    assert np.mean((y <= BOUNDS[0]) | (y >= BOUNDS[1])) == 0  # the data have no value there
    for seed in (1, 2, 3):
        rel = _readme_release(apistrat_design, seed)
        assert rel.privacy.facts["method"] == "jointexp"
        assert rel.privacy.differentially_private  # pure epsilon-DP as run
        share = _share_on_bound(rel)
        assert share < 0.05, (seed, share)
        # usable, not only off the bounds: the synthetic median near the data's (unweighted:
        # the strata keep their sizes)
        x = np.concatenate([d.data["api00"].to_numpy(float) for d in rel.designs])
        assert abs(np.median(x) - np.median(y)) < 50, (seed, np.median(x), np.median(y))


def test_apiclus2_values_without_pile_up_and_its_design_refused():
    """Issue 37's check on apiclus2 (the README's former example): the default method on its
    126 api00 values (as exchangeable records: a DataFrame) puts under 5% on a bound on three
    seeds; the clustered design itself is refused (issue 36 D6), naming the reason."""
    from surveysynth.datasets import load_api

    data = load_api("apiclus2")
    y = data["api00"].to_numpy(float)
    assert np.mean((y <= BOUNDS[0]) | (y >= BOUNDS[1])) == 0
    for seed in (1, 2, 3):
        rel = _readme_release(data[["api00"]], seed)
        share = _share_on_bound(rel)
        assert share < 0.05, (seed, share)
    d = ss.SurveyDesign(data, ids="~dnum+snum", fpc="~fpc1+fpc2")
    with pytest.raises(ValueError, match="refuses clustered designs"):
        _readme_release(d, 1)


def test_mutant_former_default_stepwise_piles_up(apistrat_design):
    """The check above fails the former default (stepwise KNG: epsilon / 49 per quantile)."""
    shares = [_share_on_bound(_readme_release(apistrat_design, s, method="stepwise"))
              for s in (1, 2, 3)]
    assert min(shares) > 0.05, shares


# ------------------------------------------------------------------ printed estimates
def _release(shift: float, m: int = 3, kind: str = "full") -> SyntheticRelease:
    """m synthetic sets: one fixed sample, shifted by -shift, 0, +shift, ... (deterministic)."""
    base = np.linspace(0.0, 10.0, 50)
    shifts = (np.arange(m) - (m - 1) / 2) * shift
    designs = [ss.SurveyDesign(pd.DataFrame({"x": base + s, "w": 2.0}), weights="w")
               for s in shifts]
    rec = build_record("none", "test copy", m=m, epsilon=None, seeded=True, notes=["test"])
    return SyntheticRelease(designs, kind, rec, n_original=50)


def _hand_full(rel: SyntheticRelease) -> tuple[float, float, float]:
    """T_f, df and vbar/((1+1/m) b) by hand (Raghunathan, Reiter & Rubin 2003), the df capped
    by the synthetic design's df nu_com = n - 1 = 49 (issue 36, D8: full synthesis, gamma 0)."""
    q = np.array([d.mean("x")["estimate"].iloc[0] for d in rel.designs])
    u = np.array([d.mean("x")["se"].iloc[0] ** 2 for d in rel.designs])
    m = len(q)
    b = np.sum((q - q.mean()) ** 2) / (m - 1)
    vbar = u.mean()
    r = vbar / ((1 + 1 / m) * b)
    nu_com = rel.designs[0].degf
    nu_obs = nu_com * (nu_com + 1) / (nu_com + 3)
    return (1 + 1 / m) * b - vbar, 1 / (1 / ((m - 1) * (1 - r) ** 2) + 1 / nu_obs), r


def test_printed_estimate_shows_df_ci_and_explains_df_below_2():
    rel = _release(shift=0.6)
    est = rel.mean("x")
    t_f, df, r = _hand_full(rel)
    assert t_f > 0 and df < 2  # the constructed case: a full-synthesis df below 2
    assert isinstance(est, ReleaseEstimate) and isinstance(est, pd.DataFrame)
    assert est["df"].iloc[0] == pytest.approx(df, rel=1e-10)
    assert est["variance"].iloc[0] == pytest.approx(t_f, rel=1e-10)
    # mutant: the df without the 1 + 1/m factor differs here (would fail the line above)
    assert abs((3 - 1) * (1 - r * (1 + 1 / 3)) ** 2 - df) > 0.1
    text = repr(est)
    lines = text.splitlines()
    header = " ".join(lines)
    for col in ("df", "ci_low", "ci_high", "estimate", "se"):
        assert re.search(rf"\b{col}\b", header), col
    # the df and the CI bounds are printed (pandas' six significant digits)
    assert f"{df:.6f}"[:6] in text
    assert f"{est['ci_low'].iloc[0]:.6f}"[:6] in text
    note = [ln for ln in lines if ln.startswith("df < 2")]
    assert len(note) == 1  # one line
    assert "T_f = (1+1/m) b - vbar" in note[0] and "df = (m-1)(1 - vbar/((1+1/m) b))^2" in note[0]
    assert f"vbar/((1+1/m) b) = {r:.2f}" in note[0] and "m - 1 = 2" in note[0]
    assert "more synthetic sets" in note[0]
    assert est.df_note() == note[0]
    # a derived frame is a plain DataFrame (the repr belongs to the combined estimate only)
    assert type(est[["estimate", "df"]]) is pd.DataFrame
    # html (notebooks) carries the line too
    assert "df &lt; 2" in est._repr_html_()


def test_no_df_line_when_df_is_2_or_more():
    rel = _release(shift=0.6, m=12)
    est = rel.mean("x")
    _, df, _ = _hand_full(rel)
    assert df >= 2 and est["df"].iloc[0] == pytest.approx(df, rel=1e-10)
    assert est.df_note() is None and "df < 2" not in repr(est)


def test_df_line_for_two_sets_and_partial_rule():
    est = _release(shift=5.0, m=2, kind="partial").mean("x")
    assert est["df"].iloc[0] < 2
    note = est.df_note()
    assert note.startswith("df < 2") and "m = 2" in note and "1 degree(s)" in note
    # the partial rule never gives df < 2 with m >= 3 (df >= m - 1): no line
    assert _release(shift=0.6, m=3, kind="partial").mean("x").df_note() is None
    frame = pd.DataFrame({"df": [np.inf, 5.0], "between": [1.0, 1.0], "within": [0.1, 0.1],
                          "m": [3, 3]})
    assert low_df_note(frame, "full") is None


# ------------------------------------------------------------------ console
# the design is declared as a simple random sample (an empty [design]): the pile-up this test
# needs is of the pooled synthesis (issue 36: a stratified design is synthesized within strata
# of 50-100 records, where the released quantiles sit just above the bound, not on it)
API_CONFIG = """
[input]
path = "apistrat.csv"
[design]
[synthesizer]
method = "quantile"
variables = ["api00"]
epsilon = 5.0
m = 2
seed = 1
population_size = 6194
init = {{ method = "{method}", quantiles = [0.1, 0.25, 0.5, 0.75, 0.9], bounds = {{ api00 = [{lo}, 1000] }} }}
[output]
folder = "release"
"""


def test_console_lists_the_report_flags(tmp_path):
    """A release whose report flags a pile-up prints the flag on the console; a clean one
    prints no fidelity flag. Bounds [700, 1000] put about half of api00 below the lower bound, so
    the release piles up there whatever the method."""
    import io
    import warnings
    from contextlib import redirect_stderr

    from surveysynth.datasets import load_api
    from surveysynth.pipeline import run_release

    load_api("apistrat").to_csv(tmp_path / "apistrat.csv", index=False)
    outputs = {}
    for name, lo in (("piled", 700), ("clean", 200)):
        folder = tmp_path / name
        folder.mkdir()
        (folder / "apistrat.csv").symlink_to(tmp_path / "apistrat.csv")
        (folder / "release.toml").write_text(API_CONFIG.format(method="jointexp", lo=lo))
        buf = io.StringIO()
        with redirect_stderr(buf), warnings.catch_warnings():
            warnings.simplefilter("ignore")  # the curator's warnings are not under test here
            run_release(folder / "release.toml")
        outputs[name] = buf.getvalue()
    piled = outputs["piled"]
    assert "the report flags" in piled, piled
    flag_lines = [ln for ln in piled.splitlines() if ln.startswith("  - Fidelity: ")]
    assert any("at the declared lower bound 700" in ln and "pile up" in ln for ln in flag_lines)
    # bounds that hold the data: no fidelity flag on the console (other report flags, such as
    # a section that could not be computed, may still be listed)
    assert "  - Fidelity: " not in outputs["clean"], outputs["clean"]
