"""How many refits the tuning of c needs when Delta_alpha is noisy (pure numpy, seconds).

Model of one refit at c: Delta_alpha = A c^b exp(sigma * G), G a centred Gumbel variable scaled
to SD 1 (a max over draws is right-skewed), A set so the median is the target at c = root. Two
step rules from the same start c0 (the plug-in root of the unweighted fit, typically too high):

* "mean of plug-in": c_next = mean of the last four plug-in roots c_k * target / Delta_alpha_k
  (the plug-in equation with R held fixed; the rule used before 2026-11-22);
* "log-linear": the first step is the plug-in root, then the root of the least-squares line
  log Delta_alpha = a + b log c through all refits (surveysynth.synth.pseudo_posterior.
  loglinear_root, the rule in use).

Both damped to [c/2, 2c]; stop when |Delta_alpha - target| <= 1% of target (cap 60 refits).
Slopes, starts and roots are those seen in the FBS benchmark (docs/benchmarks.md).

    python benchmarks/tuning_simulation.py [--reps 2000]
"""

from __future__ import annotations

import numpy as np

from surveysynth.synth.tuning import loglinear_root as _loglinear_root

TARGET = 3.4
EULER = 0.5772156649015329


def refits(rule: str, sigma: float, b: float, c0: float, root: float,
           rng: np.random.Generator, cap: int = 60) -> int:
    A = TARGET / root**b
    c, hist, logc, logf = c0, [], [], []
    for k in range(1, cap + 1):
        g = (rng.gumbel() - EULER) * np.sqrt(6) / np.pi  # SD 1
        f = A * c**b * np.exp(sigma * g)
        if abs(f - TARGET) <= 0.01 * TARGET:
            return k
        if rule == "mean of plug-in":
            hist.append(c * TARGET / f)
            c_new = float(np.mean(hist[-4:]))
        else:
            logc.append(np.log(c))
            logf.append(np.log(f))
            c_new = (c * TARGET / f if len(logc) == 1
                     else _loglinear_root(np.array(logc), np.array(logf), TARGET))
        c = float(np.clip(c_new, c / 2, 2 * c))
    return cap


def main(argv=None) -> None:
    import argparse

    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--reps", type=int, default=2000, help="simulated tunings per cell")
    reps = ap.parse_args(argv).reps
    print("| noise SD | slope b | c0 -> root | mean of plug-in: mean (90%) | "
          "log-linear: mean (90%) |")
    print("|---|---|---|---|---|")
    for sigma in (0.02, 0.05, 0.10, 0.16):
        for b, c0, root in [(0.5, 1.45, 0.55), (0.75, 1.3, 0.75), (0.9, 1.48, 1.34)]:
            cells = []
            for rule in ("mean of plug-in", "log-linear"):
                rng = np.random.default_rng(1)
                k = np.array([refits(rule, sigma, b, c0, root, rng) for _ in range(reps)])
                cells.append(f"{k.mean():.1f} ({np.percentile(k, 90):.0f})")
            print(f"| {sigma:.0%} | {b} | {c0} -> {root} | {cells[0]} | {cells[1]} |")


if __name__ == "__main__":
    main()
