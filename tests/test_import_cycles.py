"""No import circle among surveysynth's modules (issue 38: rooms of one concern).

import-linter's layer contracts (``make layers``) keep arrows pointing down between layers, but
two modules of one layer may still import each other, and a function-level import hides such a
circle from a reader (calibration -> estimate -> calibration was one). This test builds the
import graph with grimp (import-linter's own graph: every ``import`` statement, at module level
or inside a function; imports only for type checking left out, as they never run) and asserts
that it has no strongly connected component of more than one module.

Circles known and not yet broken would be listed in ``KNOWN`` (none now): the test fails on
any other circle, and on a listed one that no longer exists (so the list only shrinks).
"""

from __future__ import annotations

import grimp
import pytest

PACKAGES = ("surveysynth", "r_bridge")

#: circles that remain (docs/architecture.md, "Import circles"), as sets of modules: none
#: since issue 38 broke the last three (core, analysis, pipeline)
KNOWN: list[frozenset[str]] = []

def import_cycles(graph: grimp.ImportGraph) -> list[frozenset[str]]:
    """The strongly connected components of more than one module (Tarjan, iterative)."""
    succ = {m: sorted(graph.find_modules_directly_imported_by(m)) for m in graph.modules}
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[frozenset[str]] = []
    for root in sorted(succ):
        if root in index:
            continue
        work = [(root, 0)]
        while work:
            v, i = work.pop()
            if i == 0:
                index[v] = low[v] = len(index)
                stack.append(v)
                on_stack.add(v)
            children = succ.get(v, [])
            if i < len(children):
                work.append((v, i + 1))
                w = children[i]
                if w not in index:
                    work.append((w, 0))
                elif w in on_stack:
                    low[v] = min(low[v], index[w])
                continue
            if low[v] == index[v]:
                comp = set()
                while True:
                    w = stack.pop()
                    on_stack.discard(w)
                    comp.add(w)
                    if w == v:
                        break
                if len(comp) > 1:
                    found.append(frozenset(comp))
            if work:
                parent = work[-1][0]
                low[parent] = min(low[parent], low[v])
    return found


def describe(graph: grimp.ImportGraph, comp: frozenset[str]) -> str:
    """One circle of the component, each import with its line: ``a:12 -> b:40 -> a``."""
    start = min(comp)
    nxt = min(m for m in graph.find_modules_directly_imported_by(start) if m in comp)
    chain = graph.find_shortest_chain(importer=nxt, imported=start) or (nxt, start)
    path = (start, *chain)
    hops = []
    for a, b in zip(path, path[1:], strict=False):
        lines = sorted(d["line_number"] for d in graph.get_import_details(importer=a, imported=b))
        hops.append(f"{a}:{','.join(map(str, lines))}")
    return " -> ".join(hops + [start])


@pytest.fixture(scope="module")
def graph() -> grimp.ImportGraph:
    return grimp.build_graph(*PACKAGES, exclude_type_checking_imports=True, cache_dir=None)


def test_no_new_import_cycle(graph):
    new = [c for c in import_cycles(graph) if c not in KNOWN]
    assert not new, ("import circle(s): " + "; ".join(describe(graph, c) for c in new)
                     + ". Fix: move what both modules need below them, or have the lower one "
                       "take it as an argument (docs/architecture.md, Import circles).")


def test_known_cycles_still_exist(graph):
    """A broken circle leaves KNOWN (the list only shrinks)."""
    gone = [sorted(c) for c in KNOWN if c not in import_cycles(graph)]
    assert not gone, f"no longer circles, remove them from KNOWN: {gone}"


def test_the_estimation_core_is_acyclic(graph):
    """The core of issue 38's circle (calibration -> estimate -> calibration, with design and
    replicate_design) is no longer one, and no circle touches the core's modules."""
    core = {"surveysynth.design", "surveysynth.estimate", "surveysynth.replicate_design",
            "surveysynth.calibration", "surveysynth.levels", "surveysynth.sampling",
            "surveysynth.ciprop", "surveysynth.contrasts", "surveysynth._validate",
            "surveysynth.db_design"}  # database designs sit on the core: design -> no way back
    core |= {m for m in graph.modules if m.startswith(("surveysynth.variance",
                                                       "surveysynth.engines"))}
    touching = [describe(graph, c) for c in import_cycles(graph) if c & core]
    assert not touching, touching


@pytest.mark.parametrize("importer, imported", [
    ("surveysynth.estimate", "surveysynth.tables"),        # tables imports estimate
    ("surveysynth.calibration", "surveysynth.design"),     # the circle issue 38 found
    ("surveysynth.replicate_design", "surveysynth.design"),
    ("surveysynth._validate", "surveysynth.synth.base"),   # a long way round
])
def test_an_introduced_cycle_is_found(importer, imported):
    """The checker itself: one import added against the arrows makes a circle it reports
    (a checker that found nothing, or only two-module circles, fails here)."""
    g = grimp.build_graph(*PACKAGES, exclude_type_checking_imports=True, cache_dir=None)  # a fresh one
    assert not [c for c in import_cycles(g) if c not in KNOWN]
    g.add_import(importer=importer, imported=imported, line_number=1, line_contents="mutant")
    comps = [c for c in import_cycles(g) if c not in KNOWN]
    assert any({importer, imported} <= c for c in comps), comps
    assert importer in describe(g, next(c for c in comps if importer in c))
