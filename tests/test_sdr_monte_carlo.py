"""The SDR repeated-sampling study (vignettes/sdr_monte_carlo.py): its committed report is the
report of its committed store, and the report's arithmetic is recomputed here from the store."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

ROOT = Path(__file__).resolve().parent.parent
STORE = ROOT / "vignettes" / "output" / "sdr_mc" / "D3.4"


def _strip_timing(text: str) -> str:
    return re.sub(r"Rendered in \d+ s", "Rendered in - s", text)


def _strip_stale_banner(text: str) -> str:
    """The report without a leading STALE banner (scripts/provenance.py mark-stale: provenance
    metadata saying the code changed since the store was made; tests/test_provenance.py checks
    it). The rendering must still be that of the committed store."""
    return text.split("\n\n", 1)[1] if text.startswith("> **STALE**") else text


@pytest.mark.parametrize("store, name", [("D3.4", "sdr_monte_carlo.md"),
                                         ("D1.8", "sdr_monte_carlo_D1.8.md"),
                                         ("D1.8_main", "sdr_monte_carlo_D1.8_main.md")])
def test_committed_report_is_the_report_of_the_committed_store(tmp_path, store, name):
    path = STORE.parent / store
    r = subprocess.run([sys.executable, str(ROOT / "vignettes" / "sdr_monte_carlo.py"),
                        "--store", str(path.relative_to(ROOT)), "--report-only", "--quiet",
                        "--out", str(tmp_path)], capture_output=True, text=True, cwd=ROOT,
                       timeout=600)
    assert r.returncode == 0, r.stderr[-3000:]
    fresh = (tmp_path / name).read_text()
    committed = (ROOT / "vignettes" / "output" / name).read_text()
    assert _strip_timing(fresh) == _strip_timing(_strip_stale_banner(committed))
    reps = len(list(path.glob("rep_*.parquet")))
    assert f"; {reps} samples of n = 1,000" in fresh


def test_bias_rows_recomputed_from_the_store():
    """Mean over cells of the per-cell mean relative error, by hand from the replicate files
    (kills a bias computed against the confidential estimate, or averaged over samples first
    with the refused samples as zeros)."""
    rep = pd.concat([pd.read_parquet(f) for f in sorted(STORE.glob("rep_*.parquet"))])
    md = (ROOT / "vignettes" / "output" / "sdr_monte_carlo.md").read_text()
    for method, kind in (("FBP D3.4 m10", "mean"), ("FBP D3.4 m10", "count"),
                         ("Sample", "mean")):
        sub = rep[(rep["method"] == method) & rep["estimand"].str.startswith(kind + " ")
                  & rep["estimate"].notna()]
        rel = (sub["estimate"] - sub["truth"]) / sub["truth"]
        expected = 100 * rel.groupby(sub["estimand"]).mean().mean()
        row = re.search(rf"\| {re.escape(method)}, {kind} \| ([-0-9.e+]+) \|", md)
        assert row, (method, kind)
        assert float(row.group(1)) == round(expected, 2)
    # refused samples are absent, not zeros: every FBP estimate row that exists is finite
    fbp = rep[rep["method"].str.startswith("FBP")]
    assert np.isfinite(fbp["estimate"].dropna()).all()


def test_a_run_resumes_only_a_store_of_the_same_code(tmp_path):
    """Resuming after an interruption must not mix two code versions in one report: a store
    whose samples record other code, or none (made before code stamps), is refused with the
    fix; a store of the current code, or an empty one, resumes. The stamp is the SHA-256 of the
    study's PROVENANCE depends, so it kills a check that compares only the commit (a changed
    work tree at the same commit) and one that trusts an unstamped store."""
    import json

    sys.path.insert(0, str(ROOT / "vignettes"))
    import sdr_monte_carlo as mc

    stamp = mc.code_stamp()
    assert len(stamp["code_sha256"]) == 64
    mc.check_resumable(tmp_path, stamp)                       # nothing stored yet: fine
    (tmp_path / "rep_00000.parquet").write_bytes(b"")
    (tmp_path / "config.json").write_text(json.dumps({"chains": 2}))
    with pytest.raises(SystemExit, match="do not record the code"):
        mc.check_resumable(tmp_path, stamp)
    other = {**stamp, "code_sha256": "0" * 64}
    (tmp_path / "config.json").write_text(json.dumps({"chains": 2, "code": other}))
    with pytest.raises(SystemExit, match="has changed since"):
        mc.check_resumable(tmp_path, stamp)
    (tmp_path / "config.json").write_text(json.dumps({"chains": 2, "code": stamp}))
    mc.check_resumable(tmp_path, stamp)
