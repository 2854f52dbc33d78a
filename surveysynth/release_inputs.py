"""The confidential input of a release: the file read by its suffix (with its value labels),
the survey design built from the ``[design]`` section, and which variables the configuration
synthesizes. The pipeline (``surveysynth release``) and the report's attack evidence
(``attack_evidence.py``, which reads a holdout file and builds its design the same way) both
use these, so neither imports the other for them (issue 38: no import circle).
``surveysynth.pipeline.read_input`` and ``build_design`` remain the public names.

Changes when the input formats, the design section's meaning, or the synthesizers' variable
settings change.
"""

from __future__ import annotations

import warnings
from pathlib import Path
from typing import Any

import pandas as pd

from .release_config import MARGINAL_METHODS, ConfigError

__all__ = ["FORMAT_NAMES", "INPUT_FORMATS", "apply_value_labels", "build_design", "joint_variables", "read_input"]


def _names(x: Any) -> list[str]:
    if x is None:
        return []
    return [x] if isinstance(x, str) else list(x)


def build_design(design: dict[str, Any], data: pd.DataFrame) -> Any:
    """The survey design of the input: a SurveyDesign, or a ReplicateDesign when
    ``repweights`` is given (R svrepdesign's arguments)."""
    try:
        if "repweights" in design:
            from .replicate_design import ReplicateDesign

            d = ReplicateDesign(data, **design)
            # the synthesizers read the design's sampling structure; a replicate design has none
            for name, value in (("strata_vars", None), ("ids_vars", []), ("nest", False)):
                if not hasattr(d, name):
                    setattr(d, name, value)
            return d
        from .design import SurveyDesign

        if "weights" in design or "probs" in design:
            return SurveyDesign(data, **design)
        # no weights: the documented meaning of the section (docs/release-config.md: weights
        # 1), so R's "assuming equal probability" warning says nothing the curator did not
        # write, and the pipeline builds the design up to three times (it printed it raw, with
        # a source line, three times above a quantile example's progress)
        with warnings.catch_warnings():
            warnings.filterwarnings("ignore", message="No weights or probabilities supplied",
                                    category=UserWarning)
            return SurveyDesign(data, **design)
    except (TypeError, ValueError) as exc:
        raise ConfigError(f"[design]: {exc}") from exc


def joint_variables(cfg: Any) -> tuple[list[str], dict[str, str], list[str]]:
    """The joint utility's variables: (synthesized, declared types, released-as-collected
    context). A partial synthesis of one outcome is measured jointly with its predictors."""
    syn = cfg.synth
    if cfg.method == "sequential":
        return ([v["name"] for v in syn["variables"]],
                {v["name"]: v["type"] for v in syn["variables"]}, [])
    if cfg.method in MARGINAL_METHODS:  # binned variables are numeric, the others categories
        binned = {**syn.get("init", {}), **syn.get("fit", {})}.get("bins", {})
        names = _names(syn.get("variables"))
        return names, {v: "categorical" for v in names if v not in binned}, []
    if cfg.method == "quantile":
        return _names(syn.get("variables")), {}, []
    predictors = _names(syn.get("predictors"))
    settings = {**syn.get("init", {}), **syn.get("fit", {})}
    types = {v: "categorical" for v in _names(settings.get("categorical"))}
    if cfg.method == "PBP":
        return [syn["outcome"], *predictors], types, []
    return [syn["outcome"]], types, predictors


#: input file formats by suffix: CSV, Parquet, and the statistical packages' files through
#: pyreadstat (value labels become pandas Categoricals, categories in code order)
INPUT_FORMATS = {".csv": "csv", ".parquet": "parquet", ".pq": "parquet", ".dta": "stata",
                 ".sas7bdat": "sas", ".xpt": "xport", ".sav": "spss", ".zsav": "spss"}
FORMAT_NAMES = "CSV, Parquet, Stata, SAS, SAS transport, SPSS"


def read_input(path: str | Path | Any) -> pd.DataFrame:
    """The confidential file as a pandas DataFrame, by its suffix (:data:`INPUT_FORMATS`); a
    pandas or polars DataFrame given instead of a path is returned as pandas (polars converted
    at the boundary with ``to_pandas()``, see :func:`surveysynth.design.as_pandas`).

    Stata (.dta), SAS (.sas7bdat, with a ``.sas7bcat`` catalog of formats beside it if there
    is one; .xpt) and SPSS (.sav, .zsav) files are read with pyreadstat. A variable with value
    labels becomes a pandas Categorical whose categories are the labels in the order of their
    codes (so tables print labels, in the order the agency coded them); a code that occurs in
    the data without a label keeps its code (as text) as its label, nothing is dropped; labels
    of codes that occur in no record are not categories (an empty category would be an empty
    cell of every table and a cell with no records for the models). Missing-value codes
    (Stata's .a-.z, SAS's special missings, SPSS's system missing) become missing values.
    """
    if not isinstance(path, (str, Path)):
        from .design import as_pandas

        return as_pandas(path, "input")
    path = Path(path)
    kind = INPUT_FORMATS.get(path.suffix.lower())
    if kind == "csv":
        return pd.read_csv(path)
    if kind == "parquet":
        return pd.read_parquet(path)
    if kind is None:
        raise ValueError(f"input {path.name!r}: unknown file type {path.suffix!r}. Fix: give one "
                         f"of {', '.join(INPUT_FORMATS)} ({FORMAT_NAMES}).")
    try:
        import pyreadstat
    except ImportError as exc:  # pragma: no cover - a declared dependency
        raise ImportError(f"reading {path.name!r} needs pyreadstat: pip install pyreadstat") from exc
    if kind == "stata":
        frame, meta = pyreadstat.read_dta(str(path))
    elif kind == "sas":
        catalog = path.with_suffix(".sas7bcat")
        frame, meta = pyreadstat.read_sas7bdat(
            str(path), catalog_file=str(catalog) if catalog.exists() else None)
    elif kind == "xport":
        frame, meta = pyreadstat.read_xport(str(path))
    else:
        frame, meta = pyreadstat.read_sav(str(path))
    return apply_value_labels(frame, meta.variable_value_labels or {})


def apply_value_labels(frame: pd.DataFrame, labels: dict[str, dict[Any, str]]) -> pd.DataFrame:
    """A copy of ``frame`` with each labelled column as a Categorical of its labels, categories
    in code order (see :func:`read_input`). ``labels``: {column: {code: label}}."""
    out = frame.copy()
    for col, mapping in labels.items():
        if col not in out.columns or not mapping:
            continue
        values = out[col]
        present = pd.unique(values.dropna())
        codes = sorted(set(present.tolist()), key=lambda v: (isinstance(v, str), v))
        names = [str(mapping.get(c, _code_text(c))) for c in codes]
        if len(set(names)) != len(names):
            dup = sorted({n for n in names if names.count(n) > 1})
            raise ValueError(
                f"input column {col!r}: value labels {dup[:5]} label more than one code "
                f"({ {c: mapping.get(c) for c in codes if str(mapping.get(c)) in dup} }). Fix: "
                "give each code its own label in the source file (a Categorical needs distinct "
                "categories).")
        # get_indexer gives -1 (missing) for a missing value: codes hold no missing value
        out[col] = pd.Categorical.from_codes(pd.Index(codes).get_indexer(values),
                                             categories=names, ordered=True)
    return out


def _code_text(code: Any) -> str:
    if isinstance(code, float) and code.is_integer():
        return str(int(code))
    return str(code)
