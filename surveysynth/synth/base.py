"""One synthesizer protocol, in scikit-learn's manner (docs/architecture.md, "Synthesizers").

* ``__init__`` takes keyword settings only and stores each unchanged on the attribute of the
  same name: the model, the privacy target, ``m``, MCMC settings, ``population_size``,
  ``random_state``, ``max_epsilon``. No validation there; ``fit`` validates (so ``set_params`` and the
  constructor have the same effect, and ``clone`` can rebuild any synthesizer).
* ``fit(design)`` validates, runs the mechanism and returns ``self``; learned state lives in
  attributes with a trailing underscore. A second ``fit`` replaces the fitted state but not the
  budget accounting: every fit and every release that spends budget is appended to
  ``ledger_``, and ``epsilon_spent_`` is their sum (a refit is a new use of the confidential
  data; :meth:`clone` starts a new, empty account and is the explicit way to begin again).
  Each entry says how it is charged (``charge``): "epsilon" (counted: its public ``epsilon``),
  "outside" (the fit's use of the data that releases nothing and that the guarantee text
  states as outside the budget: tuning fits choosing the risk weights), or "none" (a use with
  no privacy guarantee: the account then has no finite total). The public record states the
  account, every entry and its total (:meth:`privacy_record`), whichever fit or release it
  comes from. Charges are public bounds (a target, never a number measured on the data
  unless the record declares it), so the account itself can be published.
* ``max_epsilon`` (a privacy filter, as OpenDP's and Tumult's odometers): the declared total.
  A fit or release whose charges would take the account above it, or that has no guarantee
  ("none"), is refused with :class:`BudgetExceededError` before it draws anything.
* ``release(m=None)`` returns a :class:`~surveysynth.release.SyntheticRelease` of m synthetic
  survey designs: rows in random order, released weights (the column named like the design's
  weights) summing to the public population size, the design's strata and fpc carried where
  they are released as collected, and the privacy record from :meth:`privacy_record`.
* ``privacy_record(m=None)`` is built in one place for all synthesizers
  (:func:`surveysynth.privacy.record.build_record`) from the facts the subclass reports in
  ``_privacy_facts``.
* Randomness: ``random_state=None`` (default) draws from the operating system's entropy
  (:func:`surveysynth.privacy.randomness.secret_rng`); a seed makes fit and release
  reproducible, is never written to the public record, and the record says the run was seeded.
* Convergence: a fit by MCMC reports ``convergence_`` (max R-hat, min bulk ESS, divergences);
  ``release`` refuses a fit that fails the gates (:data:`CONVERGENCE_DEFAULTS`) unless
  ``allow_unconverged=True``, and then the public guarantee says so.

Weights always mean sampling weights; risk weights are ``alpha``.
"""

from __future__ import annotations

import contextlib
import copy
import inspect
import warnings
from collections.abc import Callable
from typing import Any, ClassVar

import numpy as np
import pandas as pd

from ..privacy.randomness import is_seeded, secret_rng
from ..privacy.record import PrivacyRecord, build_record
from .params import CONVERGENCE_DEFAULTS, validate_params

__all__ = ["Synthesizer", "NotFittedError", "ConvergenceError", "BudgetExceededError",
           "CONVERGENCE_DEFAULTS", "collected_design", "convergence_verdict", "clone"]

# CONVERGENCE_DEFAULTS (the release gates) is declared in .params, beside the MCMC settings
# block whose ``convergence`` constraint names them; re-exported here.

#: the fix a refused (unconverged) fit states; each part is applied by a test
#: (tests/test_examples.py): pystan 3 names Stan's adapt_delta ``delta``
CONVERGENCE_FIX = (
    "Fix: more warm-up and draws (warmup=2000, draws=2000; in a release config init = { "
    "warmup = 2000, draws = 2000 }); against divergences a higher target acceptance rate, "
    "stan_kwargs={'delta': 0.95} (config: init = { stan_kwargs = { delta = 0.95 } }; pystan's "
    "name for Stan's adapt_delta); or a simpler model; or release anyway with "
    "allow_unconverged=True (config: init = { allow_unconverged = true }; the public manifest "
    "then says so).")


class NotFittedError(ValueError, AttributeError):
    """``release`` or ``privacy_record`` before ``fit``."""


class ConvergenceError(RuntimeError):
    """An MCMC fit failed the release gates; the message names the parameters and the fix."""


class BudgetExceededError(ValueError):
    """A fit or release would take the budget account above the declared ``max_epsilon``."""


#: how a ledger entry is charged (see the module docstring)
CHARGES = ("epsilon", "outside", "none")


def convergence_verdict(summary: dict[str, Any], table: pd.DataFrame | None,
                        gates: dict[str, float]) -> dict[str, Any]:
    """Apply the gates to a fit summary (``max_rhat``, ``min_ess_bulk``, ``divergent``,
    ``transitions``) and its per-parameter table (columns ``rhat``, ``ess_bulk``)."""
    g = {**CONVERGENCE_DEFAULTS, **(gates or {})}
    problems: list[str] = []
    max_rhat = float(summary.get("max_rhat", np.nan))
    min_ess = float(summary.get("min_ess_bulk", np.nan))
    div = int(summary.get("divergences", summary.get("divergent", 0)))
    trans = int(summary.get("transitions", 0)) or 1
    bad_rhat: list[str] = []
    bad_ess: list[str] = []
    if table is not None and len(table):
        if "rhat" in table:
            bad_rhat = table.index[table["rhat"].to_numpy(dtype=float) > g["rhat"]].astype(str).tolist()
        if "ess_bulk" in table:
            bad_ess = table.index[table["ess_bulk"].to_numpy(dtype=float) < g["ess_bulk"]].astype(str).tolist()
    if not np.isfinite(max_rhat) or max_rhat > g["rhat"]:
        problems.append(f"R-hat {max_rhat:.3f} > {g['rhat']}" + (f" for {bad_rhat[:6]}" if bad_rhat else ""))
    if not np.isfinite(min_ess) or min_ess < g["ess_bulk"]:
        problems.append(f"bulk ESS {min_ess:.0f} < {g['ess_bulk']:.0f}" + (f" for {bad_ess[:6]}" if bad_ess else ""))
    if div / trans > g["divergent_share"]:
        problems.append(f"{div} divergent transitions of {trans} (> {g['divergent_share']:.2%})")
    return {"passed": not problems, "problems": problems, "max_rhat": max_rhat,
            "min_ess_bulk": min_ess, "divergent": div, "transitions": trans, "gates": g}


def clone(synth: Synthesizer) -> Synthesizer:
    """A new, unfitted synthesizer with the same settings (and an empty budget account)."""
    return synth.clone()


class Synthesizer:
    """Base class of every synthesizer (see the module docstring for the protocol)."""

    #: "partial" (some variables released as collected) or "full"
    kind: ClassVar[str] = "partial"
    #: name used in messages and the manifest
    name: ClassVar[str] = ""
    #: does each release spend budget (posterior draws) or is it post-processing of the fit?
    release_spends: ClassVar[bool] = False
    #: setting -> allowed values (surveysynth.synth.params): every constructor setting, once
    _parameter_constraints: ClassVar[dict[str, list[Any]]] = {}
    #: deprecated setting name -> its new name (kept for one release; fit warns and maps it)
    _deprecated_parameters: ClassVar[dict[str, str]] = {}

    # ------------------------------------------------------------------ parameters
    def check_params(self, key: Callable[[str], str] | None = None) -> dict[str, Any]:
        """Check the settings without data: each against the class's constraint table
        (:func:`surveysynth.synth.params.validate_params`: type, range, choices), then the
        class's cross-setting rules. ``fit`` runs it first; the release config and the R
        package run it before any data are read. Returns the settings with deprecated
        aliases mapped to their new names (a DeprecationWarning for each); raises ValueError
        naming the setting, the value and the fix; ``key`` names a setting in messages (the
        release config passes its keys, ``synthesizer.init.chains``)."""
        params = validate_params(type(self), self.get_params(), key=key)
        self._check_settings()
        return params

    def _check_settings(self) -> None:
        """The class's cross-setting rules (no data); subclasses override."""

    def stan_program(self) -> str:
        """The Stan program this configuration samples (``synth/stan/<name>.stan``), from the
        settings alone ("" when the mechanism runs no Stan or several): the release command's
        compile note."""
        return str(getattr(type(self), "program", "") or "")

    def check_design(self, design: Any) -> None:
        """Refuse a design the synthesizer cannot carry (clusters, weights varying within
        strata, ...) before any use of the data; ValueError naming the fix. Default: any."""

    def check_data(self, design: Any) -> None:
        """Pre-flight for ``surveysynth release --check`` (no MCMC): the settings and the data
        checks the fit makes before its first MCMC run. Default: the settings only
        (:meth:`check_params`); FBS, FBP, PBP and Sequential check the data too."""
        self.check_params()

    def _param(self, name: str) -> Any:
        """A setting's value in effect: a deprecated alias that was given wins (fit has warned)."""
        for old, new in self._deprecated_parameters.items():
            if new == name and getattr(self, old, None) is not None and not (
                    isinstance(getattr(self, old), str) and getattr(self, old) == "deprecated"):
                return getattr(self, old)
        return getattr(self, name)

    @classmethod
    def _get_param_names(cls) -> list[str]:
        sig = inspect.signature(cls.__init__)
        names = []
        for p in sig.parameters.values():
            if p.name == "self":
                continue
            if p.kind in (p.VAR_POSITIONAL, p.VAR_KEYWORD):
                raise TypeError(f"{cls.__name__}.__init__ must not take *args or **kwargs.")
            names.append(p.name)
        return sorted(names)

    def get_params(self, deep: bool = False) -> dict[str, Any]:
        """The constructor settings, as stored."""
        return {k: getattr(self, k) for k in self._get_param_names()}

    def set_params(self, **params: Any) -> Synthesizer:
        """Change settings (same effect as passing them to the constructor); returns self."""
        valid = set(self._get_param_names())
        bad = sorted(set(params) - valid)
        if bad:
            raise ValueError(f"{type(self).__name__}: unknown setting(s) {bad}; settings are {sorted(valid)}.")
        for k, v in params.items():
            setattr(self, k, v)
        return self

    def clone(self) -> Synthesizer:
        """A new, unfitted synthesizer with the same settings and an empty budget account."""
        params = self.get_params()
        new = type(self)(**params)
        for k, v in params.items():
            if getattr(new, k) is not v:
                raise RuntimeError(f"{type(self).__name__}.__init__ changed setting {k!r}.")
        return new

    def __repr__(self) -> str:
        sig = inspect.signature(type(self).__init__)
        parts = []
        for k in self._get_param_names():
            v = getattr(self, k, None)
            default = sig.parameters[k].default
            if default is inspect.Parameter.empty or not _same(v, default):
                parts.append(f"{k}={v!r}")
        return f"{type(self).__name__}({', '.join(parts)})"

    # ------------------------------------------------------------------ fitted state
    def _is_fitted(self) -> bool:
        return getattr(self, "n_", None) is not None

    def _check_fitted(self) -> None:
        if not self._is_fitted():
            raise NotFittedError(
                f"this {type(self).__name__} is not fitted yet: call fit(design) first."
            )

    def _reset_fitted(self) -> None:
        """Forget the previous fit's state (trailing-underscore attributes) but the ledger."""
        for k in [k for k in vars(self) if k.endswith("_") and not k.startswith("_")]:
            if k not in ("ledger_",):
                delattr(self, k)

    def _spend(self, entry: dict[str, Any]) -> None:
        """Record one use of the confidential data in the budget account."""
        self._spend_all([entry])

    def _spend_all(self, entries: list[dict[str, Any]]) -> None:
        """Book the entries of one fit or release together, or none of them: refused with
        :class:`BudgetExceededError` when they would take the account above ``max_epsilon``
        (or carry no guarantee while a total is declared)."""
        fit = int(getattr(self, "fits_", 1))
        booked = [self._entry(e, fit) for e in entries]
        cap = self._max_epsilon()
        if cap is not None:
            unguarded = [e for e in booked if e["charge"] == "none"]
            if unguarded:
                raise BudgetExceededError(
                    f"{type(self).__name__}: max_epsilon = {cap:g} is declared, but this "
                    f"{unguarded[0].get('step', 'use')} has no privacy guarantee (no epsilon "
                    "can be charged against the declared total); nothing was released. Fix: a "
                    "private configuration (risk weights tuned to a target, a private method), "
                    "or drop max_epsilon for a release without protection.")
            new = float(sum(e["epsilon"] for e in booked if e["charge"] == "epsilon"))
            spent = self.epsilon_spent_
            if spent + new > cap * (1 + 1e-12):
                raise BudgetExceededError(
                    f"{type(self).__name__}: this {booked[0].get('step', 'use')} would spend "
                    f"epsilon {new:.6g} on top of {spent:.6g} already spent by this object "
                    f"({len(self.ledger_ if hasattr(self, 'ledger_') else [])} ledger entries), "
                    f"a total of {spent + new:.6g} > the declared max_epsilon = {cap:.6g}; "
                    "nothing was released or fitted. Fix: release fewer new draws (a smaller m, "
                    "or the draws already released: the same m again), or declare a larger "
                    "total if the disclosure review allows it.")
        vars(self).setdefault("ledger_", []).extend(booked)

    @staticmethod
    def _entry(e: dict[str, Any], fit: int) -> dict[str, Any]:
        out = {"fit": fit, **e}
        eps = out.get("epsilon")
        charge = out.setdefault("charge", "epsilon" if eps is not None else "none")
        if charge not in CHARGES or (charge == "epsilon") is (eps is None):
            raise AssertionError(f"ledger entry {out!r}: charge {charge!r} with epsilon {eps!r}")
        return out

    def _max_epsilon(self) -> float | None:
        """The declared total (``max_epsilon``), checked."""
        cap = getattr(self, "max_epsilon", None)
        if cap is None:
            return None
        if isinstance(cap, bool) or not isinstance(cap, (int, float, np.integer, np.floating)) \
                or not (np.isfinite(cap) and cap > 0):
            raise ValueError(f"max_epsilon={cap!r}: the declared total must be a positive "
                             "number (or None: no declared total).")
        return float(cap)

    @property
    def epsilon_spent_(self) -> float:
        """Total epsilon charged by every fit and release of this object (its budget account;
        entries charged "outside" or "none" add nothing here: see :meth:`account`)."""
        eps = [e.get("epsilon") for e in getattr(self, "ledger_", [])]
        return float(sum(e for e in eps if e is not None))

    def account(self, m: int | None = None) -> dict[str, Any]:
        """The budget account a release of ``m`` sets would leave: ``ledger`` (every entry,
        with the release's new charges, not booked), ``epsilon`` (their total; None when an
        entry has no guarantee: the total is then unbounded), ``unprotected`` (such entries)
        and ``max_epsilon`` (the declared total, or None)."""
        self._check_fitted()
        pending = self._release_charges(self._m(m), book=False)
        fit = int(getattr(self, "fits_", 1))
        ledger = [dict(e) for e in getattr(self, "ledger_", [])] + [self._entry(e, fit)
                                                                    for e in pending]
        unprotected = [e for e in ledger if e["charge"] == "none"]
        total = None if unprotected else float(sum(e["epsilon"] for e in ledger
                                                   if e["charge"] == "epsilon"))
        return {"ledger": ledger, "epsilon": total, "unprotected": len(unprotected),
                "max_epsilon": self._max_epsilon()}

    def _release_charges(self, m: int, book: bool) -> list[dict[str, Any]]:
        """The ledger entries a release of m sets adds (new posterior draws); ``book``: mark
        those draws as released. Default: a release is post-processing of the fit (none)."""
        return []

    # ------------------------------------------------------------------ the protocol
    def fit(self, design: Any) -> Synthesizer:
        """Validate, run the mechanism on the confidential ``design``; returns self."""
        self.check_params()  # settings first: a refused setting is not a use of the data
        fits = int(getattr(self, "fits_", 0)) + 1
        if fits > 1:
            warnings.warn(
                f"{type(self).__name__} is refitted (fit number {fits}): the budget account "
                f"keeps the earlier fits (epsilon spent so far {self.epsilon_spent_:.4g}); use "
                "clone() to start a new account for a new, independent release.",
                UserWarning, stacklevel=2)
        self._reset_fitted()
        self.fits_ = fits
        self._rng_ = secret_rng(self.random_state)
        self.seeded_ = is_seeded(self.random_state)
        self.design_fpc_ = _fpc_source(design)
        self.fit_design_ = design  # confidential: for the release's report (never written)
        self.fit_warnings_ = []
        spent = len(getattr(self, "ledger_", []))
        try:
            with _noting_warnings(self.fit_warnings_):
                self._fit(design, self._rng_)
        except BaseException:
            # a fit that failed before it spent anything (bad settings or data) is not a use
            # of the budget: the next fit is not a refit
            if len(getattr(self, "ledger_", [])) == spent:
                self._reset_fitted()
                if fits > 1:
                    self.fits_ = fits - 1
            raise
        return self

    def release(self, m: int | None = None) -> Any:
        """A SyntheticRelease of ``m`` (default ``self.m``) synthetic survey designs."""
        self._check_fitted()
        m = self._m(m)
        # the warnings of the fit and of this release, for the report (the release holds this
        # list; the release's own warnings are added when it is made)
        notes = list(getattr(self, "fit_warnings_", []))
        with _noting_warnings(notes):
            return self._release(m, notes)

    def _release(self, m: int, notes: list[str]) -> Any:
        from ..release import SyntheticRelease

        self._check_convergence()
        # the privacy filter first: a release the declared total cannot cover draws nothing
        charges = self._release_charges(m, book=False)
        self._spend_all(charges)
        self._release_charges(m, book=True)
        frames, spec = self._synthesize(m, self._rng_)
        perms = [self._rng_.permutation(len(f)) for f in frames]
        designs = [self._design_of(f, spec, p) for f, p in zip(frames, perms, strict=True)]
        record = self.privacy_record(m)
        # in memory only (keys with "_" are never written): the row order, and what the
        # disclosure-review report of SyntheticRelease.save needs (this fit as released)
        conf: dict[str, Any] = {"_row_permutations": perms,
                                "_report": {"synthesizer": copy.copy(self),
                                            "design": self.fit_design_,
                                            "warnings": notes}}
        summary = getattr(self, "confidential_summary", None)
        if callable(summary):
            conf.update(summary())
        return SyntheticRelease(designs, self.kind, record, n_original=None, confidential=conf)

    def privacy_record(self, m: int | None = None) -> PrivacyRecord:
        """The public privacy record of a release of ``m`` sets from this fit: its guarantee,
        and the budget account as it stands after that release (:meth:`account`): ``epsilon``
        is the total spent by this object over every fit and release, ``ledger`` each entry."""
        self._check_fitted()
        m = self._m(m)
        r = self._privacy_facts(m)
        acc = self.account(m)
        r["ledger"] = acc["ledger"]
        notes = list(r.pop("notes", []))
        fit = int(getattr(self, "fits_", 1))
        earlier = [e for e in acc["ledger"] if e["charge"] == "none" and e["fit"] != fit]
        if earlier and r["family"] != "none":
            # an earlier fit's release had no guarantee: the account has no finite total
            notes.append(f"{len(earlier)} entr{'y' if len(earlier) == 1 else 'ies'} of this "
                         "object's ledger (earlier fits) used the confidential data without "
                         "privacy protection, so no epsilon bounds what its releases reveal "
                         "together.")
            r = {"family": "none", "mechanism": r["mechanism"], "ledger": acc["ledger"],
                 "facts": {}, "published_without_budget": r.get("published_without_budget", [])}
        r["epsilon"] = acc["epsilon"]
        facts = dict(r.pop("facts", {}))
        facts["ledger_entries"] = len(acc["ledger"])
        facts["fits"] = int(getattr(self, "fits_", 1))
        if acc["max_epsilon"] is not None:
            facts["max_epsilon"] = acc["max_epsilon"]
        r["facts"] = facts
        r["notes"] = notes
        pwb = list(r.pop("published_without_budget", []))
        collected = self.released_as_collected()
        if collected:
            pwb.append({
                "item": f"the columns released as collected (not synthesized): {collected}, "
                        "and with them every count of records by their values (e.g. a table's "
                        "n_unweighted over them equals the confidential record counts)",
                "reason": "partial synthesis: these columns are treated as public (not "
                          "sensitive) and are outside the guarantee, which covers the "
                          "synthesized values; if they are sensitive, synthesize them (PBP, "
                          "Sequential) instead of releasing them.",
            })
        if getattr(self, "population_size_given_", True) is False:
            pwb.append({
                "item": "population size N used to scale the released weights (sum of the "
                        "confidential weights)",
                "reason": "population_size was not given as a public input; the released "
                          "weights sum to this N. Give population_size to publish a public N.",
            })
        return build_record(
            r.pop("family"), r.pop("mechanism"), m=m, seeded=bool(self.seeded_),
            convergence_override=bool(getattr(self, "convergence_override_", False)),
            published_without_budget=pwb, **r,
        )

    def released_as_collected(self) -> list[str]:
        """Columns of the released data sets that are the confidential values as collected
        (predictors, design columns, declared public columns); [] for a full synthesis."""
        return []

    # ------------------------------------------------------------------ helpers
    def _m(self, m: int | None) -> int:
        m = self.m if m is None else m
        if isinstance(m, bool) or not isinstance(m, (int, np.integer)) or int(m) < 1:
            raise ValueError(f"m={m!r}: the number of synthetic data sets must be a positive integer.")
        return int(m)

    def _check_convergence(self) -> None:
        conv = getattr(self, "convergence_", None)
        self.convergence_override_ = False
        if conv is None or conv["passed"]:
            return
        if getattr(self, "allow_unconverged", False):
            self.convergence_override_ = True
            warnings.warn(
                f"{type(self).__name__}: releasing a fit that failed the convergence gates "
                f"({'; '.join(conv['problems'])}) because allow_unconverged=True; the public "
                "manifest says so.", UserWarning, stacklevel=3)
            return
        raise ConvergenceError(
            f"{type(self).__name__}: the fit failed the release gates: "
            f"{'; '.join(conv['problems'])}. " + CONVERGENCE_FIX
        )

    def _population(self, design: Any) -> float:
        """The public population size N the released weights sum to."""
        w = np.asarray(design.weights, dtype=float)
        if self.population_size is None:
            self.population_size_given_ = False
            return float(w.sum())
        N = self.population_size
        if isinstance(N, bool) or not isinstance(N, (int, float, np.integer, np.floating)) or not N > 0:
            raise ValueError(f"population_size={N!r}: must be a positive number (a public total).")
        self.population_size_given_ = True
        return float(N)

    def _design_of(self, frame: pd.DataFrame, spec: dict[str, Any], perm: np.ndarray):
        """A synthetic SurveyDesign with rows in random order ``perm`` (the released order
        carries no information about the confidential file's order; the permutation stays in
        the release's in-memory confidential part, so the curator can link records for risk
        measures)."""
        from ..design import SurveyDesign

        f = frame.iloc[perm].reset_index(drop=True)
        f, spec = self._with_fpc(f, spec)
        return SurveyDesign(f, **spec)

    def _with_fpc(self, f: pd.DataFrame, spec: dict[str, Any]) -> tuple[pd.DataFrame, dict]:
        """Carry the confidential design's fpc into a synthetic design that keeps its stages.

        The fpc columns are design information, public like the strata (population sizes or
        sampling fractions per stratum). They are kept when the synthetic design has the same
        stages as the confidential one: a partial synthesis that releases the design's strata
        (and cluster ids, if any) as collected, so each stratum's n and N are those of the
        sample. Then the fpc of each synthetic row is looked up from its released strata/ids
        (the fpc must be a function of them, as the design validated). Not kept: full synthesis
        (no strata; every value is a new draw: ``kind == "full"``), and a partial synthesis that
        does not release the strata (FBP, docs/methods.md): there the confidential fpc per
        stratum has no stratum to apply to.
        """
        src = getattr(self, "design_fpc_", None)
        if src is None or self.kind != "partial" or spec.get("fpc"):
            return f, spec
        strata, ids = _as_cols(spec.get("strata")), _as_cols(spec.get("ids"))
        if strata != src["strata"] or ids != src["ids"]:
            return f, spec
        key, fpc, table = strata + ids, src["fpc"], src["table"]
        if not set(key) <= set(f.columns):
            return f, spec
        f = f.copy()
        missing = [c for c in fpc if c not in f.columns]
        if missing:
            if key:
                idx = pd.MultiIndex.from_frame(table[key].astype(object)).get_indexer(
                    pd.MultiIndex.from_frame(f[key].astype(object)))
            else:
                idx = np.zeros(len(f), dtype=np.int64)
            if (idx < 0).any():
                warnings.warn(
                    f"{type(self).__name__}: synthetic rows {np.flatnonzero(idx < 0)[:5].tolist()} "
                    f"have strata/ids {key} not in the confidential design; the synthetic designs "
                    "are released without the fpc (with-replacement variances).",
                    UserWarning, stacklevel=4)
                return f, spec
            for c in missing:
                f[c] = table[c].to_numpy()[idx]
        return f, {**spec, "fpc": list(fpc)}

    # ------------------------------------------------------------------ subclass hooks
    def _fit(self, design: Any, rng: np.random.Generator) -> None:  # pragma: no cover
        raise NotImplementedError

    def _synthesize(self, m: int, rng: np.random.Generator) -> tuple[list[pd.DataFrame], dict]:
        """m synthetic frames and the SurveyDesign keyword arguments (column names)."""
        raise NotImplementedError  # pragma: no cover

    def _privacy_facts(self, m: int) -> dict[str, Any]:
        """``family``, ``mechanism``, ``epsilon``, ``facts`` ... for :func:`build_record`."""
        raise NotImplementedError  # pragma: no cover


def _as_cols(x: Any) -> list[str]:
    if x is None:
        return []
    cols = [x] if isinstance(x, str) else list(x)
    return [c for c in cols if c not in ("1", "~1")]


@contextlib.contextmanager
def _noting_warnings(store: list[str]) -> Any:
    """Note the text of every warning raised inside (as `surveysynth release` lists them in
    the report: "Category: message"), and pass each on unchanged to the caller's filters."""
    with warnings.catch_warnings(record=True) as caught:
        try:
            yield
        finally:
            pending = list(caught)
    for w in pending:
        store.append(f"{w.category.__name__}: {w.message}")
        warnings.warn_explicit(w.message, w.category, w.filename, w.lineno, source=w.source)


def _fpc_source(design: Any) -> dict[str, Any] | None:
    """The confidential design's fpc per stratum/cluster (design information, public like the
    strata), to carry into synthetic designs that keep the stages (:meth:`Synthesizer._with_fpc`):
    the distinct rows of (strata, ids, fpc); None without an fpc or when the fpc is not a
    function of the strata and ids (then it cannot be looked up)."""
    fpc = list(getattr(design, "fpc_vars", None) or [])
    if not fpc:
        return None
    strata = _as_cols(getattr(design, "strata_vars", None))
    ids = _as_cols(getattr(design, "ids_vars", None))
    data = getattr(design, "full_data", None)
    if not isinstance(data, pd.DataFrame):
        return None
    key = strata + ids
    table = data[key + fpc].drop_duplicates().reset_index(drop=True)
    if key and table[key].duplicated().any():
        return None
    if not key and len(table) != 1:
        return None
    return {"fpc": fpc, "strata": strata, "ids": ids, "table": table}


def collected_design(design: Any) -> dict[str, Any]:
    """The confidential design's own variables, as a partial synthesis that carries the design
    releases them AS COLLECTED (issue 36, D2; docs/clustered_synthesis.md): every stage's
    cluster ids, the strata, the fpc columns and ``nest``. ``columns`` lists them once each
    (the columns each synthetic frame copies from the confidential rows); ``spec`` is the
    SurveyDesign keyword arguments without the weights (which the synthesizer names)."""
    ids = _as_cols(getattr(design, "ids_vars", None))
    strata = _as_cols(getattr(design, "strata_vars", None))
    fpc = _as_cols(getattr(design, "fpc_vars", None))
    spec: dict[str, Any] = {}
    if ids:
        spec["ids"] = ids
    if strata:
        spec["strata"] = strata
    if fpc:
        spec["fpc"] = fpc
    if getattr(design, "nest", False):
        spec["nest"] = True
    return {"ids": ids, "strata": strata, "fpc": fpc, "spec": spec,
            "columns": list(dict.fromkeys(ids + strata + fpc))}


def _same(a: Any, b: Any) -> bool:
    try:
        return bool(a == b) if not isinstance(a, np.ndarray) else False
    except Exception:  # noqa: BLE001 - comparison of arbitrary settings
        return False
