"""The public folder holds only what the budget covers or the record declares (issue 35).

One small release per family (FBS, FBP, PBP, Sequential, quantile, mixture through the release
pipeline; Laplace tables through ``LaplaceTables.save``), each made once per session, and a
scanner over its ``public/`` folder that knows the confidential numbers of the fit (captured
from the synthesizer the pipeline ran: no mock, the real fit) and checks that every one is
absent unless the record lists it under ``published_without_budget``:

* no seed (neither the key nor the curator's value), no tuning constant c, no per-record risk
  weight alpha_i;
* no achieved bound Delta_alpha of a tuned fit (full precision, 6 decimals, or the 4 digits a
  text would print), nor the epsilon computed from it; the public target is what is published;
* a table's ``n_unweighted`` that equals the confidential per-cell record counts is declared
  (by the table's name) in ``published_without_budget``;
* every record (the release manifest and the pipeline's manifest) has a ``guarantee_class`` that
  agrees with ``differentially_private``.

On the main branch before issue 35 this fails (the FBS folder held the achieved Delta_alpha at
full precision and undeclared per-cell counts, and no record had a guarantee class).
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import pytest

from surveysynth import pipeline
from surveysynth.datasets import sdr_population, sdr_sample

pytestmark = [pytest.mark.filterwarnings("ignore::UserWarning"),
              pytest.mark.filterwarnings("ignore::RuntimeWarning")]

SEED = 918273  # the curator's seed: must not reach public/
FAST = "chains = 2, draws = 150, warmup = 150, allow_unconverged = true"
TABLE = """
[[tables]]
name = "mean_salary"
rows = "field"
cols = "gender"
value = "salary"
stat = "mean"
"""


def _pseudo_posterior(method: str, target: float) -> str:
    """FBS / FBP / PBP on the example's salary by field and gender, tuned to ``target``."""
    return f"""method = "{method}"
outcome = "salary"
predictors = ["field", "gender"]
target_lipschitz = {target}
m = 2
population_size = 100000
init = {{ {FAST} }}"""


SYNTH = {
    "FBS": _pseudo_posterior("FBS", 6.0),
    "FBP": _pseudo_posterior("FBP", 6.0),
    "PBP": _pseudo_posterior("PBP", 20.0),
    "sequential": f"""method = "sequential"
target_epsilon = 40.0
m = 2
population_size = 100000
public = ["field", "gender"]
init = {{ {FAST} }}

[[variables]]
name = "salary"
type = "positive"
""",
    "quantile": """method = "quantile"
variables = ["salary"]
epsilon = 2.0
m = 2
population_size = 100000
init = { method = "jointexp", bounds = { salary = [0, 500000] }, quantiles = [0.1, 0.5, 0.9] }""",
    "mixture": f"""method = "mixture"
outcome = "salary"
predictors = ["field", "gender"]
known = ["field", "gender"]
r = 0.2
alpha = "pairwise"
m = 2
population_size = 100000
init = {{ K = 2, categorical = ["field"], {FAST} }}""",
}


def _data() -> pd.DataFrame:
    return sdr_sample(sdr_population(seed=2021), n=400, seed=8).data.copy()


def _run(tmp: Path, method: str) -> dict[str, Any]:
    """Run the release pipeline and keep the fitted synthesizer it ran (a spy on
    fit_and_release: the real pipeline, the real fit)."""
    data = _data()
    weights = "weight"
    if method == "quantile":
        # a quantile synthesis runs within strata and needs weights constant within each
        # (issue 36, D7): each field's mean weight (the PPS weights vary within fields)
        data["wfield"] = data.groupby("field")["weight"].transform("mean")
        weights = "wfield"
    data.to_csv(tmp / "conf.csv", index=False)
    # the sequential config lists [[variables]] after the synthesizer, so tables go before it
    tables = "" if method == "quantile" else TABLE
    synth = SYNTH[method].replace("method =", f"seed = {SEED}\nmethod =", 1)
    cfg = tmp / "release.toml"
    cfg.write_text(f"""
[input]
path = "conf.csv"
[design]
strata = "field"
weights = "{weights}"
[report]
attacks = false
[output]
folder = "release"
{tables}
[synthesizer]
{synth}
""")
    captured: dict[str, Any] = {}
    orig = pipeline.fit_and_release

    def spy(*a, **k):
        out = orig(*a, **k)
        captured["syn"] = out[0]
        return out

    pipeline.fit_and_release = spy
    try:
        out = pipeline.run_release(cfg, quiet=True)
    finally:
        pipeline.fit_and_release = orig
    return {"public": out / "public", "syn": captured["syn"], "data": data,
            "tables": [] if method == "quantile" else [("mean_salary", ["field", "gender"])]}


def _laplace(tmp: Path) -> dict[str, Any]:
    from surveysynth import SurveyDesign
    from surveysynth.privacy import laplace_tables

    data = _data()
    d = SurveyDesign(data, strata="field", weights="weight")
    lap = laplace_tables(d, rows="field", cols="gender", value="salary", epsilon=20.0,
                         seed=SEED)
    out = lap.save(tmp / "laplace")
    return {"public": out / "public", "syn": None, "data": data,
            "tables": [("counts", ["field", "gender"]), ("means", ["field", "gender"])]}


_CACHE: dict[str, dict[str, Any]] = {}


@pytest.fixture(scope="session")
def releases(tmp_path_factory):
    """One release per family, made the first time a test asks for it."""
    def get(method: str) -> dict[str, Any]:
        if method not in _CACHE:
            tmp = tmp_path_factory.mktemp(f"scan-{method}")
            _CACHE[method] = _laplace(tmp) if method == "laplace" else _run(tmp, method)
        return _CACHE[method]
    return get


# ------------------------------------------------------------------------------ the scanner
def _numbers(public: Path) -> set[float]:
    """Every number with a decimal point in public text files and Parquet data (6 decimals)."""
    found: set[float] = set()
    for p in public.rglob("*"):
        if p.suffix == ".parquet":
            frame = pd.read_parquet(p)
            for c in frame.select_dtypes("number"):
                found.update(frame[c].astype(float).round(6).tolist())
        elif p.suffix in (".csv", ".json"):
            for tok in re.findall(r"-?\d+\.\d+(?:e[-+]?\d+)?", p.read_text()):
                found.add(round(float(tok), 6))
    return found


def _text(public: Path) -> str:
    return " ".join(p.read_text() for p in public.rglob("*") if p.suffix in (".csv", ".json"))


def _records(public: Path) -> list[dict[str, Any]]:
    """Every privacy record in the folder (pipeline manifest, release manifest)."""
    out = []
    for p in public.rglob("manifest.json"):
        m = json.loads(p.read_text())
        out.append(m["privacy"])
    return out


def _declared(public: Path) -> str:
    return " ".join(e["item"] for r in _records(public) for e in r["published_without_budget"])


def _keys(obj: Any) -> set[str]:
    if isinstance(obj, dict):
        return set(obj) | set().union(*(_keys(v) for v in obj.values()))
    if isinstance(obj, list):
        return set().union(*(_keys(v) for v in obj)) if obj else set()
    return set()


def _confidential_counts(data: pd.DataFrame, by: list[str]) -> pd.Series:
    return data.groupby(by, observed=True).size().rename(index=str)


def scan(rel: dict[str, Any]) -> None:
    """Fail naming the first confidential-derived item in public/ that is neither covered
    by the budget nor declared."""
    public, syn = rel["public"], rel["syn"]
    numbers, text, declared = _numbers(public), _text(public), _declared(public)
    records = _records(public)
    assert records, "no privacy record in public/"
    # the seed: no key, no value
    keys = set().union(*(_keys(json.loads(p.read_text())) for p in public.rglob("*.json")))
    assert not keys & {"seed", "random_state"}, f"public/ has a seed key: {keys}"
    assert str(SEED) not in text, "public/ holds the curator's seed"
    if syn is not None:
        alpha = np.asarray(getattr(syn, "alpha_", []), dtype=float).ravel()
        leaked = (set(np.round(alpha, 6)) - {0.0, 1.0}) & numbers
        assert not leaked, f"public/ holds per-record risk weights alpha: {sorted(leaked)[:3]}"
        c = getattr(syn, "c_", None)
        if c is not None:
            assert round(float(c), 6) not in numbers, "public/ holds the tuning constant c"
        # the achieved bound of a tuned fit (each Sequential step's, and their sum)
        achieved = [getattr(syn, "delta_alpha_", None)]
        achieved += list(getattr(syn, "delta_alpha_steps_", {}).values())
        achieved = [float(a) for a in achieved if a is not None]
        if achieved and "Delta_alpha" not in declared:
            m = records[0]["m"]
            for a in achieved:
                for v in (a, 2 * a, 2 * a * m):
                    assert round(v, 6) not in numbers, (
                        f"public/ holds the achieved bound (or its epsilon) {v!r}, undeclared")
                    short = re.escape(f"{v:.4g}")
                    assert not re.search(rf"(?<![\d.]){short}(?!\d)", text), (
                        f"public/ prints the achieved bound {v:.4g}, undeclared")
    # n_unweighted equal to the confidential per-cell counts must be declared, by table
    for name, by in rel["tables"]:
        files = list(public.rglob(f"{name}.csv"))
        assert files, f"table {name} not in public/"
        tab = pd.read_csv(files[0], comment="#", dtype={v: str for v in by})
        inner = tab[(tab[by] != "All").all(axis=1)].set_index(by)["n_unweighted"]
        conf = _confidential_counts(rel["data"], by)
        inner.index = inner.index.set_levels([lv.astype(str) for lv in inner.index.levels])
        if inner.reindex(conf.index).to_numpy().tolist() == conf.to_numpy().tolist():
            assert re.search(rf"n_unweighted[^.]*{name}|{name}[^.]*n_unweighted|n_unweighted of "
                             "every cell", declared), (
                f"table {name}: n_unweighted equals the confidential record counts per cell "
                f"({conf.to_numpy().tolist()[:5]}...) and is not declared")
    # every record says what kind of promise it makes, and its flag agrees
    for r in records:
        assert "guarantee_class" in r, "a privacy record without guarantee_class"
        assert r["differentially_private"] is r["guarantee_class"].startswith("formal"), r


# ------------------------------------------------------------------------------ the tests
@pytest.mark.parametrize("method", ["FBS", "FBP", "PBP", "sequential", "quantile", "mixture",
                                    "laplace"])
def test_public_folder_holds_only_covered_or_declared(releases, method):
    rel = releases(method)
    scan(rel)
    if method in ("FBS", "FBP", "PBP", "sequential"):
        # tuned fits publish the public target, and the account's total
        rec = json.loads((rel["public"] / "manifest.json").read_text())["privacy"]
        assert rec["facts"]["bound"] == "target"
        assert rec["epsilon"] == pytest.approx(sum(e["epsilon"] for e in rec["ledger"]
                                                   if e["charge"] == "epsilon"))


def test_scanner_catches_each_planted_leak(releases, tmp_path):
    """The scanner is itself tested: each leak planted once into a copy of the FBS folder
    (kills a scanner that never looks, or looks at the wrong numbers)."""
    import shutil

    rel = releases("FBS")
    syn = rel["syn"]

    def planted(edit) -> dict[str, Any]:
        dst = tmp_path / f"p{len(list(tmp_path.iterdir()))}"
        shutil.copytree(rel["public"], dst)
        mf = dst / "manifest.json"
        m = json.loads(mf.read_text())
        edit(m)
        mf.write_text(json.dumps(m))
        return {**rel, "public": dst}

    scan(rel)
    cases = [
        ("achieved bound", lambda m: m.update(delta_alpha=syn.delta_alpha_)),
        ("seed key", lambda m: m.update(seed=SEED)),
        ("per-record risk weights", lambda m: m.update(
            extra=[float(a) for a in syn.alpha_[syn.alpha_ < 1][:2]])),
        ("guarantee_class", lambda m: m["privacy"].pop("guarantee_class")),
        ("not declared", lambda m: m["privacy"].update(published_without_budget=[
            e for e in m["privacy"]["published_without_budget"]
            if "mean_salary" not in e["item"]])),
    ]
    for what, edit in cases:
        with pytest.raises(AssertionError):
            scan(planted(edit))
        del what
