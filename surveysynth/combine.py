"""Combining rules for m synthetic or multiply imputed data sets (METHODS.md section 4).

Each of the m data sets gives, for each of k estimands, a point estimate ``q_l`` and its
(within-set) variance ``u_l``. With

    qbar = mean_l q_l,   b = sum_l (q_l - qbar)^2 / (m - 1),   ubar = mean_l u_l,

* ``kind="partial"`` (partial synthesis, Reiter 2003): ``T_p = ubar + b/m``,
  ``df = (m-1) (1 + ubar/(b/m))^2``;
* ``kind="full"`` (full synthesis, Raghunathan, Reiter & Rubin 2003): ``T_f = (1 + 1/m) b - ubar``,
  ``df = (m-1) (1 - m ubar / ((m+1) b))^2``, floored at the model-based variance of Raab,
  Nowok & Dibben (2016) for proper full synthesis, ``T_s = ubar (n_syn/n + (1 + n_syn/n)/m)``:
  when ``T_f < T_s`` (this includes every ``T_f <= 0``) the row uses ``T_s`` with a normal
  reference and is flagged in ``note`` (module notes: why);
* for both synthesis rules, with the synthetic design's complete-data df ``nu_com`` given
  (``df_complete``; a release passes each estimate's design df, R's ``degf``: PSUs minus
  strata), the df are capped by a Barnard-Rubin (1999) style small-sample adjustment
  (issue 36, D8): ``nu = (1/nu_m + 1/nu_obs)^-1`` with ``nu_obs = nu_com (nu_com + 1) /
  (nu_com + 3) (1 - gamma)``, ``nu_m`` the rule's large-sample df above and ``gamma`` the
  between share of T: ``(b/m) / T_p`` for partial synthesis; 0 for full synthesis (T_f is
  the between component minus ubar, so no share of it is "within"; the cap is then
  ``nu_com (nu_com+1)/(nu_com+3)`` combined harmonically with nu_m). So nu <= min(nu_m,
  nu_obs) < nu_com: a synthetic release never claims more df than its design has (apiclus1:
  14, not 102), and with ``nu_com`` infinite the large-sample df are unchanged;
* ``kind="mi"`` (multiple imputation, Rubin 1987): ``T = ubar + (1 + 1/m) b`` with Rubin's
  large-sample df ``(m-1)(1 + 1/r)^2``, ``r = (1+1/m) b / ubar``, or the Barnard-Rubin (1999)
  small-sample df when the complete-data df is given.

Intervals are ``qbar +- t_{df} sqrt(T)`` (normal when df is infinite).

Decisions where the sources leave a choice (recorded in docs/tables.md):

* ``m = 1``: b is undefined; every rule returns ``T = ubar`` with a normal reference (df = inf)
  and says so in ``note`` (METHODS section 4).
* Full-synthesis floor (issue 36; docs/tables.md, "Which rule and which df"). T_f is unbiased
  but rests on b, a variance from m estimates (m - 1 df): at m = 5 it falls below half its
  expectation in about a quarter of releases, and its Satterthwaite df (above) are then near 0
  (PBP on apistrat gave SE 3.1 and 5.1 against the confidential 9.4, df 0.06 and 0.26). Under
  the synthesis model, with the posterior variance of the estimand equal to the confidential
  sample's (n_syn/n) ubar, E[T_f] = ubar (n_syn/n + (1 + n_syn/n)/m) = T_s, the variance
  R synthpop uses for population inference from proper full synthesis (Raab, Nowok & Dibben
  2016); T_s rests on ubar (m n_syn records), not on b. So T = max(T_f, T_s): below T_s the
  shortfall is noise of b (or a posterior narrower than the sample's, which the model rules
  out), and T_s is used with the normal reference (df = inf; with ``df_complete`` given, the
  Barnard-Rubin style cap of D8 gives a t on ``nu_obs``); above it (b larger than the model
  expects: a mechanism's noise, risk weights that widen the posterior, misfit) T_f and its df
  are kept, as before. Coverage in a simulation of proper synthesis (tests/test_combine.py):
  0.95-0.97 at m = 2-20, against 0.88 for ``|z| < 2`` with T_f alone. It replaces the former
  fallback (T_f* = (n_syn/n) ubar, Reiter 2002, only when T_f <= 0), which left the tiny
  positive T_f above. The rule needs ``n`` (the confidential sample size) and ``n_syn`` (rows
  of one synthetic set); without them it is an error, never a silent guess.
* ``b = 0`` (identical estimates, e.g. a release of m copies of one data set): the partial rule
  gives ``T_p = ubar`` and ``df = inf`` (the limit of the df formula); Rubin's df is also inf.
* Barnard-Rubin df: ``nu_obs = (nu_com+1)/(nu_com+3) nu_com (1 - gamma)`` with
  ``gamma = (1+1/m) b / T`` as in Barnard & Rubin (1999). R ``mitools::MIcombine`` uses
  ``vbar/(vbar + b)`` in place of ``1 - gamma`` (it omits the 1 + 1/m factor), so with a finite
  ``df_complete`` its df differ slightly from ours; with ``df_complete=None`` (infinite) they agree.
"""

from __future__ import annotations

import numpy as np
import pandas as pd
from numpy.typing import ArrayLike
from scipy import stats

KINDS = ("partial", "full", "mi")

NOTE_M1 = "m = 1: between-set variance undefined; T = ubar with a normal reference"
NOTE_FALLBACK = ("full synthesis: T_f below its model-based floor, used T_s = ubar (n_syn/n + "
                 "(1 + n_syn/n)/m) (Raab, Nowok & Dibben 2016) with a normal reference (a t on "
                 "the capped df when the synthetic design's df is given)")


def _as_2d(x: ArrayLike, name: str) -> np.ndarray:
    a = np.asarray(x, dtype=float)
    if a.ndim == 1:
        a = a[:, None]
    if a.ndim != 2:
        raise ValueError(
            f"{name}: expected shape (m,) or (m, k) (m data sets, k estimands), got {a.shape}."
        )
    if a.shape[0] == 0:
        raise ValueError(f"{name}: no data sets (m = 0).")
    return a


def combine(
    estimates: ArrayLike,
    variances: ArrayLike,
    kind: str = "partial",
    n: float | None = None,
    n_syn: float | None = None,
    df_complete: float | ArrayLike | None = None,
    level: float = 0.95,
) -> pd.DataFrame:
    """Combine m point estimates and variances into one inference per estimand.

    Parameters
    ----------
    estimates, variances : array of shape (m,) or (m, k)
        Row l holds data set l's estimates (resp. their variances, i.e. squared SEs) of the k
        estimands.
    kind : ``"partial"`` (partially synthetic data), ``"full"`` (fully synthetic data) or
        ``"mi"`` (multiple imputation). A release's kind decides which rule is valid.
    n, n_syn : the confidential sample size and the size of one synthetic data set; used only by
        the full-synthesis floor ``T_s = ubar (n_syn/n + (1 + n_syn/n)/m)`` (required with
        ``kind="full"``).
    df_complete : complete-data degrees of freedom nu_com (scalar or one per estimand; inf or
        NaN entries: none). ``kind="mi"``: the Barnard-Rubin df; ``None`` gives Rubin's
        large-sample df (as R ``mitools::MIcombine``). ``"partial"`` / ``"full"``: the
        synthetic design's df (R ``degf``) capping the rule's df (module notes, D8).
    level : confidence level of the interval.

    Returns
    -------
    DataFrame with one row per estimand and columns ``estimate`` (qbar), ``variance`` (T),
    ``se`` (sqrt T), ``df``, ``ci_low``, ``ci_high``, ``between`` (b, the between-set variance;
    NaN for m = 1), ``within`` (ubar), ``m`` and ``note`` (empty unless a special case applied).
    """
    if kind not in KINDS:
        raise ValueError(f"kind={kind!r}: choose one of {KINDS} ('mi' = multiple imputation).")
    if not 0 < level < 1:
        raise ValueError(f"level={level}: must be in (0, 1).")
    q = _as_2d(estimates, "estimates")
    u = _as_2d(variances, "variances")
    if q.shape != u.shape:
        raise ValueError(
            f"estimates have shape {q.shape} but variances {u.shape}: give one variance per "
            "estimate (variances are squared standard errors)."
        )
    neg = u < 0
    if neg.any():
        r, c = np.argwhere(neg)[0]
        raise ValueError(
            f"variances: negative value {u[r, c]:g} (data set {r}, estimand {c}; "
            f"{int(neg.sum())} in all). Fix: pass variances (SE squared), not differences."
        )
    m, k = q.shape
    qbar = q.mean(axis=0)
    ubar = u.mean(axis=0)
    note = np.full(k, "", dtype=object)
    with np.errstate(divide="ignore", invalid="ignore"):
        if m == 1:
            b = np.full(k, np.nan)
            T = ubar.copy()
            df = np.full(k, np.inf)
            note[:] = NOTE_M1
        else:
            b = q.var(axis=0, ddof=1)
            if kind == "partial":
                T = ubar + b / m
                df = np.where(b > 0, (m - 1) * (1 + ubar / (b / m)) ** 2, np.inf)
                df = _cap_df(df, df_complete, (b / m) / T, k)
            elif kind == "full":
                if n is None or n_syn is None:
                    raise ValueError(
                        "full synthesis: the rule floors T_f at T_s = ubar (n_syn/n + (1 + "
                        "n_syn/n)/m), which needs the sizes. Fix: pass n (confidential sample "
                        "size) and n_syn (rows of one synthetic data set)."
                    )
                if n <= 0 or n_syn <= 0:
                    raise ValueError(f"n={n}, n_syn={n_syn}: both must be positive.")
                T = (1 + 1 / m) * b - ubar
                df = (m - 1) * (1 - m * ubar / ((m + 1) * b)) ** 2
                T_s = ubar * (n_syn / n + (1 + n_syn / n) / m)
                fb = (T < T_s) | (T <= 0)
                T = np.where(fb, T_s, T)
                df = np.where(fb, np.inf, df)
                note[fb] = NOTE_FALLBACK
                df = _cap_df(df, df_complete, np.zeros(k), k)
            else:  # mi
                T = ubar + (1 + 1 / m) * b
                r = (1 + 1 / m) * b / ubar
                df = np.where(b > 0, (m - 1) * (1 + 1 / r) ** 2, np.inf)
                if df_complete is not None:
                    nu_com = np.broadcast_to(np.asarray(df_complete, dtype=float), (k,))
                    if (nu_com <= 0).any():
                        raise ValueError(f"df_complete={df_complete!r}: must be positive.")
                    gamma = (1 + 1 / m) * b / T
                    nu_obs = (nu_com + 1) / (nu_com + 3) * nu_com * (1 - gamma)
                    df = np.where(np.isfinite(nu_com), 1 / (1 / nu_obs + 1 / df), df)
        se = np.sqrt(T)
        crit = np.where(
            np.isfinite(df),
            stats.t.ppf((1 + level) / 2, np.where(np.isfinite(df) & (df > 0), df, 1.0)),
            stats.norm.ppf((1 + level) / 2),
        )
    return pd.DataFrame(
        {
            "estimate": qbar,
            "variance": T,
            "se": se,
            "df": df,
            "ci_low": qbar - crit * se,
            "ci_high": qbar + crit * se,
            "between": b,
            "within": ubar,
            "m": np.full(k, m, dtype=np.int64),
            "note": note,
        }
    )


def _cap_df(df: np.ndarray, df_complete: float | ArrayLike | None, gamma: np.ndarray,
            k: int) -> np.ndarray:
    """The synthesis rules' df capped by the design's complete-data df (D8, module notes):
    ``(1/df + 1/nu_obs)^-1``, ``nu_obs = nu_com (nu_com+1)/(nu_com+3) (1 - gamma)``; entries
    without a finite positive nu_com keep their df."""
    if df_complete is None:
        return df
    nu_com = np.broadcast_to(np.asarray(df_complete, dtype=float), (k,))
    if (nu_com <= 0).any():
        bad = np.flatnonzero(nu_com <= 0)[:5].tolist()
        raise ValueError(
            f"df_complete: non-positive design df for estimand(s) {bad} ({nu_com[bad].tolist()}):"
            " a design with no more PSUs than strata has no variance estimate. Fix: check the "
            "synthetic designs' ids/strata (or pass None: no cap).")
    finite = np.isfinite(nu_com)
    if not finite.any():
        return df
    g = np.clip(np.nan_to_num(np.asarray(gamma, dtype=float), nan=0.0), 0.0, 1.0)
    with np.errstate(divide="ignore", invalid="ignore"):
        nu_obs = nu_com * (nu_com + 1) / (nu_com + 3) * (1 - g)
        capped = 1.0 / (1.0 / df + 1.0 / nu_obs)
    return np.where(finite & np.isfinite(capped), capped,
                    np.where(finite, np.minimum(df, nu_obs), df))


#: one line per rule: what it is, its df and its assumptions (printed with a release estimate)
RULE_TEXT = {
    "partial": ("partial synthesis (Reiter 2003): T = ubar + b/m",
                "each set's estimate approximately normal with a design-consistent "
                "variance, a synthesis model congenial to the analysis, and sets drawn "
                "independently given the confidential data"),
    "full": ("full synthesis (Raghunathan, Reiter & Rubin 2003): T = (1+1/m) b - ubar, at "
             "least ubar (n_syn/n + (1 + n_syn/n)/m) (Raab, Nowok & Dibben 2016)",
             "each set's estimate approximately normal with a design-consistent "
             "variance, a correct (congenial) synthesis model, and sets drawn independently "
             "from the posterior predictive of the population"),
    "mi": ("multiple imputation (Rubin 1987): T = ubar + (1+1/m) b",
           "proper imputations from a model congenial to the analysis"),
}


def rule_note(result: pd.DataFrame, kind: str, df_complete: ArrayLike | None = None) -> str:
    """Two lines for a combined estimate's print: the rule and its df (with the design df
    that capped it, D8), and one line of the rule's assumptions."""
    rule, assumes = RULE_TEXT[kind]
    df = np.asarray(result["df"], dtype=float)
    fin = df[np.isfinite(df)]
    df_txt = ("inf" if fin.size == 0 else f"{fin.min():.3g}" if fin.min() == fin.max()
              else f"{fin.min():.3g}-{fin.max():.3g}")
    cap = ""
    if df_complete is not None:
        nu = np.asarray(df_complete, dtype=float)
        nu = nu[np.isfinite(nu)]
        if nu.size:
            nu_txt = f"{nu.min():.4g}" if nu.min() == nu.max() else f"{nu.min():.4g}-{nu.max():.4g}"
            cap = (f", capped by the synthetic design's df {nu_txt} (Barnard & Rubin 1999: "
                   "nu = (1/nu_m + 1/nu_obs)^-1)")
    return f"Rule: {rule}; df {df_txt}{cap}.\nAssumes: {assumes}."


def low_df_note(result: pd.DataFrame, kind: str) -> str | None:
    """One line explaining a combined inference with df < 2, or None when every df >= 2.

    ``result`` is a :func:`combine` frame (columns ``df``, ``between``, ``within``, ``m``). A t
    reference with df < 2 has a 97.5% quantile above 4.3 (12.7 at df = 1, 64 at df = 0.5), so
    such intervals are too wide to use; the line says why and what helps. For full synthesis
    (Raghunathan, Reiter & Rubin 2003) T_f = (1 + 1/m) b - vbar and df = (m - 1)(1 - r)^2 with
    r = vbar / ((1 + 1/m) b): df is small when the m estimates vary little more than each one's
    own sampling variance predicts (r near 1), so T_f is a small difference of two noisy
    numbers; df can never exceed m - 1, so more synthetic sets are the remedy. For partial
    synthesis and multiple imputation df >= m - 1 (large-sample rules), so df < 2 means m = 2.
    """
    df = np.asarray(result["df"], dtype=float)
    low = np.isfinite(df) & (df < 2)
    if not low.any():
        return None
    m = int(np.asarray(result["m"])[0])
    if kind == "full" and m > 2:
        with np.errstate(divide="ignore", invalid="ignore"):
            r = (np.asarray(result["within"], dtype=float)
                 / ((1 + 1 / m) * np.asarray(result["between"], dtype=float)))[low]
        r_txt = (f"{np.nanmin(r):.2f}" if np.nanmin(r) == np.nanmax(r)
                 else f"{np.nanmin(r):.2f}-{np.nanmax(r):.2f}")
        return (
            f"df < 2 ({int(low.sum())} row(s)): full synthesis estimates the variance as "
            f"T_f = (1+1/m) b - vbar from only m = {m} sets, with df = (m-1)(1 - vbar/((1+1/m) b))^2"
            f" <= m - 1 = {m - 1}; here vbar/((1+1/m) b) = {r_txt} (the closer to 1, i.e. the "
            "less the sets' estimates vary beyond their own sampling variance, the smaller df), "
            "so T_f is poorly determined and the t interval is very wide: use more synthetic "
            "sets (a larger m)."
        )
    return (
        f"df < 2 ({int(low.sum())} row(s)): with m = {m} synthetic sets the between-set variance "
        f"rests on {m - 1} degree(s) of freedom, so the t interval is very wide: use more "
        "synthetic sets (a larger m)."
    )


def combine_sets(
    estimates: ArrayLike,
    variances: ArrayLike,
    kind: str,
    n_syn: float,
    n_original: float | None = None,
    level: float = 0.95,
    df_complete: ArrayLike | None = None,
) -> pd.DataFrame:
    """:func:`combine` for the m synthetic sets of a release (the rule a release applies).

    ``n_original`` is the confidential sample size when the release publishes it; without it
    the full-synthesis floor T_s takes n = n_syn and its note says so, so a reader sees that
    the floored variance rests on that assumption. ``df_complete``: each estimand's design
    df in the synthetic designs (the smallest over the m sets), which caps the rule's df (D8).
    """
    n = n_original if n_original is not None else n_syn
    out = combine(estimates, variances, kind=kind, n=n, n_syn=n_syn, level=level,
                  df_complete=df_complete)
    if n_original is None and kind == "full":
        notes = out["note"].to_numpy(dtype=object).copy()
        notes[notes == NOTE_FALLBACK] = NOTE_FALLBACK + " (n_original unknown: n taken as n_syn)"
        out["note"] = notes
    return out
