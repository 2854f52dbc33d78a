"""Reference ASMDs from Meta's balance 0.23.0 for tests/test_propensity_nonresponse.py.

How to run (balance's plotting dependencies are not needed for ``asmd`` and are stubbed):

    pip download balance==0.23.0 --no-deps -d /tmp/bal && cd /tmp/bal && unzip -q balance-*.whl
    cd <worktree> && PYTHONPATH=$PWD:/tmp/bal /work/main/.venv/bin/python \
        tests/reference/balance/make_asmd_reference.py

Reports "balance 0.23.0". Writes asmd_apistrat.json beside this script: the simulated
response flags, and balance's ``asmd(respondents, full sample, weights, base weights,
std_type="target")`` before (base weights) and after each adjustment (classes=5, None).
"""

import json
import sys
import types
from pathlib import Path

for name in ("IPython", "IPython.lib", "IPython.lib.display", "IPython.display", "seaborn",
             "plotly", "plotly.graph_objs", "plotly.io", "plotly.graph_objects",
             "plotly.express", "plotly.subplots", "plotly.offline", "seaborn.axisgrid"):
    mod = types.ModuleType(name)
    mod.__path__ = []
    mod.__getattr__ = lambda k: (_ for _ in ()).throw(AttributeError(k)) if k.startswith(
        "__") else object
    sys.modules[name] = mod

import balance  # noqa: E402
import numpy as np  # noqa: E402
from balance.stats_and_plots.weighted_comparisons_stats import asmd  # noqa: E402

import surveysynth as ss  # noqa: E402
import tests.test_propensity_nonresponse as T  # noqa: E402
from surveysynth.datasets import load_api  # noqa: E402

a = load_api("apistrat")
rng = np.random.default_rng(20261127)
eta = 1.2 - 0.035 * (a["meals"] - 50) - 0.8 * (a["stype"] == "H") + 0.004 * (a["api99"] - 630)
a["resp"] = (rng.random(a.shape[0]) < 1 / (1 + np.exp(-eta))).astype(int)
d = ss.SurveyDesign(a, strata="stype", weights="pw", fpc="fpc")
X = a[["meals", "api99", "stype"]].astype({"stype": str}).reset_index(drop=True)
r = a["resp"].to_numpy() == 1
out = {"balance_version": balance.__version__, "resp": a["resp"].tolist()}
w0 = d.full_weights
out["before"] = asmd(X[r].reset_index(drop=True), X, w0[r], w0, std_type="target").to_dict()
for cl in (5, None):
    w1 = T.propensity_adjust(d, "resp == 1", T.RHS, classes=cl).full_weights
    out[f"after_{cl}"] = asmd(X[r].reset_index(drop=True), X, w1[r], w0,
                              std_type="target").to_dict()
print("balance", balance.__version__)
(Path(__file__).parent / "asmd_apistrat.json").write_text(json.dumps(out, indent=1))
