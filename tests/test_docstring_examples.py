"""Every public class shows a runnable example in its docstring (issue 37, item 7).

The classes are those ``surveysynth`` exports and the synthesizers of ``surveysynth.synth``
(exceptions and warnings excepted); each docstring must hold at least one doctest example,
and the examples run here with doctest (whitespace normalised, so the printed frames need no
trailing blanks). Synthesizer examples run short chains on 60 records. pystan writes
"Building..." to stdout when it loads a compiled model outside a terminal: that line is
pystan's, not the example's, and is ignored.
"""

from __future__ import annotations

import doctest
import inspect

import pytest

import surveysynth as ss
import surveysynth.synth as synth

_PYSTAN_LINES = ("Building...", "Building: found in cache, done.")


def _public_classes() -> dict[str, type]:
    out = {}
    for module, names in ((ss, ss.__all__), (synth, synth.__all__)):
        for name in names:
            obj = getattr(module, name, None)
            if inspect.isclass(obj) and not issubclass(obj, (Exception, Warning)):
                out[f"{module.__name__}.{name}"] = obj
    return out


CLASSES = _public_classes()


class _Checker(doctest.OutputChecker):
    def check_output(self, want: str, got: str, optionflags: int) -> bool:
        got = "".join(line for line in got.splitlines(keepends=True)
                      if line.strip() not in _PYSTAN_LINES)
        return super().check_output(want, got, optionflags)


def test_the_public_classes_are_found():
    assert {"surveysynth.SurveyDesign", "surveysynth.ReplicateDesign",
            "surveysynth.SyntheticRelease", "surveysynth.Table", "surveysynth.synth.FBS",
            "surveysynth.synth.QuantileSynthesizer", "surveysynth.synth.Sequential"} <= set(CLASSES)


@pytest.mark.parametrize("name", sorted(CLASSES))
def test_class_docstring_example_runs(name):
    cls = CLASSES[name]
    tests = doctest.DocTestFinder(recurse=False).find(cls, name, globs={})
    examples = sum(len(t.examples) for t in tests)
    assert examples > 0, f"{name}: no example (>>> lines) in its docstring"
    runner = doctest.DocTestRunner(checker=_Checker(), optionflags=doctest.NORMALIZE_WHITESPACE
                                   | doctest.ELLIPSIS)
    for t in tests:
        runner.run(t)
    result = runner.summarize(verbose=False)
    assert result.failed == 0, f"{name}: {result.failed} of {result.attempted} examples failed"


ENGINE_API = {
    ss.SurveyDesign: ["domains", "missing_rows", "numeric_values", "level_indicators",
                      "domain_ratios", "domain_df", "resolve_df", "with_calibration"],
    ss.ReplicateDesign: ["domains", "missing_rows", "numeric_values", "level_indicators",
                         "domain_ratios", "domain_df", "resolve_df", "from_factors",
                         "replicate_estimates"],
}


@pytest.mark.parametrize("cls", list(ENGINE_API), ids=lambda c: c.__name__)
def test_internal_helpers_are_marked_in_help(cls):
    """help() marks the engine API as internal in each method's first line, and the class
    docstring names the analysis API: a helper turned public without the mark fails here."""
    import pydoc

    text = pydoc.render_doc(cls, renderer=pydoc.plaintext)
    for name in ENGINE_API[cls]:
        doc = inspect.getdoc(getattr(cls, name))
        assert doc.startswith("Engine API, internal"), name
        block = text[text.index(f" {name}("):]
        assert "Engine API, internal" in block[:block.index("\n |  \n")], name
    assert "The analysis API is the estimators" in inspect.getdoc(cls)
