"""Database-backed survey designs: R's ``svydesign(dbtype="SQLite", dbname=, data="table")``.

A survey file too large for memory stays in its database table. As in R's ``DBIsvydesign``,
the design variables (ids, strata, weights or probs, fpc) are read once and the design is
built and validated from them; every analysis then reads from the table only the columns it
names (its variables, ``by``, denominators, calibration variables), adds them to the design,
and runs the in-memory estimator. The numbers are therefore exactly the in-memory design's (and
R's, which does the same). Memory holds the design columns plus the columns of one analysis;
for files whose analysis columns do not fit either, :meth:`DBSurveyDesign.to_dask` reads the
table in row ranges into a :class:`~surveysynth.DaskSurveyDesign` (one partition per range,
read on the workers).

SQLite is read with the standard library's ``sqlite3`` (read-only). Any other database
(``dbtype`` another name) is read through SQLAlchemy, when installed, with ``dbname`` its URL
(``postgresql://...``). See docs/db_designs.md.
"""

from __future__ import annotations

import re
import sqlite3
from collections.abc import Mapping, Sequence
from typing import Any

import pandas as pd

from ._validate import parse_vars
from .design import SurveyDesign

# methods that compute from the design (results returned as they are)
_ESTIMATORS = frozenset({"total", "mean", "proportion", "ratio", "quantile"})
# methods that return a new design (wrapped again, so later analyses read from the table)
_TRANSFORMS = frozenset({
    "calibrate", "rake", "post_stratify", "postStratify", "trim_weights", "bootstrap",
    "jackknife", "brr", "sdr", "canty_davison", "gen_boot", "fays_gen_rep",
    "redistribute_weights", "full_design",
})
# read-only properties of the design passed through
_PROPERTIES = frozenset({
    "weights", "full_weights", "n", "degf", "n_stages", "stages", "popsize", "is_subset",
    "is_calibrated", "in_subset", "design_kind", "ids_vars", "strata_vars", "fpc_vars",
    "weights_var", "lonely_psu", "nest", "has_fpc", "ultimate_cluster", "scale", "rscales",
    "type", "mse", "rho",
})
_NAME = re.compile(r"[A-Za-z_.][A-Za-z0-9_.]*")


def _quote(name: str) -> str:
    return '"' + str(name).replace('"', '""') + '"'


class _Source:
    """Where the table lives and how to read some of its columns, in one fixed row order."""

    def __init__(self, dbname: Any, table: str, dbtype: str) -> None:
        if not isinstance(table, str) or not table:
            raise ValueError("data=: give the name of the table (R: data=\"table\").")
        self.dbname, self.table, self.dbtype = dbname, table, str(dbtype)
        self.sqlite = self.dbtype.lower() == "sqlite"
        with self.connect() as con:
            if self.sqlite:
                try:
                    cursor = con.execute(f"SELECT * FROM {_quote(table)} LIMIT 0")
                except sqlite3.OperationalError as exc:
                    raise ValueError(f"table {table!r} cannot be read from {dbname!r} ({exc}). "
                                     "Fix: check the table name (data=) and dbname=.") from exc
                self.columns = [d[0] for d in cursor.description]
                # rowid order, when the table has one (a WITHOUT ROWID table: its key order)
                try:
                    con.execute(f"SELECT rowid FROM {_quote(table)} LIMIT 0")
                    self.order = " ORDER BY rowid"
                except sqlite3.OperationalError:
                    self.order = ""
            else:
                self.columns = list(pd.read_sql_query(
                    f"SELECT * FROM {_quote(table)} WHERE 1 = 0", con).columns)
                self.order = ""

    def connect(self):
        if self.sqlite:
            return _Closing(sqlite3.connect(f"file:{self.dbname}?mode=ro", uri=True))
        try:
            import sqlalchemy
        except ImportError as exc:
            raise ImportError(
                f"dbtype={self.dbtype!r}: databases other than SQLite are read through "
                "SQLAlchemy, which is not installed. Fix: pip install sqlalchemy and the "
                "database's driver, and give dbname as its URL.") from exc
        return sqlalchemy.create_engine(self.dbname).connect()

    def read(self, columns: Sequence[str], chunksize: int | None = None,
             where: str = "") -> pd.DataFrame:
        """The columns of every row, in the table's row order (read in chunks if asked)."""
        missing = [c for c in columns if c not in self.columns]
        if missing:
            raise ValueError(f"columns {missing} are not in table {self.table!r} (its columns: "
                             f"{self.columns[:20]}{' ...' if len(self.columns) > 20 else ''}).")
        sql = (f"SELECT {', '.join(_quote(c) for c in columns)} FROM {_quote(self.table)}"
               f"{where}{self.order}")
        with self.connect() as con:
            if chunksize:
                parts = list(pd.read_sql_query(sql, con, chunksize=int(chunksize)))
                out = pd.concat(parts, ignore_index=True) if parts else \
                    pd.read_sql_query(sql + " LIMIT 0", con)
            else:
                out = pd.read_sql_query(sql, con)
        return out


class _Closing:
    """sqlite3 connections as context managers that close (sqlite3's own only commits)."""

    def __init__(self, con: sqlite3.Connection) -> None:
        self.con = con

    def __enter__(self) -> sqlite3.Connection:
        return self.con

    def __exit__(self, *exc: Any) -> None:
        self.con.close()


def _read_range(dbname: Any, table: str, dbtype: str, columns: list[str], numeric: list[str],
                lo: int, hi: int) -> pd.DataFrame:
    """One partition of :meth:`DBSurveyDesign.to_dask`: the rows with rowid in [lo, hi], the
    ``numeric`` columns as float64 and the others as text (every partition alike, whatever
    its values: an INTEGER column with a NULL in one range only stays one dtype)."""
    src = _Source.__new__(_Source)
    src.dbname, src.table, src.dbtype, src.sqlite = dbname, table, dbtype, True
    src.columns, src.order = list(columns), " ORDER BY rowid"
    out = src.read(columns, where=f" WHERE rowid BETWEEN {int(lo)} AND {int(hi)}")
    for c in columns:
        out[c] = out[c].astype(float) if c in numeric else out[c].astype(object)
    return out


class DBSurveyDesign:
    """A survey design over a database table (R ``svydesign(dbtype=, dbname=, data=)``).

    Parameters
    ----------
    dbname : the SQLite file (or, for another ``dbtype``, a SQLAlchemy URL).
    table : the table holding the sample, one row per unit (R's ``data="table"``).
    ids, strata, weights, probs, fpc, nest, lonely_psu, ... : as :class:`SurveyDesign`, as
        column names or formulas (the columns are read from the table).
    dbtype : ``"SQLite"`` (default, the standard library) or a name for SQLAlchemy.
    chunksize : read the table in chunks of this many rows (bounded peak memory of the
        database driver); ``None`` reads each query at once.

    The estimators (``total``, ``mean``, ``proportion``, ``ratio``, ``quantile``, and
    ``ss.tabulate(d, ...)``) take the same arguments as on :class:`SurveyDesign`; the columns they name
    are read from the table for that call only. ``calibrate``, ``rake``, ``post_stratify``,
    ``trim_weights``, ``subset`` and the replicate makers (``jackknife``, ``bootstrap``,
    ``sdr``, ...) return a new DBSurveyDesign over the same table. :meth:`fetch` reads columns
    (for a subset mask, say); :meth:`design` gives the in-memory design with some columns.

    >>> import sqlite3, tempfile, os, pandas as pd
    >>> import surveysynth as ss
    >>> df = pd.DataFrame({"stype": ["E", "E", "E", "H", "H", "H"],
    ...                    "pw": [10.0, 10.0, 10.0, 5.0, 5.0, 5.0],
    ...                    "api00": [600.0, 650.0, 700.0, 550.0, 600.0, 640.0]})
    >>> path = os.path.join(tempfile.mkdtemp(), "api.db")
    >>> with sqlite3.connect(path) as con:
    ...     _ = df.to_sql("api", con, index=False)
    >>> d = ss.DBSurveyDesign(path, "api", strata="stype", weights="pw")
    >>> d.mean("api00")[["variable", "estimate", "se"]].round(2)
      variable  estimate     se
    0    api00    632.22  21.11
    """

    def __init__(self, dbname: Any, table: str, ids: Any = None, strata: Any = None,
                 weights: Any = None, probs: Any = None, fpc: Any = None,
                 dbtype: str = "SQLite", chunksize: int | None = None,
                 **design_options: Any) -> None:
        for arg, val in (("weights", weights), ("probs", probs)):
            if val is not None and not isinstance(val, str):
                raise ValueError(f"{arg}=: give a column of the table (a name or formula); "
                                 "a database design reads its weights from the table.")
        self._src = _Source(dbname, table, dbtype)
        self._chunksize = chunksize
        self._spec = dict(ids=ids, strata=strata, weights=weights, probs=probs, fpc=fpc,
                          **design_options)
        cols: list[str] = []
        for arg in ("ids", "strata", "weights", "probs", "fpc"):
            cols += parse_vars(self._spec[arg], arg) or []
        design_cols = list(dict.fromkeys(cols))
        frame = self._src.read(design_cols, chunksize) if design_cols else \
            pd.DataFrame(index=pd.RangeIndex(self._count()))
        self._design = SurveyDesign(frame, **self._spec)

    # ------------------------------------------------------------------ construction
    @classmethod
    def _wrap(cls, parent: DBSurveyDesign, design: Any) -> DBSurveyDesign:
        new = object.__new__(cls)
        new._src, new._chunksize, new._spec = parent._src, parent._chunksize, parent._spec
        new._design = design
        return new

    def _count(self) -> int:
        with self._src.connect() as con:
            return int(pd.read_sql_query(f"SELECT COUNT(*) AS n FROM "
                                         f"{_quote(self._src.table)}", con)["n"].iloc[0])

    # ------------------------------------------------------------------ columns
    @property
    def table_columns(self) -> list[str]:
        """The columns of the table."""
        return list(self._src.columns)

    @property
    def dbname(self) -> Any:
        return self._src.dbname

    @property
    def table(self) -> str:
        return self._src.table

    def fetch(self, columns: str | Sequence[str]) -> pd.DataFrame:
        """Columns of the table, one row per row of the full sample (for subset masks)."""
        cols = [columns] if isinstance(columns, str) else list(columns)
        out = self._src.read(cols, self._chunksize)
        out.index = self._design.full_data.index
        return out

    def _needed(self, args: tuple, kwargs: Mapping) -> list[str]:
        """Table columns named by the arguments (names, lists, formulas) and not yet loaded."""
        have = set(map(str, self._design.full_data.columns))
        table = set(self._src.columns)
        found: list[str] = []

        def visit(x: Any) -> None:
            if isinstance(x, str):
                for tok in [x, *_NAME.findall(x)]:
                    if tok in table and tok not in have:
                        found.append(tok)
            elif isinstance(x, Mapping):
                for k, v in x.items():
                    visit(k)
                    visit(v)
            elif isinstance(x, (list, tuple)):
                for v in x:
                    visit(v)
            elif isinstance(x, pd.DataFrame):
                for c in x.columns:
                    visit(c)

        for a in args:
            visit(a)
        for v in kwargs.values():
            visit(v)
        return list(dict.fromkeys(found))

    def design(self, columns: str | Sequence[str] = ()) -> Any:
        """The in-memory design (SurveyDesign or ReplicateDesign, any calibration and subset
        kept) with the design columns and ``columns`` of the table."""
        cols = [columns] if isinstance(columns, str) else list(columns)
        have = set(map(str, self._design.full_data.columns))
        cols = [c for c in dict.fromkeys(cols) if c not in have]
        if not cols:
            return self._design
        return self._design.with_columns(self.fetch(cols))

    # ------------------------------------------------------------------ analysis
    def subset(self, mask: Any) -> DBSurveyDesign:
        """The domain where ``mask`` holds (R ``subset``): a boolean array over the rows in
        the design, e.g. ``d.fetch("sch.wide")["sch.wide"].eq("Yes")`` on a full design."""
        if isinstance(mask, pd.Series):
            mask = mask.to_numpy()
        return self._wrap(self, self._design.subset(mask))

    def __getattr__(self, name: str) -> Any:
        if name.startswith("_"):
            raise AttributeError(name)
        if name in _PROPERTIES:
            return getattr(self._design, name)
        if name in _ESTIMATORS or name in _TRANSFORMS:
            def method(*args: Any, **kwargs: Any) -> Any:
                d = self.design(self._needed(args, kwargs))
                out = getattr(d, name)(*args, **kwargs)
                if name in _TRANSFORMS and getattr(out, "design_kind", None) is not None:
                    return self._wrap(self, out)
                return out
            method.__name__ = name
            method.__doc__ = getattr(type(self._design), name).__doc__
            return method
        raise AttributeError(f"DBSurveyDesign has no {name!r}; call .design(columns) for the "
                             "in-memory design with the columns it needs.")

    def _engine_tabulate(self, rows: Any, cols: Any = None, value: Any = None, *args: Any,
                         **kwargs: Any) -> Any:
        """``ss.tabulate(d, ...)`` on a database design: the same table, from the columns
        the table needs."""
        from .tables import tabulate

        return tabulate(self.design(self._needed((rows, cols, value) + args, kwargs)), rows,
                        cols, value, *args, **kwargs)

    # ------------------------------------------------------------------ out of memory
    def to_dask(self, columns: str | Sequence[str], chunk_rows: int = 1_000_000,
                **dask_options: Any) -> Any:
        """A :class:`~surveysynth.DaskSurveyDesign` reading the design columns and
        ``columns`` from the table in ranges of ``chunk_rows`` rowids, one Dask partition per
        range (read where the partition is computed): for analysis columns too large for
        memory. SQLite tables with a rowid only; linearization designs given by ``weights=``
        (the Dask engine's scope: no ``probs``, calibration or subset)."""
        if not self._src.sqlite or not self._src.order:
            raise NotImplementedError("to_dask reads SQLite tables by rowid ranges; this table "
                                      "has none. Fix: export it to Parquet and use "
                                      "DaskSurveyDesign.from_parquet.")
        if self._design.design_kind != "taylor" or self._design.is_calibrated \
                or self._design.is_subset or self._spec.get("weights") is None:
            raise NotImplementedError(
                "to_dask: the Dask engine takes a linearization design given by weights=, "
                "without calibration or subset (estimate by= a 0/1 column instead).")
        import dask
        import dask.dataframe as dd

        from .engines.dask_engine import DaskSurveyDesign

        spec = self._spec
        wcols = parse_vars(spec["weights"], "weights") or []
        if len(wcols) != 1:
            raise NotImplementedError("to_dask: give weights= as one column.")
        cols = [columns] if isinstance(columns, str) else list(columns)
        design_cols = [c for a in ("ids", "strata", "fpc") for c in parse_vars(spec[a], a) or []]
        need = list(dict.fromkeys(design_cols + wcols + cols))
        with self._src.connect() as con:
            lo, hi = con.execute(f"SELECT MIN(rowid), MAX(rowid) FROM "
                                 f"{_quote(self._src.table)}").fetchone()
        with self._src.connect() as con:  # SQLite's declared column types
            decl = {r[1]: str(r[2]).upper() for r in
                    con.execute(f"PRAGMA table_info({_quote(self._src.table)})")}
        numeric = [c for c in need if any(t in decl.get(c, "") for t in
                                          ("INT", "REAL", "FLOA", "DOUB", "NUM", "DEC"))]
        meta = pd.DataFrame({c: pd.Series(dtype=float if c in numeric else object)
                             for c in need})
        args = (self._src.dbname, self._src.table, self._src.dbtype, need, numeric)
        parts = [dask.delayed(_read_range)(*args, a, min(a + chunk_rows - 1, hi))
                 for a in range(int(lo), int(hi) + 1, int(chunk_rows))]
        ddf = dd.from_delayed(parts, meta=meta, verify_meta=False)
        keep = {k: v for k, v in spec.items()
                if k in ("nest", "lonely_psu", "adjust_domain_lonely", "ultimate_cluster")}
        return DaskSurveyDesign(ddf, ids=parse_vars(spec["ids"], "ids"),
                                strata=parse_vars(spec["strata"], "strata"),
                                weights=wcols[0], fpc=parse_vars(spec["fpc"], "fpc"),
                                **keep, **dask_options)

    def __repr__(self) -> str:
        return (f"DB-backed {self._design!r}\nDBSurveyDesign(dbname={self._src.dbname!r}, "
                f"table={self._src.table!r}, dbtype={self._src.dbtype!r})")


def svydesign(ids: Any = None, strata: Any = None, weights: Any = None, probs: Any = None,
              fpc: Any = None, data: Any = None, dbtype: str | None = None,
              dbname: Any = None, **options: Any) -> Any:
    """R's ``svydesign``: with ``dbtype`` and ``dbname``, ``data`` is the name of a table and
    the design is a :class:`DBSurveyDesign`; otherwise a :class:`SurveyDesign` of the
    DataFrame ``data``."""
    if dbtype is not None or dbname is not None:
        if dbname is None:
            raise ValueError("dbtype= given without dbname= (the database file or URL).")
        return DBSurveyDesign(dbname, data, ids=ids, strata=strata, weights=weights,
                              probs=probs, fpc=fpc, dbtype=dbtype or "SQLite", **options)
    return SurveyDesign(data, ids=ids, strata=strata, weights=weights, probs=probs, fpc=fpc,
                        **options)


__all__ = ["DBSurveyDesign", "svydesign"]
