"""Official tabulation: interior cells, margins and grand total with SE, CV, CI and flags.

``tabulate(source, rows, cols, value, stat)`` makes the kind of table a statistical agency
publishes from a survey (METHODS section 5): counts (sums of weights), totals or domain means by
the cells of ``rows`` x ``cols``, with the row margins (by ``rows`` only), the column margins
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

STATS = ("total", "mean")
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
        interior = self.long[self.long.cell == "interior"]
        seen = list(dict.fromkeys(map(tuple, interior[variables].to_numpy().tolist())))
        return seen + [tuple([self.margin_label] * len(variables))]

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
        what = "count" if self.value is None else f"{self.stat} of {self.value}"
        note = self.meta.get("source_note", "")
        return (f"Cells: {what} (standard error). * unreliable: " + " or ".join(crit) + "."
                + (f" {note}" if note else ""))

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
        long["n_unweighted"] = np.rint(long["n_unweighted"].to_numpy(float)).astype("int64")
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
           stat: str, na_rm: bool):
    """Estimates, variances, df and unweighted n of one table block on the full level grid."""
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
    est, var = est[:, 0], var[:, 0]
    if grid is None:
        return est, var, df, n_unw
    have = pd.MultiIndex.from_frame(by_df[by].astype(object))
    pos = have.get_indexer(grid)
    found = pos >= 0
    K = len(grid)
    fill = 0.0 if stat == "total" else np.nan
    e = np.full(K, fill)
    v = np.full(K, 0.0 if stat == "total" else np.nan)
    d = np.full(K, np.nan)
    n = np.zeros(K)
    e[found], v[found], d[found], n[found] = est[pos[found]], var[pos[found]], df[pos[found]], \
        n_unw[pos[found]]
    return e, v, d, n


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
) -> Table:
    """Tabulate counts, totals or means by ``rows`` x ``cols`` with margins, SE, CV, CI, flags.

    Parameters
    ----------
    source : SurveyDesign, ReplicateDesign or SyntheticRelease.
    rows, cols : classification variable(s) of the table rows and columns (``cols`` optional).
    value : numeric variable; ``None`` with ``stat="total"`` tabulates counts (sums of weights).
    stat : ``"total"`` (counts or totals of ``value``) or ``"mean"`` (domain means of ``value``).
    cv_max, n_min : reliability thresholds (None disables one).
    level, ci : confidence level; ``"normal"`` (R confint) or ``"t"`` (design df). Releases use
        the combining rule's df.
    na_rm : drop records with missing ``value`` from the estimate (kept for the variance).
    margin_label : label of margin rows/columns in the label columns.

    Returns
    -------
    :class:`Table`: ``.long`` (one row per cell), ``.wide(what)``, ``.display()``, exports.
    """
    if stat not in STATS:
        raise ValueError(f"stat={stat!r}: choose 'total' or 'mean'.")
    if stat == "mean" and value is None:
        raise ValueError("stat='mean' needs value=<numeric column>: the mean of what?")
    designs, release = _check_source(source)
    row_vars, col_vars = as_list(rows), as_list(cols)
    if not row_vars:
        raise ValueError("rows: give at least one classification variable.")
    dup = set(row_vars) & set(col_vars)
    if dup or len(set(row_vars)) < len(row_vars) or len(set(col_vars)) < len(col_vars):
        raise ValueError(f"rows={row_vars}, cols={col_vars}: a variable may appear only once.")
    if value is not None and value in row_vars + col_vars:
        raise ValueError(f"value={value!r} is also a classification variable.")
    for d in designs:
        require_columns(d.full_data, row_vars + col_vars + ([value] if value else []), "tabulate")
    levels = {v: union_levels(designs, v) for v in row_vars + col_vars}

    def grid(vs: list[str]) -> pd.MultiIndex | None:
        if not vs:
            return None
        return pd.MultiIndex.from_product([levels[v] for v in vs], names=vs)

    blocks = [("interior", row_vars + col_vars)]
    if col_vars:
        blocks += [("row margin", row_vars), ("column margin", col_vars)]
    blocks.append(("grand total", []))
    labels, parts = [], []
    for cell, by in blocks:
        g = grid(by)
        K = 1 if g is None else len(g)
        labels.append(cell_labels(row_vars + col_vars, by, g, K, cell, margin_label))
        parts.append([_block(d, by, g, value, stat, na_rm) for d in designs])
    long = pd.concat(labels, ignore_index=True)
    q = np.column_stack([np.concatenate([p[i][0] for p in parts]) for i in range(len(designs))]).T
    u = np.column_stack([np.concatenate([p[i][1] for p in parts]) for i in range(len(designs))]).T
    dfs = np.column_stack([np.concatenate([p[i][2] for p in parts]) for i in range(len(designs))]).T
    nn = np.column_stack([np.concatenate([p[i][3] for p in parts]) for i in range(len(designs))]).T
    meta: dict[str, Any] = {"cv_max": cv_max, "n_min": n_min, "level": level}
    if release is None:
        est, se, df, n_unw = q[0], np.sqrt(u[0]), dfs[0], nn[0]
        lo, hi = confidence_interval(est, se, df, level, ci)
        meta["source"] = type(source).__name__
        extra = {}
    else:
        comb = combine_sets(q, u, kind=release.kind, n_syn=release.n_syn,
                            n_original=getattr(release, "n_original", None), level=level)
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
    return Table(long, row_vars, col_vars, stat, value, margin_label, meta)
