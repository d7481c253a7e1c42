"""The op tree the StableHLO parser builds: a module of functions, each a region of ops.

It keeps MLIR's structure (SSA names, regions, attributes as Python values) and none of its
meaning; converter.py turns it into HLO. Attribute values:

  int, float, bool, str                  `1 : i64`, `1.5 : f32`, `true`, `"text"`
  list                                   `[1, 2]`
  dict                                   `{a = 1, b}` (a unit attribute maps to True)
  Dense                                  `dense<...> : tensor<...>` (text kept until its type is known)
  DenseArray                             `array<i64: 1, 2>`
  DialectAttr                            `#stablehlo.gather<...>`, `#stablehlo<precision DEFAULT>`
  Symbol                                 `@name`
  Shape                                  a type (`tensor<2xf32>`) used as an attribute
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from ..shape import Shape


@dataclass(frozen=True)
class ValueRef:
    """A use of an SSA value: `%name` or `%name#index`; pos is its offset in the text."""
    name: str
    index: int
    pos: int


@dataclass(frozen=True)
class Dense:
    body: str            # the text between `dense<` and `>`
    type: Shape | None   # the type after ':', when one follows
    pos: int


@dataclass(frozen=True)
class DenseArray:
    element: str
    values: tuple


@dataclass(frozen=True)
class DialectAttr:
    name: str            # "stablehlo.gather", "stablehlo" for `#stablehlo<...>`
    body: str            # the text between the angle brackets
    fields: dict | None  # `key = value, ...` bodies, parsed


@dataclass(frozen=True)
class Symbol:
    name: str


@dataclass
class Block:
    args: list[tuple[str, Shape]] = field(default_factory=list)
    ops: list[Op] = field(default_factory=list)


@dataclass
class Region:
    blocks: list[Block]
    pos: int


@dataclass
class Op:
    name: str                                  # "stablehlo.add", "func.return", ...
    pos: int
    line: int
    results: list[tuple[str, int]] = field(default_factory=list)   # (name, count)
    operands: list[ValueRef] = field(default_factory=list)
    attrs: dict[str, Any] = field(default_factory=dict)
    keywords: list[str] = field(default_factory=list)   # bare words of a pretty form (GT, FLOAT)
    groups: list[list[tuple]] = field(default_factory=list)   # parenthesised lists of a pretty form
    regions: list[Region] = field(default_factory=list)
    region_names: list[str] = field(default_factory=list)    # `cond`, `do`, `reducer` in pretty forms
    operand_types: list[Shape] = field(default_factory=list)
    result_types: list[Shape] = field(default_factory=list)
    raw: list[str] = field(default_factory=list)     # `[0:2, 1:3]` of a pretty slice, `<...>` of sdy
    generic: bool = False

    @property
    def num_results(self) -> int:
        return sum(count for _, count in self.results)


@dataclass
class Function:
    name: str
    pos: int
    public: bool
    args: list[tuple[str, Shape]]
    result_types: list[Shape]
    body: Region | None


@dataclass
class MlirModule:
    name: str
    functions: dict[str, Function]
