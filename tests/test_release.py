"""SyntheticRelease: combining per design, privacy record checks, save/load round trip."""

from __future__ import annotations

import json

import numpy as np
import pandas as pd
import pytest

from surveysynth import SurveyDesign
from surveysynth.combine import NOTE_FALLBACK
from surveysynth.privacy.record import build_record
from surveysynth.release import SyntheticRelease, load_release


@pytest.fixture(scope="module")
def apistrat() -> pd.DataFrame:
    import rpy2  # noqa: F401  (installed by make test: must import)

    from surveysynth.datasets import load_api

    return load_api("apistrat")


def _privacy(m: int, family: str = "none", **kw):
    return build_record(family, "test copy", m=m, epsilon=kw.pop("epsilon", None),
                        seeded=True, notes=["test"], **kw)


def _design(frame: pd.DataFrame) -> SurveyDesign:
    return SurveyDesign(frame, strata="stype", weights="pw", fpc="fpc")


def test_copies_of_one_design_give_its_estimates(apistrat):
    d = _design(apistrat)
    rel = SyntheticRelease([d] * 4, "partial", _privacy(4))
    for method, args in (("mean", ("api00",)), ("total", ("enroll",)),
                         ("ratio", ("api00", "api99")), ("proportion", ("sch.wide",))):
        ref = getattr(d, method)(*args, by="stype")
        got = getattr(rel, method)(*args, by="stype")
        np.testing.assert_allclose(got.estimate, ref.estimate, rtol=1e-13)
        np.testing.assert_allclose(got.se, ref.se, rtol=1e-13)
        assert (got["between"] == 0).all()
        assert (got["stype"].astype(str).to_numpy() == ref["stype"].astype(str).to_numpy()).all()
    # b = 0: the partial rule's df are infinite, capped by the design df (n - H = 197; issue
    # 36, D8: nu_obs = nu_com (nu_com + 1)/(nu_com + 3), gamma = 0)
    assert rel.mean("api00")["df"].to_numpy() == pytest.approx(197 * 198 / 200, rel=1e-12)


def test_perturbed_copies_reproduce_hand_tp(apistrat):
    rng = np.random.default_rng(11)
    m = 3
    frames = [apistrat.assign(api00=apistrat["api00"] + rng.normal(0, 25, len(apistrat)))
              for _ in range(m)]
    designs = [_design(f) for f in frames]
    rel = SyntheticRelease(designs, "partial", _privacy(m))
    got = rel.mean("api00", by="stype")
    per = [d.mean("api00", by="stype") for d in designs]
    for j in range(3):
        q = [p.estimate[j] for p in per]
        u = [p.se[j] ** 2 for p in per]
        qbar = sum(q) / m
        b = sum((x - qbar) ** 2 for x in q) / (m - 1)
        tp = sum(u) / m + b / m
        assert got.estimate[j] == pytest.approx(qbar, rel=1e-13)
        assert got["variance"][j] == pytest.approx(tp, rel=1e-12)
        assert got["between"][j] == pytest.approx(b, rel=1e-12)
        # the rule's df capped by the domain's design df (issue 36, D8)
        nu = min(p.df[j] for p in per)
        nu_obs = nu * (nu + 1) / (nu + 3) * (1 - (b / m) / tp)
        df = (m - 1) * (1 + (sum(u) / m) / (b / m)) ** 2
        assert got["df"][j] == pytest.approx(1 / (1 / df + 1 / nu_obs), rel=1e-12)


def test_full_release_uses_n_original_in_fallback(apistrat):
    d = _design(apistrat)
    rel = SyntheticRelease([d, d], "full", _privacy(2), n_original=400)
    out = rel.mean("api00")
    ref = d.mean("api00")
    assert out.note[0] == NOTE_FALLBACK  # b = 0 -> T_f = -ubar < T_s
    r = 200 / 400  # T_s = ubar (n_syn/n + (1 + n_syn/n)/m), m = 2
    assert out["variance"][0] == pytest.approx((r + (1 + r) / 2) * ref.se[0] ** 2, rel=1e-12)
    rel2 = SyntheticRelease([d, d], "full", _privacy(2))
    out2 = rel2.mean("api00")
    assert "n taken as n_syn" in out2.note[0]
    assert out2["variance"][0] == pytest.approx(2 * ref.se[0] ** 2, rel=1e-12)


def test_empty_domain_counts_zero_and_means_nan(apistrat):
    d = SurveyDesign(apistrat, strata="stype", weights="pw")
    # second set has no high schools: its domain counts are zero and counts still add up
    no_h = apistrat.assign(stype=apistrat["stype"].where(apistrat["stype"] != "H", "M"))
    d2 = SurveyDesign(no_h, strata="stype", weights="pw")
    rel = SyntheticRelease([d, d2], "partial", _privacy(2))
    tot = rel.total("pw", by="stype")
    h = tot[tot.stype == "H"].iloc[0]
    assert h.estimate == pytest.approx(d.total("pw", by="stype").estimate[1] / 2, rel=1e-12)
    assert "empty in 1 of 2" in h.note
    assert tot.estimate.sum() == pytest.approx(rel.total("pw").estimate[0], rel=1e-12)
    mh = rel.mean("api00", by="stype")
    assert np.isnan(mh[mh.stype == "H"].estimate.iloc[0])


def test_save_load_round_trip(tmp_path, apistrat):
    rng = np.random.default_rng(5)
    small = apistrat[["stype", "sch.wide", "api00", "enroll", "pw", "fpc"]]
    frames = [small.assign(api00=small["api00"] + rng.normal(0, 10, len(small)))
              for _ in range(2)]
    before = frames[0].copy()
    d1 = _design(frames[0])
    d2 = SurveyDesign(frames[1].drop(columns=["pw"]), strata="stype",
                      weights=frames[1]["pw"].to_numpy(), fpc="fpc")  # array weights
    d1b = SurveyDesign(frames[1].drop(columns=["pw"]).assign(pw=1.0), weights="pw")
    with pytest.raises(ValueError, match="same columns"):
        SyntheticRelease([d1, d1b], "partial", _privacy(2))
    d1 = SurveyDesign(frames[0].drop(columns=["pw"]), strata="stype",
                      weights=frames[0]["pw"].to_numpy(), fpc="fpc")
    rel = SyntheticRelease([d1, d2], "partial",
                           _privacy(2, family="pseudo_posterior", epsilon=np.float64(3.5),
                                    delta_alpha=1.75, facts={"draws": 4000},
                                    ledger=[{"step": "fit", "epsilon": np.float64(3.5)}]),
                           n_original=200)
    out = rel.save(tmp_path / "rel", confidential={"seed": 9})
    assert sorted(p.name for p in out.iterdir()) == ["confidential", "public"]
    files = sorted(p.name for p in (out / "public").iterdir())
    assert files == ["manifest.json", "synthetic_1.parquet", "synthetic_2.parquet"]
    man = json.loads((out / "public" / "manifest.json").read_text())
    assert man["privacy"]["guarantee_text"] == rel.guarantee
    assert man["privacy"]["epsilon"] == 3.5 and '"seed"' not in json.dumps(man)
    assert json.loads((out / "confidential" / "confidential.json").read_text())["seed"] == 9
    assert [e["item"] for e in man["privacy"]["published_without_budget"]] == [
        "confidential sample size n = 200"]
    assert man["n_original"] == 200 and man["kind"] == "partial" and man["m"] == 2
    assert man["columns"] == list(d1.data.columns)
    back = load_release(out)
    assert back.m == 2 and back.kind == "partial" and back.epsilon == 3.5
    assert back.n_original == 200
    assert back.privacy == rel.privacy
    assert isinstance(back.designs[0].data["stype"].dtype, pd.CategoricalDtype)
    a = rel.mean("api00", by=["stype", "sch.wide"])
    b = back.mean("api00", by=["stype", "sch.wide"])
    pd.testing.assert_frame_equal(a, b)
    np.testing.assert_array_equal(back.designs[1].weights, d2.weights)
    pd.testing.assert_frame_equal(frames[0], before)  # caller's data untouched
    with pytest.raises(ValueError, match="not empty"):
        rel.save(out)
    with pytest.raises(ValueError, match="not empty"):
        rel.save_public(out / "public")
    assert "epsilon=3.5" in repr(rel)


def test_privacy_record_is_checked(apistrat):
    d = _design(apistrat)
    with pytest.raises(ValueError, match="PrivacyRecord"):
        SyntheticRelease([d], "partial", "pseudo_posterior")
    with pytest.raises(ValueError, match="missing key"):
        SyntheticRelease([d], "partial", {"mechanism": "x"})
    with pytest.raises(ValueError, match="family"):
        _privacy(1, family="strong")
    with pytest.raises(ValueError, match="release holds 1"):
        SyntheticRelease([d], "partial", _privacy(2))
    with pytest.raises(ValueError, match="per-record"):
        _privacy(1, ledger=[{"alpha": np.ones(200)}])
    with pytest.raises(ValueError, match="never go into the public record"):
        _privacy(1, facts={"seed": 3})
    with pytest.raises(ValueError, match="unknown key"):
        SyntheticRelease([d], "partial", {**_privacy(1).to_dict(), "alpha": [0.5] * 200})
    with pytest.raises(ValueError, match="kind"):
        SyntheticRelease([d], "synthetic", _privacy(1))
    with pytest.raises(ValueError, match="not survey designs"):
        SyntheticRelease([apistrat], "partial", _privacy(1))
    rel = SyntheticRelease([d], "partial", _privacy(1))
    assert rel.mean("api00").note[0].startswith("m = 1")
    assert rel.privacy.guarantee.startswith("not differentially private")
