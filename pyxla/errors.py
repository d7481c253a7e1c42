"""The exceptions pyxla raises. Every one says what was wrong and where."""
from __future__ import annotations


class PyxlaError(Exception):
    """Base of every error pyxla raises on purpose."""


class ParseError(PyxlaError):
    """Malformed HLO text: carries the line, the column and the offending line with a caret."""

    def __init__(self, message: str, line: int, column: int, line_text: str, source: str = "<hlo>"):
        self.message = message
        self.line = line          # 1-based
        self.column = column      # 1-based
        self.line_text = line_text
        self.source = source
        caret = " " * (column - 1) + "^"
        super().__init__(f"{source}:{line}:{column}: {message}\n  {line_text}\n  {caret}")


class VerifierError(PyxlaError):
    """A module that parses but breaks a rule of HLO: names the computation and instruction."""


class ShapeError(PyxlaError):
    """Shape inference found operands or attributes that do not fit the opcode."""


class EvaluationError(PyxlaError):
    """The reference evaluator could not run an instruction (names it)."""


class ArgumentError(PyxlaError, ValueError):
    """Arguments given to an executable do not match its parameters."""


class TraceError(PyxlaError):
    """A traced program did something the trace cannot express: names the op, the shapes and
    the user's source line."""


class ConcretizationError(TraceError):
    """A traced (abstract) value was used where Python needs a concrete one: `if x > 0:`,
    `int(x)`, `np.asarray(x)` inside `jit`."""
