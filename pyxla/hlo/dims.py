"""Symbolic dimension sizes: what a shape polymorphic program's dimensions are made of.

A dimension of an array shape is either a plain `int` or a `DimExpr`: a polynomial with
integer coefficients over named symbols (`b`, `s`), such as `b`, `2*b`, `b*s` or `s - 1`.
Arithmetic on dimensions (`+ - *`, exact `//`, `%` by a constant) stays symbolic, so the
shape rules of the op registry, written for ints, work on symbolic shapes unchanged. An
expression whose symbols cancel is a plain int again: `dim()` normalises.

Comparisons decide what the symbols' ranges decide. Each symbol has a lower bound (1 unless
declared, as in JAX: a dimension named in a polymorphic shape is at least 1) and an optional
upper bound. `==` is True only when provable (equal polynomials, or the bounds pin the
difference to 0) and False otherwise, as JAX's `==` on symbolic dimensions, so a test such
as "is this dimension 1?" (broadcasting) answers no for `b`. `<`, `<=`, `>`, `>=` are
decided from the bounds; when the bounds do not decide (`b >= 4` with b only known >= 1)
they raise `InconclusiveDimensionOperation` naming the comparison. `int(b)` and any use
of a symbolic size where a concrete integer is needed raise the same error.

In HLO text a symbolic dimension prints as XLA writes a dynamic one: `?`, or `<=N` when the
expression has an upper bound N. The text keeps neither the symbols nor how dimensions
relate; parsing `?` makes a fresh anonymous symbol.
"""
from __future__ import annotations

import itertools
import math
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Union

from ..errors import PyxlaError


class InconclusiveDimensionOperation(PyxlaError, TypeError):
    """A question about symbolic sizes that their constraints do not answer."""


@dataclass(frozen=True, eq=False)
class Symbol:
    """A named size. `lower`/`upper` bound its values (inclusive; upper None: unbounded).
    Symbols are the same when their names are: bounds describe a name, they do not make
    another one."""
    name: str
    lower: int = 1
    upper: int | None = None

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Symbol) and other.name == self.name

    def __hash__(self) -> int:
        return hash(self.name)

    def __str__(self) -> str:
        return self.name


# A monomial is a sorted tuple of (symbol, power); the constant term is the empty tuple.
Monomial = tuple[tuple[Symbol, int], ...]
Dim = Union[int, "DimExpr"]

_anonymous = itertools.count()


def anonymous_symbol(upper: int | None = None) -> Symbol:
    """A fresh symbol for a dynamic dimension read from text (`?` or `<=N`), related to no other."""
    return Symbol(f"_d{next(_anonymous)}", 0, upper)


def is_anonymous(sym: Symbol) -> bool:
    """Whether `sym` was made by anonymous_symbol: a dynamic dimension read from text."""
    return sym.name.startswith("_d") and sym.name[2:].isdigit()


class DimExpr:
    """A symbolic size: sum of coefficient * product of symbols. Immutable and hashable."""

    __slots__ = ("terms", "_hash")

    def __init__(self, terms: Mapping[Monomial, int]):
        self.terms: dict[Monomial, int] = {m: c for m, c in terms.items() if c != 0}
        self._hash = hash(frozenset((tuple((s.name, p) for s, p in m), c) for m, c in self.terms.items()))

    # -- construction -------------------------------------------------------------------
    @staticmethod
    def symbol(sym: Symbol) -> DimExpr:
        return DimExpr({((sym, 1),): 1})

    @property
    def symbols(self) -> frozenset[Symbol]:
        return frozenset(s for m in self.terms for s, _ in m)

    @property
    def constant(self) -> int:
        return self.terms.get((), 0)

    # -- arithmetic ---------------------------------------------------------------------
    def __add__(self, other: Dim) -> Dim:
        o = _as_expr(other)
        if o is None:
            return NotImplemented
        terms = dict(self.terms)
        for m, c in o.terms.items():
            terms[m] = terms.get(m, 0) + c
        return dim(DimExpr(terms))

    __radd__ = __add__

    def __neg__(self) -> DimExpr:
        return DimExpr({m: -c for m, c in self.terms.items()})

    def __sub__(self, other: Dim) -> Dim:
        o = _as_expr(other)
        return NotImplemented if o is None else self + (-o)

    def __rsub__(self, other: Dim) -> Dim:
        o = _as_expr(other)
        return NotImplemented if o is None else o + (-self)

    def __mul__(self, other: Dim) -> Dim:
        o = _as_expr(other)
        if o is None:
            return NotImplemented
        terms: dict[Monomial, int] = {}
        for (m1, c1), (m2, c2) in itertools.product(self.terms.items(), o.terms.items()):
            m = _monomial_product(m1, m2)
            terms[m] = terms.get(m, 0) + c1 * c2
        return dim(DimExpr(terms))

    __rmul__ = __mul__

    def __floordiv__(self, other: Dim) -> Dim:
        """Exact division only: by an int dividing every coefficient, or by an expression
        that is a factor with an int quotient (`(b*768) // b`)."""
        if _as_expr(other) is None:
            return NotImplemented
        if isinstance(other, int) and other != 0 and all(c % other == 0 for c in self.terms.values()):
            return dim(DimExpr({m: c // other for m, c in self.terms.items()}))
        if isinstance(other, DimExpr):
            quotient = _exact_quotient(self, other)
            if quotient is not None:
                return quotient
        raise InconclusiveDimensionOperation(
            f"cannot divide the symbolic size {self} by {other}: the division is not exact for every value "
            "of its symbols")

    def __rfloordiv__(self, other: Dim) -> Dim:
        o = _as_expr(other)
        if o is None:
            return NotImplemented
        return o // self

    def __truediv__(self, other: Dim) -> Dim:
        return self.__floordiv__(other)

    def __mod__(self, other: Dim) -> int:
        if _as_expr(other) is None:
            return NotImplemented
        if isinstance(other, int) and other != 0:
            rest = {m: c for m, c in self.terms.items() if m and c % other != 0}
            if not rest:
                return self.constant % other
        raise InconclusiveDimensionOperation(f"the remainder of the symbolic size {self} divided by {other} "
                                             "depends on the values of its symbols")

    # -- comparisons --------------------------------------------------------------------
    def bounds(self) -> tuple[float, float]:
        """(lowest, highest) values the expression can take, from its symbols' bounds."""
        low = high = float(self.constant)
        for m, c in self.terms.items():
            if not m:
                continue
            lo_m, hi_m = 1.0, 1.0
            for s, p in m:
                lo_m *= float(s.lower) ** p
                hi_m *= math.inf if s.upper is None else float(s.upper) ** p
            low, high = (low + c * lo_m, high + c * hi_m) if c > 0 else (low + c * hi_m, high + c * lo_m)
        return low, high

    def _compare(self, other: Dim, op: str) -> bool:
        o = _as_expr(other)
        if o is None:
            return NotImplemented
        diff = self - o
        low, high = diff.bounds() if isinstance(diff, DimExpr) else (diff, diff)
        decided = {"<": (high < 0, low >= 0), "<=": (high <= 0, low > 0),
                   ">": (low > 0, high <= 0), ">=": (low >= 0, high < 0)}[op]
        if decided[0]:
            return True
        if decided[1]:
            return False
        raise InconclusiveDimensionOperation(
            f"the comparison {self} {op} {other} depends on the values of the symbolic sizes "
            f"({', '.join(_describe(s) for s in sorted((self.symbols | o.symbols), key=lambda s: s.name))}); "
            "declare a constraint (for example 'b >= 2') or avoid the comparison")

    def __lt__(self, other: Dim) -> bool:
        return self._compare(other, "<")

    def __le__(self, other: Dim) -> bool:
        return self._compare(other, "<=")

    def __gt__(self, other: Dim) -> bool:
        return self._compare(other, ">")

    def __ge__(self, other: Dim) -> bool:
        return self._compare(other, ">=")

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, (int, DimExpr)) or isinstance(other, bool):
            return False
        diff = self - other
        if isinstance(diff, int):
            return diff == 0
        low, high = diff.bounds()
        return low == high == 0

    def __ne__(self, other: object) -> bool:
        return not self.__eq__(other)

    def __hash__(self) -> int:
        return self._hash

    # -- values -------------------------------------------------------------------------
    def evaluate(self, values: Mapping[str, int]) -> int:
        """The size for the symbols' values, given by name."""
        total = 0
        for m, c in self.terms.items():
            term = c
            for s, p in m:
                if s.name not in values:
                    raise KeyError(f"no value for the symbolic size {s.name!r}")
                term *= int(values[s.name]) ** p
            total += term
        return total

    def _concrete(self) -> int:
        raise InconclusiveDimensionOperation(
            f"the size {self} is symbolic (declared in polymorphic_shapes) and this operation needs a "
            "concrete integer")

    def __int__(self) -> int:
        return self._concrete()

    def __index__(self) -> int:
        return self._concrete()

    def __bool__(self) -> bool:
        return True   # a dimension expression is an object, not a test; `if dim:` means "given"

    def __repr__(self) -> str:
        return f"DimExpr({self})"

    def __str__(self) -> str:
        parts = []
        for m, c in sorted(self.terms.items(), key=lambda mc: (-len(mc[0]), [(s.name, p) for s, p in mc[0]])):
            body = "*".join(s.name if p == 1 else f"{s.name}^{p}" for s, p in m)
            if not m:
                parts.append(str(c))
            elif c == 1:
                parts.append(body)
            elif c == -1:
                parts.append(f"-{body}")
            else:
                parts.append(f"{c}*{body}")
        text = " + ".join(parts) if parts else "0"
        return text.replace("+ -", "- ")


def _describe(s: Symbol) -> str:
    return f"{s.name} >= {s.lower}" + (f", {s.name} <= {s.upper}" if s.upper is not None else "")


def _as_expr(value: object) -> DimExpr | None:
    if isinstance(value, DimExpr):
        return value
    if isinstance(value, int) and not isinstance(value, bool):
        return DimExpr({(): value})
    try:
        import numpy as np
        if isinstance(value, np.integer):
            return DimExpr({(): int(value)})
    except ImportError:   # pragma: no cover - NumPy is a core dependency
        pass
    return None


def _monomial_product(a: Monomial, b: Monomial) -> Monomial:
    powers: dict[Symbol, int] = {}
    for s, p in a + b:
        powers[s] = powers.get(s, 0) + p
    return tuple(sorted(powers.items(), key=lambda sp: sp[0].name))


def _exact_quotient(numerator: DimExpr, divisor: DimExpr) -> Dim | None:
    """numerator / divisor when divisor is a single term dividing every term exactly."""
    if len(divisor.terms) != 1:
        return None
    (dm, dc), = divisor.terms.items()
    dpow = dict(dm)
    terms: dict[Monomial, int] = {}
    for m, c in numerator.terms.items():
        powers = dict(m)
        if c % dc or any(powers.get(s, 0) < p for s, p in dpow.items()):
            return None
        rest = {s: powers.get(s, 0) - dpow.get(s, 0) for s in powers}
        terms[tuple(sorted(((s, p) for s, p in rest.items() if p), key=lambda sp: sp[0].name))] = c // dc
    return dim(DimExpr(terms))


def dim(value: Dim) -> Dim:
    """`value` as a plain int when it is constant, else the expression itself."""
    if isinstance(value, DimExpr):
        if all(not m for m in value.terms):
            return value.constant
        return value
    return int(value)


def is_symbolic(value: object) -> bool:
    return isinstance(value, DimExpr)


def single_symbol(value: object) -> Symbol | None:
    """The symbol when `value` is exactly one symbol (`b`, not `2*b` or `b+1`), else None."""
    if not isinstance(value, DimExpr) or len(value.terms) != 1:
        return None
    ((monomial, coefficient),) = value.terms.items()
    if coefficient != 1 or len(monomial) != 1 or monomial[0][1] != 1:
        return None
    return monomial[0][0]


def symbols_of(dims: Iterable[Dim]) -> frozenset[Symbol]:
    out: frozenset[Symbol] = frozenset()
    for d in dims:
        if isinstance(d, DimExpr):
            out |= d.symbols
    return out


def evaluate_dim(value: Dim, values: Mapping[str, int]) -> int:
    return value.evaluate(values) if isinstance(value, DimExpr) else int(value)


def upper_bound(value: Dim) -> int | None:
    """The largest value a dimension can take, or None when unbounded."""
    if not isinstance(value, DimExpr):
        return int(value)
    high = value.bounds()[1]
    return None if math.isinf(high) else int(high)


# -- the text of polymorphic shapes -----------------------------------------------------
_TOKEN = re.compile(r"\s*(?:(\d+)|([A-Za-z_][A-Za-z_0-9]*)|(.))")


class DimensionSyntaxError(PyxlaError, ValueError):
    """A polymorphic shape or constraint that is not well formed."""


def parse_dim(text: str, symbols: dict[str, Symbol]) -> Dim:
    """A dimension expression: integers, names, `+ - *`, parentheses (`2*b`, `b*s`, `s - 1`).
    Names are looked up in (and new ones added to) `symbols`."""
    tokens = [(n, name, op) for n, name, op in _TOKEN.findall(text) if n or name or op.strip()]
    pos = 0

    def fail(why: str) -> DimensionSyntaxError:
        return DimensionSyntaxError(f"in the dimension expression {text!r}: {why}")

    def peek() -> tuple[str, str, str]:
        return tokens[pos] if pos < len(tokens) else ("", "", "")

    def atom() -> Dim:
        nonlocal pos
        number, name, op = peek()
        if not (number or name or op):
            raise fail("it ends where a number or a name was expected")
        pos += 1
        if number:
            return int(number)
        if name:
            if name not in symbols:
                symbols[name] = Symbol(name)
            return DimExpr.symbol(symbols[name])
        if op == "(":
            value = expression()
            if peek()[2] != ")":
                raise fail("a '(' is not closed")
            pos += 1
            return value
        if op == "-":
            return -_as_expr(atom())   # type: ignore[operator]
        raise fail(f"unexpected {op!r}")

    def product() -> Dim:
        nonlocal pos
        value = atom()
        while peek()[2] == "*":
            pos += 1
            value = value * atom()
        return value

    def expression() -> Dim:
        nonlocal pos
        value = product()
        while peek()[2] in ("+", "-"):
            op = peek()[2]
            pos += 1
            value = value + product() if op == "+" else value - product()
        return value

    result = expression()
    if pos != len(tokens):
        raise fail(f"unexpected {''.join(tokens[pos])!r}")
    return dim(result) if isinstance(result, DimExpr) else result


@dataclass(frozen=True)
class Constraint:
    """`lhs op rhs` between dimension expressions, op one of >= <= > < ==."""
    lhs: Dim
    op: str
    rhs: Dim
    text: str

    def holds(self, values: Mapping[str, int]) -> bool:
        a, b = evaluate_dim(self.lhs, values), evaluate_dim(self.rhs, values)
        return {">=": a >= b, "<=": a <= b, ">": a > b, "<": a < b, "==": a == b}[self.op]


_CONSTRAINT = re.compile(r"^(.*?)(>=|<=|==|>|<)(.*)$")


def parse_constraint(text: str, symbols: dict[str, Symbol]) -> Constraint:
    m = _CONSTRAINT.match(text)
    if not m:
        raise DimensionSyntaxError(f"the constraint {text!r} is not 'A >= B', 'A <= B', 'A > B', 'A < B' or 'A == B'")
    return Constraint(parse_dim(m.group(1), symbols), m.group(2), parse_dim(m.group(3), symbols), text.strip())


def bound_symbols(symbols: dict[str, Symbol], constraints: Iterable[Constraint]) -> dict[str, Symbol]:
    """The symbols with the bounds that constraints of the form `name >= k` / `name <= k`
    (or `k <= name`, `name > k`, ...) give them; other constraints are checked per call only."""
    lower = {n: s.lower for n, s in symbols.items()}
    upper = {n: s.upper for n, s in symbols.items()}
    for c in constraints:
        lhs, op, rhs = c.lhs, c.op, c.rhs
        if isinstance(lhs, int) and isinstance(rhs, DimExpr):
            lhs, rhs, op = rhs, lhs, {">=": "<=", "<=": ">=", ">": "<", "<": ">", "==": "=="}[op]
        if not (isinstance(lhs, DimExpr) and isinstance(rhs, int) and len(lhs.terms) == 1):
            continue
        (m, coef), = lhs.terms.items()
        if coef != 1 or len(m) != 1 or m[0][1] != 1:
            continue
        name = m[0][0].name
        if op in (">=", ">", "=="):
            lower[name] = max(lower[name], rhs + (op == ">"))
        if op in ("<=", "<", "=="):
            bound = rhs - (op == "<")
            upper[name] = bound if upper[name] is None else min(upper[name], bound)   # type: ignore[type-var]
    return {n: Symbol(n, lower[n], upper[n]) for n in symbols}


def rebind(value: Dim, symbols: Mapping[str, Symbol]) -> Dim:
    """`value` with its symbols replaced by the same-named ones of `symbols` (new bounds)."""
    if not isinstance(value, DimExpr):
        return value
    terms: dict[Monomial, int] = {}
    for m, c in value.terms.items():
        terms[tuple((symbols.get(s.name, s), p) for s, p in m)] = c
    return DimExpr(terms)
