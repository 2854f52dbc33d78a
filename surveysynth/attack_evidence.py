"""Attack-based evidence of a pipeline release (issue 35, item 6): what the confidential report's
"Attack-based evidence" section is computed from.

The attacks themselves are in :mod:`surveysynth.privacy.attacks`; this module assembles, from
what the pipeline has, the three syntheses they are read on (docs/attacks.md):

* **release**: the published synthetic sets, attacked with the confidential records;
* **unweighted synthesis**: the same model with every risk weight 1, at the same m. FBS, FBP and
  PBP fit it anyway (their first, unweighted fit): its draws are synthesized, no extra fit.
  Mixture and NB refit with ``alpha = None``, Sequential with ``risk_weights = "none"``. The
  quantile (KNG) synthesizer has no risk weights: not applicable, and the report says so;
* **holdout**: records the synthesizer never saw. ``[report] holdout = "FILE"`` names a file of
  them (a second sample of the population, as the demo writes): the release itself is attacked
  with them, no extra fit. ``holdout = "split"`` (the default) holds out a random
  ``holdout_share`` of the confidential records from an *evaluation* refit of the configuration
  on the rest (the published release is still fit on every record: holding data out of the
  release would cost it utility); the release and unweighted columns are then the evaluation
  fits against their training records, and the published release's own measures against all
  records are a column of their own. ``attacks = false`` computes the release's measures
  against its records only (no holdout, no extra fit).

Everything here is computed from confidential records: confidential report only.
"""

from __future__ import annotations

import contextlib
import copy
import io
import warnings
from dataclasses import dataclass
from typing import Any

import numpy as np
import pandas as pd

from .privacy.attacks import AttackEvidence, RecordColumns, attack_table
from .release_inputs import build_design, joint_variables, read_input

#: the synthesizers whose unweighted counterpart is a refit with these settings
_UNWEIGHTED_SETTINGS = {"mixture": {"alpha": None}, "nb": {"alpha": None},
                        "sequential": {"risk_weights": "none", "target_epsilon": None}}
_CATEGORICAL_TYPES = ("binary", "categorical", "ordinal")


@dataclass
class AttackSettings:
    """The ``[report]`` keys of the attacks (docs/release-config.md)."""

    attacks: bool = True
    holdout: str = "split"
    holdout_share: float = 0.2
    keys: list[str] | None = None
    target: str | None = None
    n_attacks: int = 500


def record_columns(cfg: Any, data: pd.DataFrame) -> RecordColumns:
    """The columns the attacks compare: the synthesized variables and the variables released
    as collected that enter the joint utility (a partial synthesis's predictors), and the known
    variables. Categorical: declared so (sequential types, ``init.categorical``), not numeric,
    or whole numbers with at most 20 levels; every other column is numeric."""
    synthesized, types, context = joint_variables(cfg)
    names = list(dict.fromkeys([*synthesized, *context, *(k for k in cfg.known
                                                            if k in data.columns)]))
    num, cat = [], []
    for c in names:
        col = data[c]
        declared = types.get(c)
        if declared is not None:
            (cat if declared in _CATEGORICAL_TYPES else num).append(c)
        elif pd.api.types.is_bool_dtype(col) or not pd.api.types.is_numeric_dtype(col):
            cat.append(c)
        else:
            v = col.dropna().to_numpy(float)
            (cat if v.size and np.all(v == np.round(v)) and np.unique(v).size <= 20
             else num).append(c)
    return RecordColumns(tuple(num), tuple(cat))


def _release_frames(release: Any) -> list[pd.DataFrame]:
    return [d.data for d in release.designs]


def quiet_fit_release(twin: Any, design: Any, m: int) -> Any:
    """``twin.fit(design).release(m)`` for the report's evaluation fits, without a word on
    the console: their warnings are the evaluation's (not the release's), and what the
    libraries print themselves (pystan's "Building..." on stdout for every Stan run) reached
    the console of ``surveysynth release`` after its last step (4-9 lines in the shipped
    FBS/FBP/PBP examples), outside the pipeline's own quiet fit."""
    sink = io.StringIO()
    with warnings.catch_warnings(), contextlib.redirect_stdout(sink), \
            contextlib.redirect_stderr(sink):
        warnings.simplefilter("ignore")
        twin.fit(design)
        return twin.release(m)


def unweighted_frames(method: str, syn: Any, design: Any, m: int, seed: Any,
                      construct: Any) -> tuple[list[pd.DataFrame] | None, str]:
    """The unweighted counterpart's m synthetic sets and a sentence on how they were made
    (None and the reason when it does not apply)."""
    from .privacy.randomness import secret_rng

    if hasattr(syn, "unweighted_fit_") and hasattr(syn, "weighted_fit_"):
        if getattr(syn, "c_", 0) is None or float(getattr(syn, "g_", 0.0)) >= 1:
            return None, ("not applicable: the release is itself unweighted (every risk "
                          "weight 1)")
        twin = copy.copy(syn)  # the fit's unweighted draws in place of the weighted ones
        twin.weighted_fit_ = syn.unweighted_fit_
        twin._rng_ = secret_rng(seed)
        return (twin.synthesize(m), "the same model with every risk weight 1: synthesized from "
                                    "the unweighted fit the synthesizer makes first (no refit)")
    settings = _UNWEIGHTED_SETTINGS.get(method)
    if settings is None:
        return None, (f"not applicable: {method} has no risk weights (its protection is its "
                      "mechanism's noise)")
    params = dict(syn.get_params())
    params.update(settings, progress=False)
    if "max_epsilon" in params:
        params["max_epsilon"] = None
    if "random_state" in params:
        params["random_state"] = seed
    twin = construct(type(syn), params)
    rel = quiet_fit_release(twin, design, m)
    return (_release_frames(rel), "the same model refit with every risk weight 1 ("
            + ", ".join(f"{k} = {v!r}" for k, v in settings.items()) + ")")


def split_records(data: pd.DataFrame, share: float, strata: Any,
                  rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray]:
    """(training, holdout) row positions: a random ``share`` of the records held out, within
    each stratum when the design has strata (at least 2 records of a stratum stay in the
    training part)."""
    n = len(data)
    groups = (np.zeros(n, dtype=int) if not strata else
              pd.factorize(pd.MultiIndex.from_frame(data[[strata] if isinstance(strata, str)
                                                          else list(strata)]))[0])
    hold = []
    for g in np.unique(groups):
        idx = np.flatnonzero(groups == g)
        k = min(int(round(share * idx.size)), max(0, idx.size - 2))
        hold.extend(rng.choice(idx, size=k, replace=False).tolist())
    hold_idx = np.sort(np.asarray(hold, dtype=int))
    return np.setdiff1d(np.arange(n), hold_idx), hold_idx


def _stated(release: Any) -> float | None:
    p = release.privacy
    return None if p.epsilon is None or p.guarantee_class == "none" else float(p.epsilon)


def _syntheses(label: str, release: Any, unweighted: list[pd.DataFrame] | None
               ) -> tuple[dict[str, list[pd.DataFrame]], dict[str, float | None]]:
    """The syntheses an attack table compares and their stated epsilons: the release under
    ``label``, and its unweighted counterpart (no protection: no epsilon) when there is one."""
    syns = {label: _release_frames(release)}
    stated = {label: _stated(release)}
    if unweighted is not None:
        syns["unweighted synthesis"] = unweighted
        stated["unweighted synthesis"] = None
    return syns, stated


def evaluate(cfg: Any, design: Any, syn: Any, release: Any,
             settings: AttackSettings) -> tuple[AttackEvidence, list[str]]:
    """The attack evidence of a pipeline release and the paragraphs that say how it was
    computed (which holdout, how the unweighted synthesis was made)."""
    from .privacy.randomness import child_seed, secret_rng

    data = design.data
    cols = record_columns(cfg, data)
    seed = cfg.synth.get("seed")
    rng = secret_rng(seed)
    m = int(release.m)
    keys = settings.keys if settings.keys else [k for k in cfg.known if k in cols.all] or None
    target = settings.target or cfg.synth.get("outcome")
    if target is not None and target not in cols.all:
        target = None
    text: list[str] = []

    def construct(cls: Any, params: dict) -> Any:
        return cls(**params)

    if not settings.attacks:
        ev = attack_table(data, {"release": _release_frames(release)}, cols, keys=keys,
                          target=target, stated_epsilon={"release": _stated(release)},
                          n_attacks=settings.n_attacks, rng=rng)
        identification_rows(ev, cfg, design, release, {"release": "release"})
        text.append("Attacks without a holdout ([report] attacks = false): the release against "
                    "its own records only; nothing says how much of it any record of the "
                    "population would show.")
        return ev, text
    if settings.holdout != "split":
        holdout = read_input(settings.holdout)
        unw, how = unweighted_frames(cfg.method, syn, design, m, child_seed(rng), construct)
        syns, stated = _syntheses("release", release, unw)
        ev = attack_table(data, syns, cols, holdout=holdout, keys=keys, target=target,
                          stated_epsilon=stated, n_attacks=settings.n_attacks, rng=rng)
        identification_rows(ev, cfg, design, release, {"release": "release",
                                                        "unweighted synthesis": unw})
        text.append(f"Holdout: {len(holdout):,} records of the population that the synthesizer "
                    f"never saw, from {settings.holdout} (no extra fit). Unweighted synthesis: "
                    f"{how}.")
        return ev, text
    train_idx, hold_idx = split_records(data, settings.holdout_share,
                                        cfg.design.get("strata"), rng)
    train = data.iloc[train_idx].reset_index(drop=True)
    holdout = data.iloc[hold_idx].reset_index(drop=True)
    scaled = train.copy()
    wcol = cfg.design.get("weights")
    if isinstance(wcol, str) and wcol in scaled:  # the training part stands for the population
        scaled[wcol] = scaled[wcol] * (len(data) / len(train))
    eval_design = build_design(cfg.design, scaled)
    params = dict(syn.get_params())
    if "progress" in params:  # AIM / MST have no progress output
        params["progress"] = False
    if "random_state" in params:
        params["random_state"] = child_seed(rng)
    if "max_epsilon" in params:
        params["max_epsilon"] = None
    twin = construct(type(syn), params)
    eval_rel = quiet_fit_release(twin, eval_design, m)
    unw, how = unweighted_frames(cfg.method, twin, eval_design, m, child_seed(rng), construct)
    syns, stated = _syntheses("release configuration", eval_rel, unw)
    ev = attack_table(train, syns, cols, holdout=holdout, keys=keys, target=target,
                      stated_epsilon=stated, n_attacks=settings.n_attacks, rng=rng)
    pub = attack_table(data, {"published release": _release_frames(release)}, cols, keys=keys,
                       target=target, stated_epsilon={"published release": _stated(release)},
                       n_attacks=settings.n_attacks, rng=rng)
    ev.values.insert(0, "published release", pub.values["published release"].reindex(
        ev.values.index))
    for (k, c), v in pub.cells.items():
        ev.cells[(k, c)] = v
    identification_rows(ev, cfg, design, release, {"published release": "release"})
    for k in ev.values.index:
        if pd.isna(ev.values.at[k, "published release"]) and k.startswith("mia"):
            ev.cells[(k, "published release")] = "n/a (no record outside its fit)"
    text.append(
        f"Holdout: an evaluation split ([report] holdout = \"split\"): {len(holdout):,} of the "
        f"{len(data):,} confidential records ({100 * settings.holdout_share:g}%, within strata) "
        f"held out, the configuration refit on the other {len(train):,} (weights scaled by "
        f"{len(data) / len(train):.4g}); the columns 'release configuration' and 'unweighted "
        "synthesis' are these evaluation fits against their training records, 'holdout' the "
        "evaluation release against the held-out records. None of them is published. "
        "'published release' is the release as published against all the records it was fit "
        f"on (it has no unseen records to compare with). Unweighted synthesis: {how}.")
    return ev, text


def identification_rows(ev: AttackEvidence, cfg: Any, design: Any, release: Any,
                        which: dict[str, Any]) -> None:
    """Add the package's identification risk (Hu, Savitsky & Williams) to ``ev``: the mean
    per-record risk and the share of records above its threshold, for the syntheses in
    ``which`` (label -> synthetic sets in the confidential row order, or "release": the
    published sets, whose row order the release's permutations undo). A partial synthesis with known variables only; the
    other cells say why not."""
    from .privacy import identification_risk

    outcome = cfg.synth.get("outcome")
    rows = {"ir_mean": "identification risk: mean per-record risk (Hu, Savitsky & Williams)",
            "ir_above": "identification risk: records above the threshold (%)"}
    for k, lab in rows.items():
        ev.labels[k] = lab
        ev.values.loc[k] = np.nan
    reason = None
    if release.kind != "partial" or outcome is None or not cfg.known:
        reason = "n/a (a partial synthesis of one outcome with known variables only)"
    for col in ev.values.columns:
        frames = which.get(col)
        if reason is not None or frames is None:
            for k in rows:
                ev.cells[(k, col)] = reason or ("n/a (no synthetic record of these records)"
                                                if col == "holdout" else "n/a")
            continue
        if isinstance(frames, str):
            perms = release.confidential.get("_row_permutations")
            if perms is None:
                continue
            frames = [d.data.iloc[np.argsort(p)].reset_index(drop=True)
                      for d, p in zip(release.designs, perms, strict=True)]
        ir = identification_risk(design.data, np.vstack([f[outcome].to_numpy(float)
                                                         for f in frames]),
                                 known=cfg.known, outcome=outcome, r=cfg.r)
        risk = np.asarray(ir.ir, dtype=float)
        ev.values.at["ir_mean", col] = float(risk.mean())
        ev.values.at["ir_above", col] = 100 * float((risk > ir.threshold).mean())
