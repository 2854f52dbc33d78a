"""The fit's progress as events (surveysynth/synth/progress.py), and the release console fed by
them instead of by reading pystan's printed output (issue 38). Real Stan, no mocks: a tiny
test program (tests/stan/normal.stan, compiled by set-up) with short chains."""

from __future__ import annotations

import io
import re
import warnings
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

import surveysynth as ss
from surveysynth.pipeline import Console
from surveysynth.synth import progress
from surveysynth.synth._stan import StanMessageFilter, run_stan  # noqa: PLC2701 - the runner

PROGRAM = (Path(__file__).resolve().parent / "stan" / "normal.stan").read_text()
DATA = {"n": 40, "y": np.random.default_rng(5).normal(3.0, 1.0, 40)}


class Recorder(progress.NullListener):
    """Every event, in order."""

    def __init__(self) -> None:
        self.events: list[tuple] = []

    def on_fit_start(self, label):
        self.events.append(("start", label))

    def on_compile(self, label, status, seconds):
        self.events.append(("compile", label, status, seconds))

    def on_fit_progress(self, label, done, total):
        self.events.append(("progress", label, done, total))

    def on_fit_end(self, label, gates):
        self.events.append(("end", label, gates))

    def on_step(self, label, done, total):
        self.events.append(("step", label, done, total))

    def on_message(self, text):
        self.events.append(("message", text))


def _run(seed: int, label: str = "toy"):
    return run_stan(PROGRAM, DATA, chains=2, draws=150, warmup=150, seed=seed, progress=False,
                    label=label, warn=False)


def test_a_stan_run_reports_start_build_progress_and_end_with_its_gates():
    rec = Recorder()
    with progress.listening(rec):
        res = _run(3)
    kinds = [e[0] for e in rec.events]
    assert kinds[:2] == ["start", "compile"] and kinds[-1] == "end", kinds
    assert {e[1] for e in rec.events if e[0] != "message"} == {"toy"}
    assert rec.events[1][2] in ("cached", "compiled", "repaired")
    done = [e[2] for e in rec.events if e[0] == "progress"]
    assert done and done == sorted(done), done  # pystan's counts, in order
    assert {e[3] for e in rec.events if e[0] == "progress"} == {2 * (150 + 150)}
    gates = rec.events[-1][2]
    assert gates is res.summary and {"max_rhat", "min_ess_bulk", "divergences"} <= set(gates)
    assert not [e for e in rec.events if e[0] == "message"]  # Stan's notes are not messages


def test_events_go_only_to_the_listener_of_the_block():
    rec = Recorder()
    with progress.listening(rec):
        pass
    _run(4)  # no listener: nothing reported, nothing raised
    assert rec.events == []
    inner, outer = Recorder(), Recorder()
    with progress.listening(outer):
        with progress.listening(inner):
            _run(5, "inner")
        _run(6, "outer")
    assert {e[1] for e in inner.events} == {"inner"}
    assert {e[1] for e in outer.events} == {"outer"}


def test_the_console_makes_one_line_per_stan_run():
    """Two runs: "Stan run 1 done" and "Stan run 2 done", once each (a console counting
    progress events, or printing each, would show more lines); a cached model is not noted
    again per run (the compile step said so), a compiled one is."""
    out = io.StringIO()
    con = Console(1, stream=out)
    with progress.listening(con):
        _run(7)
        _run(8)
    lines = out.getvalue().splitlines()
    done = [x for x in lines if re.fullmatch(r"\[3/6\] fit: Stan run \d done in \d+ s", x)]
    assert [x.split()[4] for x in done] == ["1", "2"], lines
    rest = [x for x in lines if x not in done]
    assert all(re.fullmatch(r" {6}Stan model (compiled|repaired) \(\d+\.\ds\)", x)
               for x in rest), lines
    out = io.StringIO()
    Console(1, stream=out).on_compile("toy", "compiled", 83.25)
    assert out.getvalue() == "      Stan model compiled (83.2s)\n"


def test_stan_output_lines_become_events_in_the_adapter():
    """pystan's text is read in one place (synth/_stan.py): progress lines become counts, its
    build lines and Stan's known notes nothing, any other line a message (a real error)."""
    rec = Recorder()
    shown = io.StringIO()
    with progress.listening(rec):
        f = StanMessageFilter(shown, "run")
        f.write("Building: found in cache, done.\nSampling:   0%\nSampling:  25% (100/400)\r")
        f.write("Informational Message: The current Metropolis proposal is about to be\n"
                "rejected ... may be misspecified.\nGradient evaluation took 1e-05 seconds\n")
        f.write("Sampling: 100%, done.\nsomething went wrong in chain 2\n")
    assert rec.events == [("progress", "run", 100, 400),
                          ("message", "something went wrong in chain 2")]
    assert "Informational" not in shown.getvalue() and "went wrong" in shown.getvalue()
    silent = StanMessageFilter(None)  # no target, no label: nothing anywhere
    silent.write("something\n")
    silent.flush()


@pytest.fixture(scope="module")
def api_design():
    rng = np.random.default_rng(11)
    df = pd.DataFrame({"y": rng.normal(500, 80, 120), "x": rng.normal(400, 60, 120),
                       "w": np.full(120, 50.0)})
    return ss.SurveyDesign(df, weights="w")


def test_quantile_regressions_are_steps_and_the_console_shows_the_last(api_design):
    rec = Recorder()
    kw = dict(variables=["y", "x"], bounds={"y": (0, 1000), "x": (0, 1000)}, C_X={"x": 1000},
              epsilon=5, m=1, random_state=3, progress=False)
    with progress.listening(rec):
        ss.synth.QuantileSynthesizer(**kw).fit(api_design)
    steps = [e for e in rec.events if e[0] == "step"]
    total = steps[0][3]
    done = [e[2] for e in steps]
    assert done[0] == 0 and done[-1] == total and done == sorted(set(done)), done
    out = io.StringIO()
    con = Console(1, stream=out)
    with progress.listening(con):
        ss.synth.QuantileSynthesizer(**kw).fit(api_design)
    assert out.getvalue().splitlines() == [f"[3/6] fit: quantile regressions {total}/{total}"]


def test_a_synthesizer_labels_its_stan_runs():
    """The risk-weighted NB synthesizer's one fit reaches the listener under its own label."""
    from surveysynth.datasets.risk import nb_mixture

    rec = Recorder()
    syn = ss.synth.NBSynthesizer("y", alpha=None, m=1, random_state=1,
                                 chains=1, draws=60, warmup=60, progress=False)
    with progress.listening(rec), warnings.catch_warnings():
        warnings.simplefilter("ignore")  # short chains: convergence warnings are expected
        syn.fit(nb_mixture(120, seed=3))
    labels = [e[1] for e in rec.events if e[0] in ("start", "end")]
    assert labels == ["NBSynthesizer fit", "NBSynthesizer fit"], rec.events[:3]
