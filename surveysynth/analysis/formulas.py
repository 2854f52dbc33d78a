"""Formula helpers shared by the analysis functions: R-style names with dots, the columns a
formula reads, and formulaic's model matrices with its errors as ValueErrors.

Logical values are factors, as in R: ``model.matrix`` codes a logical variable or expression
(``I(x > 4)``, a boolean column) as a factor with levels ``FALSE``, ``TRUE``, so a model without
intercept gets two indicator columns and one with an intercept the ``TRUE`` contrast. formulaic
treats booleans as numbers (one 0/1 column either way); :class:`RMaterializer` makes them
categorical, and codes every categorical term with the levels of :mod:`surveysynth.encoding`
(R's order, learned once, unseen levels refused). Column names stay formulaic's (``I(x > 4)[False]``, ``I(x > 4)[True]``,
``b[T.True]`` for R's ``I(x > 4)FALSE``, ``I(x > 4)TRUE``, ``bTRUE``).
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from typing import Any

import pandas as pd
from formulaic import model_matrix
from formulaic.materializers import PandasMaterializer
from interface_meta import override

from ..encoding import Factor, r_levels


class RMaterializer(PandasMaterializer):
    """formulaic's pandas materializer with R's coding of logical values as two-level factors.

    Registered under its own name (a ModelSpec keeps its materializer by name, so that
    ``predict`` on new data codes them alike), with a low precedence and no input types:
    formulaic's own ``"pandas"`` materializer stays the default for every other user.
    """

    REGISTER_NAME = "surveysynth_r"
    REGISTER_PRECEDENCE = 1

    @override
    def _is_categorical(self, values: Any) -> bool:
        dtype = getattr(values, "dtype", None)
        if dtype is not None and str(dtype) in ("bool", "boolean"):
            return True  # R's logical: a factor (surveysynth.encoding.is_factor)
        return super()._is_categorical(values)

    @override
    def _encode_evaled_factor(self, factor: Any, spec: Any, drop_rows: Sequence[int],
                              reduced_rank: bool = False) -> dict[str, Any]:
        self._factor_expr = str(factor.expr)  # names the term in an unseen-level error
        return super()._encode_evaled_factor(factor, spec, drop_rows, reduced_rank)

    @override
    def _encode_categorical(self, values: Any, metadata: Any, encoder_state: dict[str, Any],
                            spec: Any, drop_rows: Sequence[int], reduced_rank: bool = False) -> Any:
        """formulaic's treatment coding with the levels of :mod:`surveysynth.encoding`: R's
        order, learned on the data the model is fitted to (formulaic keeps them in the model
        spec's encoder state) and re-applied to new data, where a value that is not a learned
        level is an error naming the rows (formulaic would warn and code it as missing)."""
        from formulaic.transforms import encode_contrasts
        from formulaic.utils.cast import as_columns
        from formulaic.utils.null_handling import drop_rows as drop_nulls

        if drop_rows:
            values = drop_nulls(values, indices=drop_rows)
        raw = pd.Series(getattr(values, "__wrapped__", values))
        if "categories" in encoder_state:  # new data: the learned levels, unseen ones refused
            name = getattr(self, "_factor_expr", "")
            Factor(name, tuple(encoder_state["categories"]), na="skip").codes(
                raw, what=f"term {name!r} of the formula")
            levels = None
        else:
            levels = r_levels(raw)
        return as_columns(encode_contrasts(values, levels=levels, reduced_rank=False,
                                           _metadata=metadata, _state=encoder_state, _spec=spec))


def formula_columns(formula: str, data_cols: pd.Index) -> list[str]:
    """Columns a formula reads: column names appearing in it as whole tokens (names with dots,
    R style, included; formulaic's own variable list splits them at the dot)."""
    found = []
    for c in map(str, data_cols):
        if re.search(rf"(?<![\w.]){re.escape(c)}(?![\w.])", formula):
            found.append(c)
    return found


def quote_dotted(text: str, data_cols: pd.Index) -> str:
    """Back-quote column names with dots (R style, ``api.stu``) so that formulaic reads them as
    names inside Python expressions (``np.log(api.stu)``) too."""
    for c in sorted((str(c) for c in data_cols if "." in str(c)), key=len, reverse=True):
        text = re.sub(rf"(?<![\w.`]){re.escape(c)}(?![\w.`])", f"`{c}`", text)
    return text


def formula_matrix(formula: str, data: pd.DataFrame, what: str, r_logicals: bool = True,
                   **kwargs: Any):
    """formulaic's model matrix; its errors (unknown names, bad syntax) as a ValueError.

    ``r_logicals``: code logical values as R's two-level factors (:class:`RMaterializer`);
    False keeps them numeric 0/1 (a logical outcome read as a number).
    """
    if r_logicals:
        kwargs["materializer"] = RMaterializer
    try:
        return model_matrix(formula, data, **kwargs)
    except Exception as exc:  # formulaic raises several types; report them alike
        raise ValueError(
            f"{what}: cannot evaluate formula {formula!r} on the design's data: {exc}. Fix: "
            f"check the names (columns: {list(map(str, data.columns))[:12]}...) and the syntax."
        ) from exc


_OFFSET = re.compile(r"\boffset\s*\(")


def split_offset(formula: str) -> tuple[str, list[str]]:
    """Remove ``offset(expr)`` terms from the right-hand side; return the formula and exprs."""
    exprs: list[str] = []
    text = formula
    while True:
        m = _OFFSET.search(text)
        if m is None:
            break
        depth, k = 1, m.end()
        while k < len(text) and depth:
            depth += {"(": 1, ")": -1}.get(text[k], 0)
            k += 1
        if depth:
            raise ValueError(f"formula {formula!r}: unbalanced parentheses in offset(...).")
        exprs.append(text[m.end(): k - 1].strip())
        before = text[: m.start()].rstrip()
        if before.endswith("+"):
            before = before[:-1].rstrip()
        after = text[k:].lstrip()
        if before.endswith("~") and after.startswith("+"):
            after = after[1:].lstrip()
        text = f"{before} {after}".strip()
        if text.endswith("~"):
            text += " 1"
    return text, exprs
