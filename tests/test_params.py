"""Settings declared once (issue 38 item 3): every synthesizer's constraint table, the one
validator (surveysynth.synth.params), the release config going through it, the deprecated
aliases, and the reference page generated from the tables.

Parametrized over the tables themselves: a constructor setting added without a constraint fails
``test_every_setting_has_a_constraint``, and every constraint of every setting is probed with
values just outside it (through the Python API and through the release config, whose message
must name the config key). No data, no MCMC: the whole file runs in a few seconds.
"""

from __future__ import annotations

import inspect
import math
import sys
import warnings
from pathlib import Path

import pytest

from surveysynth.pipeline import _construct, _settings  # noqa: PLC2701 - the config's builder
from surveysynth.release_config import (
    SECTIONS,
    SYNTHESIZERS,
    ConfigError,
    check_keys,
    render_markdown,
    synth_class,
    synth_settings,
    upgrade,
)
from surveysynth.synth.params import (
    DEPRECATED,
    Columns,
    Interval,
    Options,
    ParameterError,
    _as_constraint,  # noqa: PLC2701 - the probes read the tables as the validator does
    _meets,  # noqa: PLC2701
    aliases_of,
    constraints_of,
    describe,
    validate_params,
)

ROOT = Path(__file__).resolve().parents[1]

#: a valid configuration of each class (the probes change one setting at a time)
VALID = {
    "FBS": dict(outcome="y"), "FBP": dict(outcome="y"), "PBP": dict(outcome="y"),
    "quantile": dict(variables=["y"], bounds={"y": (0, 1)}),
    "mixture": dict(outcome="y"), "nb": dict(outcome="y"),
    "sequential": dict(variables=[{"name": "y", "type": "continuous"}]),
    "AIM": dict(variables=["y"]), "MST": dict(variables=["y"]),
}
#: the same as [synthesizer] keys of a release config
CONFIG = {
    "FBS": {"outcome": "y", "target_epsilon": 10.0}, "FBP": {"outcome": "y"},
    "PBP": {"outcome": "y"},
    "quantile": {"variables": ["y"], "epsilon": 1.0, "init": {"bounds": {"y": [0, 1]}}},
    "mixture": {"outcome": "y"}, "nb": {"outcome": "y"},
    "sequential": {"init": {"variables": [{"name": "y", "type": "continuous"}]}},
    "AIM": {"variables": ["y"], "epsilon": 1.0}, "MST": {"variables": ["y"], "epsilon": 1.0},
}


def _probes(constraint) -> list:
    """Values just outside one constraint (and of the wrong kind)."""
    c = _as_constraint(constraint)
    if c is None:
        return [object()]
    if isinstance(c, Interval):
        out = [math.nan, True, "1", object()]
        step = 1 if c.kind == "integer" else 1e-9
        if c.low is not None:
            out.append(c.low if c.closed in ("right", "neither") else c.low - step)
        if c.high is not None:
            out.append(c.high if c.closed in ("left", "neither") else c.high + step)
        if c.kind == "integer":
            out += [1.5, 2.0]
        else:
            out.append(math.inf)
        return out
    if isinstance(c, Options):
        return ["not-an-option", "", 1, object()]
    if isinstance(c, Columns):
        return ["", ["a", 1], 3, object()]
    return [object(), 1j]


def _cases() -> list[tuple[str, str, object]]:
    """(method, setting, value) for every value that violates every constraint of a setting."""
    out = []
    seen = set()
    for method in SYNTHESIZERS:
        cls = synth_class(method)
        for name, allowed in constraints_of(cls).items():
            for c in allowed:
                for v in _probes(c):
                    if any(_meets(_as_constraint(a), v) for a in allowed):
                        continue
                    ident = (method, name, repr(v) if not isinstance(v, object) or isinstance(
                        v, (int, float, str, list, complex)) else type(v).__name__)
                    if ident not in seen:
                        seen.add(ident)
                        out.append((method, name, v))
    return out


CASES = _cases()


def _id(case) -> str:
    method, name, v = case
    shown = repr(v) if isinstance(v, (int, float, str, list, complex)) else type(v).__name__
    return f"{method}-{name}-{shown}"


# ------------------------------------------------------------------------------ the tables
@pytest.mark.parametrize("method", SYNTHESIZERS)
def test_every_setting_has_a_constraint(method):
    """A setting added to a constructor without a constraint fails here (and in fit)."""
    cls = synth_class(method)
    params = set(inspect.signature(cls.__init__).parameters) - {"self"}
    table = set(constraints_of(cls))
    aliases = aliases_of(cls)
    assert params - set(aliases) == table, (params - set(aliases) - table, table - params)
    assert set(aliases.values()) <= table  # an alias maps to a declared setting
    for old in aliases:  # and stays in the signature, defaulting to "not given"
        assert inspect.signature(cls.__init__).parameters[old].default == DEPRECATED


@pytest.mark.parametrize("method", SYNTHESIZERS)
def test_valid_settings_and_defaults_pass(method):
    cls = synth_class(method)
    syn = cls(**VALID[method])
    assert syn.check_params()  # the defaults meet their own constraints
    for name, allowed in constraints_of(cls).items():  # closed interval ends are allowed
        for c in map(_as_constraint, allowed):
            if isinstance(c, Interval) and c.low is not None and c.closed in ("both", "left"):
                syn.set_params(**{name: c.low if c.kind == "integer" else float(c.low)})
                validate_params(cls, {name: getattr(syn, name)})
        syn.set_params(**{name: cls(**VALID[method]).get_params()[name]})


def test_probes_cover_every_setting():
    covered = {(m, n) for m, n, _ in CASES}
    for method in SYNTHESIZERS:
        for name in constraints_of(synth_class(method)):
            assert (method, name) in covered, (method, name)


@pytest.mark.parametrize("case", CASES, ids=[_id(c) for c in CASES])
def test_every_constraint_refuses_a_wrong_value_naming_the_setting(case):
    method, name, value = case
    cls = synth_class(method)
    syn = cls(**{**VALID[method], name: value})
    with pytest.raises(ParameterError) as err:
        syn.check_params()
    msg = str(err.value)
    assert err.value.param == name
    assert msg.startswith(f"{name}=") and cls.__name__ in msg and "Fix: correct" in msg, msg
    assert f"{name} must be {describe(constraints_of(cls)[name])}" in msg


@pytest.mark.parametrize("case", CASES, ids=[_id(c) for c in CASES])
def test_the_release_config_goes_through_the_same_validator(case):
    """The same wrong value in [synthesizer] init is refused naming synthesizer.init.<key>."""
    method, name, value = case
    syn = {"method": method, **CONFIG[method]}
    syn["init"] = {**syn.get("init", {}), name: value}
    if name == "random_state":
        syn["init"].pop(name)
        syn["seed"] = value
    with pytest.raises(ConfigError) as err:
        _construct(method, syn)
    key = "synthesizer.seed" if name == "random_state" else f"synthesizer.init.{name}"
    assert str(err.value).startswith(f"{key}="), str(err.value)


def test_fit_validates_before_any_use_of_the_data():
    """A refused setting stops fit before the data are read (and is not counted as a fit)."""
    from surveysynth.synth import FBS

    syn = FBS("y", chains=0)
    with pytest.raises(ParameterError, match=r"chains=0 is not valid for FBS.*integer >= 1"):
        syn.fit("not a design")  # the design is never looked at
    assert not hasattr(syn, "fits_") and not hasattr(syn, "ledger_")


def test_config_top_level_keys_are_checked_by_the_class_tables():
    raw = {"input": {"path": "x.csv"}, "design": {}, "output": {"folder": "out"},
           "synthesizer": {"method": "FBS", "outcome": "y", "target_epsilon": 10.0, "m": 0}}
    with pytest.raises(ConfigError, match=r"^synthesizer\.m=0 is not valid for FBS.*integer "
                                          r">= 1.*Fix: correct synthesizer\.m"):
        check_keys(raw)
    raw["synthesizer"].update(m=3, target_epsilon=-1.0)
    with pytest.raises(ConfigError, match=r"^synthesizer\.target_epsilon=-1\.0 .*> 0"):
        check_keys(raw)
    raw["synthesizer"].update(target_epsilon=10.0, seed="secret")
    with pytest.raises(ConfigError, match=r"^synthesizer\.seed='secret'"):
        check_keys(raw)
    raw["synthesizer"].pop("seed")
    assert check_keys(raw) == "FBS"


# ------------------------------------------------------------------------------ the validator
def test_intervals_and_their_ends():
    pos = Interval("number", 0, None, closed="neither")
    assert not pos.ok(0) and pos.ok(1e-300) and not pos.ok(math.inf) and not pos.ok(math.nan)
    unit = Interval("number", 0, 1, closed="neither")
    assert not unit.ok(0.0) and not unit.ok(1.0) and unit.ok(0.5)
    closed = Interval("number", 0, 1)
    assert closed.ok(0) and closed.ok(1) and not closed.ok(1.0000001)
    count = Interval("integer", 1, None)
    assert count.ok(1) and not count.ok(0) and not count.ok(True) and not count.ok(2.0)
    import numpy as np

    assert count.ok(np.int64(3)) and Interval("number").ok(np.float32(0.5))
    assert describe([None, pos]) == "None or a number > 0"
    assert describe([Options("a", "b")]) == "one of 'a', 'b'"
    assert describe([unit]) == "a number in (0, 1)"
    assert describe([count]) == "an integer >= 1"


def test_a_class_without_a_table_is_not_checked():
    from surveysynth.synth.base import Synthesizer

    class Mine(Synthesizer):
        def __init__(self, k: int = 1) -> None:
            self.k = k

    assert Mine(k="anything").check_params() == {"k": "anything"}


# ------------------------------------------------------------------------------ renamed names
def test_loglik_is_a_deprecated_alias_of_log_lik():
    from surveysynth.synth import FBP, FBS

    syn = FBS("y", loglik="stan")
    with pytest.warns(DeprecationWarning, match=r"'loglik' is deprecated.*use 'log_lik'"):
        params = syn.check_params()
    assert params["log_lik"] == "stan" and "loglik" not in params
    assert syn._param("log_lik") == "stan"  # what fit reads  # noqa: SLF001
    assert FBS("y", log_lik="stan")._param("log_lik") == "stan"  # noqa: SLF001
    assert FBS("y")._param("log_lik") == "auto"  # noqa: SLF001
    with pytest.warns(DeprecationWarning), pytest.raises(ParameterError, match="bad"):
        FBP("y", loglik="bad").check_params()  # the old name's value is checked as log_lik
    with pytest.warns(DeprecationWarning), pytest.raises(
            ParameterError, match=r"loglik='stan' and log_lik='numpy' both given.*keep 'log_lik'"):
        FBS("y", loglik="stan", log_lik="numpy").check_params()
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # the new name: no warning
        FBS("y", log_lik="stan").check_params()
    assert FBS("y", loglik="stan").clone().loglik == "stan"  # clone keeps what was given


def test_config_weights_is_a_deprecated_alias_of_alpha():
    raw = {"input": {"path": "x.csv"}, "design": {}, "output": {"folder": "out"},
           "synthesizer": {"method": "mixture", "outcome": "y", "known": ["g"], "r": 0.2,
                           "weights": "marginal"}}
    before = {k: dict(v) for k, v in raw.items()}
    with pytest.warns(DeprecationWarning, match=r"synthesizer\.weights is deprecated.*"
                                                r"synthesizer\.alpha"):
        assert check_keys(raw) == "mixture"
    with pytest.warns(DeprecationWarning):
        new = upgrade(raw)
    assert raw == before  # the caller's config is not changed
    assert new["synthesizer"]["alpha"] == "marginal" and "weights" not in new["synthesizer"]
    assert _settings("mixture", new["synthesizer"])["alpha"] == "marginal"
    with pytest.warns(DeprecationWarning), pytest.raises(ConfigError, match="choose one of"):
        check_keys({**raw, "synthesizer": {**raw["synthesizer"], "weights": "everything"}})
    both = {**raw, "synthesizer": {**raw["synthesizer"], "alpha": "pairwise"}}
    with pytest.raises(ConfigError, match=r"weights and synthesizer\.alpha both given"):
        check_keys(both)
    raw["synthesizer"]["alpha"] = raw["synthesizer"].pop("weights")
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert check_keys(raw) == "mixture"


def test_shipped_examples_use_the_new_names():
    from surveysynth.release_config import example_config

    for method in SYNTHESIZERS:
        text = example_config(method)
        assert "\nweights = " not in text.split("[synthesizer]")[1].split("[[")[0], method
        assert "loglik" not in text, method
    assert 'alpha = "pairwise"' in example_config("mixture")


def test_no_old_names_in_the_docs():
    for page in [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]:
        text = page.read_text()
        assert 'loglik="' not in text and "loglik = " not in text, page
        assert "synthesizer.weights" not in text or "deprecated" in text, page


# ------------------------------------------------------------------------------ the page
def test_reference_page_is_generated_from_the_tables():
    page = (ROOT / "docs" / "release-config.md").read_text()
    sys.path.insert(0, str(ROOT / "scripts"))
    try:
        import release_config_doc
    finally:
        sys.path.pop(0)
    assert release_config_doc.main(["--check"]) == 0, "run python scripts/release_config_doc.py"
    assert page == render_markdown() + "\n"
    for method in SYNTHESIZERS:  # every setting's allowed values, as the validator says them
        for s in synth_settings(method):
            assert f"| `{s['default']}` | {s['allowed'].replace('|', chr(92) + '|')} |" in page, (
                method, s["name"])
    assert "| `loglik` | `'deprecated'` | deprecated: use `log_lik` |" in page
    assert "| `weights` | deprecated: see `alpha` |" in page
    for key in SECTIONS["synthesizer"].keys:
        if key.setting:
            assert key.setting in constraints_of(synth_class((key.methods or SYNTHESIZERS)[0]))


# ------------------------------------------------------------------------------ same draws
def test_validation_moves_change_no_draw():
    """A seeded quantile release (numpy only, no Stan) gives the bytes it gave before the
    settings moved into the tables (recorded on main at 9cbe78d): validation consumes no
    randomness and changes no normalised setting. The Stan synthesizers were compared the same
    way, once, on this machine (FBS, FBP, PBP, nb, mixture, sequential: identical; the report)."""
    import hashlib

    import surveysynth as ss
    from surveysynth.release_config import example_data

    df = example_data(n=120, seed=3)
    syn = ss.synth.QuantileSynthesizer(variables="salary", bounds={"salary": (0, 5e5)},
                                       epsilon=5, m=2, random_state=7, progress=False)
    rel = syn.fit(ss.SurveyDesign(df)).release()
    got = [hashlib.sha256(d.data.to_csv(index=False).encode()).hexdigest()[:16]
           for d in rel.designs]
    assert got == ["5f5488e872c84798", "efda48e06d40e3be"]


# ------------------------------------------------------------------------------ free functions
def _functions():
    import numpy as np

    from surveysynth.synth import private_quantiles as pq

    x = np.array([1.0, 2.0, 3.0, 4.0])
    return {  # a valid call of each public function with a constraint table
        "joint_exp_quantiles": (pq.joint_exp_quantiles, dict(
            data=x, quantiles=[0.5], epsilon=1.0, lower=0.0, upper=5.0, random_state=1)),
        "joint_exp_tables": (pq.joint_exp_tables, dict(
            data=x, quantiles=[0.5], epsilon=1.0, lower=0.0, upper=5.0)),
        "tail_transform": (pq.tail_transform, dict(lower=0.0, upper=5.0, transform="log")),
        "dp_theil_sen_slope": (pq.dp_theil_sen_slope, dict(
            x=x, y=x, epsilon=1.0, bound=2.0, rng=np.random.default_rng(1))),
    }


def _function_cases():
    out = []
    for fname, (fn, _) in _functions().items():
        for arg, allowed in constraints_of(fn).items():
            for c in allowed:
                for v in _probes(c):
                    if not any(_meets(_as_constraint(a), v) for a in allowed):
                        out.append((fname, arg, v))
    return out


FUNCTION_CASES = _function_cases()


@pytest.mark.parametrize("case", FUNCTION_CASES, ids=[_id(c) for c in FUNCTION_CASES])
def test_public_functions_go_through_the_same_validator(case):
    fname, arg, value = case
    fn, valid = _functions()[fname]
    fn(**valid)  # the valid call runs
    with pytest.raises(ParameterError) as err:
        fn(**{**valid, arg: value})
    assert str(err.value).startswith(f"{arg}=") and f"valid for {fname}" in str(err.value)


def test_private_quantile_functions_declare_their_tables():
    assert set(constraints_of(_functions()["joint_exp_quantiles"][0])) == {
        "epsilon", "transform", "scale", "center", "grid_bits"}
    assert "epsilon" in constraints_of(_functions()["dp_theil_sen_slope"][0])
