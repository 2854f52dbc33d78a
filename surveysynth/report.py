"""The disclosure-review report of a release: CONFIDENTIAL, written only to ``confidential/``.

It compares the release with the confidential data (cell estimates, CI overlap, ECDF / pMSE
distances, identification risk), shows the tuning path and the MCMC diagnostics: all of it is
computed from the confidential data, so none of it may be published (the public part of a
release holds only what its privacy record covers). Rendered by Jinja2 with autoescaping (no
hand-built HTML), pictures embedded as PNG and also returned as files.

Layout, the same for every method, in the order a review board reads it: the
not-for-publication notice; the summary card (``<dl id="summary-card">``: the one-line verdict
first (:func:`verdict_line`: "Released: 3 synthetic sets, epsilon 20.4 spent (...) - 2 fidelity
flags"), method, epsilon to 3 significant digits, Delta_alpha where the guarantee has one, the
guarantee's label with its full text folded in ``<details>``, the attack evidence's verdict, the
convergence verdict with max R-hat / min ESS / divergences); the warnings (``role="alert"``
when there are any); the published tables as exported; then every section of
:data:`SECTIONS` in its order: fidelity flags, identification risk, attack-based evidence,
utility of the published tables, of each synthesized variable and of their joint distribution,
and the diagnostics (tuning, fit summary, MCMC; folded). A section that does not apply says why
in one line (:func:`not_applicable`, e.g. "JointExp draws exactly: no MCMC diagnostics.").
Every fidelity flag, failed gate and regression coefficient past :data:`STD_DIFF_FLAG` is a
warning. Numbers are formatted by meaning (:func:`format_table`, :mod:`surveysynth._format`):
never in scientific notation, counts as integers, shares as percentages, epsilons to 3
significant digits, estimates to the place of their SE. The same report is rendered as
Markdown (``render(..., markdown=True)``: ``report.md``, the guarantee's label on its line and
its text after the card). ``tests/test_report.py`` renders the HTML in headless Chromium;
``tests/test_report_shape.py`` checks the shape for every method.
"""

from __future__ import annotations

import base64
import datetime as _dt
import io
from typing import Any

import numpy as np
import pandas as pd

from ._format import by_se, number, percent, sig
from .synthetic_utility import STD_DIFF_FLAG as STD_DIFF_FLAG
from .synthetic_utility import joint_utility as joint_utility

NOTICE = ("CONFIDENTIAL - NOT FOR PUBLICATION. This report is computed from the confidential "
          "data for the disclosure review board.")

#: the same report in Markdown (``report.md``): the guarantee's label on its own line, its
#: full text after the card; tables as pipe tables; pictures by their files in ``figures/``
_MARKDOWN = """# surveysynth release: disclosure review

**{{ notice }}**

**{{ verdict }}**

- Method: {{ method }} ({{ kind }} synthesis, m = {{ m }})
- Epsilon: {{ epsilon }}
{% if delta_alpha is not none %}- Delta_alpha: {{ delta_alpha }} (Lipschitz bound of the released fit)
{% endif %}- Guarantee: **{{ guarantee_label }}**
- Attack evidence: {{ attack_verdict }}
- Convergence: {% if convergence is none %}{{ no_mcmc }}{% elif convergence.passed %}passed the release gates{% else %}FAILED the release gates{% endif %}{% if convergence is not none %} (max R-hat {{ convergence.rhat }}, min bulk ESS {{ convergence.ess }}, {{ convergence.divergent }} divergent of {{ convergence.transitions }} transitions){% endif %}
- Created: {{ created }}
{% if guarantee %}
Full text of the guarantee: {{ guarantee }}
{% endif %}
## Warnings ({{ warnings|length }})

{% if warnings %}{% for w in warnings %}- {{ w }}
{% endfor %}{% else %}{{ no_warnings }}
{% endif %}
## Published tables

{% if tables %}{% for t in tables %}### {{ t.title }}

{{ t.markdown }}

{{ t.footnote }}

{% endfor %}{% else %}{{ tables_note }}
{% endif %}{% for s in sections %}
## {{ s.title }}

{% for p in s.paragraphs %}{{ p }}

{% endfor %}{% if s.markdown %}{{ s.markdown }}

{% endif %}{% for img in s.images %}{% if img.file %}![{{ img.caption }}](figures/{{ img.file }})

{% endif %}{% endfor %}{% for sub in s.subtables %}### {{ sub.title }}

{% for p in sub.paragraphs %}{{ p }}

{% endfor %}{% if sub.markdown %}{{ sub.markdown }}

{% endif %}{% for img in sub.images %}{% if img.file %}![{{ img.caption }}](figures/{{ img.file }})

{% endif %}{% endfor %}{% endfor %}{% endfor %}"""


_TEMPLATE = """<!doctype html>
<html lang="en"><head><meta charset="utf-8">
<title>surveysynth disclosure review (confidential)</title>
<style>
body{font-family:system-ui,-apple-system,"Segoe UI",Roboto,sans-serif;max-width:64em;margin:1.5em auto;
  padding:0 1em;color:#1d1d1d;line-height:1.45}
h1{font-size:1.6em;margin:.4em 0} h2{font-size:1.25em;border-bottom:2px solid #d5dbe3;padding-bottom:.2em;
  margin-top:1.8em} h3{font-size:1.05em}
.notice{background:#fbe3e3;border:2px solid #a40000;color:#6d0000;padding:.6em .9em;font-weight:600;
  border-radius:4px}
#summary-card{display:grid;grid-template-columns:11em 1fr;gap:.35em 1em;border:1px solid #b8c4d3;
  border-left:6px solid #2f5d8c;background:#f4f7fb;padding:.9em 1.1em;margin:1.2em 0;border-radius:4px}
#summary-card dt{font-weight:600;color:#2f3b4a} #summary-card dd{margin:0}
.verdict-pass{color:#176b2c;font-weight:600} .verdict-fail{color:#a40000;font-weight:700}
.verdict-none{color:#555}
.warnings{background:#fff4d6;border:1px solid #d8a300;border-left:6px solid #d8a300;padding:.5em 1em;
  margin:1em 0;border-radius:4px} .warnings h2{border:0;margin:.2em 0;font-size:1.1em;color:#7a5a00}
.warnings li{margin:.25em 0}
.no-warnings{background:#eef6ee;border-color:#7aa77a} .no-warnings h2{color:#2f5d2f}
#verdict{font-size:1.05em} .guarantee-text summary{font-weight:400;color:#2f5d8c}
figure{margin:1em 0} figure img{max-width:100%;border:1px solid #e2e6ea}
figcaption{font-size:.9em;color:#444;margin-top:.3em}
table{border-collapse:collapse;margin:.6em 0;font-size:.88em}
th,td{border:1px solid #cfd6de;padding:3px 8px} th{background:#eef2f6;text-align:left}
td{text-align:right;font-variant-numeric:tabular-nums}
details{margin:1em 0;border:1px solid #d5dbe3;border-radius:4px;padding:.3em .8em;background:#fafbfc}
summary{cursor:pointer;font-weight:600;padding:.2em 0}
.footnote{font-size:.85em;color:#444}
</style></head>
<body>
<p class="notice" role="note">{{ notice }}</p>
<h1>surveysynth release: disclosure review</h1>
<dl id="summary-card">
<dt>Verdict</dt><dd data-field="verdict" id="verdict"><b>{{ verdict }}</b></dd>
<dt>Method</dt><dd data-field="method">{{ method }} ({{ kind }} synthesis, m = {{ m }})</dd>
<dt>Epsilon</dt><dd data-field="epsilon">{{ epsilon }}</dd>
{% if delta_alpha is not none %}<dt>Delta_alpha</dt><dd data-field="delta_alpha">{{ delta_alpha }} (Lipschitz bound of the released fit)</dd>
{% endif %}<dt>Guarantee</dt><dd data-field="guarantee"><b>{{ guarantee_label }}</b>{% if guarantee %}<details class="guarantee-text"><summary>Full text of the guarantee</summary><p>{{ guarantee }}</p></details>{% endif %}</dd>
<dt>Attack evidence</dt><dd data-field="attacks">{{ attack_verdict }}</dd>
<dt>Convergence</dt><dd data-field="convergence">{% if convergence is none %}<span class="verdict-none">{{ no_mcmc }}</span>{% elif convergence.passed %}<span class="verdict-pass">passed the release gates</span>{% else %}<span class="verdict-fail">FAILED the release gates</span>{% endif %}{% if convergence is not none %} (max R-hat {{ convergence.rhat }}, min bulk ESS {{ convergence.ess }}, {{ convergence.divergent }} divergent of {{ convergence.transitions }} transitions){% endif %}</dd>
<dt>Created</dt><dd data-field="created">{{ created }}</dd>
</dl>
<section class="warnings{% if not warnings %} no-warnings{% endif %}"{% if warnings %} role="alert"{% endif %} id="warnings"><h2>Warnings ({{ warnings|length }})</h2>{% if warnings %}<ul>
{% for w in warnings %}<li>{{ w }}</li>
{% endfor %}</ul>{% else %}<p>{{ no_warnings }}</p>{% endif %}</section>
<h2 id="published-tables">Published tables</h2>
{% if tables %}<p>As published in <code>public/tables/</code>: computed from the synthetic release only
(estimate and standard error; * marks an unreliable cell).</p>
{% for t in tables %}<h3>{{ t.title }}</h3>{{ t.html|safe }}<p class="footnote">{{ t.footnote }}</p>
{% endfor %}{% else %}<p>{{ tables_note }}</p>{% endif %}
{% for s in sections %}{% if s.folded %}<details><summary>{{ s.title }}</summary>{% else %}<h2>{{ s.title }}</h2>{% endif %}
{% for p in s.paragraphs %}<p>{{ p }}</p>{% endfor %}
{% if s.table is not none %}{{ s.table|safe }}{% endif %}
{% for img in s.images %}<figure><img alt="{{ img.caption }}" src="data:image/png;base64,{{ img.data }}"><figcaption>{{ img.caption }}</figcaption></figure>{% endfor %}
{% for sub in s.subtables %}<h3>{{ sub.title }}</h3>{% for p in sub.paragraphs %}<p>{{ p }}</p>{% endfor %}{{ sub.html|safe }}
{% for img in sub.images %}<figure><img alt="{{ img.caption }}" src="data:image/png;base64,{{ img.data }}"><figcaption>{{ img.caption }}</figcaption></figure>{% endfor %}
{% endfor %}
{% if s.folded %}</details>{% endif %}
{% endfor %}
</body></html>
"""


def png(fig) -> bytes:
    import matplotlib.pyplot as plt

    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=100, bbox_inches="tight")
    plt.close(fig)
    return buf.getvalue()


def _fmt(x: Any, digits: int = 3) -> str:
    """A number to ``digits`` significant digits, never in scientific notation ("none" for
    None; :func:`surveysynth._format.number`)."""
    return number(x, digits)


def _count(x: Any) -> str:
    """A count as an integer with thousands separators (an ESS, rows, transitions)."""
    if x is None or not np.isfinite(float(x)):
        return "NaN"
    return f"{round(float(x)):,}"


def _integral(col: pd.Series) -> bool:
    """A column of counts: integer dtype, or floats that are all whole numbers."""
    if pd.api.types.is_bool_dtype(col) or not pd.api.types.is_numeric_dtype(col):
        return False
    if pd.api.types.is_integer_dtype(col):
        return True
    v = col.to_numpy(dtype=float)
    v = v[np.isfinite(v)]
    return bool(v.size) and bool(np.all(v == np.round(v))) and bool(np.all(np.abs(v) < 1e15))


#: estimate columns formatted by the magnitude of their standard error (column -> SE column),
#: where both are in a table: a combined or design estimate, and the two sides of a comparison
SE_COLUMNS = {"estimate": "se", "ci_low": "se", "ci_high": "se",
              "confidential": "conf_se", "conf_ci_low": "conf_se", "conf_ci_high": "conf_se",
              "release": "rel_se", "rel_ci_low": "rel_se", "rel_ci_high": "rel_se"}


def _is_share(name: Any) -> bool:
    """A column of shares (printed as %): its name says so (share, ..._at_bound)."""
    n = str(name).lower()
    return "share" in n or n.endswith("_at_bound") or n.endswith("_beyond_bound")


def _is_epsilon(name: Any) -> bool:
    return "epsilon" in str(name).lower()


def _cell(v: Any, digits: int) -> Any:
    """One value of a column of mixed types (a fit summary's values)."""
    if isinstance(v, (bool, np.bool_)) or not isinstance(v, (int, float, np.number)):
        return v
    if pd.isna(v):
        return ""
    if float(v) == round(float(v)) and abs(float(v)) < 1e15:
        return f"{int(round(float(v))):,}"
    return number(v, digits)


def format_table(table: pd.DataFrame, digits: int = 4) -> pd.DataFrame:
    """Numbers formatted by meaning, as text, never in scientific notation: counts (integer
    columns, or columns of whole numbers) as integers with thousands separators; shares (a
    column name with "share", or ``..._at_bound``) as percentages; epsilons to 3 significant
    digits; an estimate whose SE is in the table (:data:`SE_COLUMNS`) to the decimal place of
    the SE's second significant digit; other numbers to ``digits`` significant digits
    (:func:`surveysynth._format.number`); infinities as "inf", missing as empty. A column of
    mixed types (a fit summary's values) is formatted value by value, a row named like an
    epsilon to 3 significant digits. The caller's frame is not changed."""
    out = table.copy()
    for c in out.columns:
        col = table[c]
        se_col = SE_COLUMNS.get(str(c))
        if pd.api.types.is_bool_dtype(col):
            continue
        if not pd.api.types.is_numeric_dtype(col):
            if col.dtype == object:
                out[c] = [sig(v, 3) if _is_epsilon(i) and isinstance(v, (int, float, np.number))
                          and not isinstance(v, (bool, np.bool_)) else _cell(v, digits)
                          for i, v in zip(col.index, col, strict=True)]
            continue
        if _is_share(c):
            out[c] = [("" if pd.isna(v) else percent(v)) for v in col]
        elif _is_epsilon(c):
            out[c] = [("" if pd.isna(v) else sig(v, 3)) for v in col]
        elif se_col is not None and se_col in table.columns and c != se_col:
            out[c] = [("" if pd.isna(v) else by_se(v, s)) for v, s in zip(
                col, table[se_col], strict=True)]
        elif _integral(col):
            out[c] = [("" if pd.isna(v) else f"{int(round(float(v))):,}") for v in col]
        else:
            out[c] = [("" if pd.isna(v) else number(v, digits)) for v in col]
    return out


def _html_table(table: pd.DataFrame, digits: int = 4, index: bool = True) -> str:
    return format_table(table, digits).to_html(escape=True, na_rep="", border=0, index=index)


def _markdown_table(table: pd.DataFrame | None, index: bool = True) -> str:
    """A table as a Markdown pipe table, its numbers formatted as :func:`format_table` does."""
    if table is None or table.shape[1] == 0:
        return ""
    t = format_table(table)
    if index and not isinstance(t.index, pd.RangeIndex):
        t = t.reset_index()
    if isinstance(t.columns, pd.MultiIndex):
        t.columns = [" ".join(str(x) for x in c if str(x)) for c in t.columns]

    def esc(v: Any) -> str:
        if v is None or (isinstance(v, float) and np.isnan(v)):
            return ""
        return str(v).replace("|", "\\|").replace("\n", " ")

    lines = ["| " + " | ".join(esc(h) for h in t.columns) + " |",
             "|" + "|".join("---" for _ in t.columns) + "|"]
    lines += ["| " + " | ".join(esc(v) for v in row) + " |" for row in t.itertuples(index=False)]
    return "\n".join(lines)


def section(title: str, paragraphs=(), table: pd.DataFrame | None = None, images=(),
            folded: bool = False, subtables=()) -> dict:
    """One report section; ``folded=True`` puts it inside a closed ``<details>`` (the
    diagnostics a reader opens when needed). ``subtables``: (title, paragraphs, DataFrame)
    triples, or (title, paragraphs, DataFrame, images) quadruples, shown after ``table``,
    each under its own heading (the DataFrame may be None). An image is a dict with
    ``caption``, ``data`` (base64 PNG) and optionally ``file`` (its name in ``figures/``,
    for the Markdown report)."""
    html = None if table is None else _html_table(table)
    subs = []
    for sub in subtables:
        t, ps, df = sub[:3]
        subs.append({"title": t, "paragraphs": list(ps),
                     "html": "" if df is None else _html_table(df, index=False),
                     "markdown": _markdown_table(df, index=False),
                     "images": list(sub[3]) if len(sub) > 3 else []})
    return {"title": title, "paragraphs": list(paragraphs), "table": html,
            "markdown": _markdown_table(table), "images": list(images),
            "folded": bool(folded), "subtables": subs}


def not_applicable(title: str, reason: str, folded: bool = False) -> dict:
    """A section that does not apply to this release, saying why in one line (every report
    has every section, in the same order: :data:`SECTIONS`)."""
    return section(title, [reason], folded=folded)


def published_table(title: str, table: Any, digits: Any = None, labels: Any = None) -> dict:
    """A published table for the report, from the :class:`~surveysynth.tables.Table` computed
    on the synthetic release: the same ``estimate (se)`` display as the export (its digits and
    value labels), with the column variables named."""
    disp = table.display(digits, labels=labels)
    if table.cols and disp.columns.nlevels == 1:
        disp.columns = pd.Index([f"{table.cols[0]}: {c}" for c in disp.columns])
    return {"title": title, "html": disp.to_html(escape=True, border=0),
            "markdown": _markdown_table(disp), "footnote": table.footnote}


def risk_section(ir: Any, known: list[str], r: float, figures: dict[str, bytes]) -> dict:
    """Identification risk of a partial synthesis: the summary table and the distribution of
    the per-record risk in the confidential data and in the release, with the threshold."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    data_risk = np.asarray(ir.data_risk, dtype=float)
    syn_risk = np.asarray(ir.ir, dtype=float)
    fig, ax = plt.subplots(figsize=(6.4, 3.2))
    bins = np.linspace(0.0, 1.0, 41)
    ax.hist(data_risk, bins=bins, alpha=0.55, color="#aa3377", label="confidential data")
    ax.hist(syn_risk, bins=bins, alpha=0.55, color="#4477aa", label="release (mean over sets)")
    ax.axvline(ir.threshold, color="k", ls="--", lw=0.9, label=f"threshold {ir.threshold:g}")
    ax.set_xlabel("per-record identification risk")
    ax.set_ylabel("records")
    ax.legend(fontsize=8, frameon=False)
    figures["risk.png"] = png(fig)
    above = int((syn_risk > ir.threshold).sum())
    return section(
        TITLES["risk"],
        [f"Known variables: {', '.join(known)}; r = {r:g}.", f"Per-record identification risk (Hu, Savitsky & Williams): for an intruder who knows "
         f"a record's known variables and true outcome y, the record's risk in a synthetic set "
         f"is the share of the records of its pattern whose synthetic outcome lies outside the "
         f"ball of relative radius r = {r:g} around y, if the record's own synthetic outcome lies "
         f"inside it (0 otherwise), averaged over the synthetic sets. "
         f"{above:,} of {syn_risk.size:,} records exceed the threshold {ir.threshold:g} in the "
         f"release ({int((data_risk > ir.threshold).sum()):,} in the confidential data)."],
        table=ir.summary(),
        images=[{"caption": "Distribution of the per-record identification risk: confidential "
                            "data (red) and release (blue); the dashed line is the threshold.",
                 "data": base64.b64encode(figures["risk.png"]).decode(), "file": "risk.png"}])


def attack_section(ev: Any, paragraphs: list[str]) -> dict:
    """The "Attack-based evidence" section (issue 35) from a
    :class:`surveysynth.privacy.attacks.AttackEvidence`: how it was computed, the table
    measure | release | unweighted synthesis | holdout, the verdict, then the membership
    attack's thresholds and synthpop's measures per synthetic set (docs/attacks.md)."""
    table = ev.display().set_index("measure")
    lead = [*paragraphs,
            f"Attacked columns and records: measures that depend on how many records are "
            f"attacked use {ev.n_reference:,} of each set of records. DCR: the largest "
            "relative difference over the numeric columns to the closest record with equal "
            "categorical values (inf when none has them). Membership inference: a record is "
            "called a training record when a synthetic record lies close to it (its relative "
            "distance to the closest synthetic record, all sets pooled); AUC 0.5 = chance; the "
            "epsilon lower bound is max over thresholds of log(TPR_lo / FPR_hi) and "
            "log(TNR_lo / FNR_hi), one-sided Clopper-Pearson bounds, Bonferroni over the "
            "thresholds (95% in all), printed beside the epsilon the synthesis states. "
            "Singling out, linkability, inference: anonymeter's attacks (reimplemented); "
            "success rates on the training records and on the holdout; risk = (training - "
            "holdout) / (1 - holdout) with its 95% interval. synthpop: identity (UiO, repU) "
            "and attribute (Dorig, DiSCO, TCAP) disclosure measures for the keys and target, "
            "in percent of the attacked records, averaged over the synthetic sets.",
            "Verdict: " + ev.verdict() + ".", *ev.notes]
    subs = []
    for label, m in ev.mia.items():
        subs.append((f"Membership attack thresholds: {label}",
                     [f"{m.n_members:,} training and {m.n_nonmembers:,} holdout records; "
                      f"AUC {_fmt(m.auc, 4)} (SE {_fmt(m.auc_se, 2)}); epsilon lower bound "
                      f"{_fmt(m.epsilon_lower, 4)} at the threshold {_fmt(m.threshold, 4)}."],
                     m.thresholds))
    for label, tab in ev.synthpop.items():
        subs.append((f"synthpop disclosure measures per synthetic set: {label}", [],
                     tab.round(4)))
    return section(TITLES["attacks"], lead, table=table, subtables=subs)


def utility_sections(tables: list, design: Any, release: Any, outcome_vars: list[str],
                     figures: dict[str, bytes]) -> list[dict]:
    """Release vs confidential, two sections (:data:`SECTIONS` "utility_tables" and
    "utility_variables"): per published table the relative differences and CI overlap of its
    cells; per synthesized numeric variable the ECDF utility and pMSE, with an
    ECDF-difference plot (one subsection each)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from .synthetic_utility import ecdf_utility, pmse
    from .tables import tabulate

    per_table: list[tuple] = []
    per_variable: list[tuple] = []
    for t in tables:
        conf = tabulate(design, t.rows, t.cols or None, t.value, t.stat).long
        syn = tabulate(release, t.rows, t.cols or None, t.value, t.stat).long
        # cells are labelled by the row/column variables, the margin block, and for proportion
        # and quantile tables by the value's level or the quantile
        extra = [c for c in ("block", "quantile", t.value) if c and c in conf and c in syn]
        keys = [c for c in conf.columns if c in t.rows + t.cols] + [
            c for c in dict.fromkeys(extra) if c not in t.rows + t.cols]
        merged = conf.merge(syn, on=keys, suffixes=("_c", "_s"))
        rel = (merged["estimate_s"] - merged["estimate_c"]) / merged["estimate_c"].abs()
        lo = np.maximum(merged["ci_low_c"], merged["ci_low_s"])
        hi = np.minimum(merged["ci_high_c"], merged["ci_high_s"])
        ov = 0.5 * (np.clip(hi - lo, 0, None) / (merged["ci_high_c"] - merged["ci_low_c"])
                    + np.clip(hi - lo, 0, None) / (merged["ci_high_s"] - merged["ci_low_s"]))
        fig, ax = plt.subplots(figsize=(6, 3))
        ax.hist(np.asarray(rel[np.isfinite(rel)]), bins=20, color="#4477aa",
                label=f"cells of {t.name} ({len(merged)})")
        ax.axvline(0, color="k", lw=0.8, ls="--", label="no difference")
        ax.set_xlabel("relative difference, release vs confidential")
        ax.set_ylabel("cells")
        ax.legend(fontsize=8, frameon=False)
        name = f"utility_{t.name}.png"
        figures[name] = png(fig)
        per_table.append((
            f"Table {t.name}",
            [f"{len(merged):,} cells. Relative difference of the release from the confidential "
             f"estimate: median |diff| {np.nanmedian(np.abs(rel)):.3f}, max "
             f"{np.nanmax(np.abs(rel)):.3f}. CI overlap (Karr et al. 2006): mean "
             f"{np.nanmean(ov):.3f}, min {np.nanmin(ov):.3f}."], None,
            [{"caption": f"Relative difference (release - confidential) / |confidential| "
                         f"of the {len(merged):,} cell estimates of table {t.name}; "
                         "the dashed line is no difference.",
              "data": base64.b64encode(figures[name]).decode(), "file": name}]))
    for v in outcome_vars:
        orig = pd.to_numeric(design.data[v], errors="coerce").to_numpy(dtype=float)
        syns = [pd.to_numeric(d.data[v], errors="coerce").to_numpy(dtype=float) for d in release.designs]
        eu = ecdf_utility(orig, syns)
        pm = pmse(orig[:, None], [s[:, None] for s in syns])
        fig, ax = plt.subplots(figsize=(6, 3))
        grid = np.quantile(np.concatenate([orig, *syns]), np.linspace(0.005, 0.995, 200))
        f_o = np.searchsorted(np.sort(orig), grid, side="right") / orig.size
        for k, s_ in enumerate(syns[:5]):
            f_s = np.searchsorted(np.sort(s_), grid, side="right") / s_.size
            ax.plot(np.linspace(0.5, 99.5, 200), f_s - f_o, lw=0.8, label=f"synthetic set {k + 1}")
        ax.axhline(0, color="k", lw=0.8, ls="--", label="confidential (reference)")
        ax.set_xlabel("pooled percentile")
        ax.set_ylabel("F_synthetic - F_confidential")
        ax.legend(fontsize=7, frameon=False)
        name = f"ecdf_{v}.png"
        figures[name] = png(fig)
        per_variable.append((
            f"Distribution of {v}",
            [f"ECDF utility (Woo et al. 2009): U_m = {eu['U_m']:.4f}, U_a = {eu['U_a']:.6f}; "
             f"pMSE (main effects) = {pm['pMSE']:.6f} (0 best, 0.25 worst)."], None,
            [{"caption": f"Difference between the empirical distribution functions of "
                         f"{v} in each synthetic set (up to 5, one line each) and in the "
                         "confidential data, along the pooled percentiles; 0 is a "
                         "perfect match.",
              "data": base64.b64encode(figures[name]).decode(), "file": name}]))
    tables_lead = ([f"Each published table computed from the confidential design against the "
                    f"same table from the release ({len(per_table)} table(s))."] if per_table
                   else ["No published tables: nothing to compare."])
    vars_lead = ([f"Each synthesized numeric variable alone ({', '.join(outcome_vars)}): "
                  "ECDF utility, pMSE of its main effects, and the difference of the "
                  "distribution functions."] if per_variable else
                 ["No synthesized numeric variable: the joint section compares the "
                  "categorical ones."])
    return [section(TITLES["utility_tables"], tables_lead, subtables=per_table),
            section(TITLES["utility_variables"], vars_lead, subtables=per_variable)]


def fidelity_section(fid: Any) -> dict:
    """The "Fidelity flags" section from a :class:`surveysynth.fidelity.Fidelity`: the
    thresholds, then the bounds, quantile and correlation tables (flagged rows marked FLAG,
    correlations sorted by the size of their change). Its flags are also the report's
    warnings (the caller adds ``fid.warnings`` to them)."""
    s = fid.settings

    def shown(df: pd.DataFrame, sort: str | None = None) -> pd.DataFrame:
        out = df.copy()
        if sort is not None and len(out):
            out = out.iloc[np.argsort(-np.nan_to_num(np.abs(out[sort].to_numpy(float)), nan=-1),
                                      kind="stable")]
        out["flag"] = np.where(out["flag"].to_numpy(bool), "FLAG", "")
        return out.reset_index(drop=True)

    subs = []
    if len(fid.bounds):
        subs.append(("Bounds and types",
                     [f"Share of values at each declared public bound (within {_fmt(s['rtol'], 3)} "
                      f"relative), flagged above {100 * s['bound_share']:g}% and "
                      f"{s['bound_ratio']:g} times the confidential data's share; any value "
                      "beyond a bound is flagged."], shown(fid.bounds)))
    subs.append(("Quantiles",
                 [f"Weighted quantiles of the synthesized variables, flagged when the relative "
                  f"difference exceeds {100 * s['quantile_tol']:g}%."], shown(fid.quantiles)))
    if len(fid.correlations):
        subs.append(("Correlations",
                     [f"Weighted Pearson correlations of the synthesized variables with each other "
                      f"and with the released numeric variables that were not synthesized, "
                      f"flagged when they move by more than {s['corr_tol']:g}; largest changes "
                      "first."], shown(fid.correlations, "change")))
    lead = (f"{fid.n_flags} flag(s), listed among the warnings at the top." if fid.n_flags
            else "No flags: no pile-up at a bound, no value beyond a bound or non-whole value "
                 "of an integer column, and no quantile or correlation moved past its threshold.")
    return section(
        TITLES["fidelity"],
        [lead, "Release (the synthetic sets pooled, weighted by the released weights) against "
               "the confidential data (weighted by the design weights). Confidential: computed "
               "from the confidential data, never published."],
        subtables=subs)


#: the report's sections after the summary card, the warnings and the published tables:
#: (key, title, folded). Every report has all of them, in this order; a section that does not
#: apply to a release says why in one line (:func:`not_applicable`).
SECTIONS = (
    ("fidelity", "Fidelity flags", False),
    ("risk", "Identification risk", False),
    ("attacks", "Attack-based evidence", False),
    ("utility_tables", "Utility: published tables", False),
    ("utility_variables", "Utility: distribution of each synthesized variable", False),
    ("utility_joint", "Utility: joint distribution of the synthesized variables", False),
    ("tuning", "Diagnostics: tuning of the risk weights", True),
    ("fit_summary", "Diagnostics: fit summary", True),
    ("mcmc", "Diagnostics: MCMC", True),
)
TITLES = {k: t for k, t, _ in SECTIONS}

#: the guarantee class in a few words, for the verdict line (docs/privacy.md, "Guarantee
#: classes")
SHORT_GUARANTEE = {
    "formal pure DP": "pure DP",
    "formal approximate DP": "approximate DP",
    "formal zCDP": "zCDP",
    "asymptotic database-local (epsilon, delta)-pDP": "asymptotic database-local pDP, not a "
                                                      "formal DP guarantee",
    "none": "not differentially private",
}
NO_WARNINGS = ("None: no fidelity flag, no failed convergence gate, no regression coefficient "
               "past its flag, no section left without its numbers.")


def ordered(sections: dict[str, dict]) -> list[dict]:
    """The sections in the report's order (:data:`SECTIONS`); each must be given."""
    missing = [k for k, _, _ in SECTIONS if k not in sections]
    if missing:
        raise KeyError(f"report sections {missing} missing: every report has every section "
                       "(not_applicable() says why one does not apply).")
    return [sections[k] for k, _, _ in SECTIONS]


def _plural(n: int, word: str) -> str:
    return f"{n:,} {word}" + ("" if n == 1 else "s")


def verdict_line(release: Any, fidelity_flags: int, convergence: dict | None,
                 other_warnings: int = 0) -> str:
    """The summary card's one-line verdict, e.g. "Released: 5 synthetic sets, epsilon 12.0
    spent (pure DP) - 2 fidelity flags": what was released, the budget spent (3 significant
    digits) and the guarantee's class in a few words, then what the report flags."""
    p = release.privacy
    eps = "no epsilon" if p.epsilon is None else f"epsilon {sig(p.epsilon, 3)} spent"
    head = (f"Released: {_plural(release.m, 'synthetic set')}, {eps} "
            f"({SHORT_GUARANTEE.get(p.guarantee_class, p.guarantee_class)})")
    tail = [_plural(fidelity_flags, "fidelity flag")]
    if convergence is not None and not convergence.get("passed", True):
        tail.append("MCMC convergence gates FAILED")
    if other_warnings:
        tail.append(_plural(other_warnings, "other warning"))
    return head + " \u2014 " + ", ".join(tail)


def render(*, method: str, release: Any, sections: list[dict], convergence: dict | None,
           warnings: list[str], tables: list[dict] | None = None,
           attack_verdict: str | None = None, fidelity_flags: int = 0,
           tables_note: str | None = None, no_mcmc: str | None = None,
           created: str | None = None, markdown: bool = False) -> str:
    """The report (Jinja2; HTML autoescaped, or Markdown with ``markdown=True``): notice,
    summary card (the one-line verdict first, the guarantee's label with its full text
    folded, the attack evidence's verdict, convergence), the warnings, the published tables
    (:func:`published_table`), then ``sections`` (:func:`ordered`: every section in the same
    order for every method; diagnostics folded). ``fidelity_flags``: how many of the
    ``warnings`` are fidelity flags (for the verdict line); ``created``: the time stamp
    (default now, UTC)."""
    import jinja2

    p = release.privacy
    conv = None
    if convergence is not None:
        conv = {"passed": bool(convergence.get("passed")),
                "rhat": _fmt(convergence.get("max_rhat"), 4),
                "ess": _count(convergence.get("min_ess_bulk")),
                "divergent": _count(convergence.get("divergent", 0)),
                "transitions": _count(convergence.get("transitions", 0))}
    text = p.guarantee_text  # generated texts begin with their label: print the label once
    if text.startswith(p.guarantee):
        text = text[len(p.guarantee):].lstrip(" .:")
    ctx = dict(
        notice=NOTICE, method=method, kind=release.kind, m=release.m,
        verdict=verdict_line(release, int(fidelity_flags), convergence,
                             max(0, len(warnings) - int(fidelity_flags))),
        epsilon="none (no differential privacy)" if p.epsilon is None else sig(p.epsilon, 3),
        delta_alpha=None if p.delta_alpha is None else sig(p.delta_alpha, 3),
        guarantee_label=p.guarantee, guarantee=text, convergence=conv,
        no_mcmc=no_mcmc or "not an MCMC fit", no_warnings=NO_WARNINGS,
        warnings=list(warnings), sections=sections, tables=list(tables or []),
        tables_note=tables_note or "No published tables: the configuration lists none "
                                   "([[tables]]).",
        attack_verdict=attack_verdict or "not computed (see the section Attack-based evidence)",
        created=created or f"{_dt.datetime.now(_dt.timezone.utc):%Y-%m-%d %H:%M UTC}",
    )
    env = jinja2.Environment(autoescape=not markdown, undefined=jinja2.StrictUndefined,
                             keep_trailing_newline=True)
    return env.from_string(_MARKDOWN if markdown else _TEMPLATE).render(**ctx)


# ----------------------------------------------------------------------------- joint utility
# The joint-utility metrics are computed in surveysynth.synthetic_utility (joint_utility,
# STD_DIFF_FLAG, still importable from here); this module presents them.


def regression_flags(result: dict[str, Any]) -> list[str]:
    """Warnings for the regression terms of :func:`joint_utility`'s result whose standardised
    difference exceeds :data:`STD_DIFF_FLAG` in absolute value (one line per regression)."""
    out = []
    for name, r in result.get("regressions", {}).items():
        if isinstance(r, str):
            continue
        z = r["std_diff"].to_numpy(float)
        bad = np.flatnonzero(np.abs(np.nan_to_num(z, nan=0.0)) > STD_DIFF_FLAG)
        if bad.size:
            terms = "; ".join(f"{r['term'].iloc[i]}: {_fmt(r['release'].iloc[i], 4)} in the "
                              f"release against {_fmt(r['confidential'].iloc[i], 4)} "
                              f"(standardised difference {_fmt(z[i], 3)})" for i in bad[:5])
            out.append(f"Regression {name}: {bad.size} coefficient(s) more than "
                       f"{STD_DIFF_FLAG:g} confidential SEs from the confidential fit ({terms}"
                       + ("; ..." if bad.size > 5 else "") + ").")
    return out


def joint_utility_section(design: Any, release: Any, synthesized: list[str],
                          types: dict[str, str] | None = None, context: list[str] | None = None,
                          regressions: list[dict] | None = None,
                          result: dict[str, Any] | None = None) -> dict:
    """The "Utility: joint" section of the confidential report (issue 22): pMSE with all
    pairwise interactions and its null ratio, k-marginal scores (k = 2, 3), CI overlap of the
    mean / level proportions of every synthesized variable, per-variable rows, and the
    coefficients of the regressions the config lists (``[[report.regressions]]``) with their
    CI overlap; a table and a short paragraph each. ``result``: :func:`joint_utility`'s output
    if already computed (else computed here)."""
    res = result if result is not None else joint_utility(
        design, release, synthesized, types=types, context=context, regressions=regressions)
    pm, km, est, var = res["pmse"], res["kmarginal"], res["estimates"], res["variables"]
    coders = res["coders"]
    cats = [c.name for c in coders if c.categorical]
    nums = [c.name for c in coders if not c.categorical]
    ctx = res["context"]
    lead = [
        f"Computed from the confidential data: not for publication. Variables: "
        f"{', '.join(res['synthesized'])} (synthesized)"
        + (f" and {', '.join(ctx)} (released as collected, in the joint measures only)"
           if ctx else "") + ". Unweighted records: the confidential sample against each "
        f"synthetic set (pMSE, k-marginal); design-based estimates for the CI overlap and the "
        f"regressions. Numeric variables ({', '.join(nums) or 'none'}) enter the propensity "
        f"model standardised; categorical ones ({', '.join(cats) or 'none'}) one-hot with the "
        f"first confidential level as reference (per-variable coding below)."]
    mean_ratio = float(pm["ratio"].mean())
    subs = [("pMSE with all pairwise interactions",
             [f"Logistic propensity model of 'synthetic' on the main effects and the products of "
              f"every pair of columns of different variables (Snoke et al. 2018), one fit per "
              f"synthetic set on the pooled records; linearly dependent columns are dropped "
              f"(k counts the parameters kept, with the intercept). Null expectation "
              f"(k - 1)(1 - c)^2 c / N; a ratio near 1 means the model tells the sets from the "
              f"data no better than chance. Mean pMSE {_fmt(pm['pMSE'].mean(), 4)}, mean ratio "
              f"{_fmt(mean_ratio, 4)} over {len(pm)} set(s)"
              + ("" if pm["converged"].all() else "; some fits did not converge "
                 "(separation: the sets differ strongly or the model has too many columns)")
              + "."] + ([f"The propensity model has up to {int(pm['k'].max()):,} parameters for "
                         f"{int(len(design.data) + pm['n_synthetic'].max()):,} pooled records: "
                         "it overfits, so read the ratio to the null (which grows with k), "
                         "not the pMSE alone."]
                        if pm["k"].max() > (len(design.data) + pm["n_synthetic"].min()) / 10
                        else []), pm.rename(columns={"null": "null_expectation"}))]
    if len(km):
        subs.append((
            "k-marginal scores",
            ["NIST CRC k-marginal score (Task et al. 2021) on binned variables: numeric ones "
             "cut at the CONFIDENTIAL min, quartiles and max (6 bins; the cut points come from "
             "the confidential data, acceptable here because this report is confidential), "
             "categorical ones one bin per level. 1000 = identical cell shares, 0 = disjoint; "
             "averaged over all k-subsets of the variables and the synthetic sets."], km))
    else:
        subs.append(("k-marginal scores", ["One variable only: no joint k-marginal (its "
                                           "1-marginal is in the per-variable table)."],
                     pd.DataFrame({"k": []})))
    shown = est.copy()
    fin = shown["overlap"].to_numpy(float)
    subs.append((
        "CI overlap of means and proportions",
        [f"Confidential design estimate (mean of a numeric variable, share of each level of a "
         f"categorical one; its 95% t interval) against the release's combined estimate (its "
         f"{release.kind}-synthesis rule). Overlap of Karr et al. (2006): 1 identical, <= 0 "
         f"disjoint (negative = the gap). Mean overlap "
         f"{_fmt(np.nanmean(fin), 3) if np.isfinite(fin).any() else 'NaN'}, min "
         f"{_fmt(np.nanmin(fin), 3) if np.isfinite(fin).any() else 'NaN'} over {len(shown)} "
         "estimate(s)."], shown))
    if len(var):
        subs.append(("Per synthesized variable",
                     ["Each variable alone: pMSE of its main effects (and its null ratio), "
                      "1-marginal score, and the mean / min CI overlap of its estimates above."],
                     var))
    for name, r in res["regressions"].items():
        if isinstance(r, str):
            subs.append((f"Regression {name}", [r], pd.DataFrame({"term": []})))
            continue
        ov = r["overlap"].to_numpy(float)
        shown_r = r.copy()
        shown_r["flag"] = np.where(np.abs(r["std_diff"].to_numpy(float)) > STD_DIFF_FLAG,
                                   "FLAG", "")
        subs.append((
            f"Regression {name}",
            [f"Survey-weighted GLM on the confidential design (svyglm, t intervals) against the "
             f"release's combined coefficients. Standardised difference = (release - "
             f"confidential) / SE_confidential, flagged (and listed among the warnings) above "
             f"{STD_DIFF_FLAG:g} in absolute value; max |difference| "
             f"{_fmt(np.nanmax(np.abs(r['std_diff'])), 3)}; CI overlap mean "
             f"{_fmt(np.nanmean(ov), 3)}, min {_fmt(np.nanmin(ov), 3)}."], shown_r))
    return section(TITLES["utility_joint"], lead, subtables=subs)
