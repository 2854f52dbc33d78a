"""Neighbouring-database audits of the package's DP mechanisms: an empirical lower bound on epsilon
beside the claim.

:func:`audit_mechanism` runs the whole pipeline (fit, release, read the released value) many times
on each of two replace-one neighbours D_in and D_out, and turns the released values into
Clopper-Pearson lower bounds on epsilon (for events S: epsilon >= log(P_1(S) / P_2(S)) for pure
DP, with P_1 bounded below and P_2 above):

* **threshold test**: the event {value > t} or {value <= t} (either database on top) chosen on
  the first half of the runs (the one with the largest Clopper-Pearson bound there), then
  evaluated once on the second half: no multiple-testing inflation;
* **lattice test** (floating point, Mironov 2012): the event "D_in's arithmetic cannot produce
  this value". Its model of D_in's arithmetic is the union of (a) the mechanism's public grid and
  (b) numpy's uniform-in-interval arithmetic ``lo + (hi - lo) * (k 2^-53)`` on the intervals
  between D_in's (transformed) values, or for KNG the truncated-normal inverse CDF on D_in's
  pieces (the samplers the package used before docs/privacy.md, "Exact sampling on a public
  grid"). A value is flagged when no integer k reproduces it bit for bit (binary search over k;
  the uniform maps are monotone; the inverse CDF is monotone only up to a few ulps, so the
  window where a solution can lie is scanned in full, see :func:`reachable`): the model is
  exact, D_in's own releases are never flagged. The event is fixed before any run, so the bound
  is valid whatever the model; the model only decides the test's power. A grid sampler gives
  no flags on either side.

**zCDP** (:func:`audit_zcdp`): a rho-zCDP claim implies (epsilon, delta)-DP for every delta
with epsilon = :func:`zcdp_epsilon` (Canonne, Kamath & Steinke 2020, the conversion of their
Corollary 13: tighter than rho + 2 sqrt(rho log(1/delta))). The threshold test then bounds
epsilon >= log((P_1(S) - delta) / P_2(S)) (Clopper-Pearson as above); the event and delta (from a
grid fixed in advance) are chosen on the first half of the runs, the bound is evaluated on the
second half and compared with the claim's epsilon at that delta. The bound is also stated as a
lower bound on rho (the smallest rho whose conversion allows it).

The two bounds are computed at confidence 1 - (1 - ``confidence``) / 2 each (Bonferroni), and
the audit's lower bound is the larger one. A correct mechanism gives a bound at or below the
claim (except with probability at most 1 - ``confidence``); a bound above the claim refutes it.
The claimed epsilon is read from the release's own privacy record.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pandas as pd
from scipy import stats

from .privacy.randomness import secret_rng

__all__ = ["AuditResult", "audit_mechanism", "clopper_pearson", "epsilon_lower_bound", "lattice_flags", "reachable",
           "MECHANISMS", "ZCDPAuditResult", "audit_zcdp", "zcdp_delta", "zcdp_epsilon",
           "epsilon_delta_lower_bound", "ZCDP_DELTAS"]

MECHANISMS = ("jointexp", "kng-exact", "laplace")


def clopper_pearson(k: int, n: int, alpha: float) -> tuple[float, float]:
    """Two-sided Clopper-Pearson interval for k successes in n at level 1 - alpha."""
    lo = 0.0 if k == 0 else float(stats.beta.ppf(alpha / 2, k, n - k + 1))
    hi = 1.0 if k == n else float(stats.beta.ppf(1 - alpha / 2, k + 1, n - k))
    return lo, hi


def epsilon_lower_bound(k1: int, n1: int, k2: int, n2: int, alpha: float = 0.05) -> float:
    """log(CP lower bound of P_1(S) / CP upper bound of P_2(S)), 0 if not positive.

    Each bound is one side of a two-sided 1 - alpha interval, so both hold together with
    probability at least 1 - alpha (the convention of issue 35's numbers).
    """
    lo1 = clopper_pearson(k1, n1, alpha)[0]
    hi2 = clopper_pearson(k2, n2, alpha)[1]
    if lo1 <= 0:
        return 0.0
    return max(0.0, math.log(lo1 / hi2))


#: the deltas the zCDP audit may choose from (on the first half of the runs): large enough to
#: be estimable from a few thousand runs, where the conversion is far from trivial
ZCDP_DELTAS = (0.001, 0.003, 0.01, 0.03, 0.1)


def zcdp_delta(rho: float, epsilon: float) -> float:
    """The delta at which rho-zCDP implies (epsilon, delta)-DP (Canonne, Kamath & Steinke 2020,
    Corollary 13): inf over alpha > 1 of exp((alpha - 1)(alpha rho - epsilon)) / (alpha - 1) *
    (1 - 1/alpha)^alpha. Evaluated on a fine grid of alpha, so the value returned is at or above
    the infimum (a claim converted with it is never understated). Capped at 1."""
    if not rho > 0:
        return 0.0
    a = 1.0 + np.exp(np.linspace(np.log(1e-9), np.log(1e6), 40001))
    logd = (a - 1) * (a * rho - epsilon) - np.log(a - 1) + a * np.log1p(-1 / a)
    return float(min(1.0, np.exp(logd.min())))


def zcdp_epsilon(rho: float, delta: float) -> float:
    """The smallest epsilon (to 1e-10) at which rho-zCDP implies (epsilon, delta)-DP by
    :func:`zcdp_delta`; 0 when delta already covers epsilon 0."""
    from scipy.optimize import brentq

    if not 0 < delta < 1:
        raise ValueError(f"delta={delta}: must lie in (0, 1).")
    if zcdp_delta(rho, 0.0) <= delta:
        return 0.0
    hi = rho + 2 * math.sqrt(rho * math.log(1 / delta)) + 1.0  # the simple conversion, + 1
    return float(brentq(lambda e: zcdp_delta(rho, e) - delta, 0.0, hi, xtol=1e-10))


def epsilon_delta_lower_bound(k1: int, n1: int, k2: int, n2: int, delta: float,
                              alpha: float = 0.05) -> float:
    """log((CP lower bound of P_1(S) - delta) / CP upper bound of P_2(S)), 0 if not positive:
    an (epsilon, delta)-DP mechanism has P_1(S) <= e^epsilon P_2(S) + delta."""
    lo1 = clopper_pearson(k1, n1, alpha)[0]
    hi2 = clopper_pearson(k2, n2, alpha)[1]
    if lo1 <= delta:
        return 0.0
    return max(0.0, math.log((lo1 - delta) / hi2))


@dataclass
class AuditResult:
    """One audit: the claim, the runs, each test's counts and bound, and the verdict."""

    mechanism: str
    settings: dict[str, Any]
    claimed_epsilon: float
    runs: int
    confidence: float
    lattice_flagged_in: int | None
    lattice_flagged_out: int | None
    lattice_lower_bound: float | None
    threshold_event: str
    threshold_counts: tuple[int, int, int]  # (k on top, k below, evaluation runs per side)
    threshold_lower_bound: float
    values_in: np.ndarray = field(repr=False)
    values_out: np.ndarray = field(repr=False)

    @property
    def lower_bound(self) -> float:
        """The audit's empirical lower bound on epsilon (the larger of the two tests)."""
        return max(self.threshold_lower_bound, self.lattice_lower_bound or 0.0)

    @property
    def passed(self) -> bool:
        """True when the lower bound does not exceed the claimed epsilon."""
        return self.lower_bound <= self.claimed_epsilon + 1e-12

    def summary(self) -> str:
        lat = ("lattice test: not applicable" if self.lattice_flagged_in is None else
               f"lattice test: {self.lattice_flagged_out} of {self.runs} releases from D_out "
               f"flagged, {self.lattice_flagged_in} of {self.runs} from D_in; epsilon >= "
               f"{self.lattice_lower_bound:.3f}")
        k1, k2, m = self.threshold_counts
        return (f"audit of {self.mechanism} ({', '.join(f'{k}={v}' for k, v in self.settings.items())}): "
                f"{self.runs} runs per side, confidence {self.confidence:g}\n"
                f"  {lat}\n"
                f"  threshold test ({self.threshold_event}, second half): {k1} vs {k2} of {m}; "
                f"epsilon >= {self.threshold_lower_bound:.3f}\n"
                f"  empirical lower bound {self.lower_bound:.3f} beside the claimed epsilon "
                f"{self.claimed_epsilon:g}: {'consistent with the claim' if self.passed else 'CLAIM REFUTED'}")


# ----------------------------------------------------------------------------- the pipelines
def _pipeline_runner(mechanism: str, s: dict[str, Any]) -> Callable[[np.ndarray, int], tuple[float, float, float]]:
    """fit -> release -> the released value (and the public centre of a pareto scale), claim."""
    if mechanism == "laplace":
        from .privacy.noise import add_laplace

        def run_laplace(data: np.ndarray, seed: int) -> tuple[float, float, float]:
            # the noise layer of surveysynth.privacy.laplace: a bounded sum, global sensitivity
            # (upper - lower) from the public bounds, scale sensitivity / epsilon
            x = np.clip(data, s["lower"], s["upper"])
            sens = s["upper"] - s["lower"]
            return add_laplace(np.array([x.sum()]), sens / s["epsilon"]), np.nan, s["epsilon"]

        return run_laplace
    from .synth.quantile_synthesizer import QuantileSynthesizer

    def run(data: np.ndarray, seed: int) -> tuple[float, float, float]:
        kw = dict(variables=["x"], quantiles=s["quantiles"], epsilon=s["epsilon"],
                  bounds={"x": (s["lower"], s["upper"])}, m=1, random_state=seed, progress=False)
        if mechanism == "jointexp":
            kw.update(method="jointexp", transform=s["transform"])
        else:
            kw.update(method="kng", sampler="exact")
        syn = QuantileSynthesizer(**kw).fit(pd.DataFrame({"x": data}))
        rel = syn.release()
        # the mechanism's output: the released quantiles (the synthetic records are drawn from
        # them, post-processing, which cannot raise the privacy loss)
        values = syn.coefficients_["x"]["(Intercept)"].to_numpy(dtype=float)
        center = float(getattr(syn, "centers_", {}).get("x", np.nan))
        return values, center, float(rel.epsilon)

    return run


# ----------------------------------------------------------------------------- the lattice test
def _first_true(pred: Callable[[np.ndarray], np.ndarray], n: int, k_max: int) -> np.ndarray:
    """Binary search over [0, k_max]: some k with pred(k) true and pred(k - 1) false (k = 0 or
    k_max at the ends). Exact for a monotone predicate; for any predicate it still ends at a
    transition, which is what the slack argument of :func:`reachable` needs."""
    lo = np.zeros(n, dtype=np.int64)
    hi = np.full(n, k_max, dtype=np.int64)
    while np.any(lo < hi):
        mid = lo + (hi - lo) // 2
        with np.errstate(all="ignore"):
            ge = pred(mid)
        hi = np.where(ge, mid, hi)
        lo = np.where(ge, lo, mid + 1)
    return lo


def reachable(f: Callable[[np.ndarray], np.ndarray], targets: np.ndarray, k_max: int,
              slack: float = 0.0, max_window: int = 1 << 20) -> np.ndarray:
    """Whether some integer k in [0, k_max] has f(k) == target exactly (bit for bit).

    ``slack = 0``: f must be non-decreasing in k (one binary search per target). ``slack > 0``:
    f need only lie within ``slack`` below a non-decreasing function T (f <= T <= f + slack;
    e.g. an inverse CDF computed by Newton's method, monotone up to a few ulps). Then every k
    with f(k) == t lies in [k_lo, k_hi], k_lo a transition of f(k) >= t - slack and k_hi + 1
    one of f(k) > t + slack (both found by binary search: at k_lo - 1, T < t - slack + slack
    <= T(k) for any solution k; at k_hi + 1, T > t + slack >= T(k)), and that window is scanned
    in full. A window longer than ``max_window`` counts as reachable (the conservative answer:
    it can cost power, never a false flag).
    """
    t = np.asarray(targets, dtype=float)
    n = t.size
    if n == 0:
        return np.zeros(0, dtype=bool)
    k0 = _first_true(lambda k: f(k) >= t, n, k_max)
    with np.errstate(all="ignore"):
        ok = f(k0) == t
    if slack <= 0 or ok.all():
        return ok
    rest = np.flatnonzero(~ok)
    tr = t[rest]
    klo = _first_true(lambda k: f(k) >= tr - slack, rest.size, k_max)
    khi = _first_true(lambda k: f(k) > tr + slack, rest.size, k_max)
    with np.errstate(all="ignore"):
        khi = np.where((khi == k_max) & ~(f(khi) > tr + slack), k_max, khi - 1)
    length = np.maximum(khi - klo + 1, 0)
    wide = length > max_window
    ok[rest[wide]] = True
    rest, tr, klo, length = rest[~wide], tr[~wide], klo[~wide], length[~wide]
    # scan every window, flattened, a few million evaluations at a time
    found = np.zeros(rest.size, dtype=bool)
    chunk = 1 << 22
    i = 0
    while i < rest.size:
        j = i + max(1, int(np.searchsorted(np.cumsum(length[i:]), chunk, side="right")))
        j = min(j, rest.size)
        ln = length[i:j]
        owner = np.repeat(np.arange(i, j), ln)
        offset = np.arange(owner.size) - np.repeat(np.cumsum(ln) - ln, ln)
        with np.errstate(all="ignore"):
            hit = f(klo[owner] + offset) == tr[owner]
        found[np.unique(owner[hit])] = True
        i = j
    ok[rest] = found
    return ok


def _transform(s: dict[str, Any], center: float):
    from .synth.private_quantiles import tail_transform

    lo, hi = s["lower"], s["upper"]
    if s["transform"] == "pareto":
        scale = max(0.5 * min(center - lo, hi - center), (hi - lo) / 1000.0)
        return tail_transform(lo, hi, "pareto", scale, center)
    return tail_transform(lo, hi, s["transform"])


def _lattice_flags(mechanism: str, s: dict[str, Any], d_in: np.ndarray, values: np.ndarray,
                   centers: np.ndarray) -> np.ndarray:
    """True where D_in's arithmetic (public grid or the uniform-in-interval / inverse-CDF
    arithmetic on D_in's intervals) cannot produce the released value."""
    lo, hi = s["lower"], s["upper"]
    ok = np.zeros(values.size, dtype=bool)
    if mechanism == "jointexp":
        from .synth.private_quantiles import GRID_BITS

        for c in np.unique(centers):
            at = (centers == c) | (np.isnan(c) & np.isnan(centers))
            fwd, inv, tlo, thi = _transform(s, c)
            v = values[at]
            K = 2 ** s.get("grid_bits", GRID_BITS)
            good = reachable(lambda k, inv=inv, tlo=tlo, thi=thi, K=K:  # noqa: N803
                              np.clip(inv(tlo + (thi - tlo) * (k / K)), lo, hi), v, K)
            edges = np.concatenate([[tlo], np.sort(fwd(np.clip(d_in, lo, hi))), [thi]])
            for a, b in zip(edges[:-1], edges[1:], strict=True):
                if b > a:
                    good |= reachable(lambda k, a=a, b=b, inv=inv:
                                       np.clip(inv(a + (b - a) * (k * 2.0 ** -53)), lo, hi),
                                       v, 2 ** 53 - 1)
            ok[at] = good
        return ~ok
    from .synth.kng import kng_intercept_pieces
    from .synth.kng.exact import GRID_BITS
    from .synth.kng.truncated_gauss import truncnorm_ppf

    K = 2 ** s.get("grid_bits", GRID_BITS)
    ok |= reachable(lambda k: lo + (hi - lo) * (k / K), values, K)
    from .synth.quantile_synthesizer import paper_quantile_grid

    grid = paper_quantile_grid() if s["quantiles"] is None else s["quantiles"]
    # The old sampler (tests/test_audit.py::old_kng_intercept_draws): a piece k of positive
    # mass, then b = clip(sd * truncnorm_ppf(lo_k / sd, hi_k / sd, u), lo_k, top_k) with u a
    # numpy uniform k 2^-53, top_k = nextafter(hi_k, -inf) below b_hi; b_lo if b_lo == b_hi.
    # Every quantile's pieces (KNG splits epsilon equally over the grid; the masses change with
    # tau, the ends do not), every piece of positive width (a superset of those it can choose).
    seen = set()
    for tau in grid:
        P = kng_intercept_pieces(np.ones((d_in.size, 1)), d_in, tau, s["epsilon"] / len(grid), 1.0,
                                 lb=lo, ub=hi)
        if P.b_lo == P.b_hi:
            ok |= values == P.b_lo
            continue
        sd = 1.0 / math.sqrt(2.0 * P.c)
        for a, b in zip(P.lo, P.hi, strict=True):
            top = np.nextafter(b, -np.inf) if b < P.b_hi else b
            if not b > a or (a, top, sd) in seen:
                continue
            seen.add((a, top, sd))
            # the same calls and arguments as the old sampler (a, b numpy doubles, u an array)
            def f(k, a=a, b=b, top=top, sd=sd):
                return np.clip(sd * truncnorm_ppf(a / sd, b / sd, k * 2.0 ** -53), a, top)

            # f clips to [a, top]: only values there can come from this piece. Newton's method
            # (narrow pieces) and ndtri_exp make u -> b monotone only up to a few ulps (measured
            # at most 5.5 ulps of max(|a|, |b|)): slack 256 ulps, then a full scan of the window.
            sel = np.flatnonzero(~ok & (values >= a) & (values <= top))
            if sel.size:
                slack = 256.0 * float(np.spacing(max(abs(a), abs(b))))
                ok[sel] = reachable(f, values[sel], 2 ** 53 - 1, slack=slack)
    return ~ok


def lattice_flags(mechanism: str, d_in: Sequence[float] | np.ndarray, values: Sequence[float] | np.ndarray, *,
                  epsilon: float = 1.0, lower: float = 0.0, upper: float = 100.0,
                  transform: str = "identity", quantiles: Sequence[float] | None = None,
                  centers: Sequence[float] | np.ndarray | None = None) -> np.ndarray:
    """The lattice test on its own: True for each released value that ``d_in``'s arithmetic
    (``mechanism`` "jointexp" or "kng-exact", at the settings of :func:`audit_mechanism`) cannot
    produce. ``centers``: the public centre of a pareto scale per value (JointExp only; None:
    none). Exposed to check the model against draws made outside the pipeline."""
    if mechanism not in ("jointexp", "kng-exact"):
        raise ValueError(f"mechanism={mechanism!r}: the lattice test models 'jointexp' or 'kng-exact'.")
    v = np.asarray(values, dtype=float).ravel()
    c = np.full(v.size, np.nan) if centers is None else np.asarray(centers, dtype=float).ravel()
    q = None if quantiles is None else [float(x) for x in np.atleast_1d(quantiles)]
    s = dict(epsilon=float(epsilon), lower=float(lower), upper=float(upper), transform=transform, quantiles=q)
    return _lattice_flags(mechanism, s, np.asarray(d_in, dtype=float).ravel(), v, c)


# ----------------------------------------------------------------------------- threshold test
def _events(v1: np.ndarray, v2: np.ndarray) -> list[tuple[str, float, int, int]]:
    pooled = np.concatenate([v1, v2])
    out = []
    for t in np.unique(np.quantile(pooled, np.linspace(0.01, 0.99, 99))):
        for side in (">", "<="):
            a = int(np.count_nonzero(v1 > t if side == ">" else v1 <= t))
            b = int(np.count_nonzero(v2 > t if side == ">" else v2 <= t))
            out.append((side, float(t), a, b))
    return out


def _threshold_test(v_in: np.ndarray, v_out: np.ndarray, alpha: float) -> tuple[str, tuple[int, int, int], float]:
    half = v_in.size // 2
    sel_in, ev_in, sel_out, ev_out = v_in[:half], v_in[half:], v_out[:half], v_out[half:]
    best, best_lb = None, -1.0
    for side, t, a, b in _events(sel_in, sel_out):
        for top, (k1, k2) in (("D_in", (a, b)), ("D_out", (b, a))):
            lb = epsilon_lower_bound(k1, half, k2, half, alpha)
            if lb > best_lb:
                best, best_lb = (side, t, top), lb
    side, t, top = best
    first, second = (ev_in, ev_out) if top == "D_in" else (ev_out, ev_in)
    k1 = int(np.count_nonzero(first > t if side == ">" else first <= t))
    k2 = int(np.count_nonzero(second > t if side == ">" else second <= t))
    m = first.size
    other = "D_out" if top == "D_in" else "D_in"
    return (f"P_{top}(value {side} {t:.6g}) / P_{other}(...)", (k1, k2, m),
            epsilon_lower_bound(k1, m, k2, m, alpha))


# ----------------------------------------------------------------------------- the audit
def _check_runs(runs: int, confidence: float) -> int:
    """The audit's runs per side (at least 20) and the confidence of its bound (in (0, 1))."""
    runs = int(runs)
    if runs < 20:
        raise ValueError(f"runs={runs}: give at least 20 runs per side.")
    if not 0 < confidence < 1:
        raise ValueError(f"confidence={confidence}: must lie in (0, 1).")
    return runs


def _check_neighbours(d_in: Any, d_out: Any) -> tuple[np.ndarray, np.ndarray]:
    a = np.asarray(d_in, dtype=float).ravel()
    b = np.asarray(d_out, dtype=float).ravel()
    if a.size != b.size or a.size == 0:
        raise ValueError(f"d_in and d_out must be non-empty with the same size (replace-one "
                         f"neighbours); got {a.size} and {b.size} records.")
    if not (np.isfinite(a).all() and np.isfinite(b).all()):
        raise ValueError("d_in and d_out must be finite numbers.")
    moved = int(np.count_nonzero(np.sort(a) != np.sort(b)))
    if moved > 2:  # replacing one record changes at most two positions of the sorted data
        diff = np.flatnonzero(a != b)[:5].tolist()
        raise ValueError(f"d_in and d_out differ in more than one record (first differing positions "
                         f"{diff}): the claim is for replace-one neighbours; change one record only.")
    return a, b


def _run_sides(runner: Callable, name: str, a: np.ndarray, b: np.ndarray, runs: int,
               seed: int | None, progress: bool) -> tuple[dict, float]:
    """``runs`` runs of the mechanism on each neighbour: {"in"/"out": (values, centres)} and
    the one claim they all made."""
    rng = secret_rng(seed)
    out = {}
    claims = set()
    from tqdm.auto import tqdm

    for side, data in (("in", a), ("out", b)):
        vals, cents = [], np.empty(runs)
        for r in tqdm(range(runs), desc=f"audit {name} D_{side}", disable=not progress):
            v, cents[r], claim = runner(data, int(rng.integers(0, 2**63)))
            vals.append(np.atleast_1d(np.asarray(v, dtype=float)))
            claims.add(round(float(claim), 12))
        out[side] = (vals, cents)
    if len(claims) != 1:
        raise ValueError(f"the mechanism claimed different budgets across runs: {sorted(claims)}.")
    return out, claims.pop()


def audit_mechanism(
    mechanism: str | Callable[[np.ndarray, int], tuple[float, float, float]],
    d_in: Sequence[float] | np.ndarray,
    d_out: Sequence[float] | np.ndarray,
    *,
    epsilon: float = 1.0,
    lower: float = 0.0,
    upper: float = 100.0,
    transform: str = "identity",
    quantiles: Sequence[float] | None = None,
    runs: int = 500,
    seed: int | None = None,
    confidence: float = 0.95,
    lattice: str | None = None,
    progress: bool = False,
) -> AuditResult:
    """Audit a mechanism on replace-one neighbours ``d_in`` / ``d_out`` (one numeric variable).

    ``mechanism``: ``"jointexp"`` (QuantileSynthesizer method="jointexp" with ``transform``),
    ``"kng-exact"`` (QuantileSynthesizer method="kng", exact sampler: intercept-only, so every
    quantile is drawn exactly), both on variable "x" with ``quantiles`` (None: the paper's 49)
    and m = 1, the released values being the released quantiles; ``"laplace"`` (the package's OpenDP Laplace noise on a sum with global
    sensitivity upper - lower; OpenDP's generator cannot be seeded, so its audits do not replay),
    or a callable ``(data, seed) -> (released values, centre or NaN, claimed epsilon)`` (a
    mechanism under test, e.g. a mutant); ``lattice`` then names the arithmetic model of the
    lattice test ("jointexp" or "kng-exact"; None: no lattice test). ``epsilon``,
    ``lower``/``upper`` (public bounds), ``transform``: the mechanism's settings. The lattice
    test flags a run when any of its released values is flagged; the threshold test uses their
    median. ``runs`` per side;
    ``seed`` seeds every run (None: secret OS entropy). Returns an :class:`AuditResult`
    (``lower_bound``, ``passed``, ``summary()``).
    """
    a, b = _check_neighbours(d_in, d_out)
    runs = _check_runs(runs, confidence)
    q = None if quantiles is None else [float(v) for v in np.atleast_1d(quantiles)]
    settings = dict(epsilon=float(epsilon), lower=float(lower), upper=float(upper),
                    transform=transform, quantiles=q)
    if callable(mechanism):
        name, runner, model = getattr(mechanism, "__name__", "custom"), mechanism, lattice
    elif mechanism in MECHANISMS:
        name, runner, model = mechanism, _pipeline_runner(mechanism, settings), mechanism
    else:
        raise ValueError(f"mechanism={mechanism!r}: one of {MECHANISMS} or a callable "
                         "(data, seed) -> (value, centre, claimed epsilon).")
    shown = {k: v for k, v in settings.items()
             if not (k == "transform" and model != "jointexp") and not (k == "quantiles" and model is None)}
    out, claim = _run_sides(runner, name, a, b, runs, seed, progress)
    alpha = (1 - confidence) / 2  # Bonferroni over the two tests
    f_in = f_out = None
    lat_lb = None
    if model is not None and model != "laplace":
        flagged = {}
        for side, (vals, cents) in out.items():
            flat = np.concatenate(vals)
            run_of = np.repeat(np.arange(runs), [v.size for v in vals])
            flags = _lattice_flags(model, settings, a, flat, cents[run_of])
            flagged[side] = int(np.unique(run_of[flags]).size)
        f_in, f_out = flagged["in"], flagged["out"]
        lat_lb = epsilon_lower_bound(f_out, runs, f_in, runs, alpha)
    v_in = np.array([np.median(v) for v in out["in"][0]])
    v_out = np.array([np.median(v) for v in out["out"][0]])
    event, counts, thr_lb = _threshold_test(v_in, v_out, alpha)
    return AuditResult(mechanism=name, settings=shown, claimed_epsilon=claim, runs=runs,
                       confidence=confidence, lattice_flagged_in=f_in, lattice_flagged_out=f_out,
                       lattice_lower_bound=lat_lb, threshold_event=event, threshold_counts=counts,
                       threshold_lower_bound=thr_lb, values_in=v_in, values_out=v_out)


# ----------------------------------------------------------------------------- zCDP
@dataclass
class ZCDPAuditResult:
    """A zCDP audit: the claimed rho, the delta chosen on the first half of the runs, the claim's
    epsilon at that delta, the second half's empirical (epsilon, delta) lower bound and the
    lower bound on rho it implies."""

    mechanism: str
    claimed_rho: float
    delta: float
    claimed_epsilon: float
    runs: int
    confidence: float
    threshold_event: str
    threshold_counts: tuple[int, int, int]
    lower_bound: float
    values_in: np.ndarray = field(repr=False)
    values_out: np.ndarray = field(repr=False)

    @property
    def rho_lower_bound(self) -> float:
        """The smallest rho whose conversion allows ``lower_bound`` at ``delta``."""
        from scipy.optimize import brentq

        if self.lower_bound <= zcdp_epsilon(1e-12, self.delta):
            return 0.0
        hi = 1.0
        while zcdp_epsilon(hi, self.delta) < self.lower_bound:
            hi *= 2
        return float(brentq(lambda r: zcdp_epsilon(r, self.delta) - self.lower_bound, 1e-12, hi,
                            xtol=1e-8))

    @property
    def passed(self) -> bool:
        """True when the lower bound does not exceed the claim's epsilon at ``delta``."""
        return self.lower_bound <= self.claimed_epsilon + 1e-12

    def summary(self) -> str:
        k1, k2, m = self.threshold_counts
        return (f"zCDP audit of {self.mechanism}: {self.runs} runs per side, confidence "
                f"{self.confidence:g}\n"
                f"  threshold test ({self.threshold_event}, second half): {k1} vs {k2} of {m}; at "
                f"delta {self.delta:g}: epsilon >= {self.lower_bound:.3f} (rho >= "
                f"{self.rho_lower_bound:.3f})\n"
                f"  claimed rho {self.claimed_rho:g} gives epsilon {self.claimed_epsilon:.3f} at that "
                f"delta: {'consistent with the claim' if self.passed else 'CLAIM REFUTED'}")


def audit_zcdp(mechanism: Callable[[np.ndarray, int], tuple[Any, float, float]],
               d_in: Sequence[float] | np.ndarray, d_out: Sequence[float] | np.ndarray, *,
               runs: int = 2000, seed: int | None = None, confidence: float = 0.95,
               deltas: Sequence[float] = ZCDP_DELTAS, progress: bool = False) -> ZCDPAuditResult:
    """Audit a rho-zCDP claim on neighbours ``d_in`` / ``d_out`` (one numeric variable).

    ``mechanism``: a callable ``(data, seed) -> (released values, NaN, claimed rho)``; the
    threshold test uses the released values' median per run. ``runs`` per side; the first half
    chooses the event {value > t} or {value <= t}, which database is on top, and the delta (one
    of ``deltas``) with the largest margin of the (epsilon, delta) lower bound over the claim's
    epsilon at that delta; the second half evaluates that one event at confidence
    ``confidence``. Why not the pure-epsilon audit: a zCDP mechanism (Gaussian noise) is not
    pure DP at any epsilon, so only an (epsilon, delta) comparison can be at or below its
    claim. Returns a :class:`ZCDPAuditResult` (``lower_bound``, ``claimed_epsilon``,
    ``rho_lower_bound``, ``passed``, ``summary()``).
    """
    if not callable(mechanism):
        raise ValueError("mechanism: give a callable (data, seed) -> (values, NaN, claimed rho).")
    a, b = _check_neighbours(d_in, d_out)
    runs = _check_runs(runs, confidence)
    deltas = [float(d) for d in deltas]
    if not deltas or not all(0 < d < 1 for d in deltas):
        raise ValueError(f"deltas={deltas}: give values in (0, 1).")
    name = getattr(mechanism, "__name__", "custom")
    out, rho = _run_sides(mechanism, name, a, b, runs, seed, progress)
    if not rho > 0:
        raise ValueError(f"the mechanism claimed rho = {rho}: a zCDP claim is a positive rho.")
    alpha = 1 - confidence
    claim_at = {d: zcdp_epsilon(rho, d) for d in deltas}
    v_in = np.array([np.median(v) for v in out["in"][0]])
    v_out = np.array([np.median(v) for v in out["out"][0]])
    half = runs // 2
    best, best_margin = None, -math.inf
    for side, t, x, y in _events(v_in[:half], v_out[:half]):
        for top, (k1, k2) in (("D_in", (x, y)), ("D_out", (y, x))):
            lo1 = clopper_pearson(k1, half, alpha)[0]
            hi2 = clopper_pearson(k2, half, alpha)[1]
            for d in deltas:  # epsilon_delta_lower_bound with the two bounds computed once
                lb = max(0.0, math.log((lo1 - d) / hi2)) if lo1 > d else 0.0
                if lb - claim_at[d] > best_margin:
                    best, best_margin = (side, t, top, d), lb - claim_at[d]
    side, t, top, d = best
    first, second = (v_in[half:], v_out[half:]) if top == "D_in" else (v_out[half:], v_in[half:])
    k1 = int(np.count_nonzero(first > t if side == ">" else first <= t))
    k2 = int(np.count_nonzero(second > t if side == ">" else second <= t))
    m = first.size
    other = "D_out" if top == "D_in" else "D_in"
    return ZCDPAuditResult(
        mechanism=name, claimed_rho=rho, delta=d, claimed_epsilon=claim_at[d], runs=runs,
        confidence=confidence, threshold_event=f"P_{top}(value {side} {t:.6g}) / P_{other}(...)",
        threshold_counts=(k1, k2, m), lower_bound=epsilon_delta_lower_bound(k1, m, k2, m, d, alpha),
        values_in=v_in, values_out=v_out)
