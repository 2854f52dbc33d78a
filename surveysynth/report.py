"""The disclosure-review report of a release: CONFIDENTIAL, written only to ``confidential/``.

It compares the release with the confidential data (cell estimates, CI overlap, ECDF / pMSE
distances, identification risk), shows the tuning path and the MCMC diagnostics: all of it is
computed from the confidential data, so none of it may be published (the public part of a
release holds only what its privacy record covers). Rendered by Jinja2 with autoescaping (no
hand-built HTML), pictures embedded as PNG and also returned as files.

Layout, in the order a review board reads it: the not-for-publication notice; the summary card
(``<dl id="summary-card">``: method, epsilon to 3 significant digits, Delta_alpha where the
guarantee has one, the guarantee label and text from the privacy record, the convergence verdict
with max R-hat / min ESS / divergences); warnings highlighted (``role="alert"``); the published
tables as exported (computed from the synthetic release); the fidelity flags
(:func:`fidelity_section`: pile-up at public bounds, moved quantiles and correlations, from
:mod:`surveysynth.fidelity`, each flag also a warning); utility and risk pictures with
captions and legends; tuning, fit summary and MCMC diagnostics folded in ``<details>``. Numbers
are formatted by meaning (:func:`format_table`): counts as integers, other numbers to 4
significant digits. ``tests/test_report.py`` renders it in headless Chromium.
"""

from __future__ import annotations

import base64
import datetime as _dt
import io
from typing import Any

import numpy as np
import pandas as pd

NOTICE = ("CONFIDENTIAL - NOT FOR PUBLICATION. This report is computed from the confidential "
          "data for the disclosure review board.")

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
<dt>Method</dt><dd data-field="method">{{ method }} ({{ kind }} synthesis, m = {{ m }})</dd>
<dt>Epsilon</dt><dd data-field="epsilon">{{ epsilon }}</dd>
{% if delta_alpha is not none %}<dt>Delta_alpha</dt><dd data-field="delta_alpha">{{ delta_alpha }} (Lipschitz bound of the released fit)</dd>
{% endif %}<dt>Guarantee</dt><dd data-field="guarantee"><b>{{ guarantee_label }}</b>: {{ guarantee }}</dd>
<dt>Convergence</dt><dd data-field="convergence">{% if convergence is none %}<span class="verdict-none">not an MCMC fit</span>{% elif convergence.passed %}<span class="verdict-pass">passed the release gates</span>{% else %}<span class="verdict-fail">FAILED the release gates</span>{% endif %}{% if convergence is not none %} (max R-hat {{ convergence.rhat }}, min bulk ESS {{ convergence.ess }}, {{ convergence.divergent }} divergent of {{ convergence.transitions }} transitions){% endif %}</dd>
<dt>Created</dt><dd data-field="created">{{ created }}</dd>
</dl>
{% if warnings %}<section class="warnings" role="alert" id="warnings"><h2>Warnings ({{ warnings|length }})</h2><ul>
{% for w in warnings %}<li>{{ w }}</li>
{% endfor %}</ul></section>{% endif %}
{% if tables %}<h2 id="published-tables">Published tables</h2>
<p>As published in <code>public/tables/</code>: computed from the synthetic release only
(estimate and standard error; * marks an unreliable cell).</p>
{% for t in tables %}<h3>{{ t.title }}</h3>{{ t.html|safe }}<p class="footnote">{{ t.footnote }}</p>
{% endfor %}{% endif %}
{% for s in sections %}{% if s.folded %}<details><summary>{{ s.title }}</summary>{% else %}<h2>{{ s.title }}</h2>{% endif %}
{% for p in s.paragraphs %}<p>{{ p }}</p>{% endfor %}
{% if s.table is not none %}{{ s.table|safe }}{% endif %}
{% for sub in s.subtables %}<h3>{{ sub.title }}</h3>{% for p in sub.paragraphs %}<p>{{ p }}</p>{% endfor %}{{ sub.html|safe }}
{% endfor %}{% for img in s.images %}<figure><img alt="{{ img.caption }}" src="data:image/png;base64,{{ img.data }}"><figcaption>{{ img.caption }}</figcaption></figure>{% endfor %}
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
    """A number to ``digits`` significant digits ("none" for None)."""
    if x is None:
        return "none"
    x = float(x)
    if not np.isfinite(x):
        return "inf" if x > 0 else ("-inf" if x < 0 else "NaN")
    return f"{x:.{digits}g}"


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


def format_table(table: pd.DataFrame, digits: int = 4) -> pd.DataFrame:
    """Numbers formatted by meaning, as text: counts (integer columns, or columns of whole
    numbers) as integers with thousands separators, other numbers to ``digits`` significant
    digits, infinities as "inf", missing as empty."""
    out = table.copy()
    for c in out.columns:
        col = out[c]
        if _integral(col):
            out[c] = [("" if pd.isna(v) else f"{int(round(float(v))):,}") for v in col]
        elif pd.api.types.is_numeric_dtype(col) and not pd.api.types.is_bool_dtype(col):
            out[c] = [("" if pd.isna(v) else _fmt(v, digits)) for v in col]
    return out


def _html_table(table: pd.DataFrame, digits: int = 4, index: bool = True) -> str:
    return format_table(table, digits).to_html(escape=True, na_rep="", border=0, index=index)


def section(title: str, paragraphs=(), table: pd.DataFrame | None = None, images=(),
            folded: bool = False, subtables=()) -> dict:
    """One report section; ``folded=True`` puts it inside a closed ``<details>`` (the
    diagnostics a reader opens when needed). ``subtables``: (title, paragraphs, DataFrame)
    triples shown after ``table``, each under its own heading."""
    html = None if table is None else _html_table(table)
    subs = [{"title": t, "paragraphs": list(ps), "html": _html_table(df, index=False)}
            for t, ps, df in subtables]
    return {"title": title, "paragraphs": list(paragraphs), "table": html, "images": list(images),
            "folded": bool(folded), "subtables": subs}


def published_table(title: str, table: Any, digits: Any = None, labels: Any = None) -> dict:
    """A published table for the report, from the :class:`~surveysynth.tables.Table` computed
    on the synthetic release: the same ``estimate (se)`` display as the export (its digits and
    value labels), with the column variables named."""
    disp = table.display(digits, labels=labels)
    if table.cols and disp.columns.nlevels == 1:
        disp.columns = pd.Index([f"{table.cols[0]}: {c}" for c in disp.columns])
    return {"title": title, "html": disp.to_html(escape=True, border=0), "footnote": table.footnote}


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
        f"Identification risk (known = {', '.join(known)}; r = {r:g})",
        [f"Per-record identification risk (Hu, Savitsky & Williams): for an intruder who knows "
         f"a record's known variables and true outcome y, the record's risk in a synthetic set "
         f"is the share of the records of its pattern whose synthetic outcome lies outside the "
         f"ball of relative radius r = {r:g} around y, if the record's own synthetic outcome lies "
         f"inside it (0 otherwise), averaged over the synthetic sets. "
         f"{above:,} of {syn_risk.size:,} records exceed the threshold {ir.threshold:g} in the "
         f"release ({int((data_risk > ir.threshold).sum()):,} in the confidential data)."],
        table=ir.summary(),
        images=[{"caption": "Distribution of the per-record identification risk: confidential "
                            "data (red) and release (blue); the dashed line is the threshold.",
                 "data": base64.b64encode(figures["risk.png"]).decode()}])


def utility_sections(tables: list, design: Any, release: Any, outcome_vars: list[str],
                     figures: dict[str, bytes]) -> list[dict]:
    """Release vs confidential: per table relative differences and CI overlap; per synthesized
    variable ECDF utility and pMSE, with an ECDF-difference plot."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from .synthetic_utility import ecdf_utility, pmse
    from .tables import tabulate

    out = []
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
        out.append(section(
            f"Utility: table {t.name}",
            [f"{len(merged):,} cells. Relative difference of the release from the confidential "
             f"estimate: median |diff| {np.nanmedian(np.abs(rel)):.3f}, max "
             f"{np.nanmax(np.abs(rel)):.3f}. CI overlap (Karr et al. 2006): mean "
             f"{np.nanmean(ov):.3f}, min {np.nanmin(ov):.3f}."],
            images=[{"caption": f"Relative difference (release - confidential) / |confidential| "
                                f"of the {len(merged):,} cell estimates of table {t.name}; "
                                "the dashed line is no difference.",
                     "data": base64.b64encode(figures[name]).decode()}]))
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
        out.append(section(
            f"Utility: distribution of {v}",
            [f"ECDF utility (Woo et al. 2009): U_m = {eu['U_m']:.4f}, U_a = {eu['U_a']:.6f}; "
             f"pMSE (main effects) = {pm['pMSE']:.6f} (0 best, 0.25 worst)."],
            images=[{"caption": f"Difference between the empirical distribution functions of "
                                f"{v} in each synthetic set (up to 5, one line each) and in the "
                                "confidential data, along the pooled percentiles; 0 is a "
                                "perfect match.",
                     "data": base64.b64encode(figures[name]).decode()}]))
    return out


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
                     [f"Share of values at each declared public bound (within {s['rtol']:g} "
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
        "Fidelity flags",
        [lead, "Release (the synthetic sets pooled, weighted by the released weights) against "
               "the confidential data (weighted by the design weights). Confidential: computed "
               "from the confidential data, never published."],
        subtables=subs)


def render(*, method: str, release: Any, sections: list[dict], convergence: dict | None,
           warnings: list[str], tables: list[dict] | None = None) -> str:
    """The report's HTML (Jinja2, autoescaped): notice, summary card, warnings, the published
    tables (:func:`published_table`), then ``sections`` (diagnostics folded)."""
    import jinja2

    env = jinja2.Environment(autoescape=True, undefined=jinja2.StrictUndefined)
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
    return env.from_string(_TEMPLATE).render(
        notice=NOTICE, method=method, kind=release.kind, m=release.m,
        epsilon=_fmt(p.epsilon), delta_alpha=None if p.delta_alpha is None else _fmt(p.delta_alpha),
        guarantee_label=p.guarantee, guarantee=text, convergence=conv,
        warnings=list(warnings), sections=sections, tables=list(tables or []),
        created=f"{_dt.datetime.now(_dt.timezone.utc):%Y-%m-%d %H:%M UTC}",
    )
