"""The benchmark scripts run (fast mode, no timing asserted, docs not rewritten)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def test_taylor_benchmark_fast_mode_runs_and_checks_agreement():
    out = subprocess.run([sys.executable, str(ROOT / "benchmarks" / "taylor.py"), "--fast"],
                         capture_output=True, text=True, timeout=600)
    assert out.returncode == 0, out.stderr[-3000:]
    assert "| mean |" in out.stdout and "| total |" in out.stdout


def test_tuning_simulation_runs_and_log_linear_rule_helps_at_low_noise():
    out = subprocess.run([sys.executable, str(ROOT / "benchmarks" / "tuning_simulation.py"),
                          "--reps", "300"], capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr
    rows = [r.split("|")[1:-1] for r in out.stdout.splitlines() if r.startswith("| 2%")]
    assert len(rows) == 3
    # at 2% noise and slope 0.5 (plug-in step far too short) the regression needs fewer refits
    plug, loglin = (float(c.split("(")[0]) for c in rows[0][3:5])
    assert loglin < plug
