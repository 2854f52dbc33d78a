"""AIM and MST: differentially private whole-file synthesis from noisy marginals (issue 40, item 2).

Both are OpenDP's implementations (``opendp.extras.mbi``: McKenna et al.'s MST, 2021, and AIM,
2022, with the Private-PGM graphical model fit), run as synthesizers of the one protocol
(:mod:`surveysynth.synth.base`): settings in ``__init__``, ``fit(design)`` spends the budget,
``release(m)`` returns m synthetic survey designs (post-processing of the fitted model).

What the package adds around OpenDP's algorithms (docs/marginal_dp.md):

* **Public domains.** Every synthesized variable is categorical on a public domain: a
  categorical column's categories (``categories``, a pandas ``category`` dtype's categories, a
  boolean's two values, or a design's strata labels: design information), a continuous column's
  bins on public edges (``bins``; the first and last edge are public bounds, values outside are
  counted into the end bins). Nothing about the domain is read off the data, so the mechanism
  needs no budget for it. Or, for a continuous column with public bounds only (``dp_bins``),
  edges chosen under budget: JointExp quantiles (:func:`dp_bin_edges`, pure DP under
  replace-one, :mod:`surveysynth.synth.private_quantiles`) spending ``dp_bins_share`` of the
  budget, booked in the ledger before the data are read.
* **Survey weights** are carried as a synthesized weight class on public edges
  (``weight_bins``): each record's class is one more variable of the model, and a synthetic
  record's weight is its class's midpoint, all weights scaled to the public population size N.
  A design with equal weights needs none (every released weight is N / n).
* **Design columns** as the pseudo-posterior synthesizers handle them: clustered designs are
  refused (:func:`~surveysynth.synth.design_checks.refuse_clustered`: a record's cluster effect
  is not modelled); strata may be synthesized as a variable; the synthetic designs carry
  weights only (full synthesis: the combining rule of fully synthetic data).
* **The measurement** runs on the records' cell indices (an integer array), not on a polars
  frame: OpenDP 0.16's polars plugin is built for polars 1.36.1 and refuses other polars
  versions (this project's samplics needs polars >= 1.37). The marginals' stable transformation
  is this module's (:func:`stable_marginals`: counts per cell, stability d_in -> d_in per
  marginal under the symmetric distance); selection, noise, budget split and model fit are
  OpenDP's own code (its AIM / MST ``make_marginals``, one-way marginals by its
  ``make_noise_marginals``) composed by OpenDP's adaptive composition. The privacy loss is
  OpenDP's ``measurement.map(2)`` (replace-one neighbours are at symmetric distance 2), which
  the fit checks against the budget.
* **Randomness.** OpenDP's samplers (Laplace or discrete Gaussian noise on integer counts,
  noisy-max selection) draw from the operating system's entropy and cannot be seeded:
  ``random_state`` seeds only the post-processing (the synthetic records drawn from the fitted
  model and their order), so a seeded release is not reproducible bit for bit; the record
  says so.
"""

from __future__ import annotations

import contextlib
import math
import warnings
from collections.abc import Mapping, Sequence
from typing import Any, ClassVar
from unittest import mock

import numpy as np
import pandas as pd

from ..privacy.randomness import secret_rng
from .base import Synthesizer
from .params import RELEASE, Interval, Options

__all__ = ["AIM", "MST", "MarginalSynthesizer", "PRIVACY_KINDS"]

#: "pure": pure epsilon-DP (OpenDP's max_divergence: Laplace noise); "zcdp": rho-zCDP
#: (zero_concentrated_divergence: discrete Gaussian noise)
PRIVACY_KINDS = ("pure", "zcdp")
#: replace-one neighbours as OpenDP measures them: symmetric distance 2
D_IN = 2
_WCLASS = "__weight_class__"
#: largest joint domain the release samples from directly (cells)
MAX_CELLS = 5_000_000
#: AIM rounds with less than this share of AIM's budget are not run (:func:`aim_step_guard`)
MIN_STEP_SHARE = 1e-6


def opendp_prelude() -> Any:
    """OpenDP with the features this module uses (contrib; honest-but-curious: a Python-defined
    transformation whose stability map OpenDP cannot check, :func:`stable_marginals`)."""
    import opendp.prelude as dp

    dp.enable_features("contrib", "honest-but-curious")
    return dp


def stable_marginals(dom: Any, metric: Any, lp: Any, cards: dict[str, int],
                      cliques: Sequence[Sequence[str]]) -> Any:
    """OpenDP transformation: records' cell indices (n x k int array) -> exact counts of each
    clique's marginal (typed dict of int32 arrays). One record added or removed moves each
    marginal's counts by 1 in one cell: stability d_in -> d_in in the L1 and L2 norms."""
    # OpenDP's own helpers for user-defined transformations and its mbi marginal types
    # (private names; the opendp pin >=0.16,<0.17 in pyproject.toml fixes them)
    from opendp._internal import _make_transformation  # noqa: PLC2701
    from opendp.extras.mbi._utilities import typed_dict_distance, typed_dict_domain  # noqa: PLC2701
    from opendp.extras.numpy import arrayd_domain

    cols = list(cards)
    cliques = [tuple(c) for c in cliques]

    def shape(c: tuple[str, ...]) -> tuple[int, ...]:
        return tuple(cards[v] for v in c)

    def counts(x: np.ndarray) -> dict[tuple[str, ...], np.ndarray]:
        out = {}
        for c in cliques:
            idx = tuple(x[:, cols.index(v)] for v in c)
            size = int(np.prod(shape(c)))
            flat = np.ravel_multi_index(idx, shape(c)) if c else np.zeros(len(x), np.int64)
            out[c] = np.bincount(flat, minlength=size).reshape(shape(c)).astype(np.int32)
        return out

    return _make_transformation(
        dom, metric,
        output_domain=typed_dict_domain({c: arrayd_domain(shape=shape(c), T="i32") for c in cliques}),
        output_metric=typed_dict_distance(lp), function=counts,
        stability_map=lambda d_in: {c: d_in for c in cliques})


def first_cliques(cards: Mapping[str, int]) -> list[tuple[str, ...]]:
    """The marginals of the first step: every variable's one-way marginal, or, when a weight
    class is synthesized, every variable's two-way marginal with the weight class (they hold
    the one-way marginals of both).

    Why the pairs: a weighted synthetic estimate is right only if the model relates each
    variable to the weight class. Left to OpenDP's AIM, the pairs with the weight class were
    often never selected (on apistrat, 2 of 4 AIM fits at epsilon 2 had the weight class
    independent of api00 in the model, so the weighted synthetic mean was the unweighted one,
    9 points below the confidential weighted mean); measuring them first costs no more budget
    (the same k marginals of sensitivity 2, one fewer) and more cells of noise per one-way
    marginal (the weight classes' count times the variance)."""
    names = list(cards)
    if _WCLASS in cards and len(names) > 1:
        return [(v, _WCLASS) for v in names if v != _WCLASS]
    return [(v,) for v in names]


def oneway_measurement(dom: Any, metric: Any, measure: Any, cards: dict[str, int],
                       budget: float, cliques: Sequence[tuple[str, ...]] | None = None) -> Any:
    """OpenDP measurement of the first step's marginals (``cliques``; default every variable's
    one-way marginal) as noisy counts spending ``budget`` at replace-one neighbours: the noise
    scale is the analytic one (k marginals of sensitivity 2 each: Laplace scale 2 k / epsilon;
    zCDP: sigma = 2 / sqrt(2 rho / k)), checked by OpenDP's own map (and moved up by an ulp at
    a time until the map is within budget)."""
    dp = opendp_prelude()
    from opendp.extras.mbi._utilities import get_associated_metric, make_noise_marginals  # noqa: PLC2701

    ones = [tuple(c) for c in cliques] if cliques is not None else [(c,) for c in cards]
    k = len(ones)
    t_one = stable_marginals(dom, metric, get_associated_metric(measure), cards, ones)
    pure = measure == dp.max_divergence()
    scale = D_IN * k / budget if pure else D_IN / math.sqrt(2 * budget / k)
    for _ in range(64):
        m = t_one >> make_noise_marginals(*t_one.output_space, measure, ones, scale)
        if m.map(D_IN) <= budget:
            return m
        scale = float(np.nextafter(scale, np.inf)) * (1 + 1e-12)
    raise AssertionError(f"no noise scale near {scale} spends at most {budget}")  # pragma: no cover


def aim_step_guard(make_round: Any, floor: float) -> Any:
    """OpenDP 0.16's AIM round builder (``_aim._make_aim_marginal``) that ends the loop (returns
    None, which OpenDP's loop reads as "stop") on a round whose budget is below ``floor``.

    Why (issue 40 leftover; OpenDP's bug, worked around here): OpenDP's AIM loop caps each
    round at the prior float of what is left (``min(d_step, prior(d_out - d_spent))``); a
    capped round spends all but a few ulps (the select/measure split rounds down, the odometer
    rounds up), so the next round gets a floating-point crumb (5.55e-17 of an AIM budget of
    0.5, measured) and the loop goes on, because only an exact zero stops it. Under pure DP the
    crumb's noisy-max selection needs a noise scale near 1e17, beyond the 2**49 that OpenDP's
    bounds search explores; the search then fails inside the selection ("scale (-0.5) must not
    be finite and non-negative", an OpenDPException that OpenDP's ``except ValueError`` does
    not catch) and the whole fit fails after the budget is booked. Under zCDP the crumb
    round runs with enormous noise (useless, harmless). The remainder left unspent is below
    ``floor`` (a millionth of AIM's budget): spending less than the budget is always safe."""

    def guarded(input_domain: Any, input_metric: Any, output_measure: Any, d_in: Any,
                d_out: float, *args: Any, **kwargs: Any) -> Any:
        if not d_out >= floor:
            return None
        return make_round(input_domain, input_metric, output_measure, d_in, d_out,
                          *args, **kwargs)

    return guarded


def make_marginal_measurement(cards: dict[str, int], algorithm: Any, privacy: str,
                              budget: float, oneway_split: float = 0.5) -> Any:
    """The OpenDP measurement of AIM or MST on records' cell indices: the first step's marginals
    (:func:`first_cliques`: one-way marginals of every variable, or each variable with the
    weight class; ``oneway_split`` of the budget), then the algorithm's selection and
    measurement with the rest, composed adaptively; its output is (marginals, fitted MarkovRandomField).
    ``measurement.map(2)`` is the privacy loss under replace-one neighbours (epsilon for
    ``privacy="pure"``, rho for "zcdp")."""
    dp = opendp_prelude()
    from mbi import Domain
    from opendp._internal import _new_pure_function  # noqa: PLC2701
    from opendp.combinators import make_adaptive_composition
    from opendp.extras.mbi import _aim, _mst  # noqa: PLC2701
    from opendp.extras.mbi._utilities import Marginals, prior  # noqa: PLC2701

    cols = list(cards)
    measure = dp.max_divergence() if privacy == "pure" else dp.zero_concentrated_divergence()
    dom = dp.user_domain("SurveysynthCellIndices",
                         lambda x: isinstance(x, np.ndarray) and x.ndim == 2 and x.shape[1] == len(cols))
    metric = dp.symmetric_distance()
    d_one = budget * oneway_split
    d_multi = float(prior(prior(budget - d_one)))
    m_one = oneway_measurement(dom, metric, measure, cards, d_one, first_cliques(cards))
    module = _aim if type(algorithm).__name__ == "AIM" else _mst

    class _Columns:  # what OpenDP's make_marginals reads off its input domain
        columns = cols

    def stable(_domain: Any, _metric: Any, lp_: Any, cliques: Sequence) -> Any:
        return stable_marginals(dom, metric, lp_, cards, cliques)

    def run(qbl: Any) -> Any:
        marg = Marginals().add(*qbl(m_one))
        model = algorithm.estimator(Domain.fromdict(cards), marg.flatten())
        # OpenDP's algorithm with this module's stable marginals on cell indices (its own
        # reads a polars LazyFrame) and, for AIM, its round builder behind the crumb guard
        # (aim_step_guard: OpenDP 0.16's loop fails on a floating-point remainder); the rest
        # of its code runs as shipped. AIM's rounds are built while m_multi runs, so the
        # patches cover the run as well as the construction.
        patches = [mock.patch.object(module, "make_stable_marginals", stable)]
        if module is _aim:
            patches.append(mock.patch.object(
                _aim, "_make_aim_marginal",
                aim_step_guard(_aim._make_aim_marginal, d_multi * MIN_STEP_SHARE)))  # noqa: SLF001
        with contextlib.ExitStack() as stack:
            for p in patches:
                stack.enter_context(p)
            m_multi = algorithm.make_marginals(_Columns(), metric, measure, D_IN, d_multi,
                                               marginals=marg, model=model)
            return qbl(m_multi)

    return make_adaptive_composition(dom, metric, measure, D_IN, [d_one, d_multi]) \
        >> _new_pure_function(run)


def _dp_bin_spec(v: str, spec: Any, col: pd.Series) -> dict[str, Any]:
    """The public part of a ``dp_bins`` entry, checked: bounds and the number of bins."""
    if not isinstance(spec, Mapping) or set(spec) != {"bounds", "bins"}:
        raise ValueError(f"dp_bins[{v!r}] = {spec!r}: give {{'bounds': [lo, hi], 'bins': k}} "
                         "(public bounds and the number of bins).")
    lo_hi = np.asarray(spec["bounds"], dtype=float)
    k = spec["bins"]
    if lo_hi.shape != (2,) or not np.all(np.isfinite(lo_hi)) or not lo_hi[0] < lo_hi[1]:
        raise ValueError(f"dp_bins[{v!r}]['bounds'] = {spec['bounds']!r}: two finite public "
                         "numbers, lower < upper (from public knowledge, not the data).")
    if isinstance(k, bool) or not isinstance(k, (int, np.integer)) or not 2 <= k <= 1000:
        raise ValueError(f"dp_bins[{v!r}]['bins'] = {k!r}: an integer from 2 to 1000.")
    if not pd.api.types.is_numeric_dtype(col):
        raise ValueError(f"dp_bins[{v!r}]: column {v!r} is not numeric ({col.dtype}); give "
                         "categories for it instead.")
    return {"kind": "bin", "edges": None, "bounds": (float(lo_hi[0]), float(lo_hi[1])),
            "k": int(k), "integer": pd.api.types.is_integer_dtype(col)}


def dp_bin_edges(x: np.ndarray, bounds: tuple[float, float], k: int, epsilon: float,
                 random_state: Any = None) -> np.ndarray:
    """Bin edges chosen under pure ``epsilon``-DP (replace-one neighbours): the public bounds
    and JointExp estimates of the quantiles 1/k, ..., (k-1)/k of ``x`` (clipped to the bounds;
    :func:`~surveysynth.synth.private_quantiles.joint_exp_quantiles`, exact sampler on a public
    grid, all quantiles under the one epsilon). Tied edges are merged (post-processing), so
    there may be fewer than k bins. Nothing else about ``x`` enters the edges."""
    from .private_quantiles import joint_exp_quantiles

    lo, hi = bounds
    q = np.arange(1, k) / k
    res = joint_exp_quantiles(np.asarray(x, dtype=float), q, float(epsilon), lo, hi,
                              random_state=random_state)
    return np.unique(np.concatenate([[lo], np.asarray(res.values, dtype=float), [hi]]))


def dp_bins_budget(privacy: str, budget: float, share: float, n_vars: int) -> tuple[float, float]:
    """Split ``budget`` (epsilon, or rho for "zcdp") between ``n_vars`` dp_bins columns and the
    marginals: (the JointExp epsilon of each column, the marginals' budget). The columns' charges
    and the marginals' compose sequentially (pure: epsilons add; zCDP: rhos add, and a pure
    epsilon-DP step is epsilon^2 / 2-zCDP, Bun & Steinke 2016, so a column's rho share r buys
    epsilon sqrt(2 r))."""
    if n_vars == 0:
        return 0.0, float(budget)
    if isinstance(share, bool) or not isinstance(share, (int, float, np.floating)) \
            or not 0 < share < 1:
        raise ValueError(f"dp_bins_share={share!r}: a share of the budget in (0, 1), e.g. 0.1.")
    each = budget * share / n_vars
    rest = float(prior_float(budget - each * n_vars))
    eps = each if privacy == "pure" else math.sqrt(2 * each)
    return float(eps), rest


def prior_float(x: float) -> float:
    """The next float below ``x`` (so a sum of shares cannot round above the budget)."""
    return float(np.nextafter(x, -np.inf))


class MarginalSynthesizer(Synthesizer):
    """Base of :class:`AIM` and :class:`MST` (see the module docstring).

    Parameters
    ----------
    variables : the columns to synthesize (each categorical on a public domain or binned).
    categories : ``{column: [values]}``, the public category sets of categorical columns (a
        pandas ``category`` column's own categories, a boolean's and the design strata's labels
        are used when not given).
    bins : ``{column: [edges]}``, public bin edges of continuous columns (increasing; the
        first and last are public bounds: values outside are counted in the end bins).
    dp_bins : ``{column: {"bounds": [lo, hi], "bins": k}}``, continuous columns whose k bins'
        inner edges are chosen under budget (JointExp quantiles at 1/k, ..., (k-1)/k between
        the public bounds; tied edges merged, so a column may get fewer bins).
    dp_bins_share : the share of the budget spent on the ``dp_bins`` edges (split equally over
        those columns; the rest goes to the marginals). Under zCDP a share rho_v of one
        column buys JointExp at epsilon sqrt(2 rho_v) (pure epsilon-DP is epsilon^2 / 2-zCDP).
    weight_bins : public edges of the weight classes (needed when the weights vary).
    privacy : "pure" (epsilon-DP, Laplace noise) or "zcdp" (rho-zCDP, discrete Gaussian noise).
    epsilon : the budget: epsilon for "pure", rho for "zcdp".
    m : synthetic data sets per release (post-processing of one fit: no budget).
    population_size : public N the released weights sum to (default: the confidential sum,
        then listed as published without budget); or ``{stratum: N_h}``, the public stratum
        population sizes of a stratified design whose strata column is synthesized: each
        synthetic stratum's weights are then scaled to sum to its N_h (post-stratification on
        public totals, post-processing), which corrects the weight classes' midpoints, and a
        design whose weights are constant within strata needs no ``weight_bins``.
    iters : mirror-descent iterations of each Private-PGM fit (post-processing).
    random_state : None (OS entropy) or a seed for the post-processing (never OpenDP's noise).
    max_epsilon : declared total of the budget account (in the unit of ``privacy``).
    """

    kind: ClassVar[str] = "full"
    algorithm_name: ClassVar[str] = ""
    #: every setting's allowed values (surveysynth.synth.params); AIM adds degree and rounds
    _parameter_constraints: ClassVar[dict[str, list[Any]]] = {
        "variables": [None, "sequence"],
        "categories": [None, dict],
        "bins": [None, dict],
        "weight_bins": [None, "array-like"],
        "privacy": [Options(*PRIVACY_KINDS)],
        "epsilon": [Interval("number", 0, None, closed="neither")],
        "iters": [Interval("integer", 1, None)],
        "dp_bins": [None, dict],
        "dp_bins_share": [Interval("number", 0, 1, closed="neither")],
        **RELEASE,
        # public stratum sizes {stratum: N_h} post-stratify the synthetic weights
        "population_size": [*RELEASE["population_size"], dict],
    }

    def __init__(self, *, variables: Sequence[str] | None = None,
                 categories: Mapping[str, Sequence[Any]] | None = None,
                 bins: Mapping[str, Sequence[float]] | None = None,
                 weight_bins: Sequence[float] | None = None, privacy: str = "pure",
                 epsilon: float = 1.0, m: int = 5, population_size: float | None = None,
                 iters: int = 1000, random_state: Any = None,
                 max_epsilon: float | None = None,
                 dp_bins: Mapping[str, Mapping[str, Any]] | None = None,
                 dp_bins_share: float = 0.1) -> None:
        self.variables = variables
        self.categories = categories
        self.bins = bins
        self.dp_bins = dp_bins
        self.dp_bins_share = dp_bins_share
        self.weight_bins = weight_bins
        self.privacy = privacy
        self.epsilon = epsilon
        self.m = m
        self.population_size = population_size
        self.iters = iters
        self.random_state = random_state
        self.max_epsilon = max_epsilon

    # ------------------------------------------------------------------ hooks
    def _algorithm(self) -> Any:  # pragma: no cover
        raise NotImplementedError

    def _estimator(self) -> Any:
        from mbi.estimation import mirror_descent

        iters = int(self.iters)

        def estimator(domain: Any, loss_fn: Any, *, potentials: Any = None) -> Any:
            return mirror_descent(domain, loss_fn, potentials=potentials, iters=iters)

        return estimator

    # ------------------------------------------------------------------ checks
    def _check_settings(self) -> None:
        """Cross-setting rules (each setting alone: the constraint table, check_params)."""
        if not self.variables:
            raise ValueError("variables: give the list of columns to synthesize, e.g. "
                             "variables=['stype', 'api00'].")

    def check_design(self, design: Any) -> None:
        """Refuse a clustered design (no budget used)."""
        from .design_checks import refuse_clustered

        if isinstance(design, pd.DataFrame):
            return
        refuse_clustered(
            design, f"{self.algorithm_name} (DP marginal-based synthesis)",
            "a record's change moves its cluster's effect, and the noisy marginals describe "
            "exchangeable records: the synthetic records carry no cluster structure, so the "
            "synthetic designs would lack the design effect")

    def _domains(self, frame: pd.DataFrame, strata: list[str]) -> dict[str, dict[str, Any]]:
        """Each variable's public domain: {"kind": "cat", "values": [...]} or {"kind": "bin",
        "edges": array}; the categories of strata columns are design information."""
        cats = dict(self.categories or {})
        bins = dict(self.bins or {})
        dpb = dict(self.dp_bins or {})
        unknown = sorted((set(cats) | set(bins) | set(dpb)) - set(self.variables))
        if unknown:
            raise ValueError(f"categories/bins/dp_bins name {unknown}, which are not among "
                             f"variables {list(self.variables)}: add them to variables or drop "
                             "them.")
        both = sorted(set(bins) & set(dpb))
        if both:
            raise ValueError(f"{both} have both public bins and dp_bins: give one of them.")
        missing = [v for v in self.variables if v not in frame.columns]
        if missing:
            raise ValueError(f"variables {missing} are not columns of the data (columns: "
                             f"{list(frame.columns)[:12]}).")
        out: dict[str, dict[str, Any]] = {}
        for v in self.variables:
            col = frame[v]
            if v in dpb:
                out[v] = _dp_bin_spec(v, dpb[v], col)
                continue
            if v in bins:
                edges = np.asarray(bins[v], dtype=float)
                if edges.ndim != 1 or edges.size < 2 or not np.all(np.diff(edges) > 0) \
                        or not np.all(np.isfinite(edges)):
                    raise ValueError(f"bins[{v!r}] = {list(bins[v])}: give at least two finite, "
                                     "strictly increasing public edges.")
                if not pd.api.types.is_numeric_dtype(col):
                    raise ValueError(f"bins[{v!r}]: column {v!r} is not numeric ({col.dtype}); "
                                     "give categories for it instead.")
                out[v] = {"kind": "bin", "edges": edges, "integer": pd.api.types.is_integer_dtype(col)}
                continue
            if v in cats:
                values = list(cats[v])
            elif isinstance(col.dtype, pd.CategoricalDtype):
                values = list(col.cat.categories)
            elif pd.api.types.is_bool_dtype(col):
                values = [False, True]
            elif v in strata:
                values = sorted(col.dropna().unique().tolist())
            else:
                raise ValueError(
                    f"variable {v!r} ({col.dtype}) has no public domain: give its category set "
                    f"(categories={{{v!r}: [...]}}) or, if it is continuous, public bin edges "
                    f"(bins={{{v!r}: [...]}}) or public bounds for edges chosen under budget "
                    f"(dp_bins={{{v!r}: {{'bounds': [lo, hi], 'bins': 5}}}}). Its categories "
                    "are not read off the data: a rare "
                    "category's presence would reveal a record.")
            if len(set(values)) != len(values) or len(values) < 1:
                raise ValueError(f"categories[{v!r}] = {values}: give distinct values.")
            bad = ~col.isin(values).to_numpy()
            if bad.any():
                rows = np.flatnonzero(bad)[:5].tolist()
                raise ValueError(f"column {v!r}: rows {rows} hold values outside its public "
                                 f"categories {values[:10]} (e.g. {col.iloc[rows[0]]!r}): add them "
                                 "to categories or recode them.")
            out[v] = {"kind": "cat", "values": values}
        return out

    def _population(self, design: Any) -> float:
        """A number N (the base class's rule) or public stratum sizes {stratum: N_h}."""
        N = self.population_size
        self.stratum_sizes_: dict[Any, float] | None = None
        if not isinstance(N, Mapping):
            return super()._population(design)
        sizes = {}
        for h, v in N.items():
            if isinstance(v, bool) or not isinstance(v, (int, float, np.integer, np.floating)) \
                    or not (np.isfinite(v) and v > 0):
                raise ValueError(f"population_size[{h!r}] = {v!r}: each stratum's public "
                                 "population size must be a positive number.")
            sizes[h] = float(v)
        if not sizes:
            raise ValueError("population_size = {}: give {stratum: N_h} for every stratum.")
        self.population_size_given_ = True
        self.stratum_sizes_ = sizes
        return float(sum(sizes.values()))

    def _check_stratum_sizes(self, strata: list[str], domains: dict[str, dict[str, Any]],
                             w: np.ndarray, frame: pd.DataFrame) -> str | None:
        """The synthesized strata column the stratum sizes belong to (None without them)."""
        if self.stratum_sizes_ is None:
            return None
        if len(strata) != 1 or strata[0] not in domains:
            raise ValueError(
                "population_size by stratum needs a stratified design whose one strata column "
                f"is among variables (strata: {strata or 'none'}; variables: "
                f"{list(self.variables)}): add the strata column to variables, or give one "
                "public N.")
        sv = strata[0]
        labels = domains[sv].get("values", [])
        if set(labels) != set(self.stratum_sizes_):
            raise ValueError(f"population_size by stratum names {sorted(map(str, self.stratum_sizes_))}"
                             f" but the strata column {sv!r} has the public labels "
                             f"{sorted(map(str, labels))}: give N_h for each of them.")
        if self.weight_bins is None:
            by = pd.Series(w).groupby(frame[sv].to_numpy()).agg(lambda x: np.ptp(x))
            varying = by[by > 1e-9 * max(1.0, float(np.max(w)))]
            if len(varying):
                raise ValueError(
                    f"the weights vary within strata {list(varying.index[:5])} of {sv!r}: give "
                    "weight_bins as well (the stratum sizes then scale each stratum's synthetic "
                    "weights to its N_h), or use a design with equal weights within strata.")
        return sv

    def _weight_class(self, w: np.ndarray, wname: str, strata: list[str],
                      domains: dict[str, dict[str, Any]], frame: pd.DataFrame) -> tuple[dict, dict]:
        """The weight class's codes and out-of-edge count (adds its domain), or the stratum
        sizes' check; refuses varying weights with neither."""
        codes, outside = {}, {}
        varying = w.size and not np.allclose(w, w[0])
        self.strata_var_ = self._check_stratum_sizes(strata, domains, w, frame)
        if self.strata_var_ is not None:
            varying = False  # the stratum sizes carry the weights between strata
        if self.weight_bins is not None:
            we = np.asarray(self.weight_bins, dtype=float)
            if we.ndim != 1 or we.size < 2 or not np.all(np.diff(we) > 0) or we[0] < 0:
                raise ValueError(f"weight_bins = {list(self.weight_bins)}: give at least two "
                                 "non-negative, strictly increasing public edges.")
            outside["weights"] = int(np.count_nonzero((w < we[0]) | (w > we[-1])))
            codes[_WCLASS] = np.clip(np.searchsorted(we, w, side="right") - 1, 0, we.size - 2)
            domains[_WCLASS] = {"kind": "wclass", "edges": we}
        elif varying:
            raise ValueError(
                f"the design's weights ({wname!r}) vary (from {w.min():.4g} to {w.max():.4g}) but "
                "weight_bins is not given: give public weight-class edges, e.g. weight_bins="
                "[0, 10, 20, 50, 100], so the weights are carried as a synthesized weight class "
                "and weighted synthetic estimates target the population.")
        return codes, outside

    def _book_and_choose_edges(self, domains: dict[str, dict[str, Any]],
                               frame: pd.DataFrame) -> tuple[float, dict, list[str]]:
        """Book the dp_bins edges and the marginals in the ledger (one booking: refused
        together), then choose the dp_bins edges (the first use of the data). Returns the
        marginals' budget, their ledger entry and the dp_bins columns."""
        dp_vars = [v for v, d in domains.items() if d["kind"] == "bin" and d["edges"] is None]
        budget = float(self.epsilon)
        eps_edges, budget_marg = dp_bins_budget(self.privacy, budget, self.dp_bins_share,
                                                len(dp_vars))
        unit = "pure DP (epsilon)" if self.privacy == "pure" else "zCDP (rho)"
        entries = [{"step": f"bin edges of {v!r} (JointExp quantiles, {domains[v]['k']} bins "
                            f"between public bounds {domains[v]['bounds']})",
                    "epsilon": budget * self.dp_bins_share / len(dp_vars), "charge": "epsilon",
                    "measure": unit, "jointexp_epsilon": eps_edges} for v in dp_vars]
        entries.append({"step": f"fit ({self.algorithm_name}: first-step marginals, selection "
                                "and measured marginals)", "epsilon": budget_marg,
                        "charge": "epsilon", "measure": unit})
        self._spend_all(entries)
        for v in dp_vars:
            domains[v]["edges"] = dp_bin_edges(frame[v].to_numpy(dtype=float),
                                               domains[v]["bounds"], domains[v]["k"], eps_edges,
                                               random_state=secret_rng(None))
        return budget_marg, self.ledger_[-1], dp_vars

    # ------------------------------------------------------------------ fit
    def _fit(self, design: Any, rng: np.random.Generator) -> None:
        from .base import _as_cols

        self._check_settings()
        self._m(None)
        self.check_design(design)
        if isinstance(design, pd.DataFrame):
            frame, w, wname, strata = design, np.ones(len(design)), "weight", []
        else:
            frame = design.data
            w = np.asarray(design.weights, dtype=float)
            wname = getattr(design, "weights_var", None) or "weight"
            wname = wname if isinstance(wname, str) else wname[0]
            strata = _as_cols(getattr(design, "strata_vars", None))
        if wname in self.variables:
            raise ValueError(f"variables include the weights column {wname!r}: the weights are "
                             "carried as a weight class (weight_bins), not as a variable.")
        self.population_ = self._population(design if not isinstance(design, pd.DataFrame)
                                            else _Unit(len(frame)))
        domains = self._domains(frame, strata)
        n = len(frame)
        for v, d in domains.items():
            if d["kind"] == "bin":
                x = frame[v].to_numpy(dtype=float)
                if np.isnan(x).any():
                    rows = np.flatnonzero(np.isnan(x))[:5].tolist()
                    raise ValueError(f"column {v!r}: missing values in rows {rows}; impute or "
                                     "drop them before synthesis (no missing-value category).")
        codes, outside = self._weight_class(w, wname, strata, domains, frame)
        # every check done: the budget is booked before the data are touched (a failing fit
        # has still used them), then the dp_bins edges are chosen
        budget_marg, fit_entry, dp_vars = self._book_and_choose_edges(domains, frame)
        for v, d in domains.items():
            if d["kind"] == "bin":
                x = frame[v].to_numpy(dtype=float)
                e = d["edges"]
                outside[v] = int(np.count_nonzero((x < e[0]) | (x > e[-1])))
                codes[v] = np.clip(np.searchsorted(e, x, side="right") - 1, 0, e.size - 2)
            elif d["kind"] == "cat":
                codes[v] = pd.Categorical(frame[v], categories=d["values"]).codes.astype(np.int64)
        self.data_outside_bounds_ = outside  # confidential: curator only
        if any(outside.values()):
            warnings.warn(
                "confidential values outside the public bin edges (curator only: "
                + ", ".join(f"{v}: {c} of {n}" for v, c in outside.items() if c)
                + "); they are counted in the end bins, so the synthetic values stay inside the "
                "edges. Widen the edges if they were meant to cover the population.",
                UserWarning, stacklevel=3)
        cards = {v: (len(d["values"]) if d["kind"] == "cat" else d["edges"].size - 1)
                 for v, d in domains.items()}
        cells = math.prod(cards.values())
        if cells > MAX_CELLS:
            raise ValueError(f"the variables' joint domain has {cells:,} cells (> {MAX_CELLS:,}): "
                             "use fewer variables or coarser bins.")
        X = np.column_stack([codes[v] for v in cards]).astype(np.int64)
        meas = make_marginal_measurement(cards, self._algorithm(), self.privacy, budget_marg)
        loss = float(meas.map(D_IN))
        if loss > budget_marg * (1 + 1e-9):  # pragma: no cover - OpenDP's search guarantees it
            raise AssertionError(f"OpenDP measures a privacy loss {loss} above the budget "
                                 f"{budget_marg}")
        fit_entry["opendp_map"] = loss
        marginals, model = meas(X)
        self.n_ = n
        self.cards_ = cards
        self.domains_ = domains
        self.weights_name_ = wname
        self.as_category_ = {v for v in self.variables
                             if isinstance(frame[v].dtype, pd.CategoricalDtype)}
        self.privacy_loss_ = loss
        self.dp_binned_ = dp_vars
        self.cliques_ = [tuple(m.clique) for m in marginals.flatten()]
        self.model_ = model
        probs = np.asarray(model.project(list(cards)).values, dtype=float).ravel()
        probs = np.clip(probs, 0, None)
        self.joint_ = probs / probs.sum()  # DP: post-processing of the noisy marginals

    # ------------------------------------------------------------------ release
    def _synthesize(self, m: int, rng: np.random.Generator) -> tuple[list[pd.DataFrame], dict]:
        names = list(self.cards_)
        shape = tuple(self.cards_.values())
        frames = []
        for _ in range(m):
            cell = rng.choice(self.joint_.size, size=self.n_, p=self.joint_)
            idx = np.unravel_index(cell, shape)
            f = {}
            w = np.ones(self.n_)
            for v, ix in zip(names, idx, strict=True):
                d = self.domains_[v]
                if d["kind"] == "cat":
                    vals = np.asarray(d["values"], dtype=object)[ix]
                    f[v] = (pd.Categorical(vals, categories=d["values"]) if v in self.as_category_
                            else pd.Series(vals).infer_objects().to_numpy())
                elif d["kind"] == "bin":
                    e = d["edges"]
                    x = rng.uniform(e[ix], e[ix + 1])
                    f[v] = np.clip(np.round(x), np.ceil(e[0]), np.floor(e[-1])) if d["integer"] else x
                else:  # the weight class: its midpoint
                    e = d["edges"]
                    w = 0.5 * (e[ix] + e[ix + 1])
            frame = pd.DataFrame({v: f[v] for v in names if v != _WCLASS})
            w = w * (self.population_ / w.sum())
            if self.strata_var_ is not None:  # post-stratified to the public N_h
                h = np.asarray(frame[self.strata_var_], dtype=object)
                for lab, N_h in self.stratum_sizes_.items():
                    at = h == lab
                    if at.any():
                        w[at] *= N_h / w[at].sum()
            frame[self.weights_name_] = w
            frames.append(frame)
        return frames, {"weights": self.weights_name_}

    # ------------------------------------------------------------------ privacy
    def _privacy_facts(self, m: int) -> dict[str, Any]:
        binned = [v for v, d in self.domains_.items() if d["kind"] == "bin"]
        return {
            "family": "marginal_dp",
            "mechanism": f"{self.algorithm_name} (OpenDP opendp.extras.mbi, Private-PGM)",
            "facts": {"algorithm": self.algorithm_name, "measure": self.privacy,
                      "budget": float(self.epsilon), "variables": len(self.variables),
                      "binned": ", ".join(binned) if binned else "none",
                      "weight_classes": (len(self.weight_bins) - 1) if self.weight_bins is not None
                      else 0, "marginals_measured": len(self.cliques_),
                      "dp_binned": ", ".join(self.dp_binned_) if self.dp_binned_ else "none",
                      "dp_bins_share": float(self.dp_bins_share) if self.dp_binned_ else 0.0,
                      "n": int(self.n_)},
            "published_without_budget": [{
                "item": f"the number of records n = {self.n_} of each synthetic set",
                "reason": "the guarantee is for replace-one neighbours (databases of the same "
                          "size), under which n is public; the noisy marginals do not protect it."}],
            "notes": ([] if not self.seeded_ else [
                "random_state seeds only the post-processing (records drawn from the fitted "
                "model, row order): OpenDP's noise comes from the operating system's entropy "
                "and cannot be seeded, so this release is not reproducible bit for bit."]),
        }


class _Unit:
    """A DataFrame input's design: weights 1."""

    def __init__(self, n: int) -> None:
        self.weights = np.ones(n)


class AIM(MarginalSynthesizer):
    """AIM (McKenna, Mullins, Sheldon & Miklau 2022): adaptively selects the worst-estimated
    marginal (up to ``degree``-way) by the exponential mechanism and measures it with noise,
    annealing the per-round budget; OpenDP's implementation. See :class:`MarginalSynthesizer`."""

    name: ClassVar[str] = "AIM"
    algorithm_name: ClassVar[str] = "AIM"
    _parameter_constraints: ClassVar[dict[str, list[Any]]] = {
        **MarginalSynthesizer._parameter_constraints,  # noqa: SLF001 - the parent's table
        "degree": [Interval("integer", 1, None)],
        "rounds": [None, Interval("integer", 1, None)],
    }

    def __init__(self, *, variables: Sequence[str] | None = None,
                 categories: Mapping[str, Sequence[Any]] | None = None,
                 bins: Mapping[str, Sequence[float]] | None = None,
                 weight_bins: Sequence[float] | None = None, privacy: str = "pure",
                 epsilon: float = 1.0, m: int = 5, population_size: float | None = None,
                 degree: int = 2, rounds: int | None = None, iters: int = 1000,
                 random_state: Any = None, max_epsilon: float | None = None,
                 dp_bins: Mapping[str, Mapping[str, Any]] | None = None,
                 dp_bins_share: float = 0.1) -> None:
        super().__init__(variables=variables, categories=categories, bins=bins,
                         weight_bins=weight_bins, privacy=privacy, epsilon=epsilon, m=m,
                         population_size=population_size, iters=iters,
                         random_state=random_state, max_epsilon=max_epsilon,
                         dp_bins=dp_bins, dp_bins_share=dp_bins_share)
        self.degree = degree
        self.rounds = rounds

    def _algorithm(self) -> Any:
        import opendp.extras.mbi as mbi

        return mbi.AIM(queries=int(self.degree), rounds=self.rounds, estimator=self._estimator())


class MST(MarginalSynthesizer):
    """MST (McKenna, Miklau & Sheldon 2021): one-way marginals, then the two-way marginals of a
    maximum spanning tree chosen by the exponential mechanism; OpenDP's implementation. See
    :class:`MarginalSynthesizer`."""

    name: ClassVar[str] = "MST"
    algorithm_name: ClassVar[str] = "MST"

    def _algorithm(self) -> Any:
        import opendp.extras.mbi as mbi

        return mbi.MST(estimator=self._estimator())
