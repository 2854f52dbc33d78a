"""The estimation engine: Taylor linearization (and, in replicate.py, replicate variance)."""

from .taylor import LONELY_OPTIONS, LonelyPSUError, Stage, taylor_variance

__all__ = ["LONELY_OPTIONS", "LonelyPSUError", "Stage", "taylor_variance"]
