"""The ```python blocks of the docs/ pages run as written (a new user's walk, brief I).

Each page's blocks run in order in one namespace, in a temporary folder, after a prelude that
makes the inputs the page takes as given (``lib``, ``frames``, ``nwtco``, a ``design``): the
user's own data, built here from R's example data or small simulated frames. The blocks
themselves are not edited, except where a page names a resource no test machine has (a
cluster address, an absolute data folder): then the replacement is listed in ``REWRITE``, and
each listed text must still be on the page. Pages whose examples are long Stan studies are in
``SKIP`` with the reason, pages of a few minutes run in the slow tier (``SLOW``); a new page
with a ```python block must be added to PRELUDE or SKIP (test_every_page_is_run_or_skipped),
so no page's example goes unrun silently.
"""

from __future__ import annotations

import os
import re
import shutil
import warnings
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
DOCS = ROOT / "docs"

pytestmark = pytest.mark.skipif(shutil.which("Rscript") is None,
                                reason="R is not installed (load_api reads R's api data)")

_API = """
import numpy as np
import pandas as pd
import surveysynth as ss
from surveysynth.datasets import load_api
"""

#: what each page takes as given (its reader's data), made before its blocks run
PRELUDE: dict[str, str] = {
    "analysis.md": _API + """
from surveysynth.privacy.record import build_record
_s = load_api("apistrat")
fit0 = ss.svyglm("sch.wide ~ ell", ss.SurveyDesign(_s, strata="stype", weights="pw", fpc="fpc"),
                 family="binomial")
newdata = _s.head(5)
# a release with the page's columns: three shifted copies of apistrat (the combining rule runs)
release = ss.SyntheticRelease(
    [ss.SurveyDesign(_s.assign(api00=_s["api00"] + k), strata="stype", weights="pw", fpc="fpc")
     for k in range(3)], kind="full",
    privacy=build_record("none", "test copy", m=3, epsilon=None, seeded=True, notes=["test"]))
""",
    "calibration.md": _API + """
apiclus1 = load_api("apiclus1")
pop_types = pd.DataFrame({"stype": ["E", "H", "M"], "Freq": [4421, 755, 1018]})
pop_schwide = pd.DataFrame({"sch.wide": ["No", "Yes"], "Freq": [1072, 5122]})
""",
    "dask.md": _API + """
import os
os.makedirs("census", exist_ok=True)
os.makedirs("acs", exist_ok=True)
_r = np.random.default_rng(1)
for i in range(2):
    n = 100
    pd.DataFrame({"psu": np.arange(n) + 1000 * i, "stratum": np.repeat([2 * i, 2 * i + 1], n // 2),
                  "w": 10.0, "N": 1000.0, "income": _r.gamma(2, 2e4, n),
                  "hours": _r.integers(10, 50, n).astype(float), "region": _r.choice(["N", "S"], n),
                  "sex": _r.choice(["f", "m"], n), "tenure": _r.choice(["own", "rent"], n)}
                 ).to_parquet(f"census/part{i}.parquet")
    a = pd.DataFrame({"PWGTP": 10.0, "income": _r.gamma(2, 2e4, n), "state": _r.choice(["A", "B"], n)})
    for k in range(1, 81):
        a[f"PWGTP{k}"] = 10.0 * _r.uniform(0.5, 1.5, n)
    a.to_parquet(f"acs/part{i}.parquet")
""",
    "db_designs.md": _API + """
import sqlite3
_r = np.random.default_rng(1)
n = 400
_df = pd.DataFrame({"psu": np.arange(n), "stratum": np.repeat([1, 2], n // 2), "w": 2500.0,
                    "N": 5e5, "income": _r.gamma(2, 2e4, n), "age": _r.integers(18, 90, n),
                    "region": _r.choice(["C", "N", "S"], n)})
with sqlite3.connect("survey.db") as _c:
    _df.to_sql("persons", _c, index=False)
""",
    "kng.md": "",
    "marginal_dp.md": _API + 'apistrat = load_api("apistrat")\n',
    "dp_tables.md": _API + """
from surveysynth.datasets import sdr_population, sdr_sample
design = sdr_sample(sdr_population(seed=1), n=1000, seed=2)
""",
    "imputation.md": _API + """
from r_bridge import r_session, r_to_pandas
from tests.test_imputation_design import R_SETUP
with r_session("survey") as (ro, _):
    ro.r(R_SETUP)
    frames = [r_to_pandas(ro.r(f"mi_all$imputations[[{i}]]")) for i in range(1, 6)]
    ro.r('data(pisamaths, package="mitools")')
    pisa = r_to_pandas(ro.r("pisamaths"))
frames = [f.assign(y=(f["drkfre"] == "Non drinker").astype(float), x=f["sex"]) for f in frames]
pop = {"(Intercept)": 1000, "sex": 500}
""",
    "multiframe.md": _API + """
import json
_REF = json.loads((ROOT / "tests/reference/r_survey45/multiframe.json").read_text())
DatA = pd.DataFrame(_REF["DatA"]).astype({"Size": "float64"})
DatB = pd.DataFrame(_REF["DatB"]).astype({"Size": "float64"})
PiklA, PiklB = np.array(_REF["PiklA"]), np.array(_REF["PiklB"])
""",
    "pps_without_replacement.md": _API + """
_r = np.random.default_rng(1)
n = 20
df = pd.DataFrame({"psu": np.arange(n), "ssu": np.arange(n), "st": np.repeat(["A", "B"], n // 2),
                   "pi": _r.uniform(0.05, 0.2, n), "f2": 0.5, "y": _r.normal(size=n)})
_p, _s = df["pi"].to_numpy(), df["st"].to_numpy()
joint = np.outer(_p, _p) * np.where(_s[:, None] == _s[None, :], 0.98, 1.0)
np.fill_diagonal(joint, _p)
""",
    "r_bridge.md": _API + """
design = ss.SurveyDesign(load_api("apistrat"), strata="stype", weights="pw", fpc="fpc")
_r = np.random.default_rng(1)
size, strata = _r.uniform(1, 10, 40), np.repeat(["a", "b"], 20)
""",
    "replicate.md": _API + """
apiclus2 = load_api("apiclus2")
_s = load_api("apistrat")
d2 = ss.SurveyDesign(_s.assign(st=np.arange(len(_s)) // 2), strata="st", weights="pw")
_r = np.random.default_rng(1)
df = pd.DataFrame({"PWGTP": 10.0, "y": _r.normal(size=50)})
for k in range(1, 81):
    df[f"PWGTP{k}"] = 10 * _r.uniform(0.5, 1.5, 50)
""",
    "tables.md": _API + """
_s = load_api("apistrat")
designs = [ss.SurveyDesign(_s.assign(api00=_s["api00"] + k), strata="stype", weights="pw",
                           fpc="fpc") for k in range(3)]
q = np.array([[1.0, 2.0], [1.1, 2.1], [0.9, 2.2]])
u = np.full((3, 2), 0.1)
""",
    "twophase.md": _API + """
from r_bridge import r_session, r_to_pandas
with r_session("survey") as (ro, _):
    ro.r("suppressMessages(library(survival)); data(nwtco)")
    nwtco = r_to_pandas(ro.r("nwtco"))
nwtco["rsi"] = (nwtco["rel"].astype(str) + "." + nwtco["stage"].astype(str) + "."
                + nwtco["instit"].astype(str))
""",
    "weighting.md": _API + """
lib = pd.read_csv(ROOT / "tests/reference/svrep/library_stsys_sample.csv",
                  dtype={"SAMPLING_STRATUM": str})
# a cluster sample of schools with a response flag (vignettes/agency_weighting.py draws one)
sample = load_api("apiclus1").rename(columns={"pw": "w"})
sample["sel_order"] = sample["dnum"].rank(method="dense").astype(int)
sample["resp"] = (np.random.default_rng(1).random(len(sample)) < 0.7).astype(int)
""",
}

#: pages not run here, with the reason
SKIP: dict[str, str] = {
    "pseudo_posterior.md": "long Stan study: FBS with default chains and tuning on 1000 records "
                           "(the README's FBS release runs the same in the slow tier)",
    "identification_risk.md": "long Stan study: two mixture fits (K = 6, m = 20) on 6208 records",
    "sequential.md": "long Stan study: six sequential models with default chains",
}

#: pages run in the slow tier only, with their default-tier counterparts
SLOW: dict[str, str] = {
    "kng.md": "KNG sandwich, 3 variables on 5000 records (154 s under load); default tier: the "
              "README's quantile synthesis (test_readme_python.py) and tests/test_kng.py",
    "marginal_dp.md": "MST through OpenDP and the JAX model fit (282 s under load); default "
                      "tier: MST's and AIM's pieces in tests/test_marginal_dp.py",
}

#: (text on the page, what runs instead): resources a test machine does not have
REWRITE: dict[str, list[tuple[str, str]]] = {
    "dask.md": [
        ('"/data/census/"', '"census/"'),
        # one in-process worker in the default tier (the page's two worker processes: slow tier)
        ('LocalCluster(n_workers=2, memory_limit="2GB")',
         'LocalCluster(n_workers=1, processes=False, dashboard_address=":0")'),
        ('weights="w", n_workers=2, memory_limit="3GiB")', 'weights="w", client=client)'),
    ],
}

#: blocks naming a remote cluster or a cloud bucket: shown, not run
REMOTE = ("tcp://A:8786", "s3://")


def _pages() -> dict[str, list[str]]:
    out = {}
    for page in sorted(DOCS.glob("*.md")):
        blocks = re.findall(r"^```python\n(.*?)^```", page.read_text(), flags=re.S | re.M)
        if blocks:
            out[page.name] = blocks
    return out


PAGES = _pages()


def test_every_page_is_run_or_skipped():
    assert set(PAGES) == set(PRELUDE) | set(SKIP), (
        "a docs page with a ```python block is neither run (PRELUDE) nor skipped with a reason "
        f"(SKIP): {sorted(set(PAGES) ^ (set(PRELUDE) | set(SKIP)))}")
    assert not set(PRELUDE) & set(SKIP) and set(SLOW) <= set(PRELUDE)


def _run(page: str, tmp: Path, rewrite: bool = True) -> None:
    ns: dict = {"__name__": "__docs__", "ROOT": ROOT}
    cwd = os.getcwd()
    os.chdir(tmp)
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            exec(compile(PRELUDE[page], f"prelude of {page}", "exec"), ns)  # noqa: S102
            for i, block in enumerate(PAGES[page], start=1):
                if any(r in block for r in REMOTE):
                    continue
                for old, new in REWRITE.get(page, []) if rewrite else []:
                    block = block.replace(old, new)
                exec(compile(block, f"docs/{page} block {i}", "exec"), ns)  # noqa: S102
    finally:
        if hasattr(ns.get("client"), "close"):  # the page's dask client and its cluster
            ns["client"].close()
            ns["client"].cluster.close()
        os.chdir(cwd)


def test_rewrites_are_on_their_pages():
    for page, pairs in REWRITE.items():
        text = "".join(PAGES[page])
        for old, _ in pairs:
            assert old in text, f"docs/{page} no longer has {old!r}: update REWRITE"


@pytest.mark.parametrize("page", [pytest.param(p, marks=[pytest.mark.slow] if p in SLOW else [])
                                  for p in sorted(PRELUDE)])
def test_docs_page_examples_run(page, tmp_path):
    if page == "dask.md":
        pytest.importorskip("distributed")
    _run(page, tmp_path)


@pytest.mark.slow
def test_dask_page_runs_with_its_worker_processes(tmp_path):
    """docs/dask.md with the LocalCluster it shows (two worker processes); the default tier
    runs the same blocks on one in-process worker (test_docs_page_examples_run)."""
    pytest.importorskip("distributed")
    script = tmp_path / "snippet.py"
    blocks = [b.replace('"/data/census/"', '"census/"') for b in PAGES["dask.md"]
              if not any(r in b for r in REMOTE)]
    body = PRELUDE["dask.md"] + "\n".join(blocks)
    script.write_text(f"from pathlib import Path\nROOT = Path({str(ROOT)!r})\n"
                      "if __name__ == '__main__':\n"
                      + "".join(f"    {ln}\n" for ln in body.splitlines()))
    import subprocess
    import sys

    env = dict(os.environ, PYTHONPATH=str(ROOT) + os.pathsep + os.environ.get("PYTHONPATH", ""))
    r = subprocess.run([sys.executable, str(script)], cwd=tmp_path, env=env, capture_output=True,
                       text=True, timeout=600)
    assert r.returncode == 0, r.stdout + r.stderr
