"""Guarantee labels generated from what a mechanism actually did.

One function per mechanism family turns the facts of a run (sensitivity rule, initialisation,
sampler, who chose the risk weights, whether they depend on the confidential data, over how
many draws a bound is an empirical maximum, ...) into a :class:`Guarantee`: a one-line
``label`` for the manifest's ``guarantee`` field, a flag ``differentially_private``, and the
full ``text``. A configuration that is not differentially private says so at the start of the
label itself ("not differentially private: ..."), not only in a note. Nobody types a guarantee
text by hand: :func:`surveysynth.privacy.record.build_record` calls these functions, so the
label is read off the run, as OpenDP reads a guarantee off a measurement.

The texts are printed, one per configuration, in docs/privacy.md (tests/test_privacy_labels.py
checks that page against these functions).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

NOT_DP = "not differentially private"

#: The ``guarantee_class`` of a record: what kind of promise it is, read off the run. Only the
#: "formal" classes set ``differentially_private`` (a formal guarantee as run: exact sampling,
#: data-independent parameters); the pseudo posterior's guarantee is asymptotic and local to the
#: database at hand, with risk weights computed from it (docs/privacy.md, "Guarantee classes").
FORMAL_PURE = "formal pure DP"
FORMAL_APPROX = "formal approximate DP"
FORMAL_ZCDP = "formal zCDP"
ASYMPTOTIC_PDP = "asymptotic database-local (epsilon, delta)-pDP"
NO_GUARANTEE = "none"
GUARANTEE_CLASSES = (FORMAL_PURE, FORMAL_APPROX, FORMAL_ZCDP, ASYMPTOTIC_PDP, NO_GUARANTEE)


@dataclass(frozen=True)
class Guarantee:
    """A guarantee as a manifest states it."""

    label: str
    differentially_private: bool
    text: str


def _fmt(x: Any) -> str:
    return "unknown" if x is None else f"{float(x):.4g}"


#: The rule, not its outcome: which fits took the alpha = 1 branch is a function of the
#: confidential data outside the budget, so the public text states the rule for every tuned
#: release and the outcome stays in the confidential report (c = None there).
_TARGET_MET = ("when the unweighted fit's bound is already below the target, no risk weighting "
               "is applied (alpha_i = 1 for every record), a comparison also made on the "
               "confidential data")


def _account(facts: dict[str, Any], per_draw: str) -> str:
    """The sentence stating epsilon as the total of the budget account."""
    return (f"epsilon = {_fmt(facts.get('epsilon'))} is the total of the budget account (the "
            f"ledger lists each entry): {per_draw} for every distinct posterior draw released, "
            "summed over every release and every fit of this synthesizer (sequential "
            f"composition); this release holds m = {facts.get('m')} synthetic data sets, and a "
            "data set from an already released draw is post-processing")


def _bound(facts: dict[str, Any], symbol: str, what: str) -> str:
    """How the per-draw bound was obtained: the public target (the achieved maximum is at most
    it and is not published) or the achieved maximum itself (rounded up, declared)."""
    S = facts.get("draws")
    emp = (f"an empirical maximum of {what} over the S = {S} posterior draws of "
           + ("its" if symbol.endswith("_j") else "the") + " released fit")
    if facts.get("bound_draws") == "final_fit":
        emp += (" (a final fit whose draws played no part in choosing the tuning constant c, "
                "so the reported bound is not selected downward by the stopping rule)")
    if facts.get("bound") == "target":
        lead = (f"{symbol} <= {_fmt(facts.get('delta_alpha'))}" if symbol == "Delta_alpha" else
                f"{symbol} is at most the public target of its step (the ledger lists each)")
        text = (f"{lead}: the public target. The achieved bound, {emp}, is at most the target "
                "(a fit above it is never released) and is not published (it is computed from "
                "the confidential data)")
    else:
        lead = (f"{symbol} = {_fmt(facts.get('delta_alpha'))}" if symbol == "Delta_alpha" else
                f"{symbol}")
        text = f"{lead} is {emp}"
        if facts.get("bound") == "achieved":
            text += (" (rounded up to 3 significant digits; published without budget: it is "
                     "computed from the confidential data)")
    return text + ("; it is not an analytic supremum over the parameter space, and a fresh set "
                   "of draws gives a somewhat different maximum")


def _unprotected(facts: dict[str, Any], what: str = "an unweighted model") -> Guarantee:
    """Pseudo posterior with every risk weight 1: no privacy protection (no epsilon stated)."""
    label = (f"{NOT_DP}: synthetic data from {what} (every risk weight alpha_i = 1), no "
             "privacy protection")
    if facts.get("no_weighting") == "target_above_unweighted_bound":
        why = ("The target bound was above the unweighted fit's bound, so no risk weighting was "
               "applied (a comparison made on the confidential data; the record lists its "
               "outcome as published without budget)")
    else:
        why = ("The risk weights alpha_i = clip(c (1 - D_i) + g, 0, 1) are 1 for every record "
               "(g >= 1), so no risk weighting was applied")
    text = (f"{label}. {why}: the synthetic data are draws from the unweighted posterior "
            "predictive, what any Bayesian synthesis releases, and no step of the mechanism "
            "limits what they reveal about a record. No epsilon is stated.")
    return Guarantee(label, False, text)


def pseudo_posterior(facts: dict[str, Any]) -> Guarantee:
    """Risk-weighted pseudo posterior (FBS, FBP, PBP, and the mixture/NB with Lipschitz alpha).

    facts: ``alpha_source`` ("lipschitz_tuned", "lipschitz_fixed_c", "caller", or "none":
    every alpha_i = 1, no protection; ``no_weighting`` says why), ``draws`` (S, posterior
    draws the bound is a maximum over), ``bound_draws`` ("final_fit": draws that played no part
    in choosing c, or "same_fit"), ``bound`` ("target": ``delta_alpha`` is the public target
    and the achieved maximum is at most it; "achieved": the achieved maximum, rounded up),
    ``delta_alpha``, ``m``, ``epsilon`` (the account's total). Asymptotic and local to the
    database, with data-dependent weights: never ``differentially_private`` (a formal
    guarantee); its class is :data:`ASYMPTOTIC_PDP`.
    """
    src = facts.get("alpha_source", "lipschitz_tuned")
    if src == "none":
        return _unprotected(facts)
    bound = _bound(facts, "Delta_alpha", "|alpha_i log p(y_i | theta_s)|")
    eps = _account(facts, "2 * Delta_alpha")
    if src == "caller":
        label = (f"{NOT_DP} unless the caller-supplied risk weights are independent of the "
                 "confidential data: pseudo posterior bound measured for the given weights")
        text = (
            f"{label}. The per-record risk weights alpha were supplied by the caller; the package "
            "cannot know whether they were computed from the confidential data. If they were "
            "not, each released draw satisfies (2*Delta_alpha)-differential privacy "
            "asymptotically and locally to this database (Savitsky, Williams & Hu), and "
            f"{eps}. {bound}."
        )
        return Guarantee(label, False, text)
    label = ("asymptotic, database-local (epsilon, delta)-probabilistic differential privacy "
             "of the risk-weighted pseudo posterior, with risk weights computed from the "
             "confidential data (not privatized)")
    how = ("The risk weights alpha_i = clip(c (1 - D_i) + g, 0, 1) are computed from the "
           "confidential data (each record's normalised bound D_i under the unweighted fit)")
    if src == "lipschitz_tuned":
        how += (", and the constant c was tuned on the confidential data to bring the bound to a "
                "target; " + _TARGET_MET)
    how += (". Neither alpha nor c is privatized: the guarantee is for the released draws "
            "given these weights, and a neighbouring database would in general get other "
            "weights, so the loss between neighbours with recomputed weights can exceed the "
            "stated epsilon")
    text = (
        f"{label}. Each draw from the alpha-weighted pseudo posterior satisfies "
        "(2*Delta_alpha)-differential privacy asymptotically (as the sample grows), for the "
        "confidential database at hand (Savitsky, Williams & Hu); this is not a worst-case "
        f"(global) epsilon-DP guarantee. {eps}. {bound}. {how}."
    )
    return Guarantee(label, False, text)


def kng(facts: dict[str, Any]) -> Guarantee:
    """KNG quantile synthesis (seed 004).

    facts: ``sensitivity`` ("sound" or "paper"), ``init`` ("independent" or "nonprivate" and
    whether it acted: ``nonprivate_start_used``), ``sampler`` ("exact", "mcmc" or "mixed"),
    ``n_iter``, ``epsilon``, ``method``.
    """
    eps = _fmt(facts.get("epsilon"))
    # issue 36 (D7): a stratified design's strata synthesized separately
    strata = facts.get("strata")
    parallel = (f" Strata ({strata}): each stratum's quantiles come from its own records with "
                "the whole epsilon; the strata are disjoint and their membership and sizes are "
                "public design information released as collected, so under replace-one "
                "neighbours (a record keeping its stratum) one record's change moves one "
                "stratum's release, and by parallel composition the release is epsilon-DP with "
                "the same epsilon." if strata else "")
    problems = []
    if facts.get("sensitivity") == "paper":
        problems.append("the gradient sensitivity 2(1 - tau)C_X (the paper's) understates the "
                        "true sensitivity for tau > 0.5, so the noise is too small for those "
                        "quantiles")
    if facts.get("nonprivate_start_used"):
        problems.append("the median chains started at the non-private quantile-regression "
                        "estimates, and a finite chain's output depends on its start")
    sampler = facts.get("sampler")
    if problems:
        label = f"{NOT_DP}: " + "; ".join(p.split(",")[0] for p in problems)
        text = (f"{label}. This is the paper's procedure reproduced for comparison: "
                + "; ".join(problems) + f". The nominal budget epsilon = {eps} is not a "
                "guarantee.")
        return Guarantee(label, False, text)
    if facts.get("method") == "jointexp" and sampler == "exact":
        label = (f"pure epsilon-differential privacy, epsilon = {eps} (joint exponential "
                 "mechanism for quantiles, exact sampling)")
        text = (f"{label}. Each variable's quantiles were released jointly by the joint "
                "exponential mechanism (Gillenwater, Joseph & Kulesza 2021; utility sensitivity 2 "
                "under replace-one neighbours) with data-independent public bounds, on a public "
                f"{facts.get('transform', 'log')} scale, drawn exactly onto a public grid inside "
                "the bounds (integer arithmetic: the set of values a release can take does not "
                "depend on the data); a later variable's slope on the previous variable by DP Theil-Sen "
                "(exponential-mechanism median of disjoint-pair slopes). "
                + (f"Scale: {facts['transform_center']}. " if facts.get("transform_center")
                   else "")
                + "Budgets compose sequentially over variables; the synthetic data sets are "
                "post-processing." + parallel)
        return Guarantee(label, True, text)
    if sampler == "exact":
        label = f"pure epsilon-differential privacy, epsilon = {eps} (K-norm gradient mechanism, exact sampling)"
        text = (f"{label}. Every quantile's coefficients were drawn exactly onto a public grid "
                "inside the public bounds (integer arithmetic: the set of values a release can "
                "take does not depend on the data) from the KNG density "
                "(Reimherr & Awan) with the sound sensitivity 2 max(tau, 1 - tau) C_X and "
                "data-independent public bounds; budgets compose sequentially over variables "
                "and quantiles; the synthetic data sets are post-processing of the released "
                "coefficients." + parallel)
        return Guarantee(label, True, text)
    which = "every quantile" if sampler == "mcmc" else "some quantiles"
    label = (f"{NOT_DP} as run: {which} drawn by a finite MCMC chain approximating the pure "
             f"epsilon-DP K-norm gradient mechanism (epsilon = {eps})")
    fix = ("Use sampler='exact' (only intercepts move there) for a proven guarantee."
           if sampler == "mcmc" else
           "The quantiles whose slopes move (medians of later variables, varying slopes) have "
           "no exact sampler; only configurations where every quantile's intercept alone moves "
           "are drawn exactly.")
    text = (f"{label}. Pure epsilon-DP holds only for exact draws from the KNG density; the "
            f"chains ran a fixed {facts.get('n_iter')} iterations per quantile and their output "
            f"is not proven to be such a draw. {fix}")
    return Guarantee(label, False, text)


def laplace(facts: dict[str, Any]) -> Guarantee:
    """Laplace tables. facts: ``sensitivity`` ("local" or "global"), ``sampler``, ``epsilon``."""
    eps = _fmt(facts.get("epsilon"))
    sampler = facts.get("sampler", "unknown sampler")
    if facts.get("sensitivity") == "global":
        label = f"pure epsilon-differential privacy, epsilon = {eps} (Laplace mechanism, global sensitivity from public bounds)"
        text = (f"{label}. Sensitivities come from public bounds on the weights and the value, "
                f"not from the data; noise drawn by {sampler}.")
        return Guarantee(label, True, text)
    label = (f"{NOT_DP}: Laplace noise calibrated to local (data-dependent) sensitivity "
             f"(nominal epsilon = {eps})")
    text = (f"{label}. The sensitivities are computed from the confidential records of each "
            "cell and margin, as in Hu, Savitsky & Williams' baseline; the noise scale itself "
            "depends on the data, so there is no worst-case epsilon-DP guarantee. Noise drawn "
            f"by {sampler}.")
    return Guarantee(label, False, text)


def identification_risk(facts: dict[str, Any]) -> Guarantee:
    """Identification-risk weighted synthesis (seed 002). facts: ``weights``, ``r``."""
    label = (f"{NOT_DP}: likelihood contributions downweighted by identification risk "
             f"({facts.get('weights')} weights)")
    text = (f"{label}. Risk weights computed from the confidential data (Hu, Savitsky & "
            f"Williams; intruder-known variables {facts.get('known')}, ball radius r = "
            f"{facts.get('r')}); disclosure risk is measured in the confidential report, not "
            "bounded.")
    return Guarantee(label, False, text)


def no_protection(facts: dict[str, Any]) -> Guarantee:
    label = f"{NOT_DP}: synthetic data from an unweighted model, no privacy protection"
    return Guarantee(label, False, label + ".")


def pseudo_posterior_sequential(facts: dict[str, Any]) -> Guarantee:
    """Sequential synthesis by risk-weighted pseudo posteriors, one per variable, composed
    (surveysynth.synth.Sequential).

    facts: ``steps`` (number of mechanisms: variables, missing indicators, the weights model),
    ``alpha_source`` ("lipschitz_tuned", "lipschitz_fixed_c", "identification_tuned",
    "identification_fixed_c", "unweighted"; identification adds ``known`` and ``r``), ``draws`` (S of
    each released fit), ``bound_draws`` ("final_fit" or "same_fit"), ``delta_alpha`` (the SUM of
    the per-step bounds), ``m``, ``epsilon``; the per-step bounds are in the record's ledger;
    ``weights_step`` ("modelled", default, or "design": design weights released as collected,
    no step; the record lists them as published without budget); ``random_effects`` ("psu" on
    a clustered design: every step has a PSU random intercept, issue 36 D3/D4).
    """
    src = facts.get("alpha_source", "lipschitz_tuned")
    k = facts.get("steps")
    if src == "unweighted":
        return _unprotected(facts, f"{k} unweighted posteriors composed sequentially")
    label = ("asymptotic, database-local (epsilon, delta)-probabilistic differential privacy "
             f"of {k} risk-weighted pseudo posteriors composed sequentially, with risk weights "
             "computed from the confidential data (not privatized)")
    bound = "Each step's " + _bound(facts, "Delta_alpha_j", "|alpha_i log p_j(y_i | theta_s)|")
    design_w = facts.get("weights_step") == "design"
    steps_are = ("each missing-value indicator and each variable's values" if design_w else
                 "each missing-value indicator, each variable's values, and the log weights")
    text = (
        f"{label}. The synthesized variables ({steps_are}, {k} steps in all) are each released "
        "through draws from "
        "a pseudo posterior whose per-record likelihood is raised to alpha_i; step j models its "
        "variable given the public variables and the confidential values of the variables "
        "before it, and each draw of step j satisfies (2*Delta_alpha_j)-differential privacy "
        "asymptotically (as the sample grows), for the confidential database at hand (Savitsky, "
        "Williams & Hu); this is not a worst-case (global) epsilon-DP guarantee. The steps "
        "compose: a release of m data sets uses m draws of every step, and {acc} (sum_j "
        "Delta_alpha_j {rel} {da}; the ledger lists each step's bound and epsilon). The "
        "synthetic values of a variable are drawn given the synthetic values of the variables "
        "before it (post-processing of the released draws). {bound}.".format(
            acc=_account(facts, "2 * Delta_alpha_j"), da=_fmt(facts.get("delta_alpha")),
            rel="<=" if facts.get("bound") == "target" else "=", bound=bound)
    )
    if design_w:
        text += (" The sampling weights are design weights (one value per cell of the public "
                 "design columns) and are released as collected, outside this guarantee: the "
                 "record lists them as published without budget.")
    if facts.get("random_effects") == "psu":
        text += (" Each step's model has a random intercept per first-stage sampling unit "
                 "(cluster), part of the parameter whose draws are released: the bounds are "
                 "of each record's density given its cluster's effect, and each synthetic set "
                 "draws new cluster effects from the released draw's between-cluster scale "
                 "(post-processing), never the fitted ones.")
    how = (" The risk weights alpha_i = clip(c (1 - D_i), 0, 1) of each step are computed "
           "from the confidential data")
    if src.startswith("identification"):
        how += (", with D_i record i's identification risk for the step's variable (Hu, "
                "Savitsky & Williams): the share of the records of its intruder-known "
                f"pattern ({facts.get('known')}) whose value lies outside [y_i - r|y_i|, "
                f"y_i + r|y_i|], r = {facts.get('r')} (for a discrete variable: whose value "
                "differs), normalised to [0, 1] over the step's records")
    if src.endswith("_tuned"):
        how += (", and each step's c was tuned on the confidential data to bring its bound to "
                "its share of the target; " + _TARGET_MET.replace("the target", "its share "
                                                                   "of the target"))
    how += (". Neither alpha nor c is privatized: the guarantee is for the released draws "
            "given these weights, and a neighbouring database would in general get other "
            "weights, so the loss between neighbours with recomputed weights can exceed the "
            "stated epsilon.")
    text += how
    return Guarantee(label, False, text)


def dp_tables(facts: dict[str, Any]) -> Guarantee:
    """DP survey tables (surveysynth.dp_tables). facts: ``measure`` ("pure" or "zcdp"),
    ``epsilon`` or ``rho`` (the account's total), ``sampler``, ``weight_cap``, ``bound_low`` /
    ``bound_high`` (None for counts), ``groups``, ``consistency``."""
    zcdp = facts.get("measure") == "zcdp"
    what = ("survey tables: noisy random-group cell sums, global sensitivity from a public "
            "weight cap and public value bounds, add/remove-one neighbours")
    if zcdp:
        rho = facts.get("rho")
        label = f"rho-zero-concentrated differential privacy, rho = {_fmt(rho)} ({what})"
        eps6 = (None if rho is None else
                float(rho) + 2 * math.sqrt(float(rho) * math.log(1e6)))
        conv = (f" It implies (epsilon, delta)-DP with epsilon = rho + 2 sqrt(rho log(1/delta)) "
                f"(Bun & Steinke 2016), e.g. epsilon = {_fmt(eps6)} at delta = 1e-6.")
    else:
        label = f"pure epsilon-differential privacy, epsilon = {_fmt(facts.get('epsilon'))} ({what})"
        conv = ""
    bounds = ("" if facts.get("bound_low") is None else
              f" and every value clipped to the public bounds [{_fmt(facts.get('bound_low'))}, "
              f"{_fmt(facts.get('bound_high'))}]")
    text = (f"{label}. Each record's sampling weight is trimmed to the public cap "
            f"{_fmt(facts.get('weight_cap'))}{bounds}; the weights are taken as fixed attributes "
            "of the records (weights recomputed from the whole sample, e.g. by calibration, are "
            f"outside this guarantee). Every primary sampling unit falls in one of "
            f"{facts.get('groups')} random groups, independently of the data; the measured "
            "vectors are the weighted counts and/or totals of every group x cell, each changed "
            "in one coordinate by at most the cap (counts) or the cap times the larger absolute "
            "bound (totals) when a record is added or removed; when the table classifies by the "
            "design's strata, also the number of PSUs in each stratum x group (sensitivity 1), "
            "for the variance. Noise drawn by "
            f"{facts.get('sampler')}; each measurement's budget is OpenDP's privacy map at that "
            "sensitivity, and the measurements compose sequentially (the ledger lists each; the "
            "stated total is their sum, over every table booked in the same account). Margins, "
            "non-negativity, means, proportions, standard errors and intervals are "
            f"post-processing ({facts.get('consistency')}).{conv}")
    return Guarantee(label, True, text)


def marginal_dp(facts: dict[str, Any]) -> Guarantee:
    """AIM / MST (OpenDP's marginal-based synthesis, issue 40). facts: ``algorithm``,
    ``measure`` ("pure": epsilon-DP, or "zcdp": rho-zCDP), ``epsilon`` (the account's total, in
    the measure's unit), ``binned``, ``weight_classes``, ``m``."""
    alg = facts.get("algorithm", "AIM")
    tot = _fmt(facts.get("epsilon"))
    zcdp = facts.get("measure") == "zcdp"
    what = (f"{alg}: marginal-based synthesis, OpenDP measurements on public domains")
    label = (f"rho-zero-concentrated differential privacy, rho = {tot} ({what})" if zcdp else
             f"pure epsilon-differential privacy, epsilon = {tot} ({what})")
    noise = ("discrete Gaussian noise; rho-zCDP implies (rho + 2 sqrt(rho log(1/delta)), "
             "delta)-DP for every delta > 0" if zcdp else "Laplace noise")
    wc = facts.get("weight_classes") or 0
    weights = (f"The survey weights are carried as a weight class on {wc} public classes, "
               "synthesized with the other variables; a synthetic record's weight is its "
               "class's midpoint, scaled to the public population size. " if wc else
               "The released weights are all equal (N / n). ")
    text = (f"{label}. Under replace-one neighbours (OpenDP's symmetric distance 2), OpenDP's "
            f"{alg} measures one-way marginals of every variable and then the marginals the "
            f"algorithm selects by the exponential mechanism (noisy max), with {noise} on "
            "integer counts, from OpenDP's samplers (operating-system entropy, never seeded); "
            "the budget is split and composed by OpenDP's adaptive composition, whose measured "
            "loss is at most the budget. Every variable is categorical on a public domain: "
            "categories given as public inputs (or design strata labels) and continuous "
            f"variables on public bin edges (binned: {facts.get('binned', 'none')}); nothing "
            "about the domain is read off the data. The graphical-model fit (Private-PGM), "
            "the synthetic records and their values within bins are post-processing. "
            f"{weights}The total is the budget account over every fit of this synthesizer "
            f"(sequential composition); this release holds m = {facts.get('m')} synthetic data "
            "sets, all post-processing of one fit. The number of records is public under "
            "replace-one neighbours.")
    return Guarantee(label, True, text)


def classify(family: str, facts: dict[str, Any], g: Guarantee) -> str:
    """The record's ``guarantee_class`` (one of :data:`GUARANTEE_CLASSES`), from the family,
    the facts and the generated guarantee: formal pure DP only where the generator says the
    run is differentially private (KNG / JointExp exact, Laplace with global sensitivity); the
    pseudo posterior's asymptotic, database-local class where it states an epsilon for its own
    weights; "none" for everything whose label says it is not differentially private."""
    if g.differentially_private:
        if family in ("kng", "laplace"):
            return FORMAL_PURE
        if family in ("dp_tables", "marginal_dp"):
            return FORMAL_ZCDP if facts.get("measure") == "zcdp" else FORMAL_PURE
        raise AssertionError(f"family {family!r} claims a formal guarantee the classifier does "
                             "not know; add its class to guarantees.classify")
    if family in ("pseudo_posterior", "pseudo_posterior_sequential") and not g.label.startswith(NOT_DP):
        return ASYMPTOTIC_PDP
    return NO_GUARANTEE


FAMILIES = {
    "pseudo_posterior": pseudo_posterior,
    "kng": kng,
    "laplace": laplace,
    "identification_risk": identification_risk,
    "none": no_protection,
    "pseudo_posterior_sequential": pseudo_posterior_sequential,
    "dp_tables": dp_tables,
    "marginal_dp": marginal_dp,
}
