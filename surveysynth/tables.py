"""Official tabulation: interior cells, margins and grand total with SE, CV, CI and flags.

``tabulate(source, rows, cols, value, stat)`` makes the kind of table a statistical agency
publishes from a survey (METHODS section 5): counts (sums of weights), totals, domain means,
level proportions, percentages (of the total, row or column), medians or quantiles by the
cells of ``rows`` x ``cols`` (``stat=``; docs/tables.md), with the row margins (by ``rows`` only), the column margins
(by ``cols`` only) and the grand total (no ``by``), each with its standard error, coefficient of
variation, confidence interval, unweighted number of records and a reliability flag.

The source may be

* a :class:`~surveysynth.design.SurveyDesign` (Taylor linearization) or a
  :class:`~surveysynth.replicate_design.ReplicateDesign` (replicate variance): each block is the
  design's own domain estimator, so every cell equals R ``svyby(..., svytotal)`` /
  ``svyby(..., svymean)`` (margins: ``svyby`` by one variable, ``svytotal``/``svymean``), or
* a :class:`~surveysynth.release.SyntheticRelease` (or any object with ``designs``, ``kind``,
  ``m``, ``n_syn`` and ``n_original``, read duck-typed, so this module imports nothing of the
  release layer): every cell is computed on each of the m synthetic designs and combined with
  the release's rule (partial or full synthesis, :func:`surveysynth.combine.combine_sets`).

Decisions (docs/tables.md):

* The table has every combination of the levels of ``rows`` and ``cols`` (R ``svyby`` drops
  empty domains): an empty cell has count/total 0 with SE 0 (what R's ``svytotal`` of the cell
  indicator gives) and mean NaN; it is flagged ``empty``.
* CV = SE / |estimate| (NaN when the estimate is 0). Flags: ``cv>cv_max`` (default 0.30, the
  usual relative-standard-error rule), ``n<n_min`` (default 30 unweighted records), ``empty``,
  ``df=0`` (no design degrees of freedom: the cell's records lie in one PSU per stratum, so
  its SE, often 0, says nothing; R gives NaN t intervals there) and ``no estimate``; ``flag``
  is True when any applies. Either threshold can be disabled with
  None.
* Intervals are normal (R ``confint``) unless ``ci="t"`` (design df); for releases they come
  from the combining rule (t with its df).
* For a release, ``n_unweighted`` is the mean over the m synthetic sets of the cell's records.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from ._validate import as_list, require_columns
from .combine import combine_sets
from .estimate import category_levels, confidence_interval

STATS = ("total", "mean", "proportion", "percent", "median", "quantile")
OF = ("total", "row", "col")
#: the label column of the quantile levels in a ``stat="quantile"`` table
QUANTILE_COLUMN = "quantile"
CELL_TYPES = ("interior", "row margin", "column margin", "grand total")
_NUMERIC = ("estimate", "se", "cv", "ci_low", "ci_high", "df", "n_unweighted")


# --------------------------------------------------------------------------------------------
# flags
# --------------------------------------------------------------------------------------------


def reliability(estimate: np.ndarray, se: np.ndarray, n_unweighted: np.ndarray,
                cv_max: float | None = 0.30, n_min: float | None = 30,
                df: np.ndarray | None = None):
    """CV, flag reasons and flags for cells (vectorized; see the module docstring).

    ``df`` (design degrees of freedom of each cell) flags ``df=0`` cells: a cell whose
    records lie in one PSU per stratum has no variance information (R: NaN t interval),
    even when its linearized SE happens to be 0 and so passes the CV rule.
    """
    est = np.asarray(estimate, float)
    se = np.asarray(se, float)
    n = np.asarray(n_unweighted, float)
    with np.errstate(divide="ignore", invalid="ignore"):
        cv = np.where(est != 0, se / np.abs(est), np.nan)
    parts = []
    if cv_max is not None:
        parts.append(np.where(cv > cv_max, f"cv>{cv_max:g}", ""))
    if n_min is not None:
        parts.append(np.where(n < n_min, f"n<{n_min:g}", ""))
    parts.append(np.where(n == 0, "empty", ""))
    if df is not None:
        d = np.asarray(df, float)
        parts.append(np.where((n > 0) & (d <= 0), "df=0", ""))
    parts.append(np.where(np.isnan(est), "no estimate", ""))
    reasons = np.array(["; ".join(p for p in row if p) for row in zip(*parts, strict=True)],
                       dtype=object) if est.size else np.array([], dtype=object)
    return cv, reasons, reasons != ""


# --------------------------------------------------------------------------------------------
# Table object
# --------------------------------------------------------------------------------------------


@dataclass
class Table:
    """A published table: one long DataFrame plus its layout.

    ``long`` has the label columns of ``rows`` and ``cols`` (``margin_label`` where a margin
    sums over a variable), ``cell`` (interior / row margin / column margin / grand total) and
    ``estimate, se, cv, ci_low, ci_high, df, n_unweighted, flag, flag_reason`` (plus ``note``,
    ``between``, ``within`` for releases).

    Example (made by :func:`surveysynth.tabulate`):

    >>> import pandas as pd
    >>> import surveysynth as ss
    >>> df = pd.DataFrame({"stype": ["E", "E", "E", "H", "H", "H"],
    ...                    "pw": [10.0, 10.0, 10.0, 5.0, 5.0, 5.0],
    ...                    "api00": [600.0, 650.0, 700.0, 550.0, 600.0, 640.0]})
    >>> t = ss.tabulate(ss.SurveyDesign(df, strata="stype", weights="pw"), rows="stype",
    ...                 value="api00", stat="mean")
    >>> t.wide("estimate").round(1)
           estimate
    stype
    E         650.0
    H         596.7
    All       632.2
    """

    long: pd.DataFrame
    rows: list[str]
    cols: list[str]
    stat: str
    value: str | None
    margin_label: str = "All"
    meta: dict[str, Any] = field(default_factory=dict)

    # ---------------------------------------------------------------- views
    def _order(self, variables: list[str]) -> list[tuple]:
        """Label tuples of ``variables`` in table order (levels, then the margin)."""
        keys = list(dict.fromkeys(map(tuple, self.long[variables].to_numpy().tolist())))
        margin = tuple([self.margin_label] * len(variables))
        return [k for k in keys if k != margin] + ([margin] if margin in keys else [])

    def wide(self, what: str = "estimate") -> pd.DataFrame:
        """Cells as a rows x cols grid of one column of :attr:`long` (margins last)."""
        if what not in self.long.columns:
            raise ValueError(f"wide(what={what!r}): choose one of {list(self.long.columns)}.")
        rkeys = self._order(self.rows)
        rpos = {k: i for i, k in enumerate(rkeys)}
        r = [rpos[tuple(x)] for x in self.long[self.rows].to_numpy().tolist()]
        if self.cols:
            ckeys = self._order(self.cols)
            cpos = {k: i for i, k in enumerate(ckeys)}
            c = [cpos[tuple(x)] for x in self.long[self.cols].to_numpy().tolist()]
        else:
            ckeys, c = [(what,)], [0] * len(r)
        vals = self.long[what].to_numpy()
        grid = np.full((len(rkeys), len(ckeys)), np.nan, dtype=vals.dtype if vals.dtype.kind in
                       "fc" else object)
        grid[r, c] = vals

        def index(keys, names):
            if len(names) == 1:
                return pd.Index([k[0] for k in keys], name=names[0], dtype=object)
            return pd.MultiIndex.from_tuples(keys, names=names)

        columns = index(ckeys, self.cols) if self.cols else pd.Index([what])
        return pd.DataFrame(grid, index=index(rkeys, self.rows), columns=columns)

    def digits(self, digits: int | dict[str, int] | None = None) -> dict[str, int]:
        """Decimals per statistic (``estimate``, ``se``, ``ci``, ``cv``) for the exports.

        Default: estimate, se and ci to the precision of the standard errors (two significant
        digits of the median SE: a 0/1 mean with SE 0.03 shows 2 decimals, a count with SE
        1,430 none), cv 3. An int sets estimate, se and ci; a dict overrides some."""
        se = self.long.se.to_numpy(float)
        se = se[np.isfinite(se) & (se > 0)]
        auto = int(np.clip(1 - np.floor(np.log10(np.median(se))), 0, 6)) if se.size else 1
        out = {"estimate": auto, "se": auto, "ci": auto, "cv": 3}
        if isinstance(digits, (int, np.integer)) and not isinstance(digits, bool):
            out.update(estimate=int(digits), se=int(digits), ci=int(digits))
        elif isinstance(digits, dict):
            bad = sorted(set(digits) - set(out))
            if bad:
                raise ValueError(f"digits: unknown statistic(s) {bad}; use {sorted(out)}.")
            out.update({k: int(v) for k, v in digits.items()})
        elif digits is not None:
            raise ValueError(f"digits={digits!r}: an integer or a dict like {{'estimate': 0}}.")
        return out

    def labelled(self, labels: dict[str, dict[Any, str]] | None = None) -> Table:
        """The table with value labels shown instead of codes in the label columns (keys of
        ``labels[var]`` are matched to the levels as text, so TOML's string keys match integer
        codes); the margin label and unlabelled levels stay as they are."""
        if not labels:
            return self
        long = self.long.copy()
        for var, mapping in labels.items():
            if var not in self.rows + self.cols:
                raise ValueError(f"labels[{var!r}]: not a classification variable of the table "
                                 f"({self.rows + self.cols}).")
            text = {str(k): str(v) for k, v in mapping.items()}
            long[var] = [text.get(str(x), x) if x != self.margin_label else x
                         for x in long[var].tolist()]
        return Table(long, self.rows, self.cols, self.stat, self.value, self.margin_label,
                     self.meta)

    def display(self, digits: int | dict[str, int] | None = None, mark: str = "*",
                labels: dict[str, dict[Any, str]] | None = None) -> pd.DataFrame:
        """Wide view of ``estimate (se)`` strings, flagged cells marked with ``mark``
        (decimals: :meth:`digits`; value labels: :meth:`labelled`)."""
        if labels:
            return self.labelled(labels).display(digits, mark)
        dg = self.digits(digits)
        est = self.long.estimate.to_numpy(float)
        se = self.long.se.to_numpy(float)
        flag = self.long.flag.to_numpy(bool)
        de, ds = dg["estimate"], dg["se"]
        text = [
            ("" if np.isnan(e) else f"{e:,.{de}f} ({s:,.{ds}f})") + (mark if f else "")
            for e, s, f in zip(est, se, flag, strict=True)
        ]
        tmp = Table(self.long.assign(_text=text), self.rows, self.cols, self.stat, self.value,
                    self.margin_label, self.meta)
        out = tmp.wide("_text")
        if not self.cols:
            out.columns = pd.Index(["estimate (se)"])
        return out

    @property
    def footnote(self) -> str:
        cv_max, n_min = self.meta.get("cv_max"), self.meta.get("n_min")
        crit = []
        if cv_max is not None:
            crit.append(f"CV > {cv_max:g}")
        if n_min is not None:
            crit.append(f"fewer than {n_min:g} unweighted records")
        crit.append("empty cell")
        what = self.describe()
        note = self.meta.get("source_note", "")
        return (f"Cells: {what} (standard error). * unreliable: " + " or ".join(crit) + "."
                + (f" {note}" if note else ""))

    def describe(self) -> str:
        """What the cells hold, in words (the footnote's first sentence)."""
        of = {"total": "the grand total", "row": "the row", "col": "the column"}
        if self.stat == "percent":
            base = "count" if self.value is None else f"total of {self.value}"
            return f"percent of {of[self.meta.get('of', 'total')]} ({base})"
        if self.stat == "proportion":
            return f"proportion of each level of {self.value} in the cell"
        if self.stat == "quantile":
            return f"quantiles of {self.value}"
        return "count" if self.value is None else f"{self.stat} of {self.value}"

    def __repr__(self) -> str:
        with pd.option_context("display.width", 140, "display.max_columns", 20):
            return f"{self.display()}\n{self.footnote}"

    # ---------------------------------------------------------------- export
    def export_frame(self, digits: int | dict[str, int] | None = None,
                     labels: dict[str, dict[Any, str]] | None = None) -> pd.DataFrame:
        """The long table as published: value labels applied, estimate/se/ci/cv rounded to
        their digits, ``df`` as an integer (rounded down: the conservative t quantile) or
        "inf" (infinite, or above 1e6 where t and normal agree to 6 digits; empty when there
        is none), ``n_unweighted`` as an integer (for a release the mean over the m sets,
        rounded)."""
        dg = self.digits(digits)
        long = self.labelled(labels).long.copy()
        for col, key in (("estimate", "estimate"), ("se", "se"), ("ci_low", "ci"),
                         ("ci_high", "ci"), ("cv", "cv"), ("between", "se"), ("within", "se")):
            if col in long:
                long[col] = long[col].astype(float).round(dg[key])
        df = long["df"].to_numpy(float)
        long["df"] = pd.array([("inf" if (np.isinf(d) or d > 1e6) else str(int(np.floor(d))))
                               if not np.isnan(d) else pd.NA for d in df], dtype="string")
        # NaN (a DP table publishes no record counts): missing, not a garbage integer
        n_unw = np.rint(long["n_unweighted"].to_numpy(float))
        long["n_unweighted"] = (n_unw.astype("int64") if not np.isnan(n_unw).any() else
                                pd.array([pd.NA if np.isnan(v) else int(v) for v in n_unw],
                                         dtype="Int64"))
        return long

    def _wide_text(self, digits: Any, labels: Any) -> pd.DataFrame:
        """The display with the column variables' names kept in the column labels (a wide
        CSV / sheet has a single header row: "gender: female")."""
        disp = self.display(digits, labels=labels).copy()
        if self.cols:
            keys = [c if isinstance(c, tuple) else (c,) for c in disp.columns]
            disp.columns = [", ".join(f"{v}: {k}" for v, k in zip(self.cols, key, strict=True))
                            for key in keys]
        disp.index = (disp.index.map(str) if disp.index.nlevels == 1 else disp.index)
        return disp

    def to_csv(self, path: str | Path, wide: bool = False, title: str | None = None,
               digits: int | dict[str, int] | None = None,
               labels: dict[str, dict[Any, str]] | None = None) -> Path:
        """The long table (:meth:`export_frame`; or the wide ``estimate (se)`` display with
        ``wide=True``, column variables named in the header) as CSV. A title and the footnote
        are written as ``#`` comment lines (read back with ``pd.read_csv(path, comment="#")``)."""
        path = Path(path)
        frame = self._wide_text(digits, labels) if wide else self.export_frame(digits, labels)
        body = frame.to_csv(index=wide)
        head = f"# {title}\n" if title else ""
        foot = f"# {self.footnote}\n" if title or wide else ""
        path.write_text(head + body + foot)
        return path

    def to_excel(self, path: str | Path, title: str | None = None,
                 digits: int | dict[str, int] | None = None,
                 labels: dict[str, dict[Any, str]] | None = None) -> Path:
        """XLSX workbook. ``table``: title, then per cell the estimate and its SE as NUMBERS
        with number formats of their digits (flagged cells shaded, marked in a ``flag``
        column block), value labels and the column variables' names in the header; ``text``:
        the ``estimate (se)`` layout as text; ``estimate``, ``se``: numeric grids; ``long``:
        :meth:`export_frame`; ``notes``: title, footnote, digits."""
        from openpyxl.styles import Alignment, Font, PatternFill

        path = Path(path)
        dg = self.digits(digits)
        lab = self.labelled(labels)
        est, se, flag = lab.wide("estimate"), lab.wide("se"), lab.wide("flag")
        fmt = {k: "#,##0" + ("." + "0" * d if d else "") for k, d in dg.items()}
        with pd.ExcelWriter(path, engine="openpyxl") as xw:
            pd.DataFrame().to_excel(xw, sheet_name="table")
            ws = xw.sheets["table"]
            ws.cell(1, 1, title or self.footnote.split(".")[0]).font = Font(bold=True, size=12)
            nr = len(self.rows)
            header = 3
            for j, v in enumerate(self.rows):
                ws.cell(header + 1, 1 + j, v).font = Font(bold=True)
            colkeys = list(est.columns)
            for j, key in enumerate(colkeys):
                key = key if isinstance(key, tuple) else (key,)
                name = (", ".join(f"{v}: {k}" for v, k in zip(self.cols, key, strict=True))
                        if self.cols else "")
                c0 = nr + 1 + 2 * j
                ws.cell(header, c0, name).font = Font(bold=True)
                ws.cell(header + 1, c0, "estimate").font = Font(bold=True)
                ws.cell(header + 1, c0 + 1, "se").font = Font(bold=True)
                ws.cell(header, c0).alignment = Alignment(horizontal="center")
            shade = PatternFill("solid", start_color="FFF2CC")
            for i, rkey in enumerate(est.index):
                rkey = rkey if isinstance(rkey, tuple) else (rkey,)
                r = header + 2 + i
                for j, v in enumerate(rkey):
                    ws.cell(r, 1 + j, v if isinstance(v, (int, float)) else str(v))
                for j in range(len(colkeys)):
                    c0 = nr + 1 + 2 * j
                    for off, grid, key in ((0, est, "estimate"), (1, se, "se")):
                        x = float(grid.iloc[i, j])
                        cell = ws.cell(r, c0 + off, None if np.isnan(x) else x)
                        cell.number_format = fmt[key]
                        if bool(flag.iloc[i, j]):
                            cell.fill = shade
            ws.cell(header + 3 + len(est.index), 1,
                    self.footnote + " Shaded: flagged (unreliable) cells.")
            self._wide_text(digits, labels).to_excel(xw, sheet_name="text")
            est.to_excel(xw, sheet_name="estimate")
            se.to_excel(xw, sheet_name="se")
            for name, key in (("estimate", "estimate"), ("se", "se")):
                sh = xw.sheets[name]
                for row in sh.iter_rows(min_row=2, min_col=nr + 1):
                    for cell in row:
                        cell.number_format = fmt[key]
            long = self.export_frame(digits, labels)
            long["df"] = [x if pd.isna(x) or x == "inf" else int(x) for x in long["df"]]
            long.to_excel(xw, sheet_name="long", index=False)
            pd.DataFrame({"note": [title or "", self.footnote,
                                   "digits: " + ", ".join(f"{k} {v}" for k, v in dg.items()),
                                   "df: integer (rounded down) or inf; n_unweighted: integer "
                                   "(for a release the mean over the m sets, rounded)"]}
                         ).to_excel(xw, sheet_name="notes", index=False)
        return path

    def to_latex(self, path: str | Path | None = None, caption: str | None = None) -> str:
        """LaTeX tabular of the display view with the footnote; written to ``path`` if given."""
        disp = self.display()
        disp.index = disp.index.map(str) if disp.index.nlevels == 1 else disp.index
        disp.columns = disp.columns.map(str) if disp.columns.nlevels == 1 else disp.columns
        tex = disp.to_latex(escape=True, caption=caption)
        fn = self.footnote.replace("*", r"$^*$").replace("%", r"\%").replace("_", r"\_")
        tex = tex + f"% {self.footnote}\n\\par\\footnotesize {fn}\n"
        if path is not None:
            Path(path).write_text(tex)
        return tex

    def to_html(self, path: str | Path | None = None) -> str:
        """HTML table of the display view with the footnote; written to ``path`` if given."""
        html = self.display().to_html() + f"\n<p><small>{self.footnote}</small></p>\n"
        if path is not None:
            Path(path).write_text(html)
        return html


# --------------------------------------------------------------------------------------------
# per-design blocks
# --------------------------------------------------------------------------------------------


def union_levels(designs: Sequence[Any], var: str) -> list:
    """Levels of ``var`` over several designs: the categories of a categorical column, else
    the sorted union of the levels each design's rows hold."""
    first = designs[0].full_data[var]
    if isinstance(first.dtype, pd.CategoricalDtype):
        return list(first.cat.categories)
    allv: list = []
    for d in designs:
        allv += category_levels(d.data[var])
    allv = list(dict.fromkeys(allv))
    try:
        return sorted(allv)
    except TypeError:
        return sorted(allv, key=str)


def _block(design: Any, by: list[str], grid: pd.MultiIndex | None, value: str | None,
           stat: str, na_rm: bool) -> dict[str, np.ndarray]:
    """Estimates, variances, df and unweighted n of one total/mean block on the level grid."""
    na_rows = design.missing_rows([value], na_rm, "tabulate") if value is not None else None
    dom, D, by_df = design.domains(by or None, na_rows)
    n_all = design.in_subset.shape[0]
    if value is None:
        Y = np.ones((n_all, 1))
    else:
        y = design.numeric_values(value)
        Y = np.where(np.isnan(y), 0.0, y)[:, None]
    X = np.ones_like(Y) if stat == "mean" else None
    est, var, _ = design.domain_ratios(Y, X, dom, D)
    df = np.asarray(design.domain_df(dom, D), float).reshape(D)
    n_unw = np.bincount(dom[dom >= 0], minlength=D).astype(float)
    res = {"e": est[:, 0], "v": var[:, 0], "d": df, "n": n_unw}
    if grid is None:
        return res
    have = pd.MultiIndex.from_frame(by_df[by].astype(object))
    fill = {"e": 0.0 if stat == "total" else np.nan, "v": 0.0 if stat == "total" else np.nan,
            "d": np.nan, "n": 0.0}
    return _align(have, grid, res, fill)


def _align(have: pd.MultiIndex, grid: pd.MultiIndex, values: dict[str, np.ndarray],
           fill: dict[str, float]) -> dict[str, np.ndarray]:
    """Values keyed by ``have`` placed on ``grid`` (``fill`` where a key is absent)."""
    pos = have.get_indexer(grid)
    found = pos >= 0
    out = {}
    for k, v in values.items():
        a = np.full(len(grid), fill.get(k, np.nan))
        a[found] = np.asarray(v, float)[pos[found]]
        out[k] = a
    return out


def _combo_codes(design: Any, variables: list[str], levels: dict[str, list]) -> np.ndarray:
    """Code of each row of ``full_data`` among the level combinations of ``variables`` (the
    order of ``MultiIndex.from_product``: last variable fastest; -1 where a value is not a
    level, i.e. missing)."""
    frame = design.full_data
    codes = [pd.Index(levels[v]).get_indexer(frame[v]) for v in variables]
    dims = [max(len(levels[v]), 1) for v in variables]
    bad = np.zeros(frame.shape[0], dtype=bool)
    for c in codes:
        bad |= c < 0
    flat = np.ravel_multi_index([np.where(c < 0, 0, c) for c in codes], dims)
    return np.where(bad, -1, flat)


def _share_block(design: Any, by: list[str], num: list[str], grid: pd.MultiIndex,
                 levels: dict[str, list], value: str | None, share_of_value: bool,
                 na_rm: bool, ci_method: str, level: float) -> dict[str, np.ndarray]:
    """Shares of the level combinations of ``num`` within the domains of ``by``, on ``grid``
    (whose names are ``by`` and ``num`` in table order).

    ``share_of_value``: the shares are of the total of the numeric ``value`` (sum w y over
    the cell / over the domain); else of the weighted count. The numerator indicators are
    built over every level of ``num`` (over all synthetic sets), so a level absent from a
    domain has share 0 with SE 0, and an absent domain gives NaN. ``n`` counts the records
    of the numerator cell; ``d`` is the df of the denominator domain (R svyciprop's)."""
    numeric = share_of_value and value is not None
    na_cols = [value] if value is not None else []
    na_rows = design.missing_rows(na_cols, na_rm, "tabulate") if na_cols else None
    dom, D, by_df = design.domains(by or None, na_rows)
    if num:
        design.domains(num, na_rows)  # a missing classification value: the same clear error
        code = _combo_codes(design, num, levels)
        L = int(np.prod([len(levels[v]) for v in num]))
    else:
        code = np.zeros(design.full_data.shape[0], dtype=np.int64)
        L = 1
    Y = (code[:, None] == np.arange(L)[None, :]).astype(float)
    if value is not None and not numeric:  # proportion: rows with a missing value
        Y[(code < 0) & (dom >= 0)] = np.nan
    X = np.ones_like(Y)
    if numeric:
        y = design.numeric_values(value)
        y = np.where(np.isnan(y), 0.0, y)[:, None]
        Y, X = Y * y, X * y
    Yc = np.where(np.isnan(Y), 0.0, Y)
    est, var, _ = design.domain_ratios(Yc, X, dom, D)
    df = np.asarray(design.domain_df(dom, D), float)
    sel = (dom >= 0) & (code >= 0)
    n = np.bincount(dom[sel] * L + code[sel], minlength=D * L).astype(float)
    res = {"e": est.ravel(), "v": var.ravel(), "d": np.repeat(df, L), "n": n}
    if ci_method != "wald":
        from .ciprop import proportion_ci

        out = pd.DataFrame({"estimate": res["e"], "se": np.sqrt(res["v"])})
        ci = proportion_ci(design, out, Y, na_cols, by or None, na_rm, level, None, ci_method)
        res.update(lo=ci["ci_low"].to_numpy(float), hi=ci["ci_high"].to_numpy(float),
                   d=ci["df"].to_numpy(float))
    # keys of the D x L results: the domain's by values, then the combination of num
    dom_keys = (by_df[by].astype(object).to_numpy().tolist() if by else [[]])
    combos = (list(pd.MultiIndex.from_product([levels[v] for v in num]))
              if num else [()])
    keys = [tuple(k) + tuple(c) for k in dom_keys for c in combos]
    have = pd.MultiIndex.from_tuples(keys, names=by + num) if keys and (by or num) else None
    if have is None:  # one domain, one share (a grand total of 100%)
        return res
    g = grid.reorder_levels(by + num) if list(grid.names) != by + num else grid
    return _align(have, g, res, {"n": 0.0})


def _quantile_block(design: Any, by: list[str], grid: pd.MultiIndex | None, value: str,
                    ps: np.ndarray, na_rm: bool, level: float, qrule: str,
                    interval_type: str, survey_version: str = "4.5") -> dict[str, np.ndarray]:
    """Quantiles of ``value`` in the domains of ``by`` (R svyquantile / svyby), with their
    Woodruff limits and SE, on the grid of ``by`` x quantile."""
    out = design.quantile(value, ps, by=by or None, na_rm=na_rm, level=level, qrule=qrule,
                          interval_type=interval_type, survey_version=survey_version)
    res = {"e": out["estimate"].to_numpy(float), "v": out["se"].to_numpy(float) ** 2,
           "d": out["df"].to_numpy(float), "n": out["n"].to_numpy(float),
           "lo": out["ci_low"].to_numpy(float), "hi": out["ci_high"].to_numpy(float)}
    if grid is None:
        return res
    keys = out[by].astype(object)
    if QUANTILE_COLUMN in grid.names:  # stat="quantile": the levels are a column variable
        keys[QUANTILE_COLUMN] = out["quantile"].to_numpy(float)
    have = pd.MultiIndex.from_frame(keys)
    return _align(have, grid, res, {"n": 0.0})


def _is_design(obj: Any) -> bool:
    return callable(getattr(obj, "domain_ratios", None)) and hasattr(obj, "full_data")


def _check_source(source: Any) -> tuple[list[Any], Any]:
    """The designs to tabulate and the release-like source (None for a single design)."""
    if _is_design(source):
        return [source], None
    designs = getattr(source, "designs", None)
    if designs is not None and hasattr(source, "kind") and all(map(_is_design, designs)):
        return list(designs), source
    raise ValueError(
        f"tabulate(source=...): expected a SurveyDesign, ReplicateDesign or SyntheticRelease, "
        f"got {type(source).__name__}. Fix: build a design first, e.g. "
        "SurveyDesign(df, strata=..., weights=...)."
    )


def cell_labels(variables: list[str], by: list[str], grid: pd.MultiIndex | None, K: int,
                cell: str, margin_label: str) -> pd.DataFrame:
    """Label columns of one block of a table: the block's levels, ``margin_label`` elsewhere."""
    lab = pd.DataFrame({v: [margin_label] * K for v in variables}, dtype=object)
    if grid is not None:
        for v in by:
            lab[v] = grid.get_level_values(v).to_numpy(dtype=object)
    lab["cell"] = cell
    return lab


def _blocks(stat: str, of: str, row_vars: list[str], col_vars: list[str]) -> list[tuple]:
    """(cell type, by, numerator variables) of each block of the table.

    Totals, means and quantiles estimate in the domains ``by``; proportions share the levels
    of ``value`` in them; percentages share the level combinations of the numerator
    variables in the denominator domains ``by``: of the grand total (by nothing), of the row
    (by the row variables) or of the column (by the column variables). A margin over the
    denominator's own variables is 100%."""
    blocks = [("interior", row_vars + col_vars)]
    if col_vars:
        blocks += [("row margin", row_vars), ("column margin", col_vars)]
    blocks.append(("grand total", []))
    if stat != "percent":
        return [(cell, by, []) for cell, by in blocks]
    den = {"total": [], "row": row_vars, "col": col_vars}[of]
    out = []
    for cell, vs in blocks:
        by = [v for v in vs if v in den]
        out.append((cell, by, [v for v in vs if v not in den]))
    return out


def _check_ci_method(ci_method: str, stat: str, value: str | None, release: Any) -> None:
    """ci_method= is R svyciprop's, for shares of counts on a design."""
    if ci_method == "wald":
        return
    from .ciprop import CI_METHODS

    if ci_method not in CI_METHODS:
        raise ValueError(f"ci_method={ci_method!r}: choose 'wald' or one of {CI_METHODS} "
                         "(R svyciprop's methods).")
    if stat not in ("proportion", "percent") or (stat == "percent" and value is not None):
        raise ValueError(f"ci_method={ci_method!r} applies to shares of counts: stat="
                         "'proportion', or 'percent' without value.")
    if release is not None:
        raise ValueError(f"ci_method={ci_method!r}: a release's intervals come from its "
                         "combining rule (t with the rule's df). Fix: ci_method='wald'.")


def _check_layout(row_vars: list[str], col_vars: list[str], value: str | None,
                  stat: str) -> None:
    """Each classification variable once, value not among them, no clash with the quantile
    column."""
    if not row_vars:
        raise ValueError("rows: give at least one classification variable.")
    dup = set(row_vars) & set(col_vars)
    if dup or len(set(row_vars)) < len(row_vars) or len(set(col_vars)) < len(col_vars):
        raise ValueError(f"rows={row_vars}, cols={col_vars}: a variable may appear only once.")
    if value is not None and value in row_vars + col_vars:
        raise ValueError(f"value={value!r} is also a classification variable.")
    if stat == "quantile" and QUANTILE_COLUMN in row_vars + col_vars:
        raise ValueError(f"stat='quantile' adds a column {QUANTILE_COLUMN!r}: rename the "
                         f"classification variable {QUANTILE_COLUMN!r}.")


def _check_stat(stat: str, of: str, value: str | None, quantiles: Any, ci_method: str,
                designs: list[Any], release: Any, col_vars: list[str]) -> np.ndarray | None:
    """Validate the statistic's arguments; returns the quantile levels (None otherwise)."""
    if stat not in STATS:
        raise ValueError(f"stat={stat!r}: choose one of {list(STATS)} (or 'row percent', "
                         "'column percent').")
    if stat in ("mean", "proportion", "median", "quantile") and value is None:
        raise ValueError(f"stat={stat!r} needs value=<column>: the {stat} of what?")
    if of not in OF:
        raise ValueError(f"of={of!r}: choose 'total' (share of the grand total), 'row' or "
                         "'col' (share of the row or of the column).")
    if stat == "percent" and of == "row" and not col_vars:
        raise ValueError("stat='percent', of='row' needs cols=: without column variables "
                         "every row is 100% of itself. Fix: of='total', or give cols.")
    if stat == "percent" and of == "col" and not col_vars:
        raise ValueError("stat='percent', of='col' needs cols=. Fix: of='total' (the share of "
                         "each row in the grand total), or give cols.")
    numeric_value = stat in ("mean", "median", "quantile") or (
        stat in ("total", "percent") and value is not None)
    if numeric_value:
        for d in designs:
            d.numeric_values(value)  # a clear error for a categorical column
    _check_ci_method(ci_method, stat, value, release)
    if stat == "quantile":
        if quantiles is None:
            raise ValueError("stat='quantile' needs quantiles= (e.g. [0.25, 0.5, 0.75]); "
                             "stat='median' gives the median.")
        ps = np.atleast_1d(np.asarray(quantiles, dtype=float))
        if ps.size == 0 or ((ps < 0) | (ps > 1) | np.isnan(ps)).any():
            raise ValueError(f"quantiles={quantiles!r}: each must be in [0, 1].")
        return ps
    if quantiles is not None:
        raise ValueError(f"quantiles= is read with stat='quantile' only (stat={stat!r}).")
    return np.array([0.5]) if stat == "median" else None


def tabulate(
    source: Any,
    rows: str | Sequence[str],
    cols: str | Sequence[str] | None = None,
    value: str | None = None,
    stat: str = "total",
    cv_max: float | None = 0.30,
    n_min: float | None = 30,
    level: float = 0.95,
    ci: str = "normal",
    na_rm: bool = False,
    margin_label: str = "All",
    *,
    of: str = "total",
    quantiles: float | Sequence[float] | None = None,
    qrule: str = "math",
    interval_type: str = "mean",
    ci_method: str = "wald",
    survey_version: str = "4.5",
) -> Table:
    """Tabulate counts, totals, means, proportions, percentages or quantiles by ``rows`` x
    ``cols`` with margins, SE, CV, CI and flags.

    Parameters
    ----------
    source : SurveyDesign, ReplicateDesign or SyntheticRelease.
    rows, cols : classification variable(s) of the table rows and columns (``cols`` optional).
    value : the variable tabulated: numeric for totals, means, quantiles (and percentages of
        its total); categorical (or numeric codes) for ``proportion``; ``None`` with
        ``"total"`` or ``"percent"`` tabulates counts (sums of weights).
    stat : ``"total"`` (counts or totals), ``"mean"`` (domain means), ``"proportion"`` (the
        share of every level of ``value`` within each cell: R ``svyby(~value, ~rows+cols,
        svymean)``; the levels become a column variable of the table), ``"percent"`` (each
        cell's share, in percent, of the total, the row or the column, by ``of``),
        ``"median"`` or ``"quantile"`` (with ``quantiles``: R ``svyquantile`` per cell, the
        quantile levels a column variable). ``"row percent"`` / ``"column percent"`` are
        ``"percent"`` with ``of="row"`` / ``"col"`` (the release config's spelling).
    cv_max, n_min : reliability thresholds (None disables one).
    level, ci : confidence level; ``"normal"`` (R confint) or ``"t"`` (design df) for Wald
        intervals. Quantile intervals are Woodruff's (t with the domain df, R svyquantile).
        Releases use the combining rule's t intervals.
    na_rm : drop records with missing ``value`` from the estimate (kept for the variance).
    margin_label : label of margin rows/columns in the label columns.
    of : for ``"percent"``: ``"total"`` (share of the grand total: R ``svymean`` of the cell
        factor), ``"row"`` (share of its row: ``svyby(~col, ~row, svymean)``) or ``"col"``.
    quantiles, qrule, interval_type : for quantiles, as :meth:`SurveyDesign.quantile` (R
        4.1's ``qrule`` and ``interval.type``); ``survey_version``: R survey 4.5's
        quantile boundary rule (default) or 4.1.1's (``"4.1"``), see docs/r_survey_functions.md.
    ci_method : interval of proportions and percentages of counts on a design: ``"wald"``
        (default, as ``ci``) or R ``svyciprop``'s ``"logit"``, ``"likelihood"``,
        ``"asin"``, ``"beta"``, ``"mean"``, ``"xlogit"`` (t on each domain's df).

    Returns
    -------
    :class:`Table`: ``.long`` (one row per cell), ``.wide(what)``, ``.display()``, exports.
    """
    own = getattr(source, "_engine_tabulate", None)
    if own is not None:  # a design that computes its cells itself (Dask: one pass, same Table)
        return own(rows, cols, value, stat, cv_max, n_min, level, ci, na_rm, margin_label,
                   of=of, quantiles=quantiles, qrule=qrule, interval_type=interval_type,
                   ci_method=ci_method)
    stat, of = {"row percent": ("percent", "row"),
                "column percent": ("percent", "col")}.get(stat, (stat, of))
    designs, release = _check_source(source)
    row_vars, col_vars = as_list(rows, "rows"), as_list(cols, "cols")
    if isinstance(value, str) and value.lstrip().startswith("~"):  # "~api00", as R writes it
        parsed = as_list(value, "value")
        if len(parsed) != 1:
            raise ValueError(f"value={value!r}: one column (a table has one value variable).")
        value = parsed[0]
    _check_layout(row_vars, col_vars, value, stat)
    for d in designs:
        require_columns(d.full_data, row_vars + col_vars + ([value] if value else []), "tabulate")
    ps = _check_stat(stat, of, value, quantiles, ci_method, designs, release, col_vars)
    extra_var = {"proportion": [value] if value else [], "quantile": [QUANTILE_COLUMN]}.get(
        stat, [])
    levels = {v: union_levels(designs, v) for v in row_vars + col_vars + extra_var
              if v != QUANTILE_COLUMN}
    if stat == "quantile":
        levels[QUANTILE_COLUMN] = ps.tolist()
    label_vars = row_vars + col_vars + extra_var

    def grid(vs: list[str]) -> pd.MultiIndex | None:
        if not vs:
            return None
        return pd.MultiIndex.from_product([levels[v] for v in vs], names=vs)

    labels, parts = [], []
    for cell, by, num in _blocks(stat, of, row_vars, col_vars):
        shown = [v for v in label_vars if v in by + num + extra_var]
        g = grid(shown)
        K = 1 if g is None else len(g)
        labels.append(cell_labels(label_vars, shown, g, K, cell, margin_label))
        if stat in ("total", "mean"):
            parts.append([_block(d, by, g, value, stat, na_rm) for d in designs])
        elif stat in ("median", "quantile"):
            parts.append([_quantile_block(d, by, g, value, ps, na_rm, level, qrule,
                                          interval_type, survey_version) for d in designs])
        else:
            numv = [value] if stat == "proportion" else num
            parts.append([_share_block(d, by, numv, g, levels, value, stat == "percent",
                                       na_rm, ci_method, level) for d in designs])
    long = pd.concat(labels, ignore_index=True)
    scale = 100.0 if stat == "percent" else 1.0

    def stack(key: str) -> np.ndarray:
        return np.vstack([np.concatenate([p[i][key] for p in parts])
                          for i in range(len(designs))])

    q, u, dfs, nn = stack("e") * scale, stack("v") * scale**2, stack("d"), stack("n")
    meta: dict[str, Any] = {"cv_max": cv_max, "n_min": n_min, "level": level}
    meta.update({"percent": {"of": of}, "median": {"qrule": qrule, "interval_type":
                 interval_type}, "quantile": {"qrule": qrule, "interval_type": interval_type},
                 "proportion": {"ci_method": ci_method}}.get(stat, {}))
    if stat == "percent":
        meta["ci_method"] = ci_method
    limits = (stack("lo")[0] * scale, stack("hi")[0] * scale) if "lo" in parts[0][0] else None
    return _finish(long, q, u, dfs, nn, limits, source, release, level, ci, cv_max, n_min,
                   meta, Table(long, row_vars, col_vars + extra_var, stat, value,
                               margin_label, meta))


def _finish(long: pd.DataFrame, q: np.ndarray, u: np.ndarray, dfs: np.ndarray,
            nn: np.ndarray, limits: tuple | None, source: Any, release: Any, level: float,
            ci: str, cv_max: float | None, n_min: float | None, meta: dict[str, Any],
            shell: Table) -> Table:
    """Estimates, SEs and intervals of the cells from the per-set arrays (m, K): the design's
    own (Wald, Woodruff or svyciprop limits) for one design, the combining rule's for a
    release; CV and flags; the Table laid out as ``shell``."""
    if release is None:
        est, se, df, n_unw = q[0], np.sqrt(u[0]), dfs[0], nn[0]
        if limits is not None:  # Woodruff (quantiles) or svyciprop limits
            lo, hi = limits
        else:
            lo, hi = confidence_interval(est, se, df, level, ci)
        meta["source"] = type(source).__name__
        extra = {}
    else:
        # the rule's df capped by the synthetic designs' df per cell (issue 36, D8;
        # docs/tables.md, "Which rule and which df"); none where a set has no design df
        with np.errstate(invalid="ignore"):
            nu = np.asarray(dfs, dtype=float).min(axis=0)
        nu = np.where(nu > 0, nu, np.nan)
        comb = combine_sets(q, u, kind=release.kind, n_syn=release.n_syn,
                            n_original=getattr(release, "n_original", None), level=level,
                            df_complete=nu)
        est, se, df = (comb[c].to_numpy(float) for c in ("estimate", "se", "df"))
        lo, hi = comb.ci_low.to_numpy(float), comb.ci_high.to_numpy(float)
        n_unw = nn.mean(axis=0)
        meta.update(source="SyntheticRelease", kind=release.kind, m=release.m,
                    source_note=f"Combined over m = {release.m} synthetic data sets "
                    f"({release.kind} synthesis rule).")
        extra = {"between": comb["between"].to_numpy(float),
                 "within": comb["within"].to_numpy(float),
                 "note": comb["note"].to_numpy(object)}
    cv, reason, flag = reliability(est, se, n_unw, cv_max, n_min, df=dfs.min(axis=0))
    long = long.assign(estimate=est, se=se, cv=cv, ci_low=lo, ci_high=hi, df=df,
                       n_unweighted=n_unw, flag=flag, flag_reason=reason, **extra)
    return Table(long, shell.rows, shell.cols, shell.stat, shell.value, shell.margin_label,
                 meta)
