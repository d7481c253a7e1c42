"""pyxla: an XLA-style machine-learning compiler written in Python."""
__version__ = "0.1.0"

from .errors import ArgumentError, EvaluationError, ParseError, PyxlaError, ShapeError, VerifierError  # noqa: F401
