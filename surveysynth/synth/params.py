"""Settings declared once: each synthesizer's constraint table and the one validator.

In scikit-learn's manner (``_parameter_constraints`` and ``validate_parameter_constraints``):
every synthesizer class states the allowed values of each constructor setting once, as data, in
its class attribute ``_parameter_constraints`` (a dict setting -> list of constraints; a value is
valid when it meets any of them). Families share blocks by dict union: :data:`MCMC` (chains,
draws, warm-up, Stan's options, the release gates), :data:`RELEASE` (m, the population size,
the seed, the budget filter). One function, :func:`validate_params`, checks a set of values
against a table and gives the project's error style: the setting (or the release config's key)
by name, the bad value, what is allowed, and the fix (its default). The Python API
(:meth:`surveysynth.synth.base.Synthesizer.check_params`, run first by ``fit``), the release
config (:mod:`surveysynth.pipeline`, which names the config key) and the R package
(``ss_synthesizer()``) all go through it, and docs/release-config.md's allowed values are
written from the same tables (:func:`describe`).

Cross-setting rules (give target_lipschitz or target_epsilon, not both; ``shift`` only with
``transform="log"``) and rules on the data stay with each class (its ``_validate``); the table
holds what one setting alone must satisfy.

Renamed settings keep their old name for one release as a deprecated alias: a class lists
them in ``_deprecated_parameters`` (old -> new); the old name stays in the signature with the
default :data:`DEPRECATED`, and :func:`validate_params` warns (DeprecationWarning naming the new
name) and maps the value to the new name.
"""

from __future__ import annotations

import functools
import inspect
import numbers
import sys
import warnings
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

__all__ = ["Interval", "Options", "Columns", "Gates", "DaskClient", "ParameterError", "DEPRECATED", "MCMC",
           "CONVERGENCE_DEFAULTS",
           "RELEASE", "validate_params", "validate_args", "describe", "constraints_of",
           "aliases_of", "integer_settings"]

#: the default of a deprecated alias in a signature: "not given"
DEPRECATED = "deprecated"


class ParameterError(ValueError):
    """A setting outside its constraint, or a rule on the data whose fix is one setting
    (``log`` for an outcome <= 0, NB's ``outcome``, the mixture's ``shift``): ``param`` is
    the setting's (or config key's) name, so the release config can name its key."""

    def __init__(self, message: str, param: str) -> None:
        super().__init__(message)
        self.param = param


# ------------------------------------------------------------------------------ constraints
@dataclass(frozen=True)
class Interval:
    """A number (``kind="number"``) or an integer (``kind="integer"``; bools are not
    integers) in [low, high] with the ends open or closed as ``closed`` says ("both", "left",
    "right", "neither"); None: unbounded. NaN and infinities are never in an interval."""

    kind: str
    low: float | None = None
    high: float | None = None
    closed: str = "both"

    def ok(self, v: Any) -> bool:
        if isinstance(v, (bool, np.bool_)):
            return False
        if self.kind == "integer":
            if not isinstance(v, numbers.Integral):
                return False
        elif not isinstance(v, numbers.Real) or not np.isfinite(float(v)):
            return False
        lo_closed = self.closed in ("both", "left")
        hi_closed = self.closed in ("both", "right")
        if self.low is not None and (v < self.low or (v == self.low and not lo_closed)):
            return False
        return not (self.high is not None and (v > self.high or (v == self.high
                                                                  and not hi_closed)))

    def describe(self) -> str:
        what = "an integer" if self.kind == "integer" else "a number"
        lo_closed = self.closed in ("both", "left")
        hi_closed = self.closed in ("both", "right")
        if self.low is not None and self.high is not None:
            return (f"{what} in {'[' if lo_closed else '('}{self.low:g}, {self.high:g}"
                    f"{']' if hi_closed else ')'}")
        if self.low is not None:
            return f"{what} {'>=' if lo_closed else '>'} {self.low:g}"
        if self.high is not None:
            return f"{what} {'<=' if hi_closed else '<'} {self.high:g}"
        return f"a finite {what[2:] if what.startswith('a ') else what[3:]}"


@dataclass(frozen=True)
class Options:
    """One of the listed values (strings, compared with ==)."""

    values: tuple[Any, ...]

    def __init__(self, *values: Any) -> None:
        object.__setattr__(self, "values", tuple(values))

    def ok(self, v: Any) -> bool:
        return isinstance(v, str) and v in self.values

    def describe(self) -> str:
        return "one of " + ", ".join(repr(x) for x in self.values)


@dataclass(frozen=True)
class Columns:
    """A column name, a list of names, or an R-style formula ``"~a+b"``."""

    def ok(self, v: Any) -> bool:
        if isinstance(v, str):
            return bool(v)
        return isinstance(v, (list, tuple)) and all(isinstance(x, str) and x for x in v)

    def describe(self) -> str:
        return "a column name, a list of column names or a formula '~a+b'"


#: Release gates on MCMC fits: split R-hat (rank-normalised) of every model parameter at most
#: ``rhat``, bulk ESS at least ``ess_bulk``, share of divergent post-warm-up transitions at
#: most ``divergent_share`` (0.001: 4 of 4,000). Stan's own recommendations (Vehtari et al.
#: 2021) for R-hat and ESS; any divergence is a warning in Stan, and a few in 4,000 are
#: tolerated here because the gate stops a release, not a fit.
CONVERGENCE_DEFAULTS: dict[str, float] = {"rhat": 1.01, "ess_bulk": 400.0, "divergent_share": 0.001}


@dataclass(frozen=True)
class Gates:
    """The release gates' overrides: a dict with keys among rhat, ess_bulk, divergent_share
    and number values."""

    def ok(self, v: Any) -> bool:
        return isinstance(v, dict) and set(v) <= set(CONVERGENCE_DEFAULTS) and all(
            Interval("number").ok(x) for x in v.values())

    def describe(self) -> str:
        return "a dict of gate overrides {rhat, ess_bulk, divergent_share: number}"


@dataclass(frozen=True)
class _Type:
    types: tuple[type, ...]
    phrase: str

    def ok(self, v: Any) -> bool:
        return isinstance(v, self.types) and not (bool not in self.types
                                                  and isinstance(v, (bool, np.bool_)))

    def describe(self) -> str:
        return self.phrase


_NAMED: dict[Any, Any] = {
    bool: _Type((bool, np.bool_), "True or False"),
    dict: _Type((dict, Mapping), "a dict"),
    str: _Type((str,), "a string"),
    "array-like": _Type((list, tuple, np.ndarray, pd.Series), "an array of numbers"),
    "random_state": _Type((numbers.Integral, np.random.Generator, np.random.SeedSequence),
                          "an integer seed or a numpy Generator"),
    "numbers": _Type((list, tuple, np.ndarray, numbers.Real), "a number or a list of numbers"),
    "sequence": _Type((list, tuple), "a list"),
}


@dataclass(frozen=True)
class DaskClient:
    """A Dask ``distributed.Client`` (duck-typed: ``map``, ``gather`` and ``run``); from the
    Python API only (a release config cannot hold one)."""

    def ok(self, v: Any) -> bool:
        return all(callable(getattr(v, a, None)) for a in ("map", "gather", "run"))

    def describe(self) -> str:
        return "a Dask distributed.Client (Python API only)"


def _as_constraint(c: Any) -> Any:
    if c is None:
        return None
    return _NAMED.get(c, c) if isinstance(c, (type, str)) else c


def _meets(c: Any, v: Any) -> bool:
    return v is None if c is None else c.ok(v)


def _phrase(c: Any) -> str:
    return "None" if c is None else c.describe()


def describe(constraints: Sequence[Any]) -> str:
    """What a setting may be, in words: "an integer >= 1", "None or a number > 0"."""
    parts = [_phrase(_as_constraint(c)) for c in constraints]
    return parts[0] if len(parts) == 1 else ", ".join(parts[:-1]) + " or " + parts[-1]


# ------------------------------------------------------------------------------ shared blocks
_POS_INT = Interval("integer", 1, None)
_POS = Interval("number", 0, None, closed="neither")

#: every synthesizer that releases m synthetic sets to a population size under a budget filter
RELEASE: dict[str, list[Any]] = {
    "m": [_POS_INT],
    "population_size": [None, _POS],
    "random_state": [None, "random_state"],
    "max_epsilon": [None, _POS],
}

#: every MCMC (Stan) synthesizer: chains, draws, warm-up, Stan's options, the release gates
MCMC: dict[str, list[Any]] = {
    "chains": [_POS_INT],
    "draws": [_POS_INT],
    "warmup": [_POS_INT],
    "stan_kwargs": [None, dict],
    "convergence": [None, Gates()],
    "allow_unconverged": [bool],
    "progress": [bool],
}


# ------------------------------------------------------------------------------ the validator
def constraints_of(cls: type) -> dict[str, list[Any]]:
    """The class's constraint table (``_parameter_constraints``)."""
    return dict(getattr(cls, "_parameter_constraints", {}))


def aliases_of(cls: type) -> dict[str, str]:
    """The class's deprecated setting names -> their new names (``_deprecated_parameters``)."""
    return dict(getattr(cls, "_deprecated_parameters", {}))


def integer_settings(cls: type) -> list[str]:
    """The settings whose table allows integers only (a front end whose numbers are doubles,
    R's, converts whole numbers for these: ``ss_synthesizer()``)."""
    out = []
    for name, allowed in constraints_of(cls).items():
        kinds = [c for c in map(_as_constraint, allowed) if c is not None]
        if kinds and all(isinstance(c, Interval) and c.kind == "integer" for c in kinds):
            out.append(name)
    return out


def _default(cls: type, name: str) -> Any:
    p = inspect.signature(cls.__init__).parameters.get(name)
    return inspect.Parameter.empty if p is None else p.default


def user_stacklevel() -> int:
    """The ``stacklevel`` that attributes a warning to the first caller outside the package
    (so that Python's default filter shows a DeprecationWarning to code that uses an old
    name: it shows them only where __main__ triggered them)."""
    root = str(Path(__file__).resolve().parents[1])
    frame, level = sys._getframe(1), 1  # noqa: SLF001 - the caller's frame
    while frame is not None and str(Path(frame.f_code.co_filename).resolve()).startswith(root):
        frame, level = frame.f_back, level + 1
    return max(level - 1, 1)


def validate_params(cls: type, values: Mapping[str, Any], *,
                    key: Callable[[str], str] | None = None) -> dict[str, Any]:
    """Check ``values`` (setting -> value) against ``cls``'s constraint table; returns them
    with deprecated aliases mapped to their new names (a DeprecationWarning for each).

    ``key`` names a setting in messages (the release config passes its keys:
    ``synthesizer.init.chains``); default: the setting's own name. Raises
    :class:`ParameterError` (a ValueError) naming the setting, the bad value, what is allowed
    and the fix. A setting without a constraint is a programming error (TypeError): every
    constructor setting must be declared (tests/test_params.py checks the tables). A class
    without a table (a user's own subclass) is not checked."""
    table = constraints_of(cls)
    if not table:
        return dict(values)
    name = key or (lambda p: p)
    out = dict(values)
    for old, new in aliases_of(cls).items():
        if old not in out:
            continue
        v = out.pop(old)
        if isinstance(v, str) and v == DEPRECATED:
            continue
        warnings.warn(f"{cls.__name__}: setting {name(old)!r} is deprecated and will be removed "
                      f"in the next release; use {name(new)!r} (same values).",
                      DeprecationWarning, stacklevel=user_stacklevel() + 1)
        given = out.get(new, _default(cls, new))
        if new in values and not _same(given, _default(cls, new)) and not _same(given, v):
            raise ParameterError(f"{cls.__name__}: {name(old)}={v!r} and {name(new)}={given!r} "
                                 f"both given; {name(old)!r} is the old name of {name(new)!r}. "
                                 f"Fix: keep {name(new)!r} only.", name(old))
        out[new] = v
    for p, v in out.items():
        if p not in table:
            raise TypeError(f"{cls.__name__}: setting {p!r} has no constraint in "
                            "_parameter_constraints; declare it.")
        _check_one(cls.__name__, p, v, table[p], _default(cls, p), name)
    return out


def _check_one(owner: str, p: str, v: Any, constraints: Sequence[Any], default: Any,
               name: Callable[[str], str]) -> None:
    """One value against its constraints; the one error text."""
    if any(_meets(_as_constraint(c), v) for c in constraints):
        return
    fix = f"Fix: correct {name(p)}" + ("" if default is inspect.Parameter.empty else
                                       f", or leave it out for its default {default!r}") + "."
    raise ParameterError(f"{name(p)}={_show(v)} is not valid for {owner}: {name(p)} must be "
                         f"{describe(constraints)}. {fix}", name(p))


def validate_args(**table: list[Any]) -> Callable[[Callable[..., Any]], Callable[..., Any]]:
    """The same validator for a public function's arguments (scikit-learn's
    ``@validate_params``): ``@validate_args(epsilon=[Interval("number", 0, None,
    closed="neither")])`` checks each named argument at every call, before the body runs; the
    table is the function's ``_parameter_constraints`` (the reference reads it)."""

    def decorate(fn: Callable[..., Any]) -> Callable[..., Any]:
        sig = inspect.signature(fn)
        unknown = sorted(set(table) - set(sig.parameters))
        if unknown:
            raise TypeError(f"{fn.__name__}: constraints for unknown argument(s) {unknown}.")

        @functools.wraps(fn)
        def checked(*args: Any, **kwargs: Any) -> Any:
            bound = sig.bind(*args, **kwargs)
            for p, v in bound.arguments.items():
                if p in table:
                    _check_one(fn.__name__, p, v, table[p], sig.parameters[p].default,
                               lambda q: q)
            return fn(*args, **kwargs)

        vars(checked)["_parameter_constraints"] = dict(table)  # the reference reads it
        return checked

    return decorate


def _show(v: Any) -> str:
    text = repr(v)
    return text if len(text) <= 80 else text[:77] + "..."


def _same(a: Any, b: Any) -> bool:
    try:
        return bool(a is b or a == b)
    except (TypeError, ValueError):  # arrays
        return False
