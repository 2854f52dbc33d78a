"""The engine registry and the estimation core's import boundary (issue 16).

* The core imports with rpy2, samplics, Stan and r_bridge blocked, and loads nothing above it.
* Engines are found by name through the registry (entry points + ``register_engine``); an
  unknown name and a known-but-not-installed engine give different errors.
* Every installed engine agrees with the native reference (and so with R, whose parity the
  native engine is tested for in test_design_r_parity.py / test_r_engine.py).
"""

from __future__ import annotations

import subprocess
import sys
import textwrap
from typing import Any

import numpy as np
import pandas as pd
import pytest

import surveysynth as ss
from surveysynth.engines import (
    ENGINES,
    Engine,
    EngineNotAvailableError,
    get_engine,
    list_engines,
    refresh_engines,
    register_engine,
)
from tests.conftest import assert_rel


def test_core_imports_with_optional_engines_blocked_and_loads_nothing_above_it():
    code = textwrap.dedent("""
        import sys
        for name in ("rpy2", "samplics", "stan", "httpstan", "r_bridge"):
            sys.modules[name] = None  # as if not installed
        import numpy as np, pandas as pd
        import surveysynth as ss
        from surveysynth import design, estimate, replicate_design, sampling, tables, combine
        from surveysynth.variance import taylor, replicate_weights
        df = pd.DataFrame({"y": np.arange(12.0), "s": list("abc") * 4, "w": np.full(12, 3.0)})
        d = ss.SurveyDesign(df, strata="s", weights="w")
        assert abs(d.mean("y")["estimate"].iloc[0] - 5.5) < 1e-12
        assert abs(d.jackknife().total("y")["estimate"].iloc[0] - 198.0) < 1e-9
        ss.tabulate(d, rows="s", value="y")
        above = [m for m in sys.modules if m.startswith(("surveysynth.synth",
                 "surveysynth.privacy", "surveysynth.release", "surveysynth.pipeline"))]
        assert not above, above
        try:
            d.mean("y", engine="r")
        except ImportError as e:
            assert "known but not installed" in str(e), str(e)
        else:
            raise AssertionError("engine='r' ran without r_bridge")
        print("OK")
    """)
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         timeout=120)
    assert out.returncode == 0 and out.stdout.strip() == "OK", out.stderr


def test_registry_lists_first_party_engines():
    engines = list_engines()
    assert {"native", "samplics", "r"} <= set(engines)
    assert engines["native"] is ENGINES["native"][1]
    assert engines["r"].__module__ == "r_bridge.engine"  # found through the entry point
    for cls in engines.values():
        assert cls.available and cls.description


def test_unknown_and_not_installed_engines_are_different_errors():
    d = ss.SurveyDesign(pd.DataFrame({"y": [1.0, 2.0, 3.0, 4.0]}), weights=np.ones(4))
    with pytest.raises(ValueError, match="engine='nosuch' is unknown.*'native'"):
        d.mean("y", engine="nosuch")

    class Missing(Engine):
        name = "needs-missing"
        description = "needs a module that is not installed"
        required_module = "surveysynth_no_such_module_for_tests"
        install_hint = "pip install surveysynth-no-such-extra"

    register_engine(Missing)
    try:
        assert "needs-missing" not in list_engines()
        with pytest.raises(EngineNotAvailableError,
                           match="needs 'surveysynth_no_such_module_for_tests'.*no-such-extra"):
            d.mean("y", engine="needs-missing")
    finally:
        del ENGINES["needs-missing"]
        refresh_engines()


def test_registered_engine_is_called_through_the_public_api(api):
    """A third-party engine built on the public domain API gives the native numbers; the
    registry dispatches to it by name (and a wrong design kind is refused)."""
    calls: list[str] = []

    class Public(Engine):
        name = "public-api"
        description = "domain ratios through the public design API"
        design_kinds = ("taylor",)

        def estimate(self, design: Any, call: dict, *, dom, D, by=None, by_df=None,
                     na_rm=False, return_ci=False):
            calls.append(call["stat"])
            Y = np.column_stack([np.nan_to_num(design.numeric_values(v))
                                 for v in call["variables"]])
            X = None if call["stat"] == "total" else np.ones_like(Y)
            est, var, _ = design.domain_ratios(Y, X, dom, D)
            return est, np.sqrt(var)

    register_engine(Public)
    try:
        d = ss.SurveyDesign(api["apistrat"], strata="stype", weights="pw", fpc="fpc")
        for stat in ("mean", "total"):
            ours = getattr(d, stat)(["api00", "enroll"], by="cname", engine="public-api")
            ref = getattr(d, stat)(["api00", "enroll"], by="cname")
            pd.testing.assert_frame_equal(ours, ref)
        assert calls == ["mean", "total"]
        with pytest.raises(ValueError, match="does not estimate replicate designs"):
            d.jackknife().mean("api00", engine="public-api")
    finally:
        del ENGINES["public-api"]
        refresh_engines()
    with pytest.raises(ValueError, match="unknown"):
        get_engine("public-api")


@pytest.mark.parametrize("name", sorted(list_engines()))
def test_every_installed_engine_matches_native(api, name):
    """Parity over list_engines(): each engine against the native reference, on the design
    kinds it declares (linearization: stratified with fpc; replicate: JKn of it)."""
    d = ss.SurveyDesign(api["apistrat"], strata="stype", weights="pw", fpc="fpc")
    kinds = get_engine(name).design_kinds
    designs = [d] if "taylor" in kinds else []
    if "replicate" in kinds:
        designs.append(d.jackknife())
    assert designs
    for des in designs:
        for stat, args in (("mean", ("api00",)), ("total", ("enroll",)),
                           ("ratio", ("api00", "api99"))):
            ours = getattr(des, stat)(*args, by="stype", engine=name)
            ref = getattr(des, stat)(*args, by="stype")
            assert_rel(ours["estimate"], ref["estimate"], 1e-9, f"{name} {stat} estimate")
            assert_rel(ours["se"], ref["se"], 1e-9, f"{name} {stat} se")
