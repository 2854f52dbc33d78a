"""QuantileSynthesizer: sequential quantile-regression synthesis with KNG (seed 004; METHODS.md 12).

Variables are synthesized in order: the first from its quantiles alone (intercept-only model),
each later one by quantile regressions on the earlier variables. For every variable a grid of
quantiles is released with the K-norm gradient mechanism (:mod:`surveysynth.synth.kng`), as

* ``method="kng"``: every quantile independently, epsilon_j / m each;
* ``method="stepwise"``: the median first (share ``a`` of epsilon_j), then outward, each quantile
  constrained not to cross its released inner neighbour; the rest share (1 - a) epsilon_j equally;
* ``method="sandwich"``: anchor quantiles by the stepwise scheme (share ``s``; the median gets
  ``b`` of that), then every other quantile between its nearest released neighbours below and
  above; they share (1 - s) epsilon_j equally;
* ``method="jointexp"`` (the default): the first variable's whole grid in one release by the
  joint exponential mechanism (Gillenwater, Joseph & Kulesza 2021;
  :mod:`surveysynth.synth.private_quantiles`, exact sampler, by default on the public pareto
  scale); each later variable on the previous one only, its slope by DP Theil-Sen and all its
  intercepts by JointExp on the residuals. Every draw is exact, so the release is pure
  epsilon-DP (issue 18: the tails). The default since issue 37: the KNG methods spend
  epsilon / (number of quantiles) per quantile and, on survey-sized files (apiclus2, n = 126,
  epsilon 5), put most synthetic values on the public bounds (docs/kng.md, "Default method");
* ``method="nonprivate"``: exact quantile regressions (no privacy; the baseline of seed 004).

``slopes="fixed"`` keeps the median's slopes for every other quantile (only intercepts move;
Koenker 1984); ``slopes="varying"`` samples all coefficients. A synthetic record takes, for each
variable, the prediction at one quantile drawn uniformly from the grid (Pistner et al. 2018;
seed 004 Algorithm 3). Sequential composition: the epsilon of one fit is the sum of the
per-quantile epsilons (:meth:`QuantileSynthesizer.quantile_budget`); releasing any number of
synthetic data sets from the fitted coefficients is post-processing (``release_spends = False``).

The synthesizer follows the one protocol of :mod:`surveysynth.synth.base`: settings stored
unchanged by ``__init__`` and validated by ``fit(design)``; every fit is a new use of the
confidential data and is appended to ``ledger_`` (``epsilon_spent_`` sums them; the privacy
record states that total, and ``clone()`` starts a new account).

Decisions taken here (see docs/kng.md):

* **Public bounds are required** for every synthesized variable of a private method
  (``bounds={"x": (lo, hi)}``, both finite): without them the KNG density of a quantile is
  dominated by the penalty's Gaussian (sd 224 in the data's units), not by the data, and releases
  were useless (api00 from -4486 to 3765). A missing bound is an error naming the fix, not a
  default with a warning: a default range can only come from the data (not private) or be
  arbitrary (useless).
* **Synthetic values never leave the bounds; integer columns stay integers.** The constraints
  keep every prediction inside [lb, ub] on the hull of achievable predictor rows (below); the
  released values are, in addition, clipped to [lb, ub] (a no-op up to rounding), and a variable
  whose input column has an integer dtype is rounded to the nearest integer within
  [ceil(lb), floor(ub)]. Both are post-processing of the released coefficients (no privacy
  cost). Later variables are predicted from the unrounded values, on which the constraints were
  checked.
* Constraints are checked on the vertices of the convex hull of every predictor row a synthetic
  record can have (finite: the previous variables take one of m predictions each). Linear
  constraints hold on a set iff they hold on its hull, so no synthetic record of any release can
  fall outside [lb, ub] or see crossing quantiles (stepwise/sandwich), and the constraint set
  depends only on already released coefficients, never on confidential rows.
* Sandwich anchors must bracket the grid (lowest anchor <= lowest quantile, highest >= highest);
  seed 004's anchors 0.05..0.99 do not bracket 0.01 and 0.03, so the default anchors are the grid
  points nearest 0.05, 0.25, 0.5, 0.75, 0.95 plus the grid's end points.
* The median (first) chain starts at a data-independent point by default (``init="independent"``);
  ``init="nonprivate"`` starts it at the exact estimate as the paper does (not DP for finite
  chains; the record says so when such a start acted on an MCMC chain). Later quantiles start at
  their already released neighbour (stepwise) or the midpoint of their two neighbours
  (sandwich), which costs no privacy.
* **``sampler="exact"`` is the default**: every quantile whose model moves only its intercept is
  drawn exactly (no MCMC, :func:`~surveysynth.synth.kng.kng_sample_intercept_exact`): all
  quantiles of the first variable (intercept-only) in every method, and the non-median quantiles
  with ``slopes="fixed"``. The others (medians of later variables, varying slopes, plain KNG's
  later variables) use MCMC. Exact draws come from the same density as a converged chain, cost
  less, and carry a proof; ``sampler="mcmc"`` (MCMC everywhere) remains for reproducing earlier
  runs and the paper. Which quantiles are exact is fixed by the configuration, not by the data
  (:meth:`QuantileSynthesizer.exact_plan`).
* Input: a SurveyDesign or a DataFrame (then a simple random sample with weights 1). The
  mechanism treats records as exchangeable (the sensitivity argument is for unweighted sums).
  An unstratified input releases n records of weight N/n, N = ``population_size`` (a public
  input) or else the sum of the input's weights (listed in the record as published without
  budget), in a column named like the design's weights (``"weight"`` otherwise).
* **Weights through strata (issue 36, D7).** A stratified design is synthesized within each
  stratum, each with the whole epsilon (parallel composition: disjoint strata whose membership
  and sizes are public design information); each synthetic record keeps its stratum, its
  stratum's weight (scaled to ``population_size`` when given) and fpc, so weighted synthetic
  estimates target the population. Weights varying within a stratum, or unequal weights
  without strata, are refused naming rows and the fix (:meth:`QuantileSynthesizer.check_design`).
* **Clustered designs are refused (D6)**: a record's change moves its cluster's effect, and no
  DP synthesis of cluster effects is implemented (docs/kng.md, "Weights, strata and clusters").
"""

from __future__ import annotations

import math
import warnings
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from types import SimpleNamespace
from typing import Any, ClassVar

import numpy as np
import pandas as pd

from .._validate import as_list
from ..privacy.randomness import secret_rng
from .base import Synthesizer
from .kng import (
    clip_predictors,
    exact_quantile_regression,
    kng_sample,
    kng_sample_intercept_exact,
)
from .kng.mechanism import _check_epsilon
from .params import RELEASE, Columns, Interval, Options, ParameterError
from .private_quantiles import dp_theil_sen_slope, joint_exp_quantiles
from .progress import progress_bar

__all__ = ["QuantileSynthesizer", "paper_quantile_grid", "split_budget"]

_METHODS = ("kng", "stepwise", "sandwich", "jointexp", "nonprivate")
_BUDGET_KEYS = ("variables", "median", "anchors", "anchor_median", "center")
_BUDGET_DEFAULTS = {"median": 0.8, "anchors": 0.8, "anchor_median": 0.8, "center": 0.1}


def paper_quantile_grid() -> np.ndarray:
    """Seed 004's 49 quantiles: 0.01, 0.03, ..., 0.47, 0.50, 0.53, ..., 0.97, 0.99."""
    low = np.round(np.arange(1, 48, 2) / 100, 2)
    return np.concatenate([low, [0.5], np.round(1 - low[::-1], 2)])


def _default_anchors(grid: np.ndarray) -> np.ndarray:
    targets = [0.05, 0.25, 0.5, 0.75, 0.95]
    pick = {float(grid[np.argmin(np.abs(grid - t))]) for t in targets}
    pick |= {float(grid[0]), float(grid[-1])}
    return np.array(sorted(pick))


def _fraction(value: float, name: str, upper_closed: bool = False) -> float:
    try:
        v = float(value)
    except (TypeError, ValueError):
        raise ValueError(f"budget[{name!r}] must be a number in (0, 1); got {value!r}.") from None
    ok = 0 < v <= 1 if upper_closed else 0 < v < 1
    if not ok:
        rng = "(0, 1]" if upper_closed else "(0, 1)"
        raise ValueError(
            f"budget[{name!r}] = {v} is outside {rng}: it is the fraction of a privacy budget "
            f"spent on one part; pass a value strictly inside {rng}."
        )
    return v


def _per_variable(value: Any, variables: list[str], name: str) -> list[Any]:
    if isinstance(value, Mapping):
        missing = [v for v in variables if v not in value]
        if missing:
            raise ValueError(f"budget[{name!r}] has no entry for variables {missing}.")
        return [value[v] for v in variables]
    if isinstance(value, (list, tuple, np.ndarray)):
        if len(value) != len(variables):
            raise ValueError(
                f"budget[{name!r}] has {len(value)} entries for {len(variables)} variables; "
                "give one per variable or a single number."
            )
        return list(value)
    return [value] * len(variables)


def split_budget(
    quantiles: Sequence[float],
    epsilon: float,
    method: str,
    median: float = 0.8,
    anchors: Sequence[float] | None = None,
    anchor_share: float = 0.8,
    anchor_median: float = 0.8,
    intercept_only: bool = True,
    center: float = 0.0,
) -> pd.DataFrame:
    """Per-quantile epsilons of one variable (columns ``tau, epsilon, role``), summing to epsilon.

    JointExp (``method="jointexp"``): rows with ``tau`` NaN. For a later variable the DP
    Theil-Sen slope gets ``median * epsilon``; with ``center > 0`` (the "pareto" scale) the DP
    median that centres the scale gets ``center * epsilon``; the joint release of all quantiles
    (intercepts) gets the rest.

    KNG: epsilon/m each. Stepwise: the median ``median * epsilon``, the others share the rest.
    Sandwich: the median ``anchor_median * anchor_share * epsilon``, the other anchors share
    ``(1 - anchor_median) * anchor_share * epsilon``, the rest share ``(1 - anchor_share) epsilon``.
    """
    grid = np.asarray(quantiles, dtype=float)
    if method == "jointexp":
        shares, roles = [], []
        if not intercept_only:
            shares.append(median)
            roles.append("slope (DP Theil-Sen)")
        if center > 0:
            shares.append(center)
            roles.append("center (DP median of the " + ("values" if intercept_only else "residuals")
                         + ", JointExp)")
        if math.fsum(shares) >= 1:
            raise ValueError(
                f"budget shares {shares} of {roles} leave nothing for the joint release; lower "
                "budget['median'] / budget['center'] so that they sum to less than 1."
            )
        shares.append(1.0 - math.fsum(shares))
        roles.append("joint (all " + ("quantiles" if intercept_only else "intercepts") + ", JointExp)")
        return pd.DataFrame({"tau": np.nan, "epsilon": [sh * epsilon for sh in shares], "role": roles})
    m = grid.size
    eps = np.empty(m)
    role = np.empty(m, dtype=object)
    if method == "kng":
        eps[:] = epsilon / m
        role[:] = "independent"
    elif method == "stepwise":
        med = np.isclose(grid, 0.5)
        if m == 1:
            eps[:] = epsilon
        else:
            eps[med] = median * epsilon
            eps[~med] = (1 - median) * epsilon / (m - 1)
        role[:] = "stepwise"
        role[med] = "median"
    elif method == "sandwich":
        anc = np.isin(np.round(grid, 10), np.round(np.asarray(anchors, float), 10))
        med = np.isclose(grid, 0.5)
        n_anc, n_rest = int(anc.sum()), int((~anc).sum())
        share = anchor_share if n_rest > 0 else 1.0
        if n_anc == 1:
            eps[med] = share * epsilon
        else:
            eps[med] = anchor_median * share * epsilon
            eps[anc & ~med] = (1 - anchor_median) * share * epsilon / (n_anc - 1)
        if n_rest:
            eps[~anc] = (1 - share) * epsilon / n_rest
        role[:] = "sandwiched"
        role[anc] = "anchor"
        role[med] = "median"
    else:
        raise ValueError(f"method {method!r} has no privacy budget.")
    return pd.DataFrame({"tau": grid, "epsilon": eps, "role": role})


def _hull_rows(points: np.ndarray) -> np.ndarray:
    """Rows of ``points`` that are vertices of their convex hull (all unique rows if degenerate)."""
    pts = np.unique(points, axis=0)
    d = pts.shape[1]
    if d == 0 or pts.shape[0] <= d + 1:
        return pts
    if d == 1:
        return np.array([[pts[:, 0].min()], [pts[:, 0].max()]])
    from scipy.spatial import ConvexHull, QhullError

    try:
        return pts[np.sort(ConvexHull(pts).vertices)]
    except (QhullError, ValueError):
        return pts


@dataclass(frozen=True)
class _Config:
    """The validated settings of one fit (built by ``QuantileSynthesizer._config``)."""

    variables: list[str]
    quantiles: np.ndarray
    method: str
    slopes: str
    epsilon: float | None
    budget: dict[str, list[float]]
    C_X: dict[str, float]
    bounds: dict[str, tuple[float, float]]
    anchors: np.ndarray | None
    sensitivity: str
    n_iter: int
    init: str
    step: Any
    adapt: bool
    sampler: str
    transform: str


class QuantileSynthesizer(Synthesizer):
    """Differentially private sequential synthesis by KNG quantile regressions (seed 004).

    All settings are keyword arguments, stored unchanged and validated by :meth:`fit`.

    Parameters
    ----------
    variables : names of the numeric columns to synthesize, in synthesis order.
    quantiles : quantile grid (default: seed 004's 49 quantiles, :func:`paper_quantile_grid`).
    method : "jointexp" (default), "kng", "stepwise", "sandwich" or "nonprivate". "jointexp":
        the first variable's quantiles by the joint exponential mechanism (Gillenwater, Joseph &
        Kulesza 2021; pure epsilon-DP, exact sampler); each later variable on the previous one
        only: its slope by DP Theil-Sen (share ``budget["median"]``) and every quantile's
        intercept by JointExp on the residuals (fixed slope), with the rest of its budget. All
        draws exact: the whole release is pure epsilon-DP. The default because the KNG methods
        split epsilon over the quantiles one by one: on apiclus2 (n = 126, epsilon 5, 49
        quantiles) stepwise put 56-83% of api00 on a bound, JointExp none (docs/kng.md,
        "Default method").
    slopes : "fixed" or "varying" (default; stepwise and sandwich; plain KNG varies all slopes;
        jointexp always keeps one slope per variable).
    epsilon : privacy budget of one fit (sum over all variables and quantiles); default 1.
    budget : dict of fractions, each a number, a list (one per variable) or a dict by variable:
        ``variables`` (shares of epsilon per variable, summing to 1; default equal),
        ``median`` (stepwise median share a, default 0.8; jointexp: the DP Theil-Sen slope's share),
        ``anchors`` (sandwich anchor share s, default 0.8), ``anchor_median`` (sandwich median
        share b of the anchors, default 0.8), ``center`` (jointexp with ``transform="pareto"``:
        the share of the DP median that centres the scale, default 0.1).
    C_X : public bound on the predictors of each variable's model (dict by variable, list, or one
        number); required for every variable after the first (the first is intercept-only: 1).
    bounds : dict variable -> (lb, ub), public bounds on the synthetic values, both finite;
        required for every variable of a private method (error otherwise; see the module notes).
    anchors : sandwich anchor quantiles (must contain 0.5 and bracket the grid).
    sensitivity : "sound" (default) or "paper" (seed 004's understated 2 (1 - tau) C_X; the
        release is then labelled not differentially private).
    n_iter : Metropolis iterations per MCMC quantile (seed 004: 1,000).
    init : "independent" (default) or "nonprivate" (paper: the median chain of stepwise/sandwich
        starts at the exact fit; labelled not DP when it acts on an MCMC chain).
    step : initial proposal scale (response units), a number or dict by variable; default
        (ub - lb)/100.
    adapt : adaptive proposals (default True); False with a small ``step`` mimics the authors'
        slowly moving chains (paper reproduction only).
    sampler : "exact" (default: exact draws wherever only the intercept moves, MCMC elsewhere)
        or "mcmc" (adaptive Metropolis for every quantile). Ignored by ``method="jointexp"``
        (always exact).
    transform : ``method="jointexp"`` only: the public scale of the mechanism, "pareto" (default:
        base measure with density ~ (s + |x - c|)^-3 centred at a DP median c released first with
        share ``budget["center"]`` (default 0.1) of the variable's epsilon, width s half the
        distance from c to the nearer bound (at least range / 1000); fitted ``centers_``,
        ``scales_``),
        "log" (log(1 + (x - lb) / s), density ~ 1 / (s + x - lb)) or "identity" (uniform base
        measure on [lb, ub]); see
        :func:`surveysynth.synth.private_quantiles.tail_transform`.
    m : number of synthetic data sets a release holds (default 5).
    random_state : None (default: secret OS entropy), or a seed for reproducible runs (a secret
        key; never published, the record says the run was seeded).
    population_size : public population size N the released weights sum to (default: the sum of
        the input's weights, then listed as published without budget).
    progress : tqdm progress bar over quantiles.
    max_epsilon : the declared total of the budget account (a privacy filter): a fit that would
        take the account (every fit of this object) above it, or a non-private fit, is refused
        before it touches the data (BudgetExceededError). None: no limit.

    Fitted attributes: ``coefficients_`` (dict variable -> DataFrame tau x coefficients, the
    released quantity), ``n_``, ``population_``, ``integer_variables_``, ``hull_``,
    ``sampler_used_`` ("exact", "mcmc", "mixed"), ``nonprivate_start_used_``, ``epsilon_``
    (this fit), and for the curator only (computed from confidential data, never released):
    ``diagnostics_`` (acceptance rates per quantile) and ``data_outside_bounds_``.

    Example (JointExp, pure epsilon-DP within public bounds):

    >>> import numpy as np
    >>> import pandas as pd
    >>> import surveysynth as ss
    >>> rng = np.random.default_rng(1)
    >>> df = pd.DataFrame({"field": rng.choice(["a", "b"], 60),
    ...                    "salary": rng.lognormal(11, 0.5, 60).round(),
    ...                    "visits": rng.poisson(3, 60)})
    >>> df["w"] = np.where(df["field"] == "a", 80.0, 120.0)  # constant within strata
    >>> d = ss.SurveyDesign(df, strata="field", weights="w")
    >>> syn = ss.synth.QuantileSynthesizer(variables="salary", bounds={"salary": (0, 5e5)},
    ...                                    epsilon=5, m=3, random_state=1, progress=False)
    >>> rel = syn.fit(d).release()
    >>> rel.privacy.guarantee
    'pure epsilon-differential privacy, epsilon = 5 (joint exponential mechanism for quantiles, exact sampling)'
    >>> len(rel.designs), rel.designs[0].data.columns.tolist()
    (3, ['field', 'salary', 'w'])
    """

    kind: ClassVar[str] = "full"
    name: ClassVar[str] = "quantile"
    release_spends: ClassVar[bool] = False
    #: every setting's allowed values (surveysynth.synth.params; the grid, budget shares,
    #: C_X, bounds and cross-setting rules: _config)
    _parameter_constraints: ClassVar[dict[str, list[Any]]] = {
        "variables": [Columns()],
        "quantiles": [None, "array-like"],
        "method": [Options(*_METHODS)],
        "slopes": [Options("fixed", "varying")],
        "epsilon": [None, Interval("number", 0, None, closed="neither")],
        "budget": [None, dict],
        "C_X": [None, dict, "numbers"],
        "bounds": [None, dict],
        "anchors": [None, "array-like"],
        "sensitivity": [Options("sound", "paper")],
        "n_iter": [Interval("integer", 1, None)],
        "init": [Options("independent", "nonprivate")],
        "step": [None, dict, Interval("number", 0, None, closed="neither")],
        "adapt": [bool],
        "sampler": [Options("exact", "mcmc")],
        "transform": [Options("pareto", "log", "identity")],
        "progress": [bool],
        **RELEASE,
    }

    def __init__(
        self,
        *,
        variables: Sequence[str] | str,
        quantiles: Sequence[float] | None = None,
        method: str = "jointexp",
        slopes: str = "varying",
        epsilon: float | None = 1.0,
        budget: Mapping[str, Any] | None = None,
        C_X: Mapping[str, float] | Sequence[float] | float | None = None,  # noqa: N803 - the paper's symbol
        bounds: Mapping[str, tuple[float, float]] | None = None,
        anchors: Sequence[float] | None = None,
        sensitivity: str = "sound",
        n_iter: int = 1000,
        init: str = "independent",
        step: Mapping[str, float] | float | None = None,
        adapt: bool = True,
        sampler: str = "exact",
        transform: str = "pareto",
        m: int = 5,
        random_state: int | np.random.Generator | np.random.SeedSequence | None = None,
        population_size: float | None = None,
        progress: bool = True,
        max_epsilon: float | None = None,
    ) -> None:
        self.variables = variables
        self.quantiles = quantiles
        self.method = method
        self.slopes = slopes
        self.epsilon = epsilon
        self.budget = budget
        self.C_X = C_X
        self.bounds = bounds
        self.anchors = anchors
        self.sensitivity = sensitivity
        self.n_iter = n_iter
        self.init = init
        self.step = step
        self.adapt = adapt
        self.sampler = sampler
        self.transform = transform
        self.m = m
        self.random_state = random_state
        self.population_size = population_size
        self.progress = progress
        self.max_epsilon = max_epsilon

    # ------------------------------------------------------------------ configuration
    def _check_settings(self) -> None:
        self._config()

    def _config(self) -> _Config:
        """The settings normalised, with the cross-setting rules (each setting alone: the
        constraint table, :meth:`check_params`); a clear ValueError names the setting."""
        variables = as_list(self.variables) if isinstance(self.variables, str) else self.variables  # '~a+b'
        try:
            variables = list(variables)
        except TypeError:
            raise ValueError(f"variables must be a list of column names; got {self.variables!r}.") from None
        if not variables or len(set(variables)) != len(variables) or not all(isinstance(v, str) for v in variables):
            raise ValueError(f"variables must be a non-empty list of distinct names; got {self.variables!r}.")
        method = self.method
        if method == "jointexp" and (self.sensitivity != "sound" or self.init != "independent"):
            raise ValueError(
                f"method='jointexp' has no KNG gradient or chain start: sensitivity="
                f"{self.sensitivity!r} / init={self.init!r} would only mislabel the release; "
                "leave them at their defaults ('sound', 'independent'), or choose a KNG method "
                "(method='stepwise', 'sandwich' or 'kng'; jointexp is the default)."
            )
        grid, anchors = _parse_grid(self.quantiles, method, self.anchors)
        epsilon = None if method == "nonprivate" else _check_epsilon(self.epsilon, "epsilon")
        budget = dict(self.budget or {})
        unknown = set(budget) - set(_BUDGET_KEYS)
        if unknown:
            raise ValueError(f"unknown budget keys {sorted(unknown)}; use {list(_BUDGET_KEYS)}.")
        k = len(variables)
        shares = _per_variable(budget.get("variables", 1.0 / k), variables, "variables")
        shares = [_fraction(s, "variables", upper_closed=True) for s in shares]
        if not math.isclose(math.fsum(shares), 1.0, rel_tol=0, abs_tol=1e-9):
            raise ValueError(
                f"budget['variables'] shares sum to {math.fsum(shares)}, not 1: they split the total "
                "epsilon between variables."
            )
        checked_budget = {"variables": shares}
        for key in ("median", "anchors", "anchor_median", "center"):
            vals = _per_variable(budget.get(key, _BUDGET_DEFAULTS[key]), variables, key)
            checked_budget[key] = [_fraction(v, key) for v in vals]
        parsed = {}
        for name, parse in (("C_X", _parse_cx), ("bounds", _parse_bounds)):
            try:  # the setting to fix is named (the release config names its key)
                parsed[name] = parse(getattr(self, name), variables, method)
            except ParameterError:
                raise
            except ValueError as exc:
                raise ParameterError(str(exc), name) from None
        return _Config(
            variables=variables, quantiles=grid, method=method, slopes=self.slopes, epsilon=epsilon,
            budget=checked_budget, C_X=parsed["C_X"], bounds=parsed["bounds"], anchors=anchors,
            sensitivity=self.sensitivity, n_iter=int(self.n_iter), init=self.init, step=self.step,
            adapt=bool(self.adapt), sampler=self.sampler, transform=self.transform,
        )

    def exact_plan(self) -> pd.DataFrame:
        """Which quantiles are drawn exactly (columns variable, tau, sampler = "exact"/"mcmc").

        Determined by the configuration only (never by the data): with ``sampler="exact"`` a
        quantile is exact when its model moves only the intercept, i.e. every quantile of the
        first (intercept-only) variable, and with ``slopes="fixed"`` (stepwise / sandwich) every
        non-median quantile of the later variables.
        """
        self.check_params()  # the settings first (the constraint table)
        return _exact_plan(self._config())

    def quantile_budget(self) -> pd.DataFrame:
        """Every quantile's epsilon in one fit (columns variable, tau, epsilon, role).

        From the settings only; the epsilons sum to ``epsilon`` (sequential composition).
        """
        self.check_params()  # the settings first (the constraint table)
        return _quantile_budget(self._config())

    @property
    def epsilon_total(self) -> float | None:
        """The epsilon one fit spends (math.fsum of :meth:`quantile_budget`); None if non-private.

        Not the account: ``epsilon_spent_`` sums every fit of this object.
        """
        cfg = self._config()
        if cfg.method == "nonprivate":
            return None
        return math.fsum(_quantile_budget(cfg)["epsilon"].tolist())

    # ------------------------------------------------------------------ fitting
    def check_design(self, design: Any) -> None:
        """Refuse a design this synthesizer cannot carry (issue 36; no privacy budget used, so
        ``surveysynth release --check`` runs it before any fit):

        * real clusters (D6): a record's change moves its cluster's effect and no DP synthesis
          of cluster effects is implemented;
        * weights that vary within a stratum, or within an unstratified design (D7): the
          strata are synthesized separately with their own (constant) weight, so unequal
          weights inside one would be lost.

        A ValueError (:class:`~surveysynth.synth.design_checks.DesignRefused`) names the
        reason, the first offending rows and the fix. A DataFrame (weights 1) passes.
        """
        _design_plan(design, self.variables)

    def _fit(self, design: Any, rng: np.random.Generator) -> None:
        """Validate settings and input, book the spend, then release every variable's quantiles
        (within each stratum separately for a stratified design: parallel composition)."""
        cfg = self._config()
        self._m(None)
        plan = _design_plan(design, cfg.variables)
        frame, source, weights_name, integer = _input_frame(design, cfg)
        self.population_ = self._population(source)
        for v in integer:
            lb, ub = cfg.bounds.get(v, (-np.inf, np.inf))
            if math.ceil(lb) > math.floor(ub):
                raise ValueError(
                    f"bounds[{v!r}] = ({lb}, {ub}) contain no integer, but column {v!r} is an "
                    "integer column (its synthetic values are rounded): widen the bounds."
                )
        n = frame.shape[0]
        outside = {}
        for v in cfg.variables:
            lb, ub = cfg.bounds.get(v, (-np.inf, np.inf))
            y = frame[v].to_numpy()
            outside[v] = int(np.count_nonzero((y < lb) | (y > ub)))
        self.data_outside_bounds_ = outside  # confidential: curator only
        if any(outside.values()):
            warnings.warn(
                "confidential values outside the declared public bounds (curator only: "
                + ", ".join(f"{v}: {c} of {n}" for v, c in outside.items() if c)
                + "); the synthetic values stay inside the bounds, so the tails beyond them are "
                "lost. Widen the public bounds if they were meant to cover the population.",
                UserWarning, stacklevel=3,
            )
        budget = None if cfg.method == "nonprivate" else _quantile_budget(cfg)
        eps = None if budget is None else math.fsum(budget["epsilon"].tolist())
        splan = None if budget is None else _exact_plan(cfg)
        planned = None if splan is None else _sampler_label(splan["sampler"] == "exact")
        # the spend is booked before the confidential data are touched: a fit that fails half
        # way has still used them. Strata: ONE entry with the same epsilon (parallel
        # composition over disjoint strata whose sizes are public design information)
        entry_in = {
            "step": "fit", "epsilon": eps, "private": cfg.method != "nonprivate",
            "mechanism": _mechanism(cfg), "sensitivity": cfg.sensitivity, "init": cfg.init,
            "sampler": planned, "nonprivate_start_used": None, "n_iter": cfg.n_iter,
        }
        if plan is not None and plan.stratified:
            entry_in["strata"] = len(plan.labels)
            entry_in["composition"] = "parallel over strata"
        self._spend(entry_in)
        entry = self.ledger_[-1]
        self.n_ = n
        self.epsilon_ = eps
        self.integer_variables_ = integer
        self.weights_name_ = weights_name
        self._cfg = cfg
        self.design_plan_ = plan
        q = cfg.quantiles.size
        bar = progress_bar(total=len(cfg.variables) * q * (len(plan.labels) if plan is not None and plan.stratified else 1),
                           desc=f"KNG {cfg.method}", disable=not self.progress)
        pareto = cfg.method == "jointexp" and cfg.transform == "pareto"
        if plan is None or not plan.stratified:
            coefs, diag, used_start, hull = _fit_block(cfg, frame, budget, splan, rng, bar)
            self.coefficients_ = coefs
            self.diagnostics_ = diag
            self.hull_ = hull
            # jointexp on the pareto scale: the DP median that centred each variable's scale
            # (released by its own budget row: public, like the coefficients)
            self.centers_ = ({v: float(diag.loc[diag["variable"] == v, "center"].iloc[0])
                              for v in cfg.variables} if pareto else {})
            self.scales_ = ({v: float(diag.loc[diag["variable"] == v, "scale"].iloc[0])
                             for v in cfg.variables} if pareto else {})
        else:
            # D7: each stratum on its own records with the whole epsilon, in the order of the
            # strata's labels (parallel composition)
            by, diags, used_start, hulls = {}, [], False, {}
            for h, label in enumerate(plan.labels):
                rows = np.flatnonzero(plan.codes == h)
                c_h, d_h, u_h, hull_h = _fit_block(
                    cfg, frame.iloc[rows].reset_index(drop=True), budget, splan, rng, bar)
                by[label] = c_h
                diags.append(d_h.assign(stratum=label))
                used_start |= u_h
                hulls[label] = hull_h
            self.coefficients_by_stratum_ = by
            self.coefficients_ = {
                v: pd.concat({lab: by[lab][v] for lab in plan.labels}, names=["stratum"])
                for v in cfg.variables}
            self.diagnostics_ = pd.concat(diags, ignore_index=True)
            self.hull_ = hulls
            diag = self.diagnostics_
            self.centers_ = ({v: {lab: float(diag.loc[(diag["variable"] == v) & (diag["stratum"] == lab),
                                                      "center"].iloc[0]) for lab in plan.labels}
                              for v in cfg.variables} if pareto else {})
            self.scales_ = ({v: {lab: float(diag.loc[(diag["variable"] == v) & (diag["stratum"] == lab),
                                                     "scale"].iloc[0]) for lab in plan.labels}
                             for v in cfg.variables} if pareto else {})
        bar.close()
        if splan is not None:
            self.sampler_used_ = _sampler_label(self.diagnostics_["sampler"].to_numpy() == "exact")
            self.nonprivate_start_used_ = bool(used_start)
            entry["sampler"] = self.sampler_used_
            entry["nonprivate_start_used"] = self.nonprivate_start_used_
        else:
            self.sampler_used_ = None
            self.nonprivate_start_used_ = False

    # ------------------------------------------------------------------ synthesis
    def _synthesize(self, m: int, rng: np.random.Generator) -> tuple[list[pd.DataFrame], dict]:
        """m synthetic frames: each record takes, for each variable, the prediction at a quantile
        drawn uniformly from the whole grid (every quantile, the top one included), given its
        synthetic predictors; then clipping to the bounds and rounding of integer variables.

        Stratified designs (D7): each stratum's n_h records from its own coefficients, with the
        stratum label, the stratum's weight (as collected; scaled to ``population_size`` when
        given) and its fpc; the synthetic designs have the confidential strata/fpc spec."""
        cfg = self._cfg
        plan = getattr(self, "design_plan_", None)
        if plan is None or not plan.stratified:
            n = self.n_
            weight = self.population_ / n
            out = [pd.DataFrame({**_draw_block(cfg, self.coefficients_, n, rng,
                                               self.integer_variables_),
                                 self.weights_name_: np.full(n, weight)})
                   for _ in range(m)]
            spec: dict[str, Any] = {"weights": self.weights_name_}
            if plan is not None and plan.fpc:
                for f in out:
                    for c, val in plan.fpc_values[0].items():
                        f[c] = val
                spec["fpc"] = list(plan.fpc)
            return out, spec
        scale = self.population_ / plan.weight_total
        out = []
        for _ in range(m):
            parts = []
            for h, label in enumerate(plan.labels):
                n_h = int(plan.sizes[h])
                cols = _draw_block(cfg, self.coefficients_by_stratum_[label], n_h, rng,
                                   self.integer_variables_)
                part = pd.DataFrame(cols)
                part.insert(0, plan.strata, plan.stratum_values[h:h + 1].repeat(n_h).to_numpy())
                part[self.weights_name_] = np.full(n_h, plan.weights[h] * scale)
                for c, val in plan.fpc_values[h].items():
                    part[c] = val
                parts.append(part)
            f = pd.concat(parts, ignore_index=True)
            f[plan.strata] = f[plan.strata].astype(plan.strata_dtype)
            out.append(f)
        spec = {"weights": self.weights_name_, "strata": plan.strata}
        if plan.fpc:
            spec["fpc"] = list(plan.fpc)
        return out, spec

    def synthesize(self, m: int | None = None) -> list[pd.DataFrame]:
        """``m`` synthetic DataFrames (variables and the weight column), as in :meth:`release`.

        Post-processing of the fitted coefficients (no budget); draws from the fit's generator.
        """
        self._check_fitted()
        frames, _ = self._synthesize(self._m(m), self._rng_)
        return frames

    # ------------------------------------------------------------------ privacy record
    def _privacy_facts(self, m: int) -> dict[str, Any]:
        cfg = self._cfg
        fits = [e for e in self.ledger_ if e.get("step") == "fit"]
        notes = []
        if len(fits) > 1:
            notes.append(
                f"this object was fitted {len(fits)} times on the confidential data; by sequential "
                f"composition the stated epsilon is the total of all fits ({len(fits)} entries in "
                "the ledger), whichever fit this release comes from."
            )
        if any(not e["private"] for e in fits):
            notes.append("exact (non-private) quantile regressions: no privacy protection.")
            return {"family": "none", "mechanism": "quantile-regression (non-private)",
                    "epsilon": None, "facts": {"method": cfg.method, "fits": len(fits)},
                    "ledger": self.ledger_, "notes": notes}
        samplers = {e["sampler"] for e in fits}
        sampler = samplers.pop() if len(samplers) == 1 else "mixed"
        facts = {
            "sensitivity": "paper" if any(e["sensitivity"] == "paper" for e in fits) else "sound",
            "init": "nonprivate" if any(e["init"] == "nonprivate" for e in fits) else "independent",
            "nonprivate_start_used": any(bool(e["nonprivate_start_used"]) for e in fits),
            "sampler": sampler,
            "n_iter": cfg.n_iter,
            "method": cfg.method,
            "slopes": (cfg.slopes if cfg.method in ("stepwise", "sandwich")
                       else "fixed" if cfg.method == "jointexp" else "varying"),
            "variables": ", ".join(cfg.variables),
            "quantiles_per_variable": int(cfg.quantiles.size),
            "fits": len(fits),
            "epsilon_per_fit": self.epsilon_,
            "bounds": "public, declared by the curator: " + "; ".join(
                f"{v} [{cfg.bounds[v][0]:g}, {cfg.bounds[v][1]:g}]" for v in cfg.variables),
            "integer_variables": ", ".join(self.integer_variables_) or "none",
        }
        if cfg.method == "jointexp":
            facts["transform"] = cfg.transform
            if cfg.transform == "pareto":
                facts["transform_center"] = (
                    "the pareto scale of each variable (residual) is centred at its DP median "
                    "(released first by JointExp with one quantile; width: half the distance "
                    "from it to the nearer public bound), share "
                    + ", ".join(f"{v}: {c:g}" for v, c in zip(cfg.variables, cfg.budget["center"], strict=True))
                    + " of the variable's epsilon (inside the stated total)")
        parts = (f"{len(cfg.variables)} variables (each variable's {cfg.quantiles.size} quantiles "
                 "in one JointExp release; a later variable's DP Theil-Sen slope first)"
                 if cfg.method == "jointexp" else
                 f"{len(cfg.variables)} variables x {cfg.quantiles.size} quantiles")
        notes.append(
            f"sequential composition over {parts}: epsilon {self.epsilon_:.6g} per fit; the "
            f"{int(m)} synthetic data sets are post-processing of one set of released coefficients."
        )
        notes.extend(_sampler_notes(cfg, self.diagnostics_))
        if cfg.method == "kng":
            notes.append("plain KNG: quantiles are released independently and may cross.")
        if len(cfg.variables) > 1:
            notes.append("predictors top-coded at C_X = "
                         + ", ".join(f"{v}: {cfg.C_X[v]:g}" for v in cfg.variables[1:]) + ".")
        plan = getattr(self, "design_plan_", None)
        pwb: list[dict[str, str]] = []
        if plan is not None and plan.stratified:
            H = len(plan.labels)
            facts["strata"] = (f"{plan.strata}: {H} strata synthesized separately, each with the "
                               "whole epsilon (parallel composition)")
            notes.append(
                f"parallel composition over the {H} strata of {plan.strata!r}: each stratum's "
                "quantiles were released from its own records only, with the whole epsilon; the "
                "strata are disjoint and their membership and sizes are public design "
                "information (released as collected), so a record's change (within its stratum) "
                "moves one stratum's release and the whole release is epsilon-DP with the same "
                "epsilon, not H x epsilon.")
            notes.append(
                "synthetic values are clipped to the public bounds"
                + (f" and rounded to integers for {', '.join(self.integer_variables_)}"
                   if self.integer_variables_ else "")
                + " (post-processing); each synthetic record carries its stratum's design weight"
                " (constant within strata, checked) and fpc, so weighted estimates target the "
                "population.")
            pwb.append({
                "item": (f"the design's strata {plan.strata!r} with their sample sizes n_h, "
                         f"weights ({self.weights_name_}, one per stratum)"
                         + (f" and fpc {plan.fpc}" if plan.fpc else "")
                         + ", as collected"),
                "reason": ("design information, public by the design (the stratified quantile "
                           "synthesis releases each stratum's n_h records with its weight; the "
                           "neighbouring relation keeps a record in its stratum)."),
            })
        else:
            notes.append(
                "synthetic values are clipped to the public bounds"
                + (f" and rounded to integers for {', '.join(self.integer_variables_)}"
                   if self.integer_variables_ else "")
                + " (post-processing); survey weights are not used by the mechanism."
            )
        out = {"family": "kng", "mechanism": _mechanism(cfg), "epsilon": self.epsilon_spent_,
               "facts": facts, "ledger": self.ledger_, "notes": notes}
        if pwb:
            out["published_without_budget"] = pwb
        return out


# ---------------------------------------------------------------------------------- helpers
def _parse_grid(quantiles: Any, method: str, anchors_in: Any) -> tuple[np.ndarray, np.ndarray | None]:
    """The sorted quantile grid and (sandwich) the anchors on it, checked."""
    grid = paper_quantile_grid() if quantiles is None else np.asarray(quantiles, dtype=float)
    grid = np.atleast_1d(grid)
    if grid.size == 0 or not np.all((grid > 0) & (grid < 1)):
        raise ValueError(f"quantiles must lie strictly between 0 and 1; got {grid.tolist()}.")
    grid = np.sort(grid)
    if np.any(np.diff(grid) <= 0):
        raise ValueError("quantiles must be distinct.")
    if method in ("stepwise", "sandwich") and not np.isclose(grid, 0.5).any():
        raise ValueError(
            f"method={method!r} starts from the median, but the quantile grid has no 0.5: "
            "add 0.5 to quantiles."
        )
    anchors = None
    if method == "sandwich":
        anc = _default_anchors(grid) if anchors_in is None else np.sort(np.asarray(anchors_in, float))
        missing = [a for a in anc if not np.isclose(grid, a).any()]
        if missing:
            raise ValueError(f"anchors {missing} are not in the quantile grid; add them to quantiles.")
        if not np.isclose(anc, 0.5).any():
            raise ValueError("sandwich anchors must include the median 0.5.")
        if anc[0] > grid[0] + 1e-12 or anc[-1] < grid[-1] - 1e-12:
            out = grid[(grid < anc[0] - 1e-12) | (grid > anc[-1] + 1e-12)]
            raise ValueError(
                f"sandwich anchors {anc.tolist()} do not bracket every quantile: "
                f"{out.tolist()} lie outside [{anc[0]}, {anc[-1]}]. Add the grid's lowest and "
                "highest quantiles to anchors."
            )
        anchors = grid[np.isclose(grid[:, None], anc[None, :]).any(axis=1)]
    return grid, anchors


def _parse_cx(C_X: Any, variables: list[str], method: str) -> dict[str, float]:  # noqa: N803
    out: dict[str, float] = {}
    if isinstance(C_X, Mapping):
        extra = set(C_X) - set(variables)
        if extra:
            raise ValueError(f"C_X given for unknown variables {sorted(extra)}.")
        vals = [C_X.get(v) for v in variables]
    elif C_X is None:
        vals = [None] * len(variables)
    elif isinstance(C_X, (list, tuple, np.ndarray)):
        vals = list(C_X)
        if len(vals) != len(variables):
            raise ValueError(f"C_X has {len(vals)} values for {len(variables)} variables.")
    else:
        vals = [C_X] * len(variables)
    for j, (v, c) in enumerate(zip(variables, vals, strict=True)):
        if c is None:
            if j == 0:
                c = 1.0
            elif method != "nonprivate":
                raise ValueError(
                    f"C_X is missing for {v!r}: KNG needs a public bound on its predictors "
                    f"{variables[:j]} (values above it are top-coded). Set it from public "
                    "knowledge, e.g. C_X={'" + v + "': 100}; a bound computed from the "
                    "confidential data would not be differentially private."
                )
            else:
                c = np.inf
        try:
            c = float(c)
        except (TypeError, ValueError):
            raise ValueError(f"C_X[{v!r}] = {c!r}: must be a number >= 1.") from None
        if not c >= 1:
            raise ValueError(f"C_X[{v!r}] = {c}: the bound covers the intercept, so it must be >= 1.")
        out[v] = c
    return out


def _parse_bounds(bounds: Any, variables: list[str], method: str) -> dict[str, tuple[float, float]]:
    if bounds is None:
        bounds = {}
    if not isinstance(bounds, Mapping):
        raise ValueError(f"bounds must be a dict variable -> (lower, upper); got {bounds!r}.")
    extra = set(bounds) - set(variables)
    if extra:
        raise ValueError(f"bounds given for unknown variables {sorted(extra)}; variables are {variables}.")
    missing = [v for v in variables if v not in bounds]
    if missing and method != "nonprivate":
        example = ", ".join(f"'{v}': (lo, hi)" for v in missing)
        raise ValueError(
            f"bounds missing for {missing}: KNG needs public bounds on every synthesized variable "
            f"(without them synthetic values run far outside the data). Fix: bounds={{{example}}} "
            "from public knowledge (a legal or physical range, a published maximum); bounds "
            "computed from the confidential data are not differentially private."
        )
    out: dict[str, tuple[float, float]] = {}
    for v, pair in bounds.items():
        try:
            lb, ub = (float(x) for x in pair)
        except (TypeError, ValueError):
            raise ValueError(f"bounds[{v!r}] = {pair!r}: must be two numbers. Fix: give (lower, "
                             "upper).") from None
        if method != "nonprivate" and not (math.isfinite(lb) and math.isfinite(ub)):
            raise ValueError(
                f"bounds[{v!r}] = ({lb}, {ub}): both public bounds must be finite numbers, e.g. "
                f"bounds={{'{v}': (0, 5000)}}."
            )
        if not lb < ub:
            raise ValueError(f"bounds[{v!r}] = ({lb}, {ub}): the lower bound must be below the "
                             "upper. Fix: give (lower, upper) with lower < upper.")
        out[v] = (lb, ub)
    return out


def _input_frame(design: Any, cfg: _Config) -> tuple[pd.DataFrame, Any, str, list[str]]:
    """Float columns of the variables, the object whose weights give N, the weight column name,
    and the variables whose input column has an integer dtype. The input is never modified."""
    if isinstance(design, pd.DataFrame):
        frame = design
        # a DataFrame is a simple random sample with weights 1
        source: Any = SimpleNamespace(weights=np.ones(design.shape[0]))
        wname = None
    elif hasattr(design, "data") and hasattr(design, "weights"):
        frame = design.data
        source = design
        wname = getattr(design, "weights_var", None)
    else:
        raise ValueError(f"fit() expects a SurveyDesign or a pandas DataFrame; got {type(design).__name__}.")
    missing = [v for v in cfg.variables if v not in frame.columns]
    if missing:
        raise ValueError(f"variables {missing} are not columns of the data; have {list(frame.columns)[:10]}.")
    out, integer = {}, []
    for v in cfg.variables:
        if pd.api.types.is_bool_dtype(frame[v]) or not pd.api.types.is_numeric_dtype(frame[v]):
            raise ValueError(
                f"column {v!r} has dtype {frame[v].dtype}: KNG synthesizes numeric columns only; "
                "convert it or leave it out of variables."
            )
        if pd.api.types.is_integer_dtype(frame[v]):
            integer.append(v)
        col = pd.to_numeric(frame[v], errors="coerce").to_numpy(dtype=np.float64, na_value=np.nan)
        bad = ~np.isfinite(col)
        if bad.any():
            rows = frame.index[np.flatnonzero(bad)[:5]].tolist()
            raise ValueError(
                f"column {v!r} has missing or non-finite values in rows {rows} "
                f"({int(bad.sum())} in all); impute or drop them before synthesis."
            )
        out[v] = col
    if frame.shape[0] < 2:
        raise ValueError("need at least two records to synthesize.")
    if not isinstance(wname, str) or wname in cfg.variables:
        wname = "weight"
        while wname in cfg.variables:
            wname += "_"
    return pd.DataFrame(out), source, wname, integer


@dataclass(frozen=True)
class _DesignPlan:
    """The design of a quantile synthesis (issue 36, D7), from a SurveyDesign input: the
    first-stage strata (``strata`` column, ``labels`` sorted, record ``codes``, ``sizes``
    n_h, ``stratum_values`` in the column's dtype), each stratum's weight (constant within
    it, checked), ``weight_total`` and the fpc columns' value per stratum (``fpc_values``).
    Unstratified: one pseudo-stratum (``stratified`` False)."""

    strata: str | None
    labels: list[Any]
    codes: np.ndarray
    sizes: np.ndarray
    stratum_values: pd.Series
    strata_dtype: Any
    weights: np.ndarray
    weight_total: float
    fpc: list[str]
    fpc_values: list[dict[str, Any]]

    @property
    def stratified(self) -> bool:
        return self.strata is not None


def _design_plan(design: Any, variables: Any) -> _DesignPlan | None:
    """Check a design input against D6/D7 and describe its strata; None for a DataFrame.

    Refused (``DesignRefused``, naming rows and the fix): real clusters; weights varying within
    a stratum (or within an unstratified design); a stratum or fpc column among the synthesized
    variables; a stratum with fewer than two records.
    """
    from .design_checks import DesignRefused, refuse_clustered

    if isinstance(design, pd.DataFrame) or not (hasattr(design, "data") and hasattr(design, "weights")):
        return None
    refuse_clustered(
        design, "QuantileSynthesizer (DP quantile synthesis)",
        "a record's change moves its cluster's effect, and no differentially private synthesis "
        "of cluster effects is implemented: the quantiles are released for exchangeable records, "
        "so the synthetic records carry no cluster structure and the synthetic designs lack the "
        "design effect")
    data = design.data
    w = np.asarray(design.weights, dtype=float)
    variables = [variables] if isinstance(variables, str) else list(variables or [])
    strata = [c for c in (getattr(design, "strata_vars", None) or []) if c not in ("1", "~1")]
    fpc = list(getattr(design, "fpc_vars", None) or [])
    wname = getattr(design, "weights_var", None)
    clash = [c for c in strata[:1] + fpc if c in variables]
    if clash:
        raise DesignRefused(
            f"QuantileSynthesizer: design column(s) {clash} are also in variables. A stratified "
            "synthesis keeps the strata and fpc as collected (design information); remove them "
            "from variables.", keys=("strata",))
    if not strata:
        if w.size and not np.allclose(w, w[0], rtol=1e-9, atol=0):
            bad = np.flatnonzero(~np.isclose(w, w[0], rtol=1e-9, atol=0))
            raise DesignRefused(
                f"QuantileSynthesizer: the design's weights ({wname or 'weights'}) are unequal "
                f"(e.g. rows {data.index[bad[:5]].tolist()} differ from row {data.index[0]!r}: "
                f"{w[bad[0]]:g} vs {w[0]:g}) and the design has no strata. The quantiles are "
                "released for exchangeable records and every synthetic record gets the same "
                "weight N/n, so weighted synthetic estimates would target the sample, not the "
                "population. Fix: give the weight classes as strata (strata=<a column constant "
                "where the weight is constant>: each stratum is then synthesized with its own "
                "weight, at the same epsilon), or pass a DataFrame (weights 1) and accept that "
                "estimates then target the sample, not the population.", keys=("weights", "strata"))
        fpc_values = [{}]
        if fpc:
            vals = data[fpc].drop_duplicates()
            fpc_values = [dict(zip(fpc, vals.iloc[0].tolist(), strict=True))] if len(vals) == 1 else [{}]
            fpc = fpc if len(vals) == 1 else []
        return _DesignPlan(None, [None], np.zeros(len(data), dtype=np.int64),
                           np.array([len(data)]), pd.Series([None]), None,
                           w[:1].copy(), float(w.sum()), fpc, fpc_values)
    col = strata[0]
    values = data[col]
    codes, uniques = pd.factorize(values, sort=True)
    uniques = pd.Index(uniques).tolist()  # plain Python labels (messages, dict keys)
    H = len(uniques)
    lo = np.full(H, np.inf)
    hi = np.full(H, -np.inf)
    np.minimum.at(lo, codes, w)
    np.maximum.at(hi, codes, w)
    varies = ~np.isclose(lo, hi, rtol=1e-9, atol=0)
    if varies.any():
        bad_strata = [uniques[h] for h in np.flatnonzero(varies)]
        rows = np.flatnonzero(np.isin(codes, np.flatnonzero(varies)) & (w != lo[codes]))
        raise DesignRefused(
            f"QuantileSynthesizer: the weights ({wname or 'weights'}) vary within strata "
            f"{bad_strata[:5]} of {col!r} (e.g. rows {data.index[rows[:5]].tolist()}). A "
            "stratified quantile synthesis releases each stratum's records with its one weight "
            "(parallel composition over strata), so weights varying inside a stratum would be "
            "lost. Fix: strata that are weight classes (e.g. the crossing of the strata with "
            "the weight classes, as a new column given as strata=), or pass a DataFrame "
            "(weights 1) and accept that estimates then target the sample, not the population.",
            keys=("weights", "strata"))
    sizes = np.bincount(codes, minlength=H)
    small = np.flatnonzero(sizes < 2)
    if small.size:
        raise DesignRefused(
            f"QuantileSynthesizer: strata {[uniques[h] for h in small[:5]]} of {col!r} have "
            "fewer than two records; a stratum is synthesized on its own records. Fix: collapse "
            "them with a neighbouring stratum (and its weight class).", keys=("strata",))
    first = np.array([np.flatnonzero(codes == h)[0] for h in range(H)])
    fpc_values = [dict(zip(fpc, data[fpc].iloc[i].tolist(), strict=True)) if fpc else {}
                  for i in first]
    return _DesignPlan(col, uniques, codes.astype(np.int64), sizes,
                       values.iloc[first].reset_index(drop=True), values.dtype,
                       w[first].copy(), float(w.sum()), fpc, fpc_values)


def _fit_block(cfg: _Config, frame: pd.DataFrame, budget, splan, rng: np.random.Generator, bar):
    """Every variable's quantiles on one block of records (the whole input, or one stratum):
    coefficients (dict variable -> DataFrame tau x coefficients), diagnostics, whether a
    non-private start acted, and the hull of achievable predictor rows."""
    n = frame.shape[0]
    grid = cfg.quantiles
    q = grid.size
    coefs: dict[str, pd.DataFrame] = {}
    diags = []
    used_start = False
    hull = np.empty((1, 0))  # achievable predictor rows (without intercept)
    working = np.empty((n, 0))  # one synthetic draw of the predictors (public)
    for j, v in enumerate(cfg.variables):
        preds = cfg.variables[:j]
        y = frame[v].to_numpy()
        X = np.column_stack([np.ones(n), frame[preds].to_numpy()]) if preds else np.ones((n, 1))
        Z = np.column_stack([np.ones(hull.shape[0]), hull])
        P = np.column_stack([np.ones(n), working])
        e = None if budget is None else budget.loc[budget["variable"] == v, "epsilon"].to_numpy()
        exact = None if splan is None else splan.loc[splan["variable"] == v, "sampler"].to_numpy() == "exact"
        B, diag, used = _fit_variable(cfg, X, y, v, Z, P, e, exact, rng, bar)
        used_start |= used
        coefs[v] = pd.DataFrame(B, index=pd.Index(grid, name="tau"), columns=["(Intercept)", *preds])
        diags.append(diag)
        # achievable rows for the next variable and one working synthetic draw
        new_pts = np.column_stack(
            [np.repeat(hull, q, axis=0), (np.repeat(Z, q, axis=0) * np.tile(B, (Z.shape[0], 1))).sum(1)]
        )
        hull = _hull_rows(new_pts)
        k = rng.integers(0, q, n)
        working = np.column_stack([working, (P * B[k]).sum(1)])
    return coefs, pd.concat(diags, ignore_index=True), used_start, hull


def _draw_block(cfg: _Config, coefficients: dict[str, pd.DataFrame], n: int,
                rng: np.random.Generator, integer: list[str]) -> dict[str, np.ndarray]:
    """n synthetic records from one block's coefficients (post-processing)."""
    q = cfg.quantiles.size
    Zs = np.ones((n, 1))
    cols: dict[str, np.ndarray] = {}
    for v in cfg.variables:
        B = coefficients[v].to_numpy()
        k = rng.integers(0, q, n)
        pred = (Zs * B[k]).sum(1)
        Zs = np.column_stack([Zs, pred])
        cols[v] = _finish(pred, cfg.bounds.get(v), v in integer)
    return cols


def _finish(pred: np.ndarray, bounds: tuple[float, float] | None, integer: bool) -> np.ndarray:
    """Post-processing of one synthetic column: clip to the public bounds, round integers."""
    lb, ub = bounds if bounds is not None else (-np.inf, np.inf)
    if integer:
        lo = math.ceil(lb) if math.isfinite(lb) else -np.inf
        hi = math.floor(ub) if math.isfinite(ub) else np.inf
        return np.clip(np.rint(pred), lo, hi).astype(np.int64)
    return np.clip(pred, lb, ub)


def _mechanism(cfg: _Config) -> str:
    if cfg.method == "nonprivate":
        return "quantile-regression (non-private)"
    if cfg.method == "jointexp":
        name = f"jointexp-{cfg.transform}"
        return name if len(cfg.variables) == 1 else name + "+dp-theil-sen-chain"
    return f"kng-{cfg.method}" + ("" if cfg.method == "kng" else f"-{cfg.slopes}")


def _sampler_label(exact: np.ndarray) -> str:
    """"exact" if every quantile was drawn exactly, "mcmc" if none, else "mixed"."""
    exact = np.asarray(exact, dtype=bool)
    return "exact" if exact.all() else ("mcmc" if not exact.any() else "mixed")


def _quantile_budget(cfg: _Config) -> pd.DataFrame:
    if cfg.method == "nonprivate":
        raise ValueError("method='nonprivate' spends no privacy budget and has no quantile budget.")
    parts = []
    for j, v in enumerate(cfg.variables):
        led = split_budget(
            cfg.quantiles, cfg.epsilon * cfg.budget["variables"][j], cfg.method,
            median=cfg.budget["median"][j], anchors=cfg.anchors,
            anchor_share=cfg.budget["anchors"][j], anchor_median=cfg.budget["anchor_median"][j],
            intercept_only=j == 0,
            center=cfg.budget["center"][j] if cfg.method == "jointexp" and cfg.transform == "pareto" else 0.0,
        )
        led.insert(0, "variable", v)
        parts.append(led)
    return pd.concat(parts, ignore_index=True)


def _exact_plan(cfg: _Config) -> pd.DataFrame:
    if cfg.method == "nonprivate":
        raise ValueError("method='nonprivate' samples nothing.")
    grid = cfg.quantiles
    med = int(np.argmin(np.abs(grid - 0.5)))
    parts = []
    for j, v in enumerate(cfg.variables):
        exact = np.zeros(grid.size, dtype=bool)
        if cfg.method == "jointexp":
            exact[:] = True
        elif cfg.sampler == "exact":
            if j == 0:
                exact[:] = True
            elif cfg.method in ("stepwise", "sandwich") and cfg.slopes == "fixed":
                exact[:] = True
                exact[med] = False
        parts.append(pd.DataFrame({"variable": v, "tau": grid, "sampler": np.where(exact, "exact", "mcmc")}))
    return pd.concat(parts, ignore_index=True)


def _fit_variable(cfg: _Config, X, y, v, Z, P, eps, exact, rng, bar):
    """Release one variable's quantiles; returns coefficients, diagnostics and whether a
    non-private start acted on an MCMC chain."""
    grid = cfg.quantiles
    q, p = grid.size, X.shape[1]
    cx = cfg.C_X[v]
    B = np.full((q, p), np.nan)
    if cfg.method == "nonprivate":
        # no clipping: the non-private baseline of seed 004 fits the raw data
        for i, tau in enumerate(grid):
            B[i] = exact_quantile_regression(X, y, tau)
            bar.update(1)
        diag = pd.DataFrame({"variable": v, "tau": grid, "accept_rate": np.nan, "sampler": "exact qr"})
        return B, diag, False

    lb, ub = cfg.bounds[v]
    if cfg.method == "jointexp":
        return _fit_variable_jointexp(cfg, X, y, v, Z, P, eps, rng, bar)
    kw = dict(
        C_X=cx, sensitivity=cfg.sensitivity, n_iter=cfg.n_iter, check_X=Z,
        proposal_rows=P, lb=lb, ub=ub, adapt=cfg.adapt,
        step=cfg.step.get(v) if isinstance(cfg.step, Mapping) else cfg.step,
    )
    accept = np.full(q, np.nan)
    used_start = False

    def draw(i, **extra):
        child = secret_rng(int(rng.integers(0, 2**63)))
        if exact[i]:
            # only the intercept moves: fixed slopes are those of the starting point (the
            # released neighbour(s), which all carry the median's slopes); none if p == 1
            init = extra.get("init")
            slope_vals = None if p == 1 else np.asarray(init, dtype=float)[1:]
            res = kng_sample_intercept_exact(
                X, y, grid[i], eps[i], cx, slopes=slope_vals, sensitivity=cfg.sensitivity,
                lower=extra.get("lower"), upper=extra.get("upper"), check_X=Z, lb=lb, ub=ub,
                random_state=child,
            )
        else:
            res = kng_sample(X, y, grid[i], eps[i], random_state=child, **kw, **extra)
        B[i] = res.beta
        accept[i] = res.accept_rate
        bar.update(1)

    med = int(np.argmin(np.abs(grid - 0.5)))
    if cfg.method == "kng":
        for i in range(q):  # the paper's plain KNG starts every chain at 0
            draw(i, init=None, slopes="varying")
    else:
        main = np.arange(q) if cfg.method == "stepwise" else np.flatnonzero(
            np.isclose(grid[:, None], cfg.anchors[None, :]).any(axis=1)
        )
        start = None
        if cfg.init == "nonprivate":
            start = exact_quantile_regression(clip_predictors(X, cx), y, grid[med])
            used_start = not exact[med]
        draw(med, init=start, slopes="varying")
        fixed = "fixed" if cfg.slopes == "fixed" else "varying"
        prev = med
        for i in [i for i in main[::-1] if i < med]:
            draw(i, init=B[prev], upper=B[prev], slopes=fixed)
            prev = i
        prev = med
        for i in [i for i in main if i > med]:
            draw(i, init=B[prev], lower=B[prev], slopes=fixed)
            prev = i
        if cfg.method == "sandwich":
            done = np.zeros(q, dtype=bool)
            done[main] = True
            order = [i for i in range(med - 1, -1, -1) if not done[i]] + [
                i for i in range(med + 1, q) if not done[i]
            ]
            for i in order:
                lo = max(k for k in range(i) if done[k])
                hi = min(k for k in range(i + 1, q) if done[k])
                draw(i, init=0.5 * (B[lo] + B[hi]), lower=B[lo], upper=B[hi], slopes=fixed)
                done[i] = True
    diag = pd.DataFrame(
        {"variable": v, "tau": grid, "accept_rate": accept, "sampler": np.where(exact, "exact", "mcmc")}
    )
    return B, diag, used_start


def _fit_variable_jointexp(cfg: _Config, X, y, v, Z, P, eps, rng, bar):
    """One variable by JointExp (method="jointexp"); every draw is exact.

    First (intercept-only) variable: all quantiles by one JointExp release on [lb, ub]. A later
    variable is modelled on the previous variable only (a first-order chain X1 -> X2 -> X3;
    earlier predictors get slope 0): its slope s by DP Theil-Sen (share ``budget["median"]``),
    then every quantile's intercept jointly by JointExp on the residuals y - s x (x not
    top-coded; C_X only sets the public slope bound (ub - lb) / C_X) with public bounds [lb - min_z zs, ub - max_z zs] over the hull values z of the
    previous variable: every synthetic prediction zs + b then
    lies in [lb, ub], and the quantiles (one slope, sorted intercepts) never cross.
    """
    grid = cfg.quantiles
    q, p = grid.size, X.shape[1]
    lb, ub = cfg.bounds[v]
    cx = cfg.C_X[v]
    B = np.zeros((q, p))
    eps = list(eps)  # budget rows in order: [slope,] [center,] joint (split_budget)
    center, scale = np.nan, None
    if p == 1:
        target, lo, hi = y, lb, ub
    else:
        # no top-coding: neither the pair slopes (clipped to the public slope bound) nor the
        # residuals (clipped to public bounds) need bounded predictors for their sensitivity,
        # and top-coding would inflate the residuals of the records in the tail
        x = X[:, -1]
        slope = dp_theil_sen_slope(x, y, eps.pop(0), (ub - lb) / cx, rng)
        target = y - slope * x
        h = Z[:, -1] * slope
        lo, hi = lb - float(h.min()), ub - float(h.max())
        B[:, -1] = slope
    if hi - lo <= 1e-9 * max(1.0, ub - lb):
        B[:, 0] = lo  # the bounds leave one intercept (no data used; budget still booked)
    else:
        if cfg.transform == "pareto":
            # the scale's centre: a DP median of the target on the uniform scale (JointExp with
            # one quantile, its own budget row: robust at a small epsilon, an output in an empty
            # region costs n in utility). Width: half the distance from the centre to the nearer
            # public bound (at least (hi - lo) / 1000), post-processing of public values, so the
            # base measure is flat over the bulk and decays like a Pareto tail beyond it. (DP
            # quartiles for the width failed at epsilon 0.025, n = 2000: q75 landed in the empty
            # region above the data, the median at 744 of [0, 730].)
            center = float(joint_exp_quantiles(
                target, [0.5], eps.pop(0), lo, hi, transform="identity",
                random_state=secret_rng(int(rng.integers(0, 2**63)))).values[0])
            scale = max(0.5 * min(center - lo, hi - center), (hi - lo) / 1000.0)
        res = joint_exp_quantiles(target, grid, eps.pop(0), lo, hi, transform=cfg.transform,
                                  center=None if np.isnan(center) else center, scale=scale,
                                  random_state=secret_rng(int(rng.integers(0, 2**63))))
        B[:, 0] = res.values
    bar.update(q)
    diag = pd.DataFrame({"variable": v, "tau": grid, "accept_rate": np.nan, "sampler": "exact",
                         "center": center, "scale": np.nan if scale is None else scale})
    return B, diag, False


def _sampler_notes(cfg: _Config, diagnostics: pd.DataFrame) -> list[str]:
    """Which quantiles were drawn exactly and which by MCMC (facts of the run, no claims)."""
    is_exact = diagnostics["sampler"] == "exact"
    q = cfg.quantiles.size
    med_tau = float(cfg.quantiles[int(np.argmin(np.abs(cfg.quantiles - 0.5)))])

    def describe(mask: pd.Series) -> str:
        parts = []
        for v in cfg.variables:
            sel = mask & (diagnostics["variable"] == v)
            k = int(sel.sum())
            if k == 0:
                continue
            taus = diagnostics.loc[sel, "tau"].to_numpy()
            if k == q:
                what = f"all {q} quantiles"
            elif k == 1 and np.isclose(taus[0], med_tau):
                what = "the median"
            elif k == q - 1 and not np.isclose(taus, med_tau).any():
                what = f"all {q} quantiles but the median"
            else:
                what = "tau = " + ", ".join(f"{t:g}" for t in taus)
            parts.append(f"{v}: {what}")
        return "; ".join(parts)

    notes = []
    if cfg.method == "jointexp":
        what = ("drawn exactly by the joint exponential mechanism (all quantiles of a variable in "
                f"one release, on the {cfg.transform} scale; no MCMC)")
    else:
        what = "drawn exactly from the KNG density (only the intercept moves; no MCMC)"
    if is_exact.all():
        return [f"every quantile was {what}."]
    if is_exact.any():
        notes.append(f"{what}: {describe(is_exact)}.")
    notes.append(
        f"drawn by MCMC ({describe(~is_exact)}): the chains ran a fixed {cfg.n_iter} iterations "
        "per quantile and not to verified convergence."
    )
    return notes
