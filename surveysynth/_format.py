"""Numbers as text, formatted by their meaning (the disclosure-review report, the attack table).

Never scientific notation where a number is read as a quantity: a mean of 115,500 prints as
"115,500", not "1.155e+05", and a distance of 0.00005699 as "0.00005699". Only magnitudes
outside [1e-12, 1e18), which no report quantity has, fall back to the exponent form.
"""

from __future__ import annotations

import math
from typing import Any

__all__ = ["by_se", "number", "percent", "sig"]


def _finite(x: Any) -> float | str:
    """``float(x)``, or the text of a value that is not a finite number."""
    if x is None:
        return "none"
    try:
        v = float(x)
    except (TypeError, ValueError):
        return str(x)
    if math.isnan(v):
        return "NaN"
    if math.isinf(v):
        return "inf" if v > 0 else "-inf"
    return v


def _fixed(v: float, decimals: int, keep_zeros: bool) -> str:
    s = f"{v:,.{max(0, decimals)}f}"
    if not keep_zeros and "." in s:
        s = s.rstrip("0").rstrip(".")
    return "0" if s in ("-0", "") else s


def number(x: Any, digits: int = 4) -> str:
    """``x`` to ``digits`` significant digits in fixed-point notation with thousands
    separators (an integer part is never cut: 106,400.3 gives "106,400"); trailing zeros
    dropped; "inf", "-inf", "NaN", "none" for what is not a finite number."""
    v = _finite(x)
    if isinstance(v, str):
        return v
    if v == 0:
        return "0"
    mag = math.floor(math.log10(abs(v)))
    if mag < -12 or mag >= 18:
        return f"{v:.{digits}g}"
    return _fixed(v, digits - 1 - mag, keep_zeros=False)


def sig(x: Any, digits: int = 3) -> str:
    """``x`` to exactly ``digits`` significant digits, trailing zeros kept ("20.0", "0.500",
    "1,230"): an epsilon, stated as precisely as it is meant."""
    v = _finite(x)
    if isinstance(v, str):
        return v
    if v == 0:
        return "0" if digits <= 1 else "0." + "0" * (digits - 1)
    mag = math.floor(math.log10(abs(v)))
    if mag < -12 or mag >= 18:
        return f"{v:.{digits}g}"
    decimals = digits - 1 - mag
    rounded = round(v, decimals)
    if rounded != 0 and math.floor(math.log10(abs(rounded))) > mag:  # 9.996 -> 10.0
        decimals -= 1
    return _fixed(rounded, decimals, keep_zeros=True)


def percent(x: Any, digits: int = 3) -> str:
    """A share (0.0663) as a percentage to ``digits`` significant digits ("6.63%"), at most
    one decimal above 10% ("95.0%"); an exact 0 or 1 prints as "0%" / "100%"."""
    v = _finite(x)
    if isinstance(v, str):
        return v
    p = 100.0 * v
    if p == 0 or p == 100:
        return f"{p:.0f}%"
    mag = math.floor(math.log10(abs(p)))
    decimals = min(max(digits - 1 - mag, 1 if abs(p) >= 10 else 0), 12)
    return _fixed(p, decimals, keep_zeros=True) + "%"


def by_se(x: Any, se: Any) -> str:
    """An estimate to the decimal place of the second significant digit of its standard
    error (an SE of 3,725 prints the estimate as a whole number, an SE of 0.0123 to 3
    decimals); ``number(x)`` when the SE is missing or not positive."""
    v = _finite(x)
    if isinstance(v, str):
        return v
    s = _finite(se)
    if isinstance(s, str) or s <= 0:
        return number(v)
    decimals = min(max(1 - math.floor(math.log10(s)), 0), 12)
    return _fixed(v, decimals, keep_zeros=True)
