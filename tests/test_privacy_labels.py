"""Every guarantee label the package can print, tested: docs/privacy.md is the generator's own
output, non-DP configurations say so in the label itself, and the pseudo posterior text says
what was done (data-dependent alpha and c, empirical maximum over S draws, final fit)."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest

from surveysynth.privacy.record import build_record

ROOT = Path(__file__).resolve().parent.parent


def _labels_module():
    spec = importlib.util.spec_from_file_location("privacy_labels", ROOT / "scripts" / "privacy_labels.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def test_docs_privacy_page_is_the_generators_output():
    mod = _labels_module()
    assert (ROOT / "docs" / "privacy.md").read_text() == mod.render(), (
        "docs/privacy.md is stale: run python scripts/privacy_labels.py")


@pytest.mark.parametrize("title, family, kw", _labels_module().CASES)
def test_each_label_is_exact(title, family, kw):
    rec = build_record(family, "x", seeded=False, **kw)
    facts = kw["facts"]
    not_dp = (family in ("laplace", "identification_risk", "none")
              or facts.get("alpha_source") in ("caller", "none", "unweighted")
              or facts.get("sensitivity") == "paper" or facts.get("nonprivate_start_used")
              or (family == "kng" and facts.get("sampler") != "exact"))
    pdp = family.startswith("pseudo_posterior") and not not_dp
    # a formal guarantee as run is the only differentially_private one: the pseudo posterior's
    # asymptotic, database-local guarantee (MCMC, data-dependent weights) is its own class
    # (kills: a pseudo posterior flagged DP; an unprotected fit labelled with an epsilon)
    assert rec.differentially_private is (not not_dp and not pdp)
    # (kills: a zCDP release of AIM/MST or of DP tables classed as pure DP)
    assert rec.guarantee_class == ("none" if not_dp else
                                   "asymptotic database-local (epsilon, delta)-pDP" if pdp
                                   else "formal zCDP" if facts.get("measure") == "zcdp"
                                   else "formal pure DP")
    assert rec.guarantee.startswith("not differentially private") is not_dp
    if facts.get("alpha_source") in ("none", "unweighted"):
        assert "no privacy protection" in rec.guarantee and rec.epsilon is None
    if family == "pseudo_posterior" and facts["alpha_source"] != "none":
        assert f"S = {facts['draws']}" in rec.guarantee_text
        assert "empirical maximum" in rec.guarantee_text
    if family == "pseudo_posterior" and not not_dp:
        assert "not privatized" in rec.guarantee
        # the public target, never the achieved maximum, unless the record declares it
        assert ("<= 3.4: the public target" in rec.guarantee_text) is (facts["bound"] == "target")
        assert ("published without budget" in rec.guarantee_text) is (facts["bound"] != "target")
        assert "played no part in choosing" in rec.guarantee_text
        assert ("tuned on the confidential" in rec.guarantee_text) is (facts["bound"] == "target")
    if pdp:
        # the account: epsilon is the ledger's total over every release and fit
        assert "total of the budget account" in rec.guarantee_text
    if facts.get("alpha_source", "").startswith("identification"):
        # which risk the weights normalise, with its pattern and radius (kills a text that
        # passes identification weights off as the Lipschitz ones)
        assert "identification risk" in rec.guarantee_text
        assert f"({facts['known']})" in rec.guarantee_text and f"r = {facts['r']}" in rec.guarantee_text
    elif family == "pseudo_posterior_sequential" and not not_dp:
        assert "identification risk" not in rec.guarantee_text
    if not not_dp and facts.get("alpha_source", "").endswith("_tuned"):
        # the alpha = 1 branch (unweighted bound already below the target) is stated as a rule
        # in every tuned text, never as this data's outcome (a bit outside the budget)
        assert "no risk weighting is applied (alpha_i = 1 for every record)" in rec.guarantee_text
    if family == "pseudo_posterior_sequential" and not not_dp:
        # the weights are a step exactly when they were modelled (design weights: no step,
        # released as collected and said so)
        design_w = facts.get("weights_step") == "design"
        assert ("and the log weights" in rec.guarantee_text) is not design_w
        assert ("released as collected, outside this guarantee" in rec.guarantee_text) is design_w
    if family == "laplace":
        assert facts["sampler"] in rec.guarantee_text
    if family == "kng" and facts.get("sampler") == "mcmc" and not_dp and facts.get("sensitivity") == "sound" \
            and not facts.get("nonprivate_start_used"):
        assert "MCMC" in rec.guarantee
    assert "seed" not in rec.facts
