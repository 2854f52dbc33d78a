"""Attack-based evidence (surveysynth.privacy.attacks): every measure against a small case
computed by hand, and the wrong versions a review would worry about kept as mutants that the
same expectations reject."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from surveysynth.privacy import attacks as A

CAT = A.RecordColumns(("y",), ("k",))


def frame(rows):
    return pd.DataFrame(rows, columns=["k", "y"])


# ---------------------------------------------------------------------------- DCR
def test_closest_distance_by_hand():
    q = frame([("a", 100.0), ("a", 200.0), ("b", 50.0)])
    c = frame([("a", 101.0), ("a", 150.0), ("c", 50.0)])
    d = A.closest_distance(q, c, CAT, "candidate")
    # (a,100): min(1/101, 50/150); (a,200): min(99/101, 50/150); (b,50): no b among candidates
    np.testing.assert_allclose(d[:2], [1 / 101, 50 / 150], rtol=1e-15)
    assert d[2] == np.inf
    # relative to the query's value instead: 1/100 and 50/200
    np.testing.assert_allclose(A.closest_distance(q, c, CAT, "query")[:2], [1 / 100, 50 / 200])


def test_closest_distance_zero_missing_and_several_numeric():
    cols = A.RecordColumns(("y", "z"), ("k",))
    q = pd.DataFrame({"k": ["a", "a", "a"], "y": [0.0, 0.0, np.nan], "z": [10.0, 10.0, 5.0]})
    c = pd.DataFrame({"k": ["a", "a"], "y": [0.0, 1.0], "z": [11.0, 10.0]})
    d = A.closest_distance(q.iloc[[0]], c, cols)
    assert d[0] == pytest.approx(1 / 11)  # y equal zeros (0), z 1/11: the L-infinity over y, z
    assert A.closest_distance(q.iloc[[2]], c, cols)[0] == np.inf  # missing vs a value
    c2 = pd.DataFrame({"k": ["a"], "y": [np.nan], "z": [5.0]})
    assert A.closest_distance(q.iloc[[2]], c2, cols)[0] == 0.0  # missing vs missing: equal


def test_dcr_summary_is_against_the_records_not_the_synthetic_data():
    """Mutant: the DCR of a synthetic record computed among the synthetic records themselves
    (a set with duplicates then looks like a copy of the data)."""
    records = frame([("a", 100.0), ("a", 300.0)])
    synthetic = [frame([("a", 500.0), ("a", 500.0), ("a", 500.0), ("a", 101.0)])]
    s = A.dcr_summary(synthetic, records, CAT, tol=0.01)
    # 500 -> 300: 2/3 (three times); 101 -> 100: 0.01 (a match: within 1%, inclusive)
    assert s["match_share"] == pytest.approx(0.25)
    assert s["median"] == pytest.approx(2 / 3)

    def mutant(sets, recs, cols, tol):  # DCR against the synthetic set itself (leave-one-out)
        syn = pd.concat(sets, ignore_index=True)
        d = [A.closest_distance(syn.iloc[[i]], syn.drop(index=i), cols)[0]
             for i in range(len(syn))]
        return float(np.mean(np.asarray(d) <= tol))

    assert mutant(synthetic, records, CAT, 0.01) != pytest.approx(s["match_share"])


# ---------------------------------------------------------------------------- membership
def test_auc_by_hand_and_its_direction():
    # lower score = member; pairs (member, nonmember): (.1,.3) (.1,.2) (.2,.3) won, (.2,.2) tie
    assert A.auc([0.1, 0.2], [0.3, 0.2]) == pytest.approx(3.5 / 4)
    inverted = 1 - A.auc([0.1, 0.2], [0.3, 0.2])  # mutant: "higher score = member"
    assert inverted == pytest.approx(0.5 / 4)
    assert A.auc([1.0, 1.0], [1.0]) == 0.5


def test_clopper_pearson_closed_forms():
    a = 0.0125
    lo, hi = A.clopper_pearson(20, 20, a)
    assert lo == pytest.approx(a ** (1 / 20)) and hi == 1.0
    lo, hi = A.clopper_pearson(0, 20, a)
    assert lo == 0.0 and hi == pytest.approx(1 - a ** (1 / 20))


def test_epsilon_lower_bound_uses_the_intervals_not_the_point_estimates():
    """A perfect attack on 5 + 5 records proves nothing at 95% (the point estimates would say
    epsilon = inf); on 100 + 100 records it proves log(a^(1/100) / (1 - a^(1/100))), a =
    0.05 / 4 (the four one-sided bounds)."""
    assert A.epsilon_lower_bound(5, 5, 0, 5, 0.05) == 0.0
    a = 0.05 / 4
    r = a ** (1 / 100)
    assert A.epsilon_lower_bound(100, 100, 0, 100, 0.05) == pytest.approx(np.log(r / (1 - r)))
    # no signal: TPR = FPR gives no bound
    assert A.epsilon_lower_bound(50, 100, 50, 100, 0.05) == 0.0


def test_membership_inference_bonferroni_over_thresholds():
    members, nonmembers = np.zeros(50), np.ones(50)
    mia = A.membership_inference(members, nonmembers)
    assert mia.auc == 1.0
    # pooled quantiles give two thresholds (0 and 0.5): each bound at 0.05 / 2 / 4
    assert list(mia.thresholds["threshold"]) == [0.0, 0.5]
    r = (0.05 / 2 / 4) ** (1 / 50)
    assert mia.epsilon_lower == pytest.approx(np.log(r / (1 - r)))
    assert mia.tpr == 1.0 and mia.fpr == 0.0
    # members FARTHER than the nonmembers: the attack "close = member" fails, no bound
    rev = A.membership_inference(nonmembers, members)
    assert rev.auc == 0.0 and rev.epsilon_lower == 0.0


# ---------------------------------------------------------------------------- anonymeter
def test_wilson_and_residual_risk_match_anonymeter():
    """Numbers from anonymeter 1.1.0 itself (stats.confidence, run in a separate environment:
    it pins numpy < 1.27): success_rate(100, 20, 0.95); EvaluationResults(n_attacks=500,
    n_success=30, n_baseline=5, n_control=10).risk(); the same without a control (200, 12)."""
    assert A.wilson_rate(20, 100) == pytest.approx((0.2110980494620957, 0.07773111613106319),
                                                   rel=1e-12)
    r = A.AttackRisk("x", 500, 30, 5, 10)
    assert r.rate() == pytest.approx((0.06335470980308298, 0.02100635332213679), rel=1e-12)
    assert r.rate("control") == pytest.approx((0.023659683421545074, 0.012760499825334266),
                                              rel=1e-12)
    assert r.risk == pytest.approx(0.040656957115780615, rel=1e-12)
    assert r.ci == pytest.approx((0.015754694174576124, 0.06555922005698511), rel=1e-12)
    r = A.AttackRisk("x", 200, 12, 1, None)
    assert r.risk == pytest.approx(0.06829194360599729, rel=1e-12)
    assert r.ci == pytest.approx((0.034652194254331865, 0.10193169295766272), rel=1e-12)


def test_inference_hit_rule():
    """anonymeter's rule |guess - secret| / guess <= 0.05 (anonymeter: [T, T, F, T, T] for
    these), except that a negative guess is divided by its absolute value here (anonymeter
    counts -10 for -9 as right: a negative ratio is <= 0.05)."""
    g = np.array([100.0, 104.0, 94.0, -10.0, 0.0])
    s = np.array([100.0, 100.0, 100.0, -9.0, 0.0])
    assert A.inference_hits(g, s, True, 0.05).tolist() == [True, True, False, False, True]


def test_singling_out_counts_on_the_training_and_control_records():
    syn = [pd.DataFrame({"k": ["a", "b", "c", "d"]})]
    train = pd.DataFrame({"k": ["a", "b", "c", "c"]})
    control = pd.DataFrame({"k": ["a", "a", "d", "e"]})
    cols = A.RecordColumns((), ("k",))
    r = A.singling_out(train, syn, control, cols, n_attacks=4, n_cols=1,
                       rng=np.random.default_rng(0))
    # the 4 queries k == a, b, c, d single out one synthetic record each; in train a and b
    # single out (c twice, d never), in control only d
    assert (r.n_attacks, r.n_success, r.n_control) == (4, 2, 1)


def test_linkability_and_inference_deterministic_cases():
    syn = [pd.DataFrame({"x": [0.0, 10.0, 20.0], "y": [0.0, 100.0, 200.0], "k": list("abc")})]
    train = syn[0].copy()
    control = pd.DataFrame({"x": [0.0, 10.0, 20.0], "y": [200.0, 0.0, 100.0], "k": list("cab")})
    aux = (A.RecordColumns(("x",), ()), A.RecordColumns(("y",), ()))
    lk = A.linkability(train, syn, control, aux, n_attacks=3, rng=np.random.default_rng(1))
    assert (lk.n_success, lk.n_control) == (3, 0)
    inf = A.inference(train, syn, control, A.RecordColumns(("x",), ()), "k", regression=False,
                      n_attacks=3, rng=np.random.default_rng(1))
    assert (inf.n_success, inf.n_control) == (3, 0)


# ---------------------------------------------------------------------------- synthpop
def synthpop_case():
    orig = pd.DataFrame({"key": ["a", "a", "b", "c", "e"], "t": ["x", "y", "x", "y", "x"]})
    syn = pd.DataFrame({"key": ["a", "b", "b", "c", "d", "d"], "t": ["x", "x", "x", "x", "y", "y"]})
    return orig, syn


def test_synthpop_measures_by_hand():
    orig, syn = synthpop_case()
    r = A.synthpop_disclosure(orig, [syn], ["key"], "t").iloc[0]
    # N_d = 5, N_s = 6; d_.q: a 2, b 1, c 1, e 1; s_.q: a 1, b 2, c 1, d 2
    expected = {
        "UiO": 60.0,            # b, c, e unique in the original
        "UiS": 100 * 2 / 6,     # a, c unique in the synthetic data
        "UiOiS": 40.0,          # b, c unique in the original and present in the synthetic
        "repU": 20.0,           # c unique in both
        "Dorig": 60.0,          # (b,x), (c,y), (e,x): one target level per key
        "Dsyn": 100.0,          # every synthetic key has one level
        "iS": 80.0,             # a, a, b, c have their key in the synthetic data
        "DiS": 80.0,
        "DiSCO": 40.0,          # (a,x) and (b,x) are right; c's synthetic x is wrong
        "DiSDiO": 20.0,         # (b,x) also disclosive in the original
        "baseCAPd": 52.0,       # 0.6^2 + 0.4^2
        "CAPd": 80.0,
        "DCAP": 40.0,
        "TCAP": 50.0,           # 2 of the 4 records whose key is in the synthetic data
    }
    for k, v in expected.items():
        assert r[k] == pytest.approx(v), k


def test_synthpop_mutants_are_caught():
    """TCAP with the synthetic records' targets in place of the original's, and repU over the
    synthetic record count, give other numbers on the hand case."""
    orig, syn = synthpop_case()
    r = A.synthpop_disclosure(orig, [syn], ["key"], "t").iloc[0]
    # mutant TCAP: count synthetic records disclosive in the synthetic data with keys in the
    # original (a: 1, b: 2, c: 1) over the 4 original records with keys in the synthetic
    tcap_mutant = 100 * (1 + 2 + 1) / 4
    assert tcap_mutant != pytest.approx(r["TCAP"])
    assert 100 * 1 / len(syn) != pytest.approx(r["repU"])  # repU / N_s
    # the averages over several sets are the mean of each set's measures
    two = A.synthpop_disclosure(orig, [syn, orig], ["key"], "t")
    assert two["DiSCO"].tolist() == pytest.approx([40.0, 60.0])


def test_group_numeric_cuts_at_reference_quantiles():
    ref = pd.Series(np.arange(1.0, 101.0))
    g = A.group_numeric(pd.Series([1.0, 50.0, 51.0, 100.0, np.nan]), ref, 2)
    assert g.tolist() == ["0", "0", "1", "1", A.MISSING]


# ---------------------------------------------------------------------------- the table
def population(n, rng):
    f = rng.integers(1, 4, n)
    return pd.DataFrame({"field": f, "gender": rng.choice(["m", "f"], n),
                         "salary": np.exp(10 + 0.2 * f + rng.normal(0, 0.5, n))})


def test_attack_table_tells_a_copy_from_a_fresh_sample():
    rng = np.random.default_rng(3)
    train, hold = population(300, rng), population(300, rng)
    before = train.copy()
    copies = [train.sample(frac=1, random_state=i).reset_index(drop=True) for i in range(2)]
    fresh = [population(300, rng) for _ in range(2)]
    cols = A.RecordColumns(("salary",), ("field", "gender"))
    ev = A.attack_table(train, {"release": copies, "unweighted synthesis": fresh}, cols,
                        holdout=hold, stated_epsilon={"release": 5.0,
                                                      "unweighted synthesis": None},
                        n_attacks=100, rng=np.random.default_rng(4))
    pd.testing.assert_frame_equal(train, before)  # the caller's data are not changed
    v = ev.values
    assert list(v.columns) == ["release", "unweighted synthesis", "holdout"]
    assert v.at["match_share", "release"] == 1.0 and v.at["dcr_median", "release"] == 0.0
    assert v.at["match_share", "holdout"] < 0.9
    assert v.at["mia_auc", "release"] == 1.0 and v.at["mia_epsilon", "release"] > 3
    assert abs(v.at["mia_auc", "unweighted synthesis"] - 0.5) < 0.1
    assert ev.mia["unweighted synthesis"].epsilon_lower < ev.mia["release"].epsilon_lower
    assert any("membership attack" in f for f in ev.flags)
    assert any("match share" in f for f in ev.flags)
    shown = ev.display().set_index("measure")
    assert shown.loc[ev.labels["stated_epsilon"], "unweighted synthesis"] == "none (no protection)"
    assert shown.loc[ev.labels["mia_auc"], "holdout"].startswith("n/a")
    assert "membership AUC 1.000" in ev.verdict() and "stated 5" in ev.verdict()


def test_attack_table_errors_name_the_column():
    cols = A.RecordColumns(("salary",), ("field",))
    train = pd.DataFrame({"field": [1, 2], "salary": [1.0, 2.0]})
    with pytest.raises(ValueError, match="holdout: columns \\['salary'\\]"):
        A.attack_table(train, {"release": [train]}, cols, holdout=train[["field"]])
