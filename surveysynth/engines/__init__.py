"""Alternative estimation engines (``engine="samplics"``; ``engine="r"`` lives in r_bridge)."""
