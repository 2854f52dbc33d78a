"""Database-backed designs (R ``svydesign(dbtype="SQLite", dbname=, data="table")``) against R
survey 4.1.1's own DB-backed designs through RSQLite (live, rpy2) on one SQLite file that R
writes, and against the in-memory SurveyDesign on the same rows."""

from __future__ import annotations

import sqlite3

import numpy as np
import pandas as pd
import pytest

import surveysynth as ss
from r_bridge import r_session
from surveysynth.db_design import svydesign
from tests.conftest import assert_rel

POP = {"(Intercept)": 6194, "stypeH": 755, "stypeM": 1018}


@pytest.fixture(scope="module")
def db(R, tmp_path_factory):
    """An SQLite file written by R (RSQLite), dots in names made underscores (R's DB designs
    paste names into SQL unquoted), and the same tables as pandas for the in-memory design."""
    path = str(tmp_path_factory.mktemp("db") / "api.db")
    with r_session("survey") as (ro, _):
        ro.r("suppressMessages(library(RSQLite))")
        ro.r(f"""local({{ con <- dbConnect(SQLite(), "{path}")
            for (nm in c("apiclus1", "apistrat", "apiclus2")) {{
              a <- get(nm); names(a) <- gsub(".", "_", names(a), fixed=TRUE)
              dbWriteTable(con, nm, a, overwrite=TRUE) }}
            dbDisconnect(con) }})""")
    with sqlite3.connect(path) as con:
        frames = {t: pd.read_sql_query(f"SELECT * FROM {t} ORDER BY rowid", con)
                  for t in ("apiclus1", "apistrat", "apiclus2")}
    return path, frames


def r_db(R, path, design, exprs):
    body = "; ".join(f"s <- {e}; out <- c(out, as.numeric(coef(s)), as.numeric(SE(s)))"
                     for e in exprs)
    return R(f'local({{ suppressMessages(library(RSQLite)); d <- {design.format(path=path)}; '
             f'out <- c(); {body}; close(d); out }})')


def ours(d):
    parts = [d.mean("api00"), d.mean("api00", by="stype"), d.ratio("api_stu", "enroll", na_rm=True),
             d.proportion("stype"), d.total(["enroll", "api00"], na_rm=True)]
    return np.concatenate([np.r_[p.estimate.to_numpy(), p.se.to_numpy()] for p in parts])


R_EXPRS = ["svymean(~api00, d)", "svyby(~api00, ~stype, d, svymean)",
           "svyratio(~api_stu, ~enroll, d, na.rm=TRUE)", "svymean(~stype, d)",
           "svytotal(~enroll+api00, d, na.rm=TRUE)"]
CASES = {
    "clus1": ('svydesign(id=~dnum, weights=~pw, fpc=~fpc, data="apiclus1", dbtype="SQLite", '
              'dbname="{path}")', "apiclus1", dict(ids="dnum", weights="pw", fpc="fpc")),
    "strat": ('svydesign(id=~1, strata=~stype, weights=~pw, fpc=~fpc, data="apistrat", '
              'dbtype="SQLite", dbname="{path}")', "apistrat",
              dict(strata="stype", weights="pw", fpc="fpc")),
    "clus2": ('svydesign(id=~dnum+snum, fpc=~fpc1+fpc2, data="apiclus2", dbtype="SQLite", '
              'dbname="{path}")', "apiclus2", dict(ids="~dnum+snum", fpc="~fpc1+fpc2")),
}


@pytest.mark.parametrize("name", list(CASES))
def test_equals_r_db_design(R, db, name):
    path, frames = db
    rd, table, kw = CASES[name]
    d = ss.DBSurveyDesign(path, table, **kw)
    r = r_db(R, path, rd, R_EXPRS)
    assert_rel(ours(d), r, what=name)
    mem = ss.SurveyDesign(frames[table], **kw)
    assert_rel(ours(d), ours(mem), tol=1e-13, what=f"{name} in memory")
    # only the design columns are held; an analysis reads its columns for that call only
    held = set(d.design().full_data.columns)
    assert held == set(sum(([v] if isinstance(v, str) and not v.startswith("~") else
                            v[1:].split("+") for v in kw.values()), []))
    assert "api00" not in held


def test_subset_calibrate_replicates_quantile(R, db):
    path, frames = db
    rd = CASES["clus1"][0]
    d = svydesign(ids="dnum", weights="pw", fpc="fpc", data="apiclus1", dbtype="SQLite",
                  dbname=path)
    assert isinstance(d, ss.DBSurveyDesign)
    sub = d.subset(d.fetch("sch_wide")["sch_wide"].eq("Yes"))
    cal = d.calibrate("~stype", POP)
    jk = d.jackknife("JK1")
    q = d.quantile("api00", 0.5)
    vals = [sub.mean("api00"), cal.mean("api00"), cal.total("enroll"), jk.mean("api00"),
            jk.total("enroll")]
    got = np.concatenate([np.r_[v.estimate.to_numpy(), v.se.to_numpy()] for v in vals])
    r = r_db(R, path, rd, [
        "svymean(~api00, subset(d, sch_wide == 'Yes'))",
        "svymean(~api00, calibrate(d, ~stype, c(`(Intercept)`=6194, stypeH=755, stypeM=1018)))",
        "svytotal(~enroll, calibrate(d, ~stype, c(`(Intercept)`=6194, stypeH=755, "
        "stypeM=1018)))"])
    # R's as.svrepdesign of a DB design keeps only the design variables: JK1 vs R in memory
    rj = R("local({ d <- as.svrepdesign(svydesign(id=~dnum, weights=~pw, fpc=~fpc, "
           "data=apiclus1), type='JK1'); a <- svymean(~api00, d); b <- svytotal(~enroll, d); "
           "c(coef(a), SE(a), coef(b), SE(b)) })")
    assert_rel(got, np.r_[r, rj], what="subset / calibrate / JK1")
    rq = R(f'local({{ suppressMessages(library(RSQLite)); d <- {rd.format(path=path)}; '
           'q <- svyquantile(~api00, d, 0.5); out <- c(q$api00[1, 1:3], SE(q)); close(d); out })')
    assert_rel(np.r_[q.estimate, q.ci_low, q.ci_high, q.se], rq, what="median")
    assert isinstance(cal, ss.DBSurveyDesign) and cal.is_calibrated
    assert "DBSurveyDesign" in repr(cal)
    # tables from the same columns
    t1 = ss.tabulate(d, "stype", value="api00", stat="mean")
    t2 = ss.tabulate(ss.SurveyDesign(frames["apiclus1"], ids="dnum", weights="pw", fpc="fpc"),
                     "stype", value="api00", stat="mean")
    pd.testing.assert_frame_equal(t1.long, t2.long)


def test_chunked_reads_and_dask(db):
    pytest.importorskip("dask")
    pytest.importorskip("distributed")
    path, frames = db
    kw = dict(ids="~dnum+snum", fpc="~fpc1+fpc2")
    mem = ss.SurveyDesign(frames["apiclus2"], **kw)
    d = ss.DBSurveyDesign(path, "apiclus2", chunksize=7, **kw)
    assert_rel(ours(d), ours(mem), tol=1e-13, what="chunked")
    w = ss.DBSurveyDesign(path, "apiclus2", ids="~dnum+snum", weights="pw")
    dk = w.to_dask(["api00", "stype"], chunk_rows=20)
    m_mem = ss.SurveyDesign(frames["apiclus2"], ids="~dnum+snum", weights="pw")
    a, b = dk.mean("api00", by="stype"), m_mem.mean("api00", by="stype")
    assert_rel(a.estimate, b.estimate, tol=1e-12)
    assert_rel(a.se, b.se, tol=1e-12)


def test_errors(db, tmp_path):
    path, _ = db
    with pytest.raises(ValueError, match="cannot be read"):
        ss.DBSurveyDesign(path, "nosuch", ids="dnum", weights="pw")
    with pytest.raises(ValueError, match="not in table"):
        ss.DBSurveyDesign(path, "apiclus1", ids="dnum", weights="pweight")
    d = ss.DBSurveyDesign(path, "apiclus1", ids="dnum", weights="pw", fpc="fpc")
    with pytest.raises(ValueError, match="not in table"):
        d.fetch("nosuch")
    with pytest.raises(ValueError, match="column of the table"):
        ss.DBSurveyDesign(path, "apiclus1", ids="dnum", weights=np.ones(183))
    with pytest.raises(AttributeError, match="design\\(columns\\)"):
        d.svyglm  # noqa: B018
    with pytest.raises(ValueError, match="dbname"):
        svydesign(ids="dnum", data="apiclus1", dbtype="SQLite")
    # read-only: the file is never written
    before = open(path, "rb").read()
    d.mean("api00")
    assert open(path, "rb").read() == before
