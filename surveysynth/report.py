"""The disclosure-review report of a release: CONFIDENTIAL, written only to ``confidential/``.

It compares the release with the confidential data (cell estimates, CI overlap, ECDF / pMSE
distances, identification risk), shows the tuning path and the MCMC diagnostics: all of it is
computed from the confidential data, so none of it may be published (the public part of a
release holds only what its privacy record covers). Rendered by Jinja2 with autoescaping (no
hand-built HTML), pictures embedded as PNG and also returned as files.
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
<html><head><meta charset="utf-8"><title>surveysynth disclosure review (confidential)</title>
<style>body{font-family:sans-serif;max-width:62em;margin:2em auto;color:#222}
.notice{background:#fdd;border:2px solid #a00;padding:.6em;font-weight:bold}
.card{border:1px solid #999;padding:.6em 1em;margin:1em 0;background:#f7f7f7}
.warn{color:#a00;font-weight:bold} img{max-width:100%} table{border-collapse:collapse}
td,th{border:1px solid #ccc;padding:2px 6px;font-size:90%}</style></head>
<body>
<p class="notice">{{ notice }}</p>
<h1>surveysynth release: disclosure review</h1>
<div class="card" id="summary-card">
<p><b>Method</b> {{ method }} ({{ kind }} synthesis, m = {{ m }})</p>
<p><b>Epsilon</b> {{ epsilon }}{% if delta_alpha %}; Lipschitz bound Delta_alpha {{ delta_alpha }}{% endif %}</p>
<p><b>Guarantee</b> {{ guarantee }}</p>
<p><b>Convergence</b> {% if convergence is none %}not an MCMC fit{% elif convergence.passed %}passed the release gates{% else %}<span class="warn">FAILED: {{ convergence.problems|join('; ') }}</span>{% endif %}</p>
<p>Created {{ created }}.</p>
</div>
{% for w in warnings %}<p class="warn">{{ w }}</p>{% endfor %}
{% for s in sections %}<h2>{{ s.title }}</h2>
{% for p in s.paragraphs %}<p>{{ p }}</p>{% endfor %}
{% if s.table is not none %}{{ s.table|safe }}{% endif %}
{% for img in s.images %}<figure><img alt="{{ img.caption }}" src="data:image/png;base64,{{ img.data }}"><figcaption>{{ img.caption }}</figcaption></figure>{% endfor %}
{% endfor %}
</body></html>
"""


def png(fig) -> bytes:
    import matplotlib.pyplot as plt

    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=110, bbox_inches="tight")
    plt.close(fig)
    return buf.getvalue()


def _fmt(x: Any, digits: int = 3) -> str:
    if x is None:
        return "none"
    return f"{float(x):.{digits}g}"


def section(title: str, paragraphs=(), table: pd.DataFrame | None = None, images=()) -> dict:
    html = None
    if table is not None:
        html = table.to_html(float_format=lambda v: f"{v:.4g}", escape=True)
    return {"title": title, "paragraphs": list(paragraphs), "table": html, "images": list(images)}


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
        keys = [c for c in conf.columns if c in t.rows + t.cols] + (["block"] if "block" in conf else [])
        merged = conf.merge(syn, on=keys, suffixes=("_c", "_s"))
        rel = (merged["estimate_s"] - merged["estimate_c"]) / merged["estimate_c"].abs()
        lo = np.maximum(merged["ci_low_c"], merged["ci_low_s"])
        hi = np.minimum(merged["ci_high_c"], merged["ci_high_s"])
        ov = 0.5 * (np.clip(hi - lo, 0, None) / (merged["ci_high_c"] - merged["ci_low_c"])
                    + np.clip(hi - lo, 0, None) / (merged["ci_high_s"] - merged["ci_low_s"]))
        fig, ax = plt.subplots(figsize=(6, 3))
        ax.hist(np.asarray(rel[np.isfinite(rel)]), bins=20, color="#4477aa")
        ax.set_xlabel("relative difference, release vs confidential")
        ax.set_ylabel("cells")
        name = f"utility_{t.name}.png"
        figures[name] = png(fig)
        out.append(section(
            f"Utility: table {t.name}",
            [f"{len(merged)} cells. Relative difference of the release from the confidential "
             f"estimate: median |diff| {np.nanmedian(np.abs(rel)):.3f}, max "
             f"{np.nanmax(np.abs(rel)):.3f}. CI overlap (Karr et al. 2006): mean "
             f"{np.nanmean(ov):.3f}, min {np.nanmin(ov):.3f}."],
            images=[{"caption": f"Relative differences of the cells of {t.name}",
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
        ax.axhline(0, color="k", lw=0.5)
        ax.set_xlabel("pooled percentile")
        ax.set_ylabel("F_synthetic - F_confidential")
        ax.legend(fontsize=7)
        name = f"ecdf_{v}.png"
        figures[name] = png(fig)
        out.append(section(
            f"Utility: distribution of {v}",
            [f"ECDF utility (Woo et al. 2009): U_m = {eu['U_m']:.4f}, U_a = {eu['U_a']:.6f}; "
             f"pMSE (main effects) = {pm['pMSE']:.6f} (0 best, 0.25 worst)."],
            images=[{"caption": f"ECDF differences of {v} (first sets)",
                     "data": base64.b64encode(figures[name]).decode()}]))
    return out


def render(*, method: str, release: Any, sections: list[dict], convergence: dict | None,
           warnings: list[str]) -> str:
    """The report's HTML (Jinja2, autoescaped)."""
    import jinja2

    env = jinja2.Environment(autoescape=True, undefined=jinja2.StrictUndefined)
    p = release.privacy
    return env.from_string(_TEMPLATE).render(
        notice=NOTICE, method=method, kind=release.kind, m=release.m,
        epsilon=_fmt(p.epsilon), delta_alpha=None if p.delta_alpha is None else _fmt(p.delta_alpha, 4),
        guarantee=p.guarantee_text, convergence=convergence, warnings=warnings,
        sections=sections,
        created=f"{_dt.datetime.now(_dt.timezone.utc):%Y-%m-%d %H:%M UTC}",
    )
