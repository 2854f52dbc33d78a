"""One synthesizer protocol, in scikit-learn's manner (docs/architecture.md, "Synthesizers").

* ``__init__`` takes keyword settings only and stores each unchanged on the attribute of the
  same name: the model, the privacy target, ``m``, MCMC settings, ``population_size``,
  ``random_state``. No validation there; ``fit`` validates (so ``set_params`` and the
  constructor have the same effect, and ``clone`` can rebuild any synthesizer).
* ``fit(design)`` validates, runs the mechanism and returns ``self``; learned state lives in
  attributes with a trailing underscore. A second ``fit`` replaces the fitted state but not the
  budget accounting: every fit and every release that spends budget is appended to
  ``ledger_``, and ``epsilon_spent_`` is their sum (a refit is a new use of the confidential
  data; :meth:`clone` starts a new, empty account and is the explicit way to begin again).
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

import inspect
import warnings
from typing import Any, ClassVar

import numpy as np
import pandas as pd

from ..privacy.randomness import is_seeded, secret_rng
from ..privacy.record import PrivacyRecord, build_record

__all__ = ["Synthesizer", "NotFittedError", "ConvergenceError", "CONVERGENCE_DEFAULTS",
           "convergence_verdict", "clone"]

#: Release gates on MCMC fits: split R-hat (rank-normalised) of every model parameter at most
#: ``rhat``, bulk ESS at least ``ess_bulk``, share of divergent post-warm-up transitions at
#: most ``divergent_share`` (0.001: 4 of 4,000). Stan's own recommendations (Vehtari et al.
#: 2021) for R-hat and ESS; any divergence is a warning in Stan, and a few in 4,000 are
#: tolerated here because the gate stops a release, not a fit.
CONVERGENCE_DEFAULTS: dict[str, float] = {"rhat": 1.01, "ess_bulk": 400.0, "divergent_share": 0.001}

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

    # ------------------------------------------------------------------ parameters
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
        ledger = vars(self).setdefault("ledger_", [])
        ledger.append({"fit": int(getattr(self, "fits_", 1)), **entry})

    @property
    def epsilon_spent_(self) -> float:
        """Total epsilon of every fit and release made by this object (its budget account)."""
        eps = [e.get("epsilon") for e in getattr(self, "ledger_", [])]
        return float(sum(e for e in eps if e is not None))

    # ------------------------------------------------------------------ the protocol
    def fit(self, design: Any) -> Synthesizer:
        """Validate, run the mechanism on the confidential ``design``; returns self."""
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
        spent = len(getattr(self, "ledger_", []))
        try:
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
        from ..release import SyntheticRelease

        self._check_fitted()
        m = self._m(m)
        self._check_convergence()
        frames, spec = self._synthesize(m, self._rng_)
        perms = [self._rng_.permutation(len(f)) for f in frames]
        designs = [self._design_of(f, spec, p) for f, p in zip(frames, perms, strict=True)]
        record = self.privacy_record(m)
        if self.release_spends:
            self._spend({"step": "release", "m": m, "epsilon": record.epsilon})
        conf: dict[str, Any] = {"_row_permutations": perms}
        summary = getattr(self, "confidential_summary", None)
        if callable(summary):
            conf.update(summary())
        return SyntheticRelease(designs, self.kind, record, n_original=None, confidential=conf)

    def privacy_record(self, m: int | None = None) -> PrivacyRecord:
        """The public privacy record of a release of ``m`` sets from this fit."""
        self._check_fitted()
        m = self._m(m)
        r = self._privacy_facts(m)
        pwb = list(r.pop("published_without_budget", []))
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


def _same(a: Any, b: Any) -> bool:
    try:
        return bool(a == b) if not isinstance(a, np.ndarray) else False
    except Exception:  # noqa: BLE001 - comparison of arbitrary settings
        return False
