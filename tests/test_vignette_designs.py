"""The designs-and-variance vignette runs (fast mode) and agrees with R to 1e-9."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def test_designs_vignette_fast(tmp_path):
    out = subprocess.run([sys.executable, str(ROOT / "vignettes" / "designs_and_variance.py"),
                          "--fast", "--out", str(tmp_path)], capture_output=True, text=True,
                         timeout=600)
    assert out.returncode == 0, out.stdout[-2000:] + out.stderr[-2000:]
    text = (tmp_path / "designs_and_variance.md").read_text()
    assert "svydesign(id=~dnum+snum, fpc=~fpc1+fpc2, data=apiclus2)" in text
    assert "largest relative difference from R survey" in out.stdout
