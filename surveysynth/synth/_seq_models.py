"""Per-type models of the sequential synthesizer (surveysynth.synth.sequential): Stan data, the
per-record log density used for the Lipschitz bound (numpy, the same full normalised density,
truncation normaliser included, that the Stan program weights and that synthesis draws from),
and the synthetic draws. See docs/sequential.md.

Each model works on the MODELLED scale of its variable:

* ``normal`` (types continuous, positive, bounded, and the log-weights model): y on the original
  scale (continuous, bounded) or log y (positive, log w); normal, truncated to the public bounds
  (on the same scale) when given. Bounded variables use the truncated normal (not the
  logit-normal): values at a bound are allowed and the density stays finite there.
* ``negbin`` (count / integer): y - lo >= 0, NB2 with log link, truncated above at hi - lo.
* ``logistic`` (binary, missing-value indicators): codes 0/1.
* ``categorical`` (multinomial logit, first level the reference) and ``ordinal`` (ordered
  logistic): codes 1..K in Stan, 0..K-1 here.
"""

from __future__ import annotations

from typing import Any

import numpy as np
from scipy import special, stats

__all__ = ["MODELS", "MODELS_RE", "split_groups", "patterns", "whitening", "identity_pre", "normal_loglik", "negbin_loglik",
           "normal_log_norm",
           "logistic_loglik", "categorical_loglik", "ordinal_loglik", "sampler_kwargs"]

_LOG2PI = float(np.log(2 * np.pi))


def _log_diff_exp(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """log(exp(a) - exp(b)) for a >= b (b may be -inf)."""
    with np.errstate(divide="ignore", invalid="ignore"):
        return a + np.log(-np.expm1(b - a))


# -------------------------------------------------------------------------------- log densities
def normal_loglik(y: np.ndarray, mu: np.ndarray, sigma: np.ndarray,
                  lo: float | None = None, hi: float | None = None) -> np.ndarray:
    """log N(y | mu, sigma), truncated to [lo, hi] (either may be None): full, normalised.

    Broadcasts: ``mu`` (S, n), ``sigma`` (S, 1), ``y`` (n,)."""
    z = (y - mu) / sigma
    ll = -0.5 * _LOG2PI - np.log(sigma) - 0.5 * z**2
    if lo is not None or hi is not None:
        ll = ll - normal_log_norm(mu, sigma, lo, hi)
    return ll


def normal_log_norm(mu: np.ndarray, sigma: np.ndarray, lo: float | None,
                    hi: float | None) -> np.ndarray:
    """log(Phi((hi - mu) / sigma) - Phi((lo - mu) / sigma)), the truncation normaliser of
    :func:`normal_loglik` (either bound may be None; broadcasts like it)."""
    # b = (hi - mu) / sigma, a = (lo - mu) / sigma. Where a > 0
    # (mu below lo) both Phi are ~1 and their log_ndtr underflow to 0 together (a > ~38):
    # log 0 = -inf and a record's log density came out +inf (an infinite Lipschitz bound,
    # then a NaN c in the tuner on apistrat). There the equal upper-tail form
    # log(Phi(-a) - Phi(-b)) is used, accurate in the tail.
    b = (hi - mu) / sigma if hi is not None else np.full_like(mu, np.inf)
    a = (lo - mu) / sigma if lo is not None else np.full_like(mu, -np.inf)
    lower = _log_diff_exp(special.log_ndtr(b), special.log_ndtr(a))
    upper = _log_diff_exp(special.log_ndtr(-a), special.log_ndtr(-b))
    return np.where(a > 0, upper, lower)


def negbin_loglik(y: np.ndarray, mu: np.ndarray | None, phi: np.ndarray,
                  hi: float | None = None, log_mu: np.ndarray | None = None) -> np.ndarray:
    """log NB2(y | mu, phi) (mean mu, variance mu + mu^2 / phi), truncated above at ``hi``
    (divided by F(hi) = I_p(phi, hi + 1), p = phi / (phi + mu)): full, normalised. ``log_mu``
    instead of ``mu``: the model's linear predictor, without an exp and a log over every
    (draw, record) and without overflow for huge means."""
    r = (np.log(mu) if log_mu is None else log_mu) - np.log(phi)
    lp = -np.logaddexp(0.0, r)                                    # log p
    # log (1 - p) = r + log p (exact; in floating point within ~1e-16 |r| absolute of
    # -logaddexp(0, -r), at half its cost over (draws x records))
    l1p = lp + r
    # lgamma(y + phi) - lgamma(phi) - lgamma(y + 1) as -log B(phi, y + 1) - log(phi + y):
    # scipy's betaln is accurate for large phi, where the difference of two gammalns loses
    # |gammaln(phi)| x 1e-16 (0.01-0.1 at phi ~ 1e13; seq_negbin.stan sums logs instead), and
    # phi * log p from -log1p(mu / phi) (log phi - log(phi + mu) cancels likewise)
    # these two terms depend on (phi, y) only: computed once per draw and DISTINCT count and
    # indexed (the same elementwise arithmetic, so the same values; a count takes a few dozen
    # values where records are thousands: betaln was 80% of a 10,000-record step's bounds)
    yv = np.asarray(y, dtype=float)
    yu, yi = np.unique(yv, return_inverse=True)
    if np.ndim(phi) == 2 and phi.shape[1] == 1 and yu.size < yv.size:
        ll = (-special.betaln(phi, yu + 1.0) - np.log(phi + yu))[:, yi.ravel()]
    else:
        ll = -special.betaln(phi, yv + 1.0) - np.log(phi + yv)
    ll = ll + phi * lp + yv * l1p
    if hi is not None:
        with np.errstate(divide="ignore"):
            ll = ll - np.log(special.betainc(phi, hi + 1.0, np.exp(lp)))
    return ll


def logistic_loglik(y: np.ndarray, eta: np.ndarray) -> np.ndarray:
    """log Bernoulli(y | inv_logit(eta))."""
    return y * eta - np.logaddexp(0.0, eta)


def categorical_loglik(y: np.ndarray, eta: np.ndarray) -> np.ndarray:
    """log softmax(eta)[y]; ``eta`` (S, n, K), ``y`` codes 0..K-1."""
    lse = special.logsumexp(eta, axis=-1)
    return np.take_along_axis(eta, np.broadcast_to(y[None, :, None], (*eta.shape[:2], 1)),
                              axis=-1)[..., 0] - lse


def ordinal_loglik(y: np.ndarray, eta: np.ndarray, cut: np.ndarray) -> np.ndarray:
    """log P(y | eta, cutpoints) of the ordered logistic (Stan's ordered_logistic):
    P(y > k) = inv_logit(eta - c_k); ``eta`` (S, n), ``cut`` (S, K-1), ``y`` codes 0..K-1."""
    S, n = eta.shape
    K = cut.shape[1] + 1
    # log P(y > k) for k = 0..K (0-based: P(y > -1) = 1, P(y > K-1) = 0)
    lq = np.empty((S, n, K + 1))
    lq[..., 0] = 0.0
    lq[..., K] = -np.inf
    lq[..., 1:K] = special.log_expit(eta[..., None] - cut[:, None, :])
    upper = np.take_along_axis(lq, np.broadcast_to(y[None, :, None], (S, n, 1)), -1)[..., 0]
    lower = np.take_along_axis(lq, np.broadcast_to(y[None, :, None] + 1, (S, n, 1)), -1)[..., 0]
    return _log_diff_exp(upper, lower)


def patterns(X: np.ndarray, y: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The distinct (x, y) rows: indices of a first record of each, and each record's pattern.

    Records with the same predictors and value have the same log density under every
    parameter, hence the same Lipschitz bound and the same alpha, so the weighted likelihood
    sum_i alpha_i log p(y_i | x_i) equals sum_j A_j log p(y_j | x_j) over the patterns j with
    A_j = sum of alpha over pattern j (``np.bincount(inv, alpha)``): exact, not an
    approximation. A step with discrete predictors and a discrete value has a few dozen
    patterns instead of n records, and Stan's gradient costs O(patterns)."""
    _, first, inv = np.unique(np.c_[X, y], axis=0, return_index=True, return_inverse=True)
    return first, inv.ravel()


def identity_pre(P: int) -> dict[str, np.ndarray]:
    """The programs' original coordinates: at = a, bt = b."""
    return dict(xbar=np.zeros(P), L=np.eye(P))


def _sym_sqrt(S: np.ndarray, power: float) -> np.ndarray:
    """S^power (+-1/2) of a symmetric positive semi-definite S, eigenvalues floored at 1e-12 of
    the largest (a direction without variance is left nearly unscaled rather than infinite)."""
    lam, V = np.linalg.eigh(0.5 * (S + S.T))
    lam = np.maximum(lam, 1e-12 * max(float(lam.max()), 1e-300))
    return (V * lam**power) @ V.T


def whitening(X: np.ndarray) -> dict[str, np.ndarray]:
    """The sampling parametrization of a step with many rows in Stan (``WHITEN_MIN_ROWS``):
    xbar the predictor means, L = Cov(X)^(-1/2), so that (X - xbar) L has uncorrelated
    unit-variance columns (b = L bt, a = at - xbar' b: a + x'b = at + ((x - xbar)' L) bt).
    The posterior precision of b is roughly X'X-shaped, so the sampled coordinates are nearly
    uncorrelated; computed once per step from the records' X, it serves all its fits."""
    P = X.shape[1]
    if P == 0:
        return identity_pre(0)
    xbar = X.mean(axis=0)
    return dict(xbar=xbar, L=_sym_sqrt((X - xbar).T @ (X - xbar) / len(X), -0.5))


# -------------------------------------------------------------------------------- models
class _Model:
    program = ""
    params: tuple[str, ...] = ()

    def program_for(self, spec: dict[str, Any], save_log_lik: bool = False) -> str:
        """Name of the Stan program that fits this model with these constants."""
        return self.program

    def stan_data(self, y, X, alpha, spec, save_log_lik, pre=None):  # pragma: no cover
        raise NotImplementedError

    def inits(self, y, X, spec, chains, rng) -> list[dict[str, Any]]:  # pragma: no cover
        raise NotImplementedError

    def sampler_pre(self, pre: dict[str, np.ndarray], y: np.ndarray,
                    spec: dict[str, Any]) -> dict[str, np.ndarray]:
        """The whitened sampling coordinates ``pre`` (``whitening``) completed with what this
        model adds from the records' ``y`` (the categorical model's logit coordinates Q);
        computed once per step, exact like the whitening. Default: ``pre`` unchanged."""
        return pre

    def sampler_inits(self, inits: list[dict[str, Any]], spec: dict[str, Any],
                      pre: dict[str, np.ndarray]) -> list[dict[str, Any]]:
        """Initial values of the natural parameters (``inits``) as the sampled ones of the
        program chosen for ``spec`` (``pre``: ``whitening`` or ``identity_pre``):
        bt = L^-1 b, at = a + xbar' b."""
        if self.program_for(spec) == "seq_normal_ss":
            return inits
        out = []
        for d in inits:
            b = np.asarray(d["b"], float)
            e = {k: v for k, v in d.items() if k not in ("a", "b")}
            e["bt"] = np.linalg.solve(pre["L"], b).tolist() if len(b) else []
            if "a" in d:
                e["at"] = float(d["a"] + pre["xbar"] @ b)
            out.append(e)
        return out

    def loglik(self, draws, s, y, X, spec) -> np.ndarray:  # pragma: no cover
        raise NotImplementedError

    def draw(self, draws, s, X, spec, rng, mean_only=False) -> np.ndarray:  # pragma: no cover
        raise NotImplementedError

    def sampler_defaults(self, spec: dict[str, Any]) -> dict[str, Any]:
        """pystan ``sample`` arguments this model's fits use unless the user gives the same key
        in ``stan_kwargs`` (:func:`sampler_kwargs`): none (Stan's defaults) for most models."""
        return {}


def sampler_kwargs(model: _Model, spec: dict[str, Any],
                   user: dict[str, Any] | None) -> dict[str, Any]:
    """The sampler arguments of a step's fits: the model's defaults for this spec
    (``sampler_defaults``), overridden key by key by the user's ``stan_kwargs``. They change how
    the posterior is explored, never the density sampled nor the per-record bound."""
    return {**model.sampler_defaults(spec), **dict(user or {})}


#: Sequential samples a step's coefficients in whitened coordinates (``whitening``) when Stan gets
#: at least this many rows: there the gradient's cost makes the number of leapfrog steps matter
#: (docs/sequential.md). With few rows a fit takes seconds in any coordinates, and a few rows
#: are what discrete predictors give, where whitening can hurt: a binary given 5 strata, one of
#: them nearly all ones (a skewed, prior-bounded direction), mixed worse whitened (~17 leapfrog
#: steps per draw instead of ~8; max R-hat 1.0045-1.0156 over 5 seeds, unwhitened 1.0023-1.0088).
WHITEN_MIN_ROWS = 1000


def _base(y, X, alpha, save_log_lik, pre=None):
    """Data every per-record program takes, with its sampling parametrization ``pre``
    (default: the programs' original coordinates, ``identity_pre``)."""
    pre = identity_pre(X.shape[1]) if pre is None else pre
    return dict(n=len(y), P=X.shape[1], X=X, alpha=alpha, save_log_lik=int(save_log_lik),
                xbar=pre["xbar"], L=pre["L"])


def _distinct_predictors(X: np.ndarray) -> dict[str, Any]:
    """The distinct rows of X (Stan's ``Xd``, ``nd``) and each row's index into them (``xd``,
    1-based): a truncation normaliser depends on the predictors only, so the truncated
    programs compute it once per distinct row (exact)."""
    if X.shape[1] == 0:
        return dict(nd=1, Xd=np.zeros((1, 0)), xd=np.ones(len(X), dtype=np.int64))
    Xd, inv = np.unique(X, axis=0, return_inverse=True)
    return dict(nd=len(Xd), Xd=Xd, xd=inv.ravel().astype(np.int64) + 1)


def _truncated_normal_sums(y, X, alpha, spec, pre=None) -> dict[str, Any]:
    """Data of seq_normal_tss.stan: the weighted sums of the untruncated kernel, with the
    predictors centred and whitened as the program samples them (u_i = (1, (x_i - xbar)' L)),
    and the distinct predictor rows with their summed alphas for the truncation normaliser
    (exact: sum_i alpha_i log Z(x_i) = sum_d alpha_d log Z(x_d))."""
    lo, hi = spec["lo"], spec["hi"]
    pre = identity_pre(X.shape[1]) if pre is None else pre
    alpha = np.asarray(alpha, float)
    z = (np.asarray(y, float) - spec["loc"]) / spec["scale"]
    U = np.c_[np.ones(len(z)), (X - pre["xbar"]) @ pre["L"]]
    Ua = U * alpha[:, None]
    G = Ua.T @ U
    dp = _distinct_predictors(X)
    return dict(P=X.shape[1], xbar=pre["xbar"], L=pre["L"], W=float(alpha.sum()),
                G=0.5 * (G + G.T), h=Ua.T @ z, q=float(alpha @ z**2), loc=spec["loc"],
                scale=spec["scale"],
                has_lo=int(lo is not None), lo=0.0 if lo is None else float(lo),
                has_hi=int(hi is not None), hi=0.0 if hi is None else float(hi),
                nd=dp["nd"], Xd=dp["Xd"],
                alpha_d=np.bincount(dp["xd"] - 1, weights=alpha, minlength=dp["nd"]))


def _normal_draw(mu: np.ndarray, sigma: float, spec: dict[str, Any],
                 rng: np.random.Generator, mean_only: bool = False) -> np.ndarray:
    """Draws of N(mu, sigma) truncated to the spec's (lo, hi) (the mean with ``mean_only``).
    The bounds hold with the random effect in mu too: the truncation is of the conditional
    density given u, the one fitted."""
    if mean_only:
        return mu
    lo, hi = spec["lo"], spec["hi"]
    if lo is None and hi is None:
        return mu + sigma * rng.standard_normal(len(mu))
    a = -np.inf if lo is None else (lo - mu) / sigma
    b = np.inf if hi is None else (hi - mu) / sigma
    z = stats.truncnorm.rvs(a, b, size=len(mu), random_state=rng)
    out = mu + sigma * z
    return np.clip(out, -np.inf if lo is None else lo, np.inf if hi is None else hi)


def _negbin_draw(mu: np.ndarray, phi: float, spec: dict[str, Any],
                 rng: np.random.Generator) -> np.ndarray:
    """Draws of NB2(mu, phi) truncated above at the spec's hi."""
    p = phi / (phi + mu)
    hi = spec["hi"]
    if hi is None:
        wild = ~np.isfinite(mu) | (mu > 1e15) | ~(p > 0)
        if wild.any():
            # numpy's sampler fails here with "n too large or p too small": say what it means
            raise ValueError(
                f"a count variable without an upper bound: a posterior draw gives means up to "
                f"{np.nanmax(mu):.3g} (records {np.flatnonzero(wild)[:5].tolist()}), beyond any "
                f"count; the fit is not usable as it stands. Fix: give the count its public "
                f"upper bound (bounds=(0, hi) in the variable's spec), or longer chains "
                f"(warmup=2000, draws=2000) and check the fit's gates (allow_unconverged lets "
                f"such a fit through).")
        return rng.negative_binomial(phi, p).astype(np.int64)
    # inverse CDF of the truncated pmf: u ~ U(0, F(hi))
    u = rng.uniform(size=len(mu)) * special.betainc(phi, hi + 1.0, p)
    out = stats.nbinom.ppf(u, phi, p)
    return np.clip(np.nan_to_num(out, nan=hi), 0, hi).astype(np.int64)


class NormalModel(_Model):
    """y (modelled scale) ~ N(loc + scale (a + x'b), scale s), truncated to (lo, hi)."""

    program = "seq_normal"
    params = ("a", "b", "s")

    def program_for(self, spec, save_log_lik=False):
        """Without per-record log_lik the weighted likelihood depends on the data only through
        weighted sums (and, when truncated, the summed alphas per distinct predictor row):
        untruncated seq_normal_ss.stan, O(P^2) per gradient; truncated seq_normal_tss.stan,
        O(P^2 + nd P). Fits that save log_lik use the per-record seq_normal.stan."""
        if save_log_lik:
            return "seq_normal"
        untruncated = spec["lo"] is None and spec["hi"] is None
        return "seq_normal_ss" if untruncated else "seq_normal_tss"

    def stan_data(self, y, X, alpha, spec, save_log_lik, pre=None):
        lo, hi = spec["lo"], spec["hi"]
        program = self.program_for(spec, save_log_lik)
        if program == "seq_normal_ss":
            z = (np.asarray(y, float) - spec["loc"]) / spec["scale"]
            U = np.c_[np.ones(len(z)), X]
            Ua = U * alpha[:, None]
            G = Ua.T @ U
            return dict(P=X.shape[1], W=float(alpha.sum()), G=0.5 * (G + G.T), h=Ua.T @ z,
                        q=float(alpha @ z**2), scale=spec["scale"])
        if program == "seq_normal_tss":
            return _truncated_normal_sums(y, X, alpha, spec, pre)
        return dict(_base(y, X, alpha, save_log_lik, pre), y=y, loc=spec["loc"],
                    scale=spec["scale"],
                    has_lo=int(lo is not None), lo=0.0 if lo is None else float(lo),
                    has_hi=int(hi is not None), hi=0.0 if hi is None else float(hi),
                    **_distinct_predictors(X))

    def inits(self, y, X, spec, chains, rng):
        z = (y - spec["loc"]) / spec["scale"]
        A = np.c_[np.ones(len(z)), X]
        coef = np.linalg.lstsq(A, z, rcond=None)[0]
        s = max(float(np.std(z - A @ coef)), 1e-2)
        return [dict(a=float(coef[0] + 0.05 * rng.standard_normal()),
                     b=(coef[1:] + 0.05 * rng.standard_normal(X.shape[1])).tolist(),
                     s=s * float(np.exp(0.05 * rng.standard_normal()))) for _ in range(chains)]

    def _mu_sigma(self, draws, s, X, spec):
        mu = spec["loc"] + spec["scale"] * (draws["a"][s][:, None] + draws["b"][s] @ X.T)
        return mu, spec["scale"] * draws["s"][s][:, None]

    def loglik(self, draws, s, y, X, spec):
        mu, sigma = self._mu_sigma(draws, s, X, spec)
        lo, hi = spec["lo"], spec["hi"]
        if lo is None and hi is None:
            return normal_loglik(y, mu, sigma)
        Xd, inv = np.unique(X, axis=0, return_inverse=True)
        if len(Xd) > len(X) // 2:
            return normal_loglik(y, mu, sigma, lo, hi)
        # the normaliser depends on the predictors only (as in the Stan programs): computed
        # once per distinct row of X, it is most of this function's cost
        mud, _ = self._mu_sigma(draws, s, Xd, spec)
        return normal_loglik(y, mu, sigma) - normal_log_norm(mud, sigma, lo, hi)[:, inv.ravel()]

    def draw(self, draws, s, X, spec, rng, mean_only=False):
        mu, sigma = self._mu_sigma(draws, slice(s, s + 1), X, spec)
        return _normal_draw(mu[0], float(sigma[0, 0]), spec, rng, mean_only)


class NegBinModel(_Model):
    """y - lo ~ NB2(exp(eta0 + a + x'b), phi), truncated above at hi - lo."""

    program = "seq_negbin"
    params = ("a", "b", "phi")

    def stan_data(self, y, X, alpha, spec, save_log_lik, pre=None):
        hi = spec["hi"]
        return dict(_base(y, X, alpha, save_log_lik, pre), y=y.astype(np.int64),
                    eta0=spec["eta0"],
                    has_hi=int(hi is not None), hi=0 if hi is None else int(hi),
                    **_distinct_predictors(X))

    def inits(self, y, X, spec, chains, rng):
        m, v = float(np.mean(y)) + 0.5, float(np.var(y)) + 0.5
        phi = float(np.clip(m**2 / max(v - m, 1e-3), 0.1, 100.0))
        return [dict(a=float(np.log(m) - spec["eta0"] + 0.05 * rng.standard_normal()),
                     b=(0.05 * rng.standard_normal(X.shape[1])).tolist(),
                     phi=phi * float(np.exp(0.05 * rng.standard_normal())))
                for _ in range(chains)]

    def sampler_defaults(self, spec):
        """A TRUNCATED count's fits use adapt delta 0.95 (Stan's default 0.8): as mu grows past
        the upper bound the truncated NB tends to a fixed shape, so the weighted likelihood goes
        flat in the intercept and the risk weights flatten it further; at 0.8 the adapted step
        size is too large there and apistrat's meals and ell fits had 2-29 divergent
        transitions each, failing the release gate. 0.95 removed them at 1.2-1.7x the leapfrog
        steps (docs/sequential.md "Small files"). Untruncated counts keep Stan's default."""
        return {"delta": 0.95} if spec.get("hi") is not None else {}

    def _log_mu_phi(self, draws, s, X, spec, u=None):
        """(log mu, phi) of the draws ``s``: the linear predictor on the log scale."""
        return (spec["eta0"] + draws["a"][s][:, None] + draws["b"][s] @ X.T,
                draws["phi"][s][:, None])

    def _mu_phi(self, draws, s, X, spec, u=None):
        eta, phi = self._log_mu_phi(draws, s, X, spec, u)
        return np.exp(eta), phi

    def loglik(self, draws, s, y, X, spec):
        eta, phi = self._log_mu_phi(draws, s, X, spec)
        return negbin_loglik(y, None, phi, spec["hi"], log_mu=eta)

    def draw(self, draws, s, X, spec, rng, mean_only=False):
        mu, phi = self._mu_phi(draws, slice(s, s + 1), X, spec)
        return _negbin_draw(mu[0], float(phi[0, 0]), spec, rng)


class LogisticModel(_Model):
    program = "seq_logistic"
    params = ("a", "b")

    def stan_data(self, y, X, alpha, spec, save_log_lik, pre=None):
        return dict(_base(y, X, alpha, save_log_lik, pre), y=y.astype(np.int64))

    def inits(self, y, X, spec, chains, rng):
        p = float(np.clip(np.mean(y), 0.02, 0.98))
        return [dict(a=float(special.logit(p) + 0.05 * rng.standard_normal()),
                     b=(0.05 * rng.standard_normal(X.shape[1])).tolist()) for _ in range(chains)]

    def _eta(self, draws, s, X):
        return draws["a"][s][:, None] + draws["b"][s] @ X.T

    def loglik(self, draws, s, y, X, spec):
        return logistic_loglik(y, self._eta(draws, s, X))

    def draw(self, draws, s, X, spec, rng, mean_only=False):
        eta = self._eta(draws, slice(s, s + 1), X)[0]
        return (rng.uniform(size=len(eta)) < special.expit(eta)).astype(np.int64)


class CategoricalModel(_Model):
    program = "seq_categorical"
    params = ("a", "B")

    @staticmethod
    def _shares(y, K: int) -> np.ndarray:
        """The records' category shares, each count + 0.5 (none is 0)."""
        return (np.bincount(np.asarray(y, np.int64), minlength=K) + 0.5) / (len(y) + 0.5 * K)

    def inits(self, y, X, spec, chains, rng):
        K = spec["K"]
        p = self._shares(y, K)
        a = np.log(p[1:]) - np.log(p[0])
        return [dict(a=(a + 0.05 * rng.standard_normal(K - 1)).tolist(),
                     B=(0.05 * rng.standard_normal((X.shape[1], K - 1))).tolist())
                for _ in range(chains)]

    def sampler_pre(self, pre, y, spec):
        """Adds Q, the logits' sampling coordinates (seq_categorical.stan: [at'; Bt] = Ct Q):
        the inverse square root of M = diag(p) - p p', p the records' shares of categories
        2..K (``_shares``: M is positive definite even when a category is empty). The logits'
        Fisher information is about n M per whitened predictor, so the coordinates Ct are
        nearly uncorrelated across logits; a linear, invertible map with the priors on (a, B):
        the posterior is the same."""
        p = self._shares(y, int(spec["K"]))
        M = np.diag(p[1:]) - np.outer(p[1:], p[1:])
        return dict(pre, Q=_sym_sqrt(M, -0.5))

    @staticmethod
    def _logit_coords(pre, K):
        return np.asarray(pre.get("Q", np.eye(K - 1)), float)

    def stan_data(self, y, X, alpha, spec, save_log_lik, pre=None):
        pre = identity_pre(X.shape[1]) if pre is None else pre
        return dict(_base(y, X, alpha, save_log_lik, pre), K=spec["K"],
                    y=y.astype(np.int64) + 1, Q=self._logit_coords(pre, spec["K"]))

    @staticmethod
    def _at_bt(inits, pre):
        """B = L Bt, a = at - B' xbar: (at, Bt) of each natural init."""
        out = []
        for d in inits:
            a = np.asarray(d["a"], float)
            B = np.asarray(d["B"], float).reshape(len(pre["xbar"]), len(a))  # P may be 0
            out.append((a + B.T @ pre["xbar"],
                        np.linalg.solve(pre["L"], B) if B.size else B))
        return out

    def sampler_inits(self, inits, spec, pre):
        """[at'; Bt] = Ct Q, B = L Bt, a = at - B' xbar (seq_categorical.stan)."""
        Q = self._logit_coords(pre, int(spec["K"]))
        return [dict(Ct=np.linalg.solve(Q.T, np.vstack([at[None, :], Bt]).T).T.tolist())
                for at, Bt in self._at_bt(inits, pre)]

    def _eta(self, draws, s, X):
        a, B = draws["a"][s], draws["B"][s]          # (S, K-1), (S, P, K-1)
        eta = a[:, None, :] + np.einsum("np,spk->snk", X, B)
        return np.concatenate([np.zeros((*eta.shape[:2], 1)), eta], axis=-1)

    def loglik(self, draws, s, y, X, spec):
        return categorical_loglik(y, self._eta(draws, s, X))

    def draw(self, draws, s, X, spec, rng, mean_only=False):
        eta = self._eta(draws, slice(s, s + 1), X)[0]
        return np.argmax(eta + rng.gumbel(size=eta.shape), axis=1).astype(np.int64)


class OrdinalModel(_Model):
    program = "seq_ordinal"
    params = ("b", "c")

    def stan_data(self, y, X, alpha, spec, save_log_lik, pre=None):
        return dict(_base(y, X, alpha, save_log_lik, pre), K=spec["K"],
                    y=y.astype(np.int64) + 1)

    def inits(self, y, X, spec, chains, rng):
        K = spec["K"]
        cum = np.cumsum(np.bincount(y, minlength=K) + 0.5)[:-1] / (len(y) + 0.5 * K)
        c = special.logit(cum)
        c = np.maximum.accumulate(c + np.arange(K - 1) * 1e-3)
        return [dict(b=(0.05 * rng.standard_normal(X.shape[1])).tolist(),
                     c=(c + 0.02 * rng.standard_normal() ).tolist()) for _ in range(chains)]

    def sampler_inits(self, inits, spec, pre):
        """b = L bt, c = ct + xbar' b (seq_ordinal.stan)."""
        out = []
        for d in inits:
            b = np.asarray(d["b"], float)
            out.append(dict(bt=np.linalg.solve(pre["L"], b).tolist() if len(b) else [],
                            ct=(np.asarray(d["c"], float) - pre["xbar"] @ b).tolist()))
        return out

    def loglik(self, draws, s, y, X, spec):
        return ordinal_loglik(y, draws["b"][s] @ X.T, draws["c"][s])

    def draw(self, draws, s, X, spec, rng, mean_only=False):
        eta = (draws["b"][s] @ X.T)
        cut = draws["c"][s]
        # P(y > k) = inv_logit(eta - c_k): y = number of k with u < P(y > k)
        q = special.expit(eta[:, None] - cut[None, :])            # (n, K-1), decreasing in k
        u = rng.uniform(size=len(eta))
        return (u[:, None] < q).sum(axis=1).astype(np.int64)


MODELS: dict[str, _Model] = {
    "normal": NormalModel(), "negbin": NegBinModel(), "logistic": LogisticModel(),
    "categorical": CategoricalModel(), "ordinal": OrdinalModel(),
}


# -------------------------------------------------------------------------------- random effects
def split_groups(Xg: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """A random-intercept model's design matrix is the predictors with the record's PSU code
    (0..J-1) as a LAST column (so that the distinct patterns, the bounds and the rows handed to
    Stan are per (x, y, PSU), exactly): the predictors and the codes."""
    return Xg[:, :-1], np.asarray(Xg[:, -1]).astype(np.int64)


class _RandomIntercept:
    """PSU random intercepts added to a family's linear predictor (clustered designs; issue 36
    D1/D3; docs/sequential.md "Clustered designs").

    ``u_j = sigma_u z_j``, z_j ~ N(0, 1) in Stan (non-centred); ``spec["J"]`` the number of PSUs
    of the design; the design matrix carries the PSU code as its last column
    (:func:`split_groups`). The log density (the Lipschitz bound) is the CONDITIONAL one given
    the draw's u_j (D4: u is inside theta). Synthesis draws u*_j afresh from N(0, sigma_u^(s))
    for each synthetic set (:meth:`fresh_u`), never the posterior u_j, which would publish each
    cluster's mean."""

    re_params: tuple[str, ...] = ("sigma_u", "z_u")

    @staticmethod
    def posterior_u(draws, s) -> np.ndarray:
        """u of the draws ``s``: (S, J), or (S, K-1, J) for the categorical model."""
        su, z = draws["sigma_u"][s], draws["z_u"][s]
        return su[..., None] * z

    def fresh_u(self, draws, s: int, spec, rng: np.random.Generator) -> np.ndarray:
        """u* ~ N(0, sigma_u^(s)) for each of the J PSUs (one synthetic set), shaped as
        :meth:`posterior_u` of one draw: (1, J) or (1, K-1, J)."""
        su = np.asarray(draws["sigma_u"][s], dtype=float)
        return (su[..., None] * rng.standard_normal((*su.shape, int(spec["J"]))))[None, ...]

    @staticmethod
    def _init_u(spec, chains, rng, shape=()) -> list[dict[str, Any]]:
        J = int(spec["J"])
        return [dict(sigma_u=(0.2 * np.exp(0.1 * rng.standard_normal(shape))).tolist()
                     if shape else float(0.2 * np.exp(0.1 * rng.standard_normal())),
                     z_u=(0.1 * rng.standard_normal((*shape, J))).tolist())
                for _ in range(chains)]


def _re_data(Xg: np.ndarray, spec: dict[str, Any], distinct: bool) -> tuple[np.ndarray, dict]:
    X, g = split_groups(Xg)
    out: dict[str, Any] = dict(J=int(spec["J"]), g=g + 1)
    if distinct:   # truncation normalisers: once per distinct (x, PSU) row
        dp = _distinct_predictors(Xg)
        Xd, gd = split_groups(dp["Xd"])
        out.update(nd=dp["nd"], Xd=Xd, xd=dp["xd"], gd=gd + 1)
    return X, out


class NormalREModel(_RandomIntercept, NormalModel):
    """NormalModel with mu = loc + scale (a + x'b + u_j) (seq_normal_re.stan; truncated to the
    bounds when given, the normaliser given u_j)."""

    program = "seq_normal_re"
    params = ("a", "b", "s", "sigma_u", "z_u")

    def program_for(self, spec, save_log_lik=False):
        """Always the per-row program (rows: the distinct (x, y, PSU) patterns)."""
        return self.program

    def stan_data(self, y, X, alpha, spec, save_log_lik, pre=None):
        lo, hi = spec["lo"], spec["hi"]
        Xp, re = _re_data(X, spec, True)
        return dict(_base(y, Xp, alpha, save_log_lik, pre), y=y, loc=spec["loc"],
                    scale=spec["scale"],
                    has_lo=int(lo is not None), lo=0.0 if lo is None else float(lo),
                    has_hi=int(hi is not None), hi=0.0 if hi is None else float(hi), **re)

    def inits(self, y, X, spec, chains, rng):
        base = NormalModel.inits(self, y, split_groups(X)[0], spec, chains, rng)
        return [{**b, **u} for b, u in zip(base, self._init_u(spec, chains, rng), strict=True)]

    def _mu_sigma(self, draws, s, X, spec, u=None):
        Xp, g = split_groups(X)
        u = self.posterior_u(draws, s) if u is None else u
        mu = spec["loc"] + spec["scale"] * (draws["a"][s][:, None] + draws["b"][s] @ Xp.T
                                            + u[:, g])
        return mu, spec["scale"] * draws["s"][s][:, None]

    def draw(self, draws, s, X, spec, rng, mean_only=False):
        u = self.fresh_u(draws, s, spec, rng)
        mu, sigma = self._mu_sigma(draws, slice(s, s + 1), X, spec, u)
        return _normal_draw(mu[0], float(sigma[0, 0]), spec, rng, mean_only)


class NegBinREModel(_RandomIntercept, NegBinModel):
    """NegBinModel with log mu = eta0 + a + x'b + u_j (seq_negbin_re.stan)."""

    program = "seq_negbin_re"
    params = ("a", "b", "phi", "sigma_u", "z_u")

    def stan_data(self, y, X, alpha, spec, save_log_lik, pre=None):
        hi = spec["hi"]
        Xp, re = _re_data(X, spec, True)
        return dict(_base(y, Xp, alpha, save_log_lik, pre), y=y.astype(np.int64),
                    eta0=spec["eta0"], has_hi=int(hi is not None),
                    hi=0 if hi is None else int(hi), **re)

    def inits(self, y, X, spec, chains, rng):
        base = NegBinModel.inits(self, y, split_groups(X)[0], spec, chains, rng)
        return [{**b, **u} for b, u in zip(base, self._init_u(spec, chains, rng), strict=True)]

    def _log_mu_phi(self, draws, s, X, spec, u=None):
        Xp, g = split_groups(X)
        u = self.posterior_u(draws, s) if u is None else u
        return (spec["eta0"] + draws["a"][s][:, None] + draws["b"][s] @ Xp.T + u[:, g],
                draws["phi"][s][:, None])

    def draw(self, draws, s, X, spec, rng, mean_only=False):
        u = self.fresh_u(draws, s, spec, rng)
        mu, phi = self._mu_phi(draws, slice(s, s + 1), X, spec, u)
        return _negbin_draw(mu[0], float(phi[0, 0]), spec, rng)


class LogisticREModel(_RandomIntercept, LogisticModel):
    """logit P(y = 1) = a + x'b + u_j (seq_logistic_re.stan)."""

    program = "seq_logistic_re"
    params = ("a", "b", "sigma_u", "z_u")

    def stan_data(self, y, X, alpha, spec, save_log_lik, pre=None):
        Xp, re = _re_data(X, spec, False)
        return dict(_base(y, Xp, alpha, save_log_lik, pre), y=y.astype(np.int64), **re)

    def inits(self, y, X, spec, chains, rng):
        base = LogisticModel.inits(self, y, split_groups(X)[0], spec, chains, rng)
        return [{**b, **u} for b, u in zip(base, self._init_u(spec, chains, rng), strict=True)]

    def _eta(self, draws, s, X, u=None):
        Xp, g = split_groups(X)
        u = self.posterior_u(draws, s) if u is None else u
        return draws["a"][s][:, None] + draws["b"][s] @ Xp.T + u[:, g]

    def draw(self, draws, s, X, spec, rng, mean_only=False):
        eta = self._eta(draws, slice(s, s + 1), X, self.fresh_u(draws, s, spec, rng))[0]
        return (rng.uniform(size=len(eta)) < special.expit(eta)).astype(np.int64)


class CategoricalREModel(_RandomIntercept, CategoricalModel):
    """eta_k = a_k + x'B_k + u_kj for the non-reference levels k, one independent intercept
    per PSU and logit, each logit its own sigma_u[k] (seq_categorical_re.stan: why not one
    shared intercept)."""

    program = "seq_categorical_re"
    params = ("a", "B", "sigma_u", "z_u")

    def stan_data(self, y, X, alpha, spec, save_log_lik, pre=None):
        Xp, re = _re_data(X, spec, False)
        return dict(CategoricalModel.stan_data(self, y, Xp, alpha, spec, save_log_lik, pre),
                    **re)

    def inits(self, y, X, spec, chains, rng):
        base = CategoricalModel.inits(self, y, split_groups(X)[0], spec, chains, rng)
        us = self._init_u(spec, chains, rng, shape=(spec["K"] - 1,))
        return [{**b, **u} for b, u in zip(base, us, strict=True)]

    def sampler_inits(self, inits, spec, pre):
        out = CategoricalModel.sampler_inits(self, inits, spec, pre)
        return [{**o, **{k: d[k] for k in self.re_params if k in d}}
                for o, d in zip(out, inits, strict=True)]

    def _eta(self, draws, s, X, u=None):
        Xp, g = split_groups(X)
        u = self.posterior_u(draws, s) if u is None else u          # (S, K-1, J)
        a, B = draws["a"][s], draws["B"][s]
        eta = a[:, None, :] + np.einsum("np,spk->snk", Xp, B) + np.swapaxes(u[:, :, g], 1, 2)
        return np.concatenate([np.zeros((*eta.shape[:2], 1)), eta], axis=-1)

    def draw(self, draws, s, X, spec, rng, mean_only=False):
        eta = self._eta(draws, slice(s, s + 1), X, self.fresh_u(draws, s, spec, rng))[0]
        return np.argmax(eta + rng.gumbel(size=eta.shape), axis=1).astype(np.int64)


class OrdinalREModel(_RandomIntercept, OrdinalModel):
    """P(y > k) = inv_logit(x'b + u_j - c_k) (seq_ordinal_re.stan)."""

    program = "seq_ordinal_re"
    params = ("b", "c", "sigma_u", "z_u")

    def stan_data(self, y, X, alpha, spec, save_log_lik, pre=None):
        Xp, re = _re_data(X, spec, False)
        return dict(_base(y, Xp, alpha, save_log_lik, pre), K=spec["K"],
                    y=y.astype(np.int64) + 1, **re)

    def inits(self, y, X, spec, chains, rng):
        base = OrdinalModel.inits(self, y, split_groups(X)[0], spec, chains, rng)
        return [{**b, **u} for b, u in zip(base, self._init_u(spec, chains, rng), strict=True)]

    def sampler_inits(self, inits, spec, pre):
        out = OrdinalModel.sampler_inits(self, inits, spec, pre)
        return [{**o, **{k: d[k] for k in self.re_params if k in d}}
                for o, d in zip(out, inits, strict=True)]

    def _eta(self, draws, s, X, u=None):
        Xp, g = split_groups(X)
        u = self.posterior_u(draws, s) if u is None else u
        return draws["b"][s] @ Xp.T + u[:, g]

    def loglik(self, draws, s, y, X, spec):
        return ordinal_loglik(y, self._eta(draws, s, X), draws["c"][s])

    def draw(self, draws, s, X, spec, rng, mean_only=False):
        eta = self._eta(draws, slice(s, s + 1), X, self.fresh_u(draws, s, spec, rng))[0]
        q = special.expit(eta[:, None] - draws["c"][s][None, :])
        u = rng.uniform(size=len(eta))
        return (u[:, None] < q).sum(axis=1).astype(np.int64)


#: family -> its model with PSU random intercepts (clustered designs, issue 36 D3)
MODELS_RE: dict[str, _Model] = {
    "normal": NormalREModel(), "negbin": NegBinREModel(), "logistic": LogisticREModel(),
    "categorical": CategoricalREModel(), "ordinal": OrdinalREModel(),
}
