"""The benchmark scripts run (fast mode, no timing asserted, docs not rewritten)."""

from __future__ import annotations

import importlib.util
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def test_taylor_benchmark_fast_mode_runs_and_checks_agreement():
    out = subprocess.run([sys.executable, str(ROOT / "benchmarks" / "taylor.py"), "--fast"],
                         capture_output=True, text=True, timeout=600)
    assert out.returncode == 0, out.stderr[-3000:]
    rows = {r.split("|")[1].strip(): r.split("|")[2:-1] for r in out.stdout.splitlines()
            if r.startswith("| ") and not r.startswith("| statistic")}
    assert set(rows) == {"mean", "total", "ratio", "proportion"}, out.stdout
    # the svy column (5th) holds a time when svy is installed, else n/a and the reason
    if importlib.util.find_spec("svy") is not None:
        assert all(r[3].strip().endswith(" s") for r in rows.values()), out.stdout
    else:
        assert all(r[3].strip() == "n/a" for r in rows.values()), out.stdout
        assert "svy not installed" in out.stderr


def test_tuning_simulation_runs_and_log_linear_rule_helps_at_low_noise():
    out = subprocess.run([sys.executable, str(ROOT / "benchmarks" / "tuning_simulation.py"),
                          "--reps", "300"], capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr
    rows = [r.split("|")[1:-1] for r in out.stdout.splitlines() if r.startswith("| 2%")]
    assert len(rows) == 3
    # at 2% noise and slope 0.5 (plug-in step far too short) the regression needs fewer refits
    plug, loglin = (float(c.split("(")[0]) for c in rows[0][3:5])
    assert loglin < plug


def test_taylor_benchmark_without_svy_gives_the_reason():
    code = ("import sys; sys.modules['svy'] = None; sys.path.insert(0, 'benchmarks'); "
            "import taylor; t, why = taylor.svy_engine(taylor.make_data(2000, 4, 5, 3), {}, 1); "
            "print(t == {}, why)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         timeout=300, cwd=ROOT)
    assert out.returncode == 0, out.stderr[-3000:]
    assert out.stdout.startswith("True svy not installed") and "pip install svy" in out.stdout


def test_seq_programs_benchmark_fast_mode_runs_side_by_side():
    """benchmarks/seq_programs.py (issue 39 item 2): the baseline commit's programs against the
    checkout's on the same step data; both fits run and agree (same posterior)."""
    base = subprocess.run(["git", "-C", str(ROOT), "rev-list", "-n", "1", "HEAD"],
                          capture_output=True, text=True)
    if base.returncode != 0:
        raise AssertionError(f"git is needed for the baseline's programs: {base.stderr}")
    out = subprocess.run([sys.executable, str(ROOT / "benchmarks" / "seq_programs.py"), "--fast",
                          "--baseline", base.stdout.strip()],
                         capture_output=True, text=True, timeout=900)
    assert out.returncode == 0, out.stderr[-3000:]
    rows = [r.split("|")[1:-1] for r in out.stdout.splitlines()
            if r.startswith("| occupation") or r.startswith("| educ")]
    assert [r[1].strip() for r in rows] == ["categorical", "ordinal"], out.stdout
    # against HEAD the two programs are the same text: the same posterior, to Monte Carlo
    # error (both seeded alike; a gap of whole posterior SDs would mean a broken harness)
    assert all(float(r[-1]) < 0.5 for r in rows), out.stdout
