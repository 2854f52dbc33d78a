"""The estimation engine: Taylor linearization (taylor.py) and replicate weights and variance (replicate_weights.py)."""

from .taylor import LONELY_OPTIONS, LonelyPSUError, Stage, taylor_variance

__all__ = ["LONELY_OPTIONS", "LonelyPSUError", "Stage", "taylor_variance"]
