"""Attack-based disclosure evidence for the confidential report (issue 35, item 6).

Every measure here attacks synthetic data with records an intruder might hold and is read beside
the same attack on records the synthesizer never saw (a *holdout*): what the synthetic data tell
about the records they were fit on beyond what they tell about any record of the population is
the record-level leakage. All of it is computed from confidential records: it belongs in the
confidential report only. Definitions, choices and the formulas: docs/attacks.md.

* :func:`closest_distance` / :func:`dcr_summary`: distance to the closest record (DCR; relative,
  L-infinity over the numeric variables, exact match on the categorical ones) and the match share
  (synthetic records within ``tol`` = 1% of a record);
* :func:`membership_inference`: a distance attack (a record is called a member when a synthetic
  record lies close to it) telling training records from holdout records: AUC and an epsilon
  lower bound from Clopper-Pearson bounds on its true and false positive rates;
* :func:`singling_out`, :func:`linkability`, :func:`inference`: the three attacks of anonymeter
  (Giomi et al. 2023), reimplemented (anonymeter 1.1.0 pins numpy < 1.27; this project runs
  numpy 2), with anonymeter's rates, baselines and residual risk (:func:`residual_risk`);
* :func:`synthpop_disclosure`: synthpop's identity and attribute disclosure measures (UiO, repU,
  Dorig, DiSCO, TCAP, ...; Raab, Nowok & Dibben 2024, synthpop's ``disclosure()``);
* :func:`attack_table`: all of them for a release, its unweighted counterpart and the holdout.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pandas as pd
from scipy import stats

__all__ = [
    "RecordColumns", "closest_distance", "dcr_summary", "auc", "clopper_pearson",
    "epsilon_lower_bound", "membership_inference", "MembershipInference", "wilson_rate",
    "residual_risk", "AttackRisk", "singling_out", "linkability", "inference", "inference_hits",
    "synthpop_disclosure", "group_numeric", "attack_table", "AttackEvidence",
]

MISSING = "(missing)"


# ---------------------------------------------------------------------------- record columns
@dataclass(frozen=True)
class RecordColumns:
    """The columns an attacker compares: numeric ones (relative distances) and categorical ones
    (exact match). A missing value is a level of its own / equal only to a missing value."""

    numeric: tuple[str, ...] = ()
    categorical: tuple[str, ...] = ()

    @property
    def all(self) -> list[str]:
        return [*self.categorical, *self.numeric]


def _labels(col: pd.Series) -> np.ndarray:
    """Values as level labels (whole numbers without a decimal point, missing as a level)."""
    if pd.api.types.is_numeric_dtype(col) and not pd.api.types.is_bool_dtype(col):
        v = col.to_numpy(dtype=float)
        whole = np.isfinite(v) & (v == np.round(v)) & (np.abs(v) < 1e15)
        out = np.where(whole, np.where(whole, v, 0).astype(np.int64).astype(str), v.astype(str))
        return np.where(np.isnan(v), MISSING, out).astype(object)
    return np.where(col.isna().to_numpy(), MISSING, col.astype(str).to_numpy(dtype=object))


def _check_frame(frame: pd.DataFrame, cols: Sequence[str], name: str) -> None:
    if not isinstance(frame, pd.DataFrame):
        raise TypeError(f"{name} must be a pandas DataFrame; got {type(frame).__name__}.")
    absent = [c for c in cols if c not in frame.columns]
    if absent:
        raise ValueError(f"{name}: columns {absent} are missing (it has {list(frame.columns)[:15]}). "
                         "Fix: give frames with the attacked columns.")


def _encode(frames: Sequence[pd.DataFrame], cols: RecordColumns,
            names: Sequence[str]) -> tuple[list[np.ndarray], list[np.ndarray]]:
    """(numeric arrays, categorical row codes) of each frame, codes shared by all frames."""
    for f, nm in zip(frames, names, strict=True):
        _check_frame(f, cols.all, nm)
    nums = [f[list(cols.numeric)].apply(pd.to_numeric, errors="coerce").to_numpy(float)
            if cols.numeric else np.zeros((len(f), 0)) for f in frames]
    if cols.categorical:
        lab = [np.column_stack([_labels(f[c]) for c in cols.categorical]) for f in frames]
        joined = np.concatenate([np.array(["\x1f".join(r) for r in x], dtype=object)
                                 if len(x) else np.array([], dtype=object) for x in lab])
        codes, _ = pd.factorize(joined)
        bounds = np.cumsum([0, *[len(f) for f in frames]])
        cats = [codes[bounds[i]:bounds[i + 1]] for i in range(len(frames))]
    else:
        cats = [np.zeros(len(f), dtype=np.int64) for f in frames]
    return nums, cats


# ---------------------------------------------------------------------------- distances
def _rel(q: np.ndarray, c: np.ndarray, relative_to: str) -> np.ndarray:
    """|q - c| / |denominator| per pair and variable (broadcast); 0/0 (equal zeros or both
    missing) is 0, x/0 is inf, one side missing is inf."""
    den = np.abs(c if relative_to == "candidate" else q)
    diff = np.abs(q - c)
    with np.errstate(divide="ignore", invalid="ignore"):
        out = diff / den
    out = np.where(diff == 0, 0.0, out)
    both_nan = np.isnan(q) & np.isnan(c)
    out = np.where(both_nan, 0.0, out)
    return np.where(np.isnan(out), np.inf, out)


def closest_distance(queries: pd.DataFrame, candidates: pd.DataFrame, cols: RecordColumns,
                     relative_to: str = "candidate", chunk: int = 2_000_000) -> np.ndarray:
    """For each query record: the distance to its closest candidate record.

    The distance of two records is infinite unless every categorical column is equal; then it is
    the largest relative difference over the numeric columns, ``max_j |q_j - c_j| / |d_j|`` with
    ``d`` the candidate (``relative_to="candidate"``: the DCR of a synthetic record to the
    confidential records) or the query (``"query"``: a confidential record's distance to the
    synthetic data, the membership attack's score). Only categorical columns: 0 for an exact
    match, else inf. Memory is bounded by ``chunk`` pairs at a time."""
    if relative_to not in ("candidate", "query"):
        raise ValueError(f"relative_to={relative_to!r}: choose 'candidate' or 'query'.")
    (qn, cn), (qc, cc) = _encode([queries, candidates], cols, ["queries", "candidates"])
    out = np.full(len(queries), np.inf)
    if not len(candidates) or not len(queries):
        return out
    order = np.argsort(cc, kind="stable")
    cc_sorted = cc[order]
    starts = np.searchsorted(cc_sorted, qc, side="left")
    ends = np.searchsorted(cc_sorted, qc, side="right")
    for code in np.unique(qc):
        qi = np.flatnonzero(qc == code)
        lo, hi = starts[qi[0]], ends[qi[0]]
        if hi == lo:
            continue
        if qn.shape[1] == 0:
            out[qi] = 0.0
            continue
        ci = order[lo:hi]
        C = cn[ci]
        step = max(1, chunk // max(1, len(ci) * qn.shape[1]))
        for s in range(0, len(qi), step):
            rows = qi[s:s + step]
            d = _rel(qn[rows][:, None, :], C[None, :, :], relative_to).max(axis=2)
            out[rows] = d.min(axis=1)
    return out


def dcr_summary(synthetic: Sequence[pd.DataFrame], records: pd.DataFrame, cols: RecordColumns,
                tol: float = 0.01) -> dict[str, float]:
    """Distance to the closest record of every synthetic record (all sets pooled) among
    ``records``, relative to the record's value: the median, the 5th percentile, and the match
    share (records within ``tol`` of a record: every numeric value within ``tol`` relative, every
    categorical value equal)."""
    d = np.concatenate([closest_distance(s, records, cols, "candidate") for s in synthetic])
    return {"median": float(np.median(d)), "p05": float(np.quantile(d, 0.05)),
            "match_share": float(np.mean(d <= tol)), "n_synthetic": int(d.size)}


# ---------------------------------------------------------------------------- membership
def auc(member_scores: Any, nonmember_scores: Any) -> float:
    """AUC of "a LOWER score means a member": P(nonmember score > member score) + P(tie) / 2
    (the Mann-Whitney statistic; 0.5 = no better than chance)."""
    a = np.asarray(member_scores, dtype=float)
    b = np.asarray(nonmember_scores, dtype=float)
    if not a.size or not b.size:
        raise ValueError("auc needs at least one member and one nonmember score.")
    ranks = stats.rankdata(np.concatenate([a, b]))
    r_non = ranks[a.size:].sum()
    return float((r_non - b.size * (b.size + 1) / 2) / (a.size * b.size))


def clopper_pearson(k: int, n: int, alpha: float) -> tuple[float, float]:
    """One-sided Clopper-Pearson bounds of a binomial proportion, each at level ``alpha``:
    (lower, upper), with P(p < lower) <= alpha and P(p > upper) <= alpha."""
    if n <= 0 or not 0 <= k <= n:
        raise ValueError(f"clopper_pearson: need 0 <= k <= n, n > 0; got k={k}, n={n}.")
    lo = 0.0 if k == 0 else float(stats.beta.ppf(alpha, k, n - k + 1))
    hi = 1.0 if k == n else float(stats.beta.ppf(1 - alpha, k + 1, n - k))
    return lo, hi


def epsilon_lower_bound(tp: int, n_pos: int, fp: int, n_neg: int, alpha: float) -> float:
    """The epsilon an attack with ``tp`` of ``n_pos`` true and ``fp`` of ``n_neg`` false
    positives proves at confidence 1 - alpha: an epsilon-DP mechanism has TPR <= e^eps FPR and
    TNR <= e^eps FNR, so

        eps >= max(log(TPR_lo / FPR_hi), log(TNR_lo / FNR_hi), 0)

    with every bound one-sided Clopper-Pearson at alpha / 4 (the four bounds hold together with
    probability >= 1 - alpha)."""
    a = alpha / 4
    tpr_lo, _ = clopper_pearson(tp, n_pos, a)
    _, fpr_hi = clopper_pearson(fp, n_neg, a)
    tnr_lo, _ = clopper_pearson(n_neg - fp, n_neg, a)
    _, fnr_hi = clopper_pearson(n_pos - tp, n_pos, a)
    cands = [0.0]
    if tpr_lo > 0:
        cands.append(float(np.log(tpr_lo / fpr_hi)))
    if tnr_lo > 0:
        cands.append(float(np.log(tnr_lo / fnr_hi)))
    return max(cands)


#: quantiles of the pooled scores tried as thresholds of the membership attack
MIA_QUANTILES = (0.01, 0.02, 0.05, 0.1, 0.2, 0.3, 0.5)


@dataclass
class MembershipInference:
    """A distance membership attack: members (training records) against nonmembers (holdout
    records); a lower score means "member". ``epsilon_lower`` is the largest bound of
    :func:`epsilon_lower_bound` over the thresholds tried (Bonferroni over them, so the maximum
    holds at confidence 1 - alpha)."""

    auc: float
    auc_se: float
    epsilon_lower: float
    threshold: float
    tpr: float
    fpr: float
    n_members: int
    n_nonmembers: int
    alpha: float
    thresholds: pd.DataFrame = field(repr=False)


def membership_inference(member_scores: Any, nonmember_scores: Any, alpha: float = 0.05,
                         quantiles: Sequence[float] = MIA_QUANTILES) -> MembershipInference:
    """AUC (with the Hanley-McNeil standard error) and the epsilon lower bound of the attack
    "member if score <= t" over the thresholds t at ``quantiles`` of the pooled scores."""
    a = np.asarray(member_scores, dtype=float)
    b = np.asarray(nonmember_scores, dtype=float)
    A = auc(a, b)
    q1, q2 = A / (2 - A), 2 * A * A / (1 + A)
    se = float(np.sqrt(max(0.0, (A * (1 - A) + (a.size - 1) * (q1 - A * A)
                                 + (b.size - 1) * (q2 - A * A)) / (a.size * b.size))))
    pooled = np.concatenate([a, b])
    finite = pooled[np.isfinite(pooled)]
    ts = np.unique(np.quantile(finite, quantiles)) if finite.size else np.array([])
    k = max(1, len(ts))
    rows = []
    for t in ts:
        tp, fp = int((a <= t).sum()), int((b <= t).sum())
        rows.append({"threshold": float(t), "tp": tp, "fp": fp, "tpr": tp / a.size,
                     "fpr": fp / b.size,
                     "epsilon_lower": epsilon_lower_bound(tp, a.size, fp, b.size, alpha / k)})
    tab = pd.DataFrame(rows, columns=["threshold", "tp", "fp", "tpr", "fpr", "epsilon_lower"])
    if len(tab):
        best = tab.iloc[int(np.argmax(tab["epsilon_lower"].to_numpy()))]
        t, tpr, fpr, eps = (float(best["threshold"]), float(best["tpr"]), float(best["fpr"]),
                            float(best["epsilon_lower"]))
    else:
        t, tpr, fpr, eps = np.inf, 1.0, 1.0, 0.0
    return MembershipInference(A, se, eps, t, tpr, fpr, int(a.size), int(b.size), alpha, tab)


# ---------------------------------------------------------------------------- anonymeter
def wilson_rate(n_success: float, n_total: int, level: float = 0.95) -> tuple[float, float]:
    """anonymeter's success rate: the Wilson score centre and half-width,
    ``((k + z^2/2) / (n + z^2), z / (n + z^2) sqrt(k (n - k) / n + z^2 / 4))``."""
    z = float(stats.norm.ppf(0.5 * (1 + level)))
    den = n_total + z * z
    rate = (n_success + 0.5 * z * z) / den
    err = z / den * np.sqrt(n_success * (n_total - n_success) / n_total + 0.25 * z * z)
    return float(rate), float(err)


def residual_risk(attack: tuple[float, float], control: tuple[float, float]) -> tuple[float, float]:
    """anonymeter's risk: (attack - control) / (1 - control), error propagated to first order
    (both rates as (value, error) from :func:`wilson_rate`)."""
    (a, ea), (c, ec) = attack, control
    value = (a - c) / (1 - c)
    err = np.sqrt((ea / abs(1 - c)) ** 2 + (ec * (a - 1) / (1 - c) ** 2) ** 2)
    return float(value), float(err)


@dataclass
class AttackRisk:
    """One anonymeter-style attack: successes of the attack on the training records, of the
    random-guess baseline and of the same attack on the holdout (control) records, out of
    ``n_attacks`` each; ``risk`` and ``ci`` as anonymeter reports them (clipped to [0, 1]):
    residual over the control when there is one, else the attack's own rate."""

    name: str
    n_attacks: int
    n_success: int
    n_baseline: int
    n_control: int | None
    level: float = 0.95

    def rate(self, which: str = "attack") -> tuple[float, float]:
        k = {"attack": self.n_success, "baseline": self.n_baseline,
             "control": self.n_control}[which]
        if k is None:
            raise ValueError(f"{self.name}: no control attack was run.")
        return wilson_rate(k, self.n_attacks, self.level)

    @property
    def risk(self) -> float:
        return self._bound()[0]

    @property
    def ci(self) -> tuple[float, float]:
        return self._bound()[1]

    def _bound(self) -> tuple[float, tuple[float, float]]:
        v, e = (self.rate() if self.n_control is None
                else residual_risk(self.rate(), self.rate("control")))
        clip = lambda x: min(max(x, 0.0), 1.0)  # noqa: E731
        return clip(v), (clip(v - e), clip(v + e))


def _gower_arrays(frames: Sequence[pd.DataFrame], cols: RecordColumns):
    """Numeric columns divided by their range over all ``frames``; categorical codes."""
    nums, _ = _encode(frames, RecordColumns(cols.numeric, ()), ["frame"] * len(frames))
    if cols.numeric:
        allv = np.vstack(nums)
        rng = np.nanmax(allv, axis=0) - np.nanmin(allv, axis=0)
        rng = np.where((rng > 0) & np.isfinite(rng), rng, 1.0)
        nums = [x / rng for x in nums]
    cats = []
    for c in cols.categorical:
        lab = np.concatenate([_labels(f[c]) for f in frames])
        cats.append(pd.factorize(lab)[0])
    bounds = np.cumsum([0, *[len(f) for f in frames]])
    cat = [np.column_stack([k[bounds[i]:bounds[i + 1]] for k in cats]) if cats
           else np.zeros((len(frames[i]), 0), dtype=np.int64) for i in range(len(frames))]
    return nums, cat


def _nearest(qn, qc, cn, cc, k: int, rng: np.random.Generator) -> np.ndarray:
    """Indices of the k nearest candidates of each query by the Gower-type distance of
    anonymeter (sum of |range-scaled numeric differences| and categorical mismatches; a pair of
    missing values counts as equal); ties broken at random."""
    perm = rng.permutation(len(cn))
    cn, cc = cn[perm], cc[perm]
    out = np.empty((len(qn), k), dtype=np.int64)
    step = max(1, 2_000_000 // max(1, len(cn)))
    for s in range(0, len(qn), step):
        a, b = qn[s:s + step][:, None, :], cn[None, :, :]
        dn = np.abs(a - b)
        dn = np.where(np.isnan(a) & np.isnan(b), 0.0, np.where(np.isnan(dn), 1.0, dn)).sum(axis=2)
        dc = (qc[s:s + step][:, None, :] != cc[None, :, :]).sum(axis=2)
        d = dn + dc
        idx = np.argsort(d, axis=1, kind="stable")[:, :k]
        out[s:s + step] = perm[idx]
    return out


def _targets(frame: pd.DataFrame, n: int, rng: np.random.Generator) -> pd.DataFrame:
    return frame.iloc[np.sort(rng.choice(len(frame), size=min(n, len(frame)), replace=False))]


def linkability(train: pd.DataFrame, synthetic: Sequence[pd.DataFrame],
                control: pd.DataFrame | None, aux: tuple[RecordColumns, RecordColumns],
                n_attacks: int = 500, n_neighbors: int = 1,
                rng: np.random.Generator | None = None) -> AttackRisk:
    """anonymeter's linkability attack: an intruder holds two datasets sharing the records but
    not the columns (``aux[0]``, ``aux[1]``); a record is linked when its k nearest synthetic
    records on the first set of columns and on the second share one. Per synthetic set, on the
    same ``n_attacks`` targets; baseline: k random synthetic records on each side. Counts are
    summed over the sets (``n_attacks`` x sets trials)."""
    rng = np.random.default_rng() if rng is None else rng
    tg = _targets(train, n_attacks, rng)
    ct = None if control is None else _targets(control, n_attacks, rng)

    def links(targets: pd.DataFrame, syn: pd.DataFrame) -> int:
        sides = []
        for cols in aux:
            (qn, sn), (qc, sc) = _gower_arrays([targets, syn], cols)
            sides.append(_nearest(qn, qc, sn, sc, n_neighbors, rng))
        return int(sum(bool(set(a) & set(b)) for a, b in zip(*sides, strict=True)))

    n = len(tg)
    succ = base = 0
    ctrl = None if ct is None else 0
    for syn in synthetic:
        succ += links(tg, syn)
        r0 = np.array([rng.choice(len(syn), n_neighbors, replace=False) for _ in range(n)])
        r1 = np.array([rng.choice(len(syn), n_neighbors, replace=False) for _ in range(n)])
        base += int(sum(bool(set(a) & set(b)) for a, b in zip(r0, r1, strict=True)))
        if ct is not None:
            ctrl += links(ct, syn)
    return AttackRisk("linkability", n * len(synthetic), succ, base, ctrl)


def inference_hits(guess: np.ndarray, secret: np.ndarray, regression: bool,
                    tolerance: float) -> np.ndarray:
    """A guess is right when equal (categorical) or within ``tolerance`` relative to the guess
    (numeric, anonymeter's rule |guess - secret| / |guess| <= tolerance; the absolute value of
    the guess is this module's, anonymeter divides by the signed guess)."""
    if regression:
        g, s = guess.astype(float), secret.astype(float)
        ok = np.abs(g - s) / (np.abs(g) + 1e-12) <= tolerance
        return ok | (np.isnan(g) & np.isnan(s))
    return guess == secret


def inference(train: pd.DataFrame, synthetic: Sequence[pd.DataFrame],
              control: pd.DataFrame | None, aux: RecordColumns, secret: str,
              regression: bool, n_attacks: int = 500, tolerance: float = 0.05,
              rng: np.random.Generator | None = None) -> AttackRisk:
    """anonymeter's inference attack: the intruder knows a target's ``aux`` columns and guesses
    its ``secret`` as the secret of the nearest synthetic record (Gower-type distance); right
    when equal, or for a numeric secret (``regression``) within ``tolerance`` relative.
    Baseline: the secret of a random synthetic record. Counts summed over the sets."""
    rng = np.random.default_rng() if rng is None else rng
    for f, nm in ((train, "train"), *((s, "synthetic") for s in synthetic)):
        _check_frame(f, [*aux.all, secret], nm)
    tg = _targets(train, n_attacks, rng)
    ct = None if control is None else _targets(control, n_attacks, rng)

    def value(frame: pd.DataFrame) -> np.ndarray:
        col = frame[secret]
        return col.to_numpy(float) if regression else _labels(col)

    def hits(targets: pd.DataFrame, syn: pd.DataFrame) -> int:
        (qn, sn), (qc, sc) = _gower_arrays([targets, syn], aux)
        idx = _nearest(qn, qc, sn, sc, 1, rng)[:, 0]
        return int(inference_hits(value(syn)[idx], value(targets), regression, tolerance).sum())

    n = len(tg)
    succ = base = 0
    ctrl = None if ct is None else 0
    for syn in synthetic:
        succ += hits(tg, syn)
        guess = value(syn)[rng.integers(0, len(syn), n)]
        base += int(inference_hits(guess, value(tg), regression, tolerance).sum())
        if ct is not None:
            ctrl += hits(ct, syn)
    return AttackRisk("inference", n * len(synthetic), succ, base, ctrl)


def _so_arrays(frames: Sequence[pd.DataFrame], cols: RecordColumns) -> list[dict[str, np.ndarray]]:
    """Per frame: each column as floats (numeric) or level codes shared by all frames
    (categorical; a missing value is its own level, code -1 never used)."""
    out: list[dict[str, np.ndarray]] = [{} for _ in frames]
    for c in cols.numeric:
        for d, f in zip(out, frames, strict=True):
            d[c] = pd.to_numeric(f[c], errors="coerce").to_numpy(float)
    bounds = np.cumsum([0, *[len(f) for f in frames]])
    for c in cols.categorical:
        lab = np.concatenate([_labels(f[c]) for f in frames])
        codes = pd.factorize(lab)[0]
        miss = np.flatnonzero(lab == MISSING)
        for i, d in enumerate(out):
            d[c] = codes[bounds[i]:bounds[i + 1]]
            d[c + "\x1fna"] = np.isin(np.arange(bounds[i], bounds[i + 1]), miss)
    return out


def _query_counts(arr: dict[str, np.ndarray], n: int, cols_q: list[str], ops: np.ndarray,
                  vals: np.ndarray) -> np.ndarray:
    """How many records match each query of a batch: query b is the conjunction over the
    columns ``cols_q`` of (column ops[b, j] vals[b, j]); operators: 0 is missing, 1 equal,
    2 not equal, 3 <, 4 >, 5 <=, 6 >= (categorical columns compare level codes)."""
    mask = np.ones((len(ops), n), dtype=bool)
    for j, c in enumerate(cols_q):
        x = arr[c][None, :]
        na = arr[c + "\x1fna"][None, :]
        v = vals[:, j][:, None]
        op = ops[:, j][:, None]
        with np.errstate(invalid="ignore"):
            m = np.select([op == 0, op == 1, op == 2, op == 3, op == 4, op == 5, op == 6],
                          [na, (x == v) & ~na, (x != v) & ~na, x < v, x > v, x <= v, x >= v],
                          False)
        mask &= m
    return mask.sum(axis=1)


def _so_arrays(frames: Sequence[pd.DataFrame], cols: RecordColumns) -> list[dict[str, np.ndarray]]:
    """Per frame: each column as floats (numeric) or as level codes shared by all frames
    (categorical), and its missing-value indicator."""
    out: list[dict[str, np.ndarray]] = [{} for _ in frames]
    bounds = np.cumsum([0, *[len(f) for f in frames]])
    for c in cols.all:
        if c in cols.numeric:
            v = np.concatenate([pd.to_numeric(f[c], errors="coerce").to_numpy(float)
                                for f in frames])
            na = np.isnan(v)
        else:
            lab = np.concatenate([_labels(f[c]) for f in frames])
            v = pd.factorize(lab)[0].astype(float)
            na = lab == MISSING
        for i, d in enumerate(out):
            d[c] = v[bounds[i]:bounds[i + 1]]
            d[c + "\x1fna"] = na[bounds[i]:bounds[i + 1]]
    return out


def singling_out(train: pd.DataFrame, synthetic: Sequence[pd.DataFrame],
                 control: pd.DataFrame | None, cols: RecordColumns, n_attacks: int = 500,
                 n_cols: int = 3, max_attempts: int | None = None, batch: int = 500,
                 rng: np.random.Generator | None = None) -> AttackRisk:
    """anonymeter's multivariate singling-out attack: from a synthetic set, queries built from
    random synthetic records on ``n_cols`` random columns (categorical: equal; numeric: >= the
    value when it is above the synthetic median, <= it otherwise; missing: is missing) that
    single out one synthetic record; a query succeeds when it matches exactly one training
    record (control: one holdout record). Baseline: random queries (a random synthetic value of
    each column, a random operator). As anonymeter, successes are out of the ``n_attacks``
    requested per set (a query the synthetic data do not yield counts as a failure); query
    generation stops after ``max_attempts`` candidates (default 20 per attack; anonymeter's is
    10^7). Compare training and control sets of equal size (anonymeter otherwise fits a size
    correction; :func:`attack_table` subsamples)."""
    rng = np.random.default_rng() if rng is None else rng
    names = cols.all
    for f, nm in ((train, "train"), *(() if control is None else ((control, "control"),))):
        _check_frame(f, names, nm)
    k = min(n_cols, len(names))
    max_attempts = 20 * n_attacks if max_attempts is None else max_attempts
    succ = base = 0
    ctrl = None if control is None else 0
    for syn in synthetic:
        _check_frame(syn, names, "synthetic")
        arrs = _so_arrays([syn, train] + ([] if control is None else [control]), cols)
        sa, ns = arrs[0], len(syn)
        med = {c: float(np.nanmedian(sa[c])) if c in cols.numeric else np.nan for c in names}
        picks: dict[tuple[str, ...], list[tuple[np.ndarray, np.ndarray]]] = {}
        seen: set[bytes] = set()
        found, tries = 0, 0
        while found < n_attacks and tries < max_attempts:
            size = min(batch, max_attempts - tries)
            tries += size
            rec = rng.integers(ns, size=size)
            combo = [tuple(names[j] for j in sorted(rng.choice(len(names), k, replace=False)))
                     for _ in range(size)]
            for cq in set(combo):
                sel = rec[[i for i, c in enumerate(combo) if c == cq]]
                vals = np.column_stack([sa[c][sel] for c in cq])
                na = np.column_stack([sa[c + "\x1fna"][sel] for c in cq])
                ops = np.column_stack([np.full(len(sel), 1) if c in cols.categorical else
                                       np.where(sa[c][sel] > med[c], 6, 5) for c in cq])
                ops = np.where(na, 0, ops)
                vals = np.where(na, 0.0, vals)
                hit = _query_counts(sa, ns, list(cq), ops, vals) == 1
                for o, v in zip(ops[hit], vals[hit], strict=True):
                    key = repr(cq).encode() + o.tobytes() + v.tobytes()
                    if key not in seen and found < n_attacks:
                        seen.add(key)
                        picks.setdefault(cq, []).append((o, v))
                        found += 1
        for cq, qs in picks.items():
            ops = np.array([o for o, _ in qs])
            vals = np.array([v for _, v in qs])
            succ += int((_query_counts(arrs[1], len(train), list(cq), ops, vals) == 1).sum())
            if control is not None:
                ctrl += int((_query_counts(arrs[2], len(control), list(cq), ops, vals)
                             == 1).sum())
        combo = [tuple(names[j] for j in sorted(rng.choice(len(names), k, replace=False)))
                 for _ in range(n_attacks)]
        for cq in set(combo):
            nq = sum(c == cq for c in combo)
            vals, ops = np.zeros((nq, k)), np.zeros((nq, k), dtype=int)
            for j, c in enumerate(cq):
                present = sa[c][~sa[c + "\x1fna"]]
                u = np.unique(present)
                if not len(u):
                    continue
                vals[:, j] = u[rng.integers(len(u), size=nq)]
                choice = [1, 2] if c in cols.categorical else [1, 2, 3, 4, 5, 6]
                ops[:, j] = rng.choice(choice, size=nq)
            base += int((_query_counts(arrs[1], len(train), list(cq), ops, vals) == 1).sum())
    return AttackRisk("singling out", n_attacks * len(synthetic), succ, base, ctrl)


# ---------------------------------------------------------------------------- synthpop
def group_numeric(values: pd.Series, reference: pd.Series, ngroups: int) -> np.ndarray:
    """Labels of ``values`` cut at the ``ngroups``-quantiles of ``reference`` (the confidential
    records; right-closed intervals, the ends open), as synthpop's ``ngroups_targets``
    groups a numeric target; missing stays missing."""
    ref = pd.to_numeric(reference, errors="coerce").to_numpy(float)
    ref = ref[np.isfinite(ref)]
    cuts = np.unique(np.quantile(ref, np.linspace(0, 1, ngroups + 1)[1:-1])) if ref.size else []
    v = pd.to_numeric(values, errors="coerce").to_numpy(float)
    g = np.searchsorted(cuts, v, side="left").astype(object)
    return np.where(np.isnan(v), MISSING, g.astype(str)).astype(object)


SYNTHPOP_MEASURES = ("UiO", "UiS", "UiOiS", "repU", "Dorig", "Dsyn", "iS", "DiS", "DiSCO",
                     "DiSDiO", "baseCAPd", "CAPd", "CAPs", "DCAP", "TCAP")


def _qt(frame: pd.DataFrame, keys: Sequence[str], target: str) -> tuple[np.ndarray, np.ndarray]:
    q = np.array(["\x1f".join(r) for r in np.column_stack([_labels(frame[k]) for k in keys])],
                 dtype=object) if len(frame) else np.array([], dtype=object)
    return q, _labels(frame[target])


def synthpop_disclosure(original: pd.DataFrame, synthetic: Sequence[pd.DataFrame],
                        keys: Sequence[str], target: str) -> pd.DataFrame:
    """synthpop's ``disclosure()`` measures, in percent, one row per synthetic set.

    q is the cross-classification of ``keys``, t the ``target`` (both as levels: group a
    numeric one first, :func:`group_numeric`); d_tq and s_tq the counts of the original and
    synthetic records, d_.q and s_.q their key totals, pd_tq = d_tq / d_.q and
    ps_tq = s_tq / s_.q, N_d and N_s the record counts. Identity: UiO = #{q: d_.q = 1} / N_d,
    UiS = #{q: s_.q = 1} / N_s, UiOiS = #{q: d_.q = 1, s_.q > 0} / N_d, repU =
    #{q: d_.q = 1, s_.q = 1} / N_d. Attribute: Dorig = sum d_tq [pd_tq = 1] / N_d, Dsyn =
    sum s_tq [ps_tq = 1] / N_s, iS = sum d_tq [s_.q > 0] / N_d, DiS = sum d_tq [some ps_.q = 1]
    / N_d, DiSCO = sum d_tq [ps_tq = 1] / N_d, DiSDiO = sum d_tq [ps_tq = 1, pd_tq = 1] / N_d.
    CAPs: baseCAPd = sum_t (d_t. / N_d)^2, CAPd = sum_tq pd_tq d_tq / N_d, CAPs = sum_tq
    ps_tq s_tq / N_s, DCAP = sum_tq ps_tq d_tq / N_d, TCAP = DiSCO's count / sum d_.q
    [s_.q > 0] (the records whose keys the synthetic data have). No exclusions (synthpop's
    defaults without ``not.targetlev`` / ``exclude_ov_denom_lim``)."""
    keys = list(keys)
    if not keys:
        raise ValueError("synthpop_disclosure needs at least one key.")
    if target in keys:
        raise ValueError(f"target {target!r} is also a key; choose a target outside the keys.")
    _check_frame(original, [*keys, target], "original")
    qd, td = _qt(original, keys, target)
    rows = []
    for i, s in enumerate(synthetic):
        _check_frame(s, [*keys, target], f"synthetic set {i + 1}")
        qs, ts = _qt(s, keys, target)
        qcode, qlev = pd.factorize(np.concatenate([qd, qs]))
        tcode, tlev = pd.factorize(np.concatenate([td, ts]))
        Q, T = len(qlev), len(tlev)
        nd, ns = len(qd), len(qs)
        d = np.bincount(tcode[:nd] * Q + qcode[:nd], minlength=T * Q).reshape(T, Q).astype(float)
        sc = np.bincount(tcode[nd:] * Q + qcode[nd:], minlength=T * Q).reshape(T, Q).astype(float)
        dq, sq = d.sum(axis=0), sc.sum(axis=0)
        with np.errstate(invalid="ignore", divide="ignore"):
            pdq = np.where(dq > 0, d / dq, 0.0)
            psq = np.where(sq > 0, sc / sq, 0.0)
        dis_s = psq == 1
        disco = float(d[dis_s].sum())
        tcap_den = float(dq[sq > 0].sum())
        rows.append({
            "set": i + 1,
            "UiO": 100 * (dq == 1).sum() / nd,
            "UiS": 100 * (sq == 1).sum() / ns,
            "UiOiS": 100 * ((dq == 1) & (sq > 0)).sum() / nd,
            "repU": 100 * ((dq == 1) & (sq == 1)).sum() / nd,
            "Dorig": 100 * d[pdq == 1].sum() / nd,
            "Dsyn": 100 * sc[dis_s].sum() / ns,
            "iS": 100 * d[:, sq > 0].sum() / nd,
            "DiS": 100 * d[:, dis_s.any(axis=0)].sum() / nd,
            "DiSCO": 100 * disco / nd,
            "DiSDiO": 100 * d[dis_s & (pdq == 1)].sum() / nd,
            "baseCAPd": 100 * float(((d.sum(axis=1) / nd) ** 2).sum()),
            "CAPd": 100 * float((pdq * d).sum()) / nd,
            "CAPs": 100 * float((psq * sc).sum()) / ns,
            "DCAP": 100 * float((psq * d).sum()) / nd,
            "TCAP": 100 * disco / tcap_den if tcap_den > 0 else np.nan,
        })
    return pd.DataFrame(rows, columns=["set", *SYNTHPOP_MEASURES])


# ---------------------------------------------------------------------------- the table
def _subsample(frame: pd.DataFrame, n: int, rng: np.random.Generator) -> pd.DataFrame:
    if len(frame) <= n:
        return frame
    return frame.iloc[np.sort(rng.choice(len(frame), size=n, replace=False))]


def _coarsened(frames: list[pd.DataFrame], cols: list[str], reference: pd.DataFrame,
               ngroups: int) -> list[pd.DataFrame]:
    """Copies of ``frames`` with each numeric column of ``cols`` that has more than ``ngroups``
    distinct values in ``reference`` cut at its ``ngroups``-quantiles (synthpop's grouping of
    numeric keys and targets; the caller's frames are not changed)."""
    out = [f.copy() for f in frames]
    for c in cols:
        col = reference[c]
        if (pd.api.types.is_numeric_dtype(col) and not pd.api.types.is_bool_dtype(col)
                and col.nunique(dropna=True) > ngroups):
            for f in out:
                f[c] = group_numeric(f[c], col, ngroups)
    return out


MEASURES = {
    "dcr_median": "DCR: median relative distance of a synthetic record to the closest record",
    "dcr_p05": "DCR: 5th percentile",
    "match_share": "match share: synthetic records within {tol:g} of a record",
    "mia_auc": "membership inference: AUC (training vs holdout records)",
    "mia_epsilon": "membership inference: epsilon lower bound ({level:g}%)",
    "stated_epsilon": "stated epsilon of the synthesis",
    "so_rate": "singling out: success rate",
    "so_risk": "singling out: risk (anonymeter, residual over the holdout)",
    "link_rate": "linkability: success rate",
    "link_risk": "linkability: risk (anonymeter, residual over the holdout)",
    "inf_rate": "inference of {target}: success rate",
    "inf_risk": "inference of {target}: risk (anonymeter, residual over the holdout)",
    "UiO": "synthpop UiO: unique in original (%)",
    "repU": "synthpop repU: replicated uniques (%)",
    "Dorig": "synthpop Dorig: disclosive in original (%)",
    "DiSCO": "synthpop DiSCO: disclosive in synthetic, correct original (%)",
    "TCAP": "synthpop TCAP (%)",
}


@dataclass
class AttackEvidence:
    """The attack table of a release: ``values`` (measure key x column: the syntheses, then
    "holdout"; NaN where a measure does not apply), the label of each measure
    (:data:`MEASURES`), ``cells`` (display overrides, e.g. a risk with its interval),
    the membership attacks, anonymeter attacks and synthpop tables per synthesis,
    ``flags`` (the release's measures above their holdout value beyond noise) and notes."""

    values: pd.DataFrame
    labels: dict[str, str]
    cells: dict[tuple[str, str], str]
    mia: dict[str, MembershipInference]
    risks: dict[str, dict[str, AttackRisk]]
    synthpop: dict[str, pd.DataFrame]
    flags: list[str]
    notes: list[str]
    n_reference: int
    release: str

    def display(self) -> pd.DataFrame:
        """The table as text: measure | one column per synthesis | holdout ("n/a" where a
        measure does not apply)."""
        rows = []
        for key in self.values.index:
            row = {"measure": self.labels[key]}
            for col in self.values.columns:
                v = self.values.at[key, col]
                row[col] = self.cells.get((key, col), "n/a" if pd.isna(v) else _fmt(v))
            rows.append(row)
        return pd.DataFrame(rows)

    def verdict(self) -> str:
        """One line for the summary card."""
        m = self.mia.get(self.release)
        head = "" if m is None else (
            f"membership AUC {m.auc:.3f}, epsilon >= {m.epsilon_lower:.3g}"
            + (f" (stated {_fmt(self.values.at['stated_epsilon', self.release])})"
               if "stated_epsilon" in self.values.index
               and pd.notna(self.values.at["stated_epsilon", self.release]) else "")
            + "; ")
        if not any(c == "holdout" for c in self.values.columns):
            return head + "no holdout: the release's measures are not compared with records " \
                          "it never saw"
        if not self.flags:
            return head + "no measure of the release above its holdout value beyond noise"
        return head + f"{len(self.flags)} measure(s) above the holdout: " + "; ".join(self.flags)


def _fmt(x: float) -> str:
    """4 significant digits, never in scientific notation (surveysynth._format.number)."""
    from .._format import number

    if not np.isfinite(x):
        return "inf" if x > 0 else "NaN"
    return number(x, 4)


def _two_prop_z(p1: float, n1: int, p2: float, n2: int) -> float:
    p = (p1 * n1 + p2 * n2) / (n1 + n2)
    se = np.sqrt(p * (1 - p) * (1 / n1 + 1 / n2))
    return 0.0 if se == 0 else float((p1 - p2) / se)


def attack_table(train: pd.DataFrame, syntheses: dict[str, Sequence[pd.DataFrame]],  # noqa: C901
                 cols: RecordColumns, holdout: pd.DataFrame | None = None,
                 keys: Sequence[str] | None = None, target: str | None = None,
                 stated_epsilon: dict[str, float | None] | None = None,
                 n_attacks: int = 500, tol: float = 0.01, ngroups: int = 20,
                 alpha: float = 0.05, rng: np.random.Generator | None = None) -> AttackEvidence:
    """Every attack of this module on each synthesis of ``syntheses`` (label -> its synthetic
    sets; the first is the release, all fit on ``train``), against ``train`` and, for the
    release, against ``holdout`` (records none of them saw): the "holdout" column.

    Measures that depend on the number of attacked records (DCR and match share, synthpop's,
    anonymeter's) use equally many training and holdout records: the larger set is subsampled
    to the size of the smaller (the same subsample for every synthesis). The membership attack
    uses all of them. ``keys`` (default: the categorical columns) and ``target`` (default: the
    first numeric column) are synthpop's and the inference attack's; numeric keys and targets
    with more than ``ngroups`` distinct values are grouped at the training records' quantiles.
    ``stated_epsilon``: the epsilon each synthesis states (None: no protection)."""
    rng = np.random.default_rng() if rng is None else rng
    if not syntheses:
        raise ValueError("attack_table needs at least one synthesis (label -> synthetic sets).")
    names = cols.all
    if not names:
        raise ValueError("attack_table needs at least one attacked column.")
    _check_frame(train, names, "train")
    if holdout is not None:
        _check_frame(holdout, names, "holdout")
    keys = list(cols.categorical if keys is None else keys)
    target = target if target is not None else (cols.numeric[0] if cols.numeric
                                                else [c for c in names if c not in keys][0])
    notes: list[str] = []
    release = next(iter(syntheses))
    n_ref = len(train) if holdout is None else min(len(train), len(holdout))
    ref = _subsample(train, n_ref, rng)
    hold = None if holdout is None else _subsample(holdout, n_ref, rng)
    if holdout is not None and (len(train) != n_ref or len(holdout) != n_ref):
        notes.append(f"Training and holdout records differ in number ({len(train):,} and "
                     f"{len(holdout):,}): the measures that depend on it use {n_ref:,} of "
                     "each, drawn at random; the membership attack uses all.")
    cols_out = [*syntheses, *(["holdout"] if holdout is not None else [])]
    values = pd.DataFrame(np.nan, index=list(MEASURES), columns=cols_out)
    cells: dict[tuple[str, str], str] = {}
    labels = {k: v.format(tol=tol, level=100 * (1 - alpha), target=target)
              for k, v in MEASURES.items()}
    mias: dict[str, MembershipInference] = {}
    risks: dict[str, dict[str, AttackRisk]] = {}
    sp: dict[str, pd.DataFrame] = {}
    sp_keys = [k for k in keys if k != target]
    link_a = RecordColumns(tuple(c for c in cols.numeric if c in sp_keys),
                           tuple(c for c in cols.categorical if c in sp_keys))
    link_b = RecordColumns(tuple(c for c in cols.numeric if c not in sp_keys),
                           tuple(c for c in cols.categorical if c not in sp_keys))
    if not link_a.all or not link_b.all:  # keys cover all or none: split the columns in half
        half = max(1, len(names) // 2)
        pick = set(names[:half])
        link_a = RecordColumns(tuple(c for c in cols.numeric if c in pick),
                               tuple(c for c in cols.categorical if c in pick))
        link_b = RecordColumns(tuple(c for c in cols.numeric if c not in pick),
                               tuple(c for c in cols.categorical if c not in pick))
    inf_aux = RecordColumns(tuple(c for c in cols.numeric if c != target),
                            tuple(c for c in cols.categorical if c != target))
    regression = target in cols.numeric
    coarse_cols = [*sp_keys, target]

    sp_ok = bool(sp_keys)  # synthpop's measures need a key besides the target
    if not sp_ok:
        notes.append("synthpop's identity and attribute disclosure measures (UiO, repU, DiSCO, "
                     "TCAP) not computed: they need a key variable besides the target, and the "
                     "release attacks one variable only.")
    if not (link_a.all and link_b.all):
        notes.append("Linkability attack not run: it needs two groups of columns (one "
                     "attacked column).")

    def sp_table(records: pd.DataFrame, sets: Sequence[pd.DataFrame]) -> pd.DataFrame:
        rec, *syn = _coarsened([records, *sets], coarse_cols, ref, ngroups)
        return synthpop_disclosure(rec, syn, sp_keys, target)

    for label, sets in syntheses.items():
        sets = list(sets)
        if not sets:
            raise ValueError(f"synthesis {label!r} has no synthetic sets.")
        for i, s in enumerate(sets):
            _check_frame(s, names, f"{label} set {i + 1}")
        d = dcr_summary(sets, ref, cols, tol)
        values.loc[["dcr_median", "dcr_p05", "match_share"], label] = [
            d["median"], d["p05"], d["match_share"]]
        if stated_epsilon is not None and label in stated_epsilon:
            e = stated_epsilon[label]
            values.at["stated_epsilon", label] = np.inf if e is None else e
            if e is None:
                cells[("stated_epsilon", label)] = "none (no protection)"
        pooled = pd.concat(sets, ignore_index=True)
        if holdout is not None:
            mia = membership_inference(
                closest_distance(train, pooled, cols, "query"),
                closest_distance(holdout, pooled, cols, "query"), alpha=alpha)
            mias[label] = mia
            values.at["mia_auc", label] = mia.auc
            cells[("mia_auc", label)] = f"{mia.auc:.4g} (SE {mia.auc_se:.2g})"
            values.at["mia_epsilon", label] = mia.epsilon_lower
        so = singling_out(ref, sets, hold, cols, n_attacks=n_attacks, rng=rng)
        lk = (linkability(ref, sets, hold, (link_a, link_b), n_attacks=n_attacks, rng=rng)
              if link_a.all and link_b.all else None)
        inf = inference(ref, sets, hold, inf_aux, target, regression, n_attacks=n_attacks,
                        rng=rng) if inf_aux.all else None
        risks[label] = {"singling out": so, **({"linkability": lk} if lk is not None else {}),
                        **({"inference": inf} if inf is not None else {})}
        for key, r in (("so", so), ("link", lk), ("inf", inf)):
            if r is None:
                continue
            values.at[f"{key}_rate", label] = r.n_success / r.n_attacks
            values.at[f"{key}_risk", label] = r.risk
            lo, hi = r.ci
            cells[(f"{key}_risk", label)] = f"{r.risk:.3g} [{lo:.3g}, {hi:.3g}]"
            if label == release and hold is not None:
                values.at[f"{key}_rate", "holdout"] = r.n_control / r.n_attacks
        if sp_ok:
            sp[label] = sp_table(ref, sets)
            for m in ("UiO", "repU", "Dorig", "DiSCO", "TCAP"):
                values.at[m, label] = float(sp[label][m].mean())
        if label == release and hold is not None:
            dh = dcr_summary(sets, hold, cols, tol)
            values.loc[["dcr_median", "dcr_p05", "match_share"], "holdout"] = [
                dh["median"], dh["p05"], dh["match_share"]]
            if sp_ok:
                sp["holdout"] = sp_table(hold, sets)
                for m in ("UiO", "repU", "Dorig", "DiSCO", "TCAP"):
                    values.at[m, "holdout"] = float(sp["holdout"][m].mean())
    if holdout is not None:
        for key in ("mia_auc", "mia_epsilon", "so_risk", "link_risk", "inf_risk",
                    "stated_epsilon"):
            cells[(key, "holdout")] = "n/a (the holdout records are this attack's controls)" \
                if key != "stated_epsilon" else "n/a"
    if not inf_aux.all:
        notes.append("Inference attack not run: no column besides the target.")
    flags = _flags(values, release, mias, risks, n_ref, d_syn=len(pd.concat(
        list(syntheses[release]), ignore_index=True)), holdout=holdout is not None)
    keep = [k for k in values.index if not values.loc[k].isna().all()
            or any((k, c) in cells for c in values.columns)]
    values = values.loc[keep]
    return AttackEvidence(values, labels, cells, mias, risks, sp, flags, notes, n_ref, release)


def _flags(values: pd.DataFrame, release: str, mias: dict[str, MembershipInference],
           risks: dict[str, dict[str, AttackRisk]], n_ref: int, d_syn: int,
           holdout: bool) -> list[str]:
    """The release's measures above their holdout value beyond noise: a positive membership
    epsilon bound, an anonymeter risk whose interval excludes 0, a match share or DiSCO above
    the holdout's by more than 1.96 standard errors of a difference of two proportions."""
    if not holdout:
        return []
    out = []
    m = mias.get(release)
    if m is not None and m.epsilon_lower > 0:
        out.append(f"membership attack epsilon >= {m.epsilon_lower:.3g} (AUC {m.auc:.3f})")
    for name, r in risks.get(release, {}).items():
        if r.n_control is not None and r.ci[0] > 0:
            out.append(f"{name} risk {r.risk:.3g} [{r.ci[0]:.3g}, {r.ci[1]:.3g}]")
    ms, mh = values.at["match_share", release], values.at["match_share", "holdout"]
    if _two_prop_z(ms, d_syn, mh, d_syn) > 1.96:
        out.append(f"match share {ms:.3g} vs {mh:.3g} on the holdout")
    ds, dh = values.at["DiSCO", release] / 100, values.at["DiSCO", "holdout"] / 100
    if np.isfinite(ds) and np.isfinite(dh) and _two_prop_z(ds, n_ref, dh, n_ref) > 1.96:
        out.append(f"DiSCO {100 * ds:.3g}% vs {100 * dh:.3g}% on the holdout")
    return out
