"""The privacy record: the one builder every synthesizer and noise mechanism goes through.

A :class:`PrivacyRecord` is what a release says about its privacy, and it is public (it goes to
``public/manifest.json``). It is built only by :func:`build_record`, which

* generates the guarantee label and text from the facts of the run
  (:mod:`surveysynth.privacy.guarantees`), so labels cannot drift from what was done;
* accepts scalars only (no per-record risk weights or bounds can slip in);
* refuses a seed: randomness behind a guarantee is a secret key. It records only whether the
  run was seeded (then the release is reproducible by whoever holds the seed);
* carries ``published_without_budget``: every quantity derived from the confidential data that
  the public part holds without being covered by epsilon, with the reason (the synthesizers add
  what they publish that way: columns released as collected, the population size when it was
  not given as a public input, a bound computed from the data, ...);
* states the ``guarantee_class`` (:data:`~surveysynth.privacy.guarantees.GUARANTEE_CLASSES`)
  and sets ``differentially_private`` only for a formal class; a record whose class is "none"
  says "not differentially private" at the start of its label;
* carries the budget account: ``epsilon`` is the total of the ledger's charges (every use of
  the confidential data by the object that made the release, each listed in ``ledger``), not
  the cost of one release.
"""

from __future__ import annotations

import json
import numbers
from dataclasses import asdict, dataclass, field
from typing import Any

import numpy as np

from .guarantees import FAMILIES, GUARANTEE_CLASSES, NO_GUARANTEE, NOT_DP, classify

FORBIDDEN_FACTS = ("seed", "random_state", "rng", "alpha", "delta_i", "c", "g", "sha256")


def _scalar(value: Any, where: str) -> Any:
    """A JSON-safe scalar; arrays and objects are refused."""
    if value is None or isinstance(value, (str, bool)):
        return value
    if isinstance(value, np.bool_):
        return bool(value)
    if isinstance(value, numbers.Integral):
        return int(value)
    if isinstance(value, numbers.Real):
        v = float(value)
        if not np.isfinite(v):
            return None if np.isnan(v) else ("inf" if v > 0 else "-inf")
        return v
    raise ValueError(
        f"privacy record {where}: {type(value).__name__} is not allowed (only strings, numbers, "
        "booleans, None). A release never carries per-record quantities such as risk weights or "
        "bounds; summarize them in the confidential report instead."
    )


@dataclass(frozen=True)
class PrivacyRecord:
    """What a release promises, as published. Build with :func:`build_record`."""

    family: str
    mechanism: str
    guarantee: str
    differentially_private: bool
    guarantee_text: str
    epsilon: float | None
    delta: float | None
    delta_alpha: float | None
    m: int
    seeded: bool
    reproducibility: str
    facts: dict[str, Any] = field(default_factory=dict)
    ledger: list[dict[str, Any]] = field(default_factory=list)
    published_without_budget: list[dict[str, str]] = field(default_factory=list)
    convergence_override: bool = False
    notes: list[str] = field(default_factory=list)
    #: one of GUARANTEE_CLASSES ("formal pure DP", ..., "asymptotic database-local
    #: (epsilon, delta)-pDP", "none"); differentially_private is true only for a formal class
    guarantee_class: str = NO_GUARANTEE

    def to_dict(self) -> dict[str, Any]:
        return json.loads(json.dumps(asdict(self), allow_nan=False))

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> PrivacyRecord:
        """Rebuild a record read from a manifest (checks the keys; texts are kept as written)."""
        names = {f for f in cls.__dataclass_fields__}
        unknown = set(d) - names
        if unknown:
            raise ValueError(f"privacy record: unknown key(s) {sorted(unknown)}.")
        # manifests written before guarantee_class existed: the class of their flag
        if "guarantee_class" not in d:
            d = {**d, "guarantee_class": _legacy_class(d)}
        missing = names - set(d)
        if missing:
            raise ValueError(f"privacy record: missing key(s) {sorted(missing)}.")
        return cls(**d)


def build_record(
    family: str,
    mechanism: str,
    *,
    m: int,
    epsilon: float | None,
    seeded: bool,
    facts: dict[str, Any] | None = None,
    delta: float | None = None,
    delta_alpha: float | None = None,
    ledger: list[dict[str, Any]] | None = None,
    published_without_budget: list[dict[str, str]] | None = None,
    convergence_override: bool = False,
    notes: list[str] | None = None,
) -> PrivacyRecord:
    """The one privacy-record builder (see the module docstring).

    ``family`` picks the guarantee generator (``pseudo_posterior``, ``kng``, ``laplace``,
    ``identification_risk``, ``none``); ``facts`` are what the run did (scalars).
    """
    if family not in FAMILIES:
        raise ValueError(f"family={family!r}: choose one of {sorted(FAMILIES)}.")
    if not isinstance(mechanism, str) or not mechanism:
        raise ValueError("mechanism must be a non-empty string naming the mechanism.")
    if not isinstance(m, numbers.Integral) or int(m) < 1:
        raise ValueError(f"m={m!r}: must be a positive integer.")
    facts = dict(facts or {})
    bad = [k for k in facts if k.lower() in FORBIDDEN_FACTS]
    if bad:
        raise ValueError(
            f"privacy record facts {bad}: a seed, per-record weights, tuning constants or input "
            "hashes never go into the public record (they stay in the confidential part)."
        )
    facts = {str(k): _scalar(v, f"facts[{k!r}]") for k, v in facts.items()}
    for key, v in (("epsilon", epsilon), ("delta", delta), ("delta_alpha", delta_alpha)):
        if v is not None and (not isinstance(v, numbers.Real) or isinstance(v, bool) or not v >= 0):
            raise ValueError(f"{key}={v!r}: must be a non-negative number or None.")
    epsilon = None if epsilon is None else float(epsilon)
    facts.setdefault("epsilon", epsilon)
    facts.setdefault("m", int(m))
    if delta_alpha is not None:
        facts.setdefault("delta_alpha", float(delta_alpha))
    g = FAMILIES[family](facts)
    gclass = classify(family, facts, g)
    if convergence_override:
        label = g.label + (" (released although MCMC convergence checks failed: override by "
                           "the curator)")
        g = type(g)(
            label, g.differentially_private,
            g.text.replace(g.label, label, 1) + " The curator released this fit although its "
            "MCMC convergence checks failed (allow_unconverged=True); the draws may not "
            "represent the stated posterior.",
        )
    _check_class(family, g, gclass)
    led = []
    for i, e in enumerate(ledger or []):
        if not isinstance(e, dict):
            raise ValueError("ledger must be a list of dicts (one per budget spend).")
        led.append({str(k): _scalar(v, f"ledger[{i}][{k!r}]") for k, v in e.items()})
    pwb = []
    for e in published_without_budget or []:
        if set(e) != {"item", "reason"}:
            raise ValueError("published_without_budget entries are {'item': ..., 'reason': ...}.")
        pwb.append({"item": str(e["item"]), "reason": str(e["reason"])})
    if not all(isinstance(s, str) for s in notes or []):
        raise ValueError("notes must be a list of strings.")
    repro = (
        "seeded by the curator: reproducible bit for bit by whoever holds the seed, which is a "
        "secret key and is not published" if seeded else
        "secret randomness from the operating system's entropy: not reproducible by anyone"
    )
    return PrivacyRecord(
        family=family, mechanism=mechanism, guarantee=g.label,
        differentially_private=g.differentially_private, guarantee_text=g.text,
        epsilon=epsilon, delta=None if delta is None else float(delta),
        delta_alpha=None if delta_alpha is None else float(delta_alpha), m=int(m),
        seeded=bool(seeded), reproducibility=repro, facts=facts, ledger=led,
        published_without_budget=pwb, convergence_override=bool(convergence_override),
        notes=list(notes or []), guarantee_class=gclass,
    )


def _check_class(family: str, g: Any, gclass: str) -> None:
    """The label cannot overstate: differentially_private only for a formal class, and a
    "none" class (and only it) says "not differentially private" at the start of its label."""
    if gclass not in GUARANTEE_CLASSES:
        raise AssertionError(f"guarantee class {gclass!r} is not one of {GUARANTEE_CLASSES}")
    if g.differentially_private is not gclass.startswith("formal"):
        raise AssertionError(f"{family}: differentially_private={g.differentially_private} but "
                             f"the guarantee class is {gclass!r}")
    if (gclass == NO_GUARANTEE) is not g.label.startswith(NOT_DP):
        raise AssertionError(f"guarantee generator for {family} produced label {g.label!r} for "
                             f"class {gclass!r}")


def _legacy_class(d: dict[str, Any]) -> str:
    """The guarantee class of a record read from an old manifest (before the field existed)."""
    if str(d.get("guarantee", "")).startswith(NOT_DP):
        return NO_GUARANTEE
    if str(d.get("family", "")).startswith("pseudo_posterior"):
        return "asymptotic database-local (epsilon, delta)-pDP"
    return "formal pure DP" if d.get("differentially_private") else NO_GUARANTEE
