"""SDR-like population and samples (METHODS section 10, seed 001 Section 3.1)."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from surveysynth.datasets import sdr_population, sdr_sample
from surveysynth.datasets.sdr import SDR_COUNTS, SDR_MEANS

COUNTS = {  # METHODS section 10, typed in again independently of the module's table
    "male": [14599, 1951, 2918, 12381, 3861, 6433, 14358, 2033],
    "female": [13364, 783, 1117, 5728, 7336, 6409, 3773, 2956],
}
MEANS = {
    "male": [121125, 146916, 118338, 122601, 120531, 122676, 136370, 137349],
    "female": [99226, 125358, 105081, 100618, 98060, 97595, 116566, 106388],
}


@pytest.fixture(scope="module")
def pop():
    return sdr_population(seed=20211025)


def test_cell_counts_exact(pop):
    assert len(pop) == 100_000
    assert list(pop.columns) == ["field", "gender", "salary", "size"]
    tab = pop.groupby(["gender", "field"]).size()
    for g, counts in COUNTS.items():
        assert tab.loc[g].tolist() == counts
    assert set(pop["gender"]) == {"male", "female"}


def test_cell_means_within_one_percent(pop):
    m = pop.groupby(["gender", "field"])["salary"].mean()
    for g, means in MEANS.items():
        np.testing.assert_allclose(m.loc[g].to_numpy(), means, rtol=0.01)
    # the population mean of seed 001 Table 4 ("All fields", Pop.) is 116270
    assert pop["salary"].mean() == pytest.approx(116270, rel=0.01)


def test_distribution_and_size_informative(pop):
    # log salary within cells has sd ~ 0.4; log size - log salary ~ N(0, 0.4^2)
    ls = np.log(pop["salary"])
    sd_within = ls.groupby([pop["gender"], pop["field"]]).std()
    assert np.all(np.abs(sd_within - 0.4) < 0.05)
    e = np.log(pop["size"]) - ls
    assert abs(e.mean()) < 0.01 and abs(e.std() - 0.4) < 0.01
    from surveysynth.sampling import inclusion_probabilities, proportional_allocation

    alloc = proportional_allocation(pop["field"], 1000)
    pik = inclusion_probabilities(pop["size"], alloc, strata=pop["field"])
    r = np.corrcoef(pop["salary"], 1 / pik)[0, 1]
    assert -0.62 < r < -0.52  # METHODS: about -0.57


def test_seed_and_without_exact_means():
    a = sdr_population(seed=1)
    b = sdr_population(seed=1)
    pd.testing.assert_frame_equal(a, b)
    c = sdr_population(seed=2)
    assert not np.allclose(a["salary"], c["salary"])
    raw = sdr_population(seed=1, exact_means=False)
    m = raw.groupby(["gender", "field"])["salary"].mean()
    # without rescaling the cell means are still near the targets (sampling error only)
    np.testing.assert_allclose(m.loc["male"].to_numpy(), MEANS["male"], rtol=0.06)
    assert SDR_COUNTS.loc["male"].tolist() == COUNTS["male"]
    assert SDR_MEANS.loc["female"].tolist() == MEANS["female"]


def test_sample_design(pop):
    before = pop.copy()
    d = sdr_sample(pop, n=1000, seed=3)
    pd.testing.assert_frame_equal(pop, before)  # caller's DataFrame not mutated
    data = d.data
    assert len(data) == 1000
    assert data.groupby("field").size().tolist() == [280, 27, 40, 181, 112, 129, 181, 50]
    assert d.strata_vars == ["field"]
    np.testing.assert_allclose(d.weights, data["weight"].to_numpy())
    # HT estimate of N is near 100,000 and weights are negatively related to salary
    assert abs(d.weights.sum() - 100_000) < 6000
    assert np.corrcoef(data["salary"], data["weight"])[0, 1] < -0.3
    total = d.total("weight")  # a design estimator runs on it
    assert np.isfinite(total["se"]).all()
    d2 = sdr_sample(pop, n=1000, seed=3)
    pd.testing.assert_frame_equal(d2.data, data)


def test_sample_unbiased_for_cell_counts(pop):
    # HT cell-count estimates average to the population counts over repeated samples
    R = 60
    rng = np.random.default_rng(9)
    est = []
    for _ in range(R):
        s = sdr_sample(pop, n=1000, seed=rng, return_data=True)
        est.append(s.groupby(["gender", "field"])["weight"].sum())
    est = pd.concat(est, axis=1).fillna(0)
    mean = est.mean(axis=1)
    se = est.std(axis=1) / np.sqrt(R)
    truth = pop.groupby(["gender", "field"]).size().reindex(mean.index)
    z = (mean - truth) / se
    assert np.abs(z).max() < 4.0


def test_sample_errors():
    with pytest.raises(ValueError, match="lacks columns"):
        sdr_sample(pd.DataFrame({"field": [1]}), n=1)


# ------------------------------------------------------------------------------ monte_carlo


def test_monte_carlo_closed_form():
    from surveysynth.simulate import monte_carlo

    mu, sigma, n = 3.0, 2.0, 25

    def sample(rng):
        return rng.normal(mu, sigma, size=n)

    def analyze(x, rng):
        se = sigma / np.sqrt(n)  # known-variance z interval: exact 95% coverage
        m = x.mean()
        return pd.DataFrame({"estimate": [m], "se": [se], "ci_low": [m - 1.959964 * se],
                             "ci_high": [m + 1.959964 * se]}, index=["mean"])

    res = monte_carlo(sample, analyze, {"mean": mu}, reps=800, seed=4, progress=False)
    row = res.summary.loc[("mean", "estimate")]
    assert abs(row["coverage"] - 0.95) < 4 * np.sqrt(0.95 * 0.05 / 800)
    assert row["avg_ci_length"] == pytest.approx(2 * 1.959964 * sigma / np.sqrt(n))
    assert row["rmse"] == pytest.approx(sigma / np.sqrt(n), rel=0.1)
    assert row["reps"] == 800
    again = monte_carlo(sample, analyze, {"mean": mu}, reps=800, seed=4, progress=False)
    pd.testing.assert_frame_equal(res.summary, again.summary)
    with pytest.raises(ValueError, match="not in truth"):
        monte_carlo(sample, analyze, {"other": 1.0}, reps=2, seed=1, progress=False)


def test_monte_carlo_resumes_after_an_interruption(tmp_path):
    """A study killed at replicate 5 and resumed from its store equals an uninterrupted run,
    and the resumed run does not redo the stored replicates."""
    from surveysynth.simulate import monte_carlo

    calls = []

    def sample(rng):
        return rng.normal(0.0, 1.0, size=10)

    def analyze(x, rng, fail_at=None):
        calls.append(len(calls))
        if fail_at is not None and len(calls) == fail_at:
            raise KeyboardInterrupt
        m = x.mean() + rng.normal(0, 0.01)
        return pd.DataFrame({"estimate": [m], "se": [0.3], "ci_low": [m - 0.6],
                             "ci_high": [m + 0.6]}, index=["mean"])

    full = monte_carlo(sample, analyze, {"mean": 0.0}, reps=12, seed=9, progress=False)
    store = tmp_path / "mc"
    calls.clear()
    with pytest.raises(KeyboardInterrupt):
        monte_carlo(sample, lambda x, r: analyze(x, r, fail_at=6), {"mean": 0.0}, reps=12,
                    seed=9, progress=False, store=store)
    assert len(list(store.glob("rep_*.parquet"))) == 5 and not list(store.glob("*.partial"))
    calls.clear()
    resumed = monte_carlo(sample, analyze, {"mean": 0.0}, reps=12, seed=9, progress=False,
                          store=store)
    assert len(calls) == 7  # only the 7 replicates not stored were run
    pd.testing.assert_frame_equal(resumed.replicates, full.replicates)
    pd.testing.assert_frame_equal(resumed.summary, full.summary)


def test_monte_carlo_sdr_ht_counts(pop):
    """Horvitz-Thompson cell counts over repeated SDR samples cover about 95%."""
    from surveysynth.simulate import monte_carlo

    truth = pop.groupby(["field", "gender"]).size().astype(float)
    truth.index = [f"{f}/{g}" for f, g in truth.index]

    def analyze(d, rng):
        data = d.data.assign(one=1.0)
        from surveysynth.design import SurveyDesign

        dd = SurveyDesign(data, strata="field", weights="weight")
        t = dd.total("one", by=["field", "gender"])
        t.index = [f"{f}/{g}" for f, g in zip(t["field"], t["gender"], strict=True)]
        return t

    res = monte_carlo(lambda rng: sdr_sample(pop, n=1000, seed=rng), analyze, truth, reps=40,
                      seed=5, progress=False)
    cov = res.summary["coverage"]
    assert len(cov) == 16 and cov.notna().all()
    assert 0.85 < cov.mean() < 1.0
