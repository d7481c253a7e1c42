"""Instruction attributes: their value types and the kind of value each name carries.

An instruction keeps its attributes in one ordered dict, name -> value, spelled as in
XLA's text (`dimensions`, `to_apply`, `control-predecessors`, ...). `ATTRIBUTE_KINDS`
says what kind of value each name holds; the parser and the printer both follow it, so
a new attribute is taught to the text format in one line here.

Value representation by kind:
  ints         tuple[int, ...]                    dimensions={0,1}
  int          int                                index=0
  float        float                              epsilon=0.001
  bool         bool                               is_stable=true
  enum         str                                direction=LT, kind=kLoop
  string       str (unquoted)                     custom_call_target="TopK"
  computation  HloComputation                     to_apply=add.1
  computations tuple[HloComputation, ...]         branch_computations={a, b}
  slice        tuple[SliceDim, ...]               slice={[0:4:2], [1:3]}
  padding      tuple[PadDim, ...]                 padding=0_1_0x2_2_1
  window       tuple[WindowDim, ...]              window={size=2x2 stride=2x2 pad=0_0x0_0}
  dim_labels   ConvDimensionNumbers               dim_labels=b01f_01io->b01f
  metadata     dict[str, str | int]               metadata={op_name="x" source_line=3}
  names        tuple[str, ...]                    control-predecessors={a, b}
  raw          str, the exact text after '='      backend_config=..., sharding={...}
"""
from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class SliceDim:
    start: int
    limit: int
    stride: int = 1


@dataclass(frozen=True)
class PadDim:
    low: int
    high: int
    interior: int = 0


@dataclass(frozen=True)
class WindowDim:
    size: int
    stride: int = 1
    pad_low: int = 0
    pad_high: int = 0
    lhs_dilate: int = 1   # base dilation
    rhs_dilate: int = 1   # window dilation
    reversal: bool = False


def features_first(rank: int, batch: int, feature: int, spatial: tuple) -> bool | None:
    """Of an array of `rank` whose dimensions play a convolution's roles: True when the
    dimensions but the batch are (feature, spatial...) (NCHW), False when (spatial...,
    feature) (NHWC), None otherwise."""
    rest = [d for d in range(rank) if d != batch]
    if rest == [feature, *spatial]:
        return True
    if rest == [*spatial, feature]:
        return False
    return None


@dataclass(frozen=True)
class ConvDimensionNumbers:
    """Which dimension plays which role in a convolution (XLA's `dim_labels`)."""
    input_batch: int
    input_feature: int
    input_spatial: tuple[int, ...]
    kernel_input_feature: int
    kernel_output_feature: int
    kernel_spatial: tuple[int, ...]
    output_batch: int
    output_feature: int
    output_spatial: tuple[int, ...]

    @staticmethod
    def from_labels(text: str) -> ConvDimensionNumbers:
        """Parse `b01f_01io->b01f`; raises ValueError with the reason."""
        try:
            lhs_rhs, out = text.split("->")
            lhs, rhs = lhs_rhs.split("_")
        except ValueError:
            raise ValueError(f"dim_labels {text!r} is not of the form LHS_RHS->OUT") from None
        if not (len(lhs) == len(rhs) == len(out)) or len(lhs) < 2:
            raise ValueError(f"dim_labels {text!r}: the three parts must have the same rank >= 2")

        def roles(part, special):
            spatial = {}
            found = {}
            for pos, ch in enumerate(part):
                if ch in special:
                    if ch in found:
                        raise ValueError(f"dim_labels {text!r}: {ch!r} repeated in {part!r}")
                    found[ch] = pos
                elif ch.isdigit():
                    if int(ch) in spatial:
                        raise ValueError(f"dim_labels {text!r}: spatial {ch!r} repeated in {part!r}")
                    spatial[int(ch)] = pos
                else:
                    raise ValueError(f"dim_labels {text!r}: unexpected {ch!r} in {part!r}")
            if set(found) != set(special) or sorted(spatial) != list(range(len(spatial))):
                raise ValueError(f"dim_labels {text!r}: {part!r} must name {'/'.join(special)} "
                                 "and spatial dimensions 0..n-1")
            return found, tuple(spatial[i] for i in range(len(spatial)))

        lf, ls = roles(lhs, "bf")
        rf, rs = roles(rhs, "io")
        of, os_ = roles(out, "bf")
        return ConvDimensionNumbers(lf["b"], lf["f"], ls, rf["i"], rf["o"], rs, of["b"], of["f"], os_)

    def to_labels(self) -> str:
        def part(rank, named, spatial):
            chars = [""] * rank
            for ch, pos in named.items():
                chars[pos] = ch
            for i, pos in enumerate(spatial):
                chars[pos] = str(i)
            return "".join(chars)

        rank = len(self.input_spatial) + 2
        return (part(rank, {"b": self.input_batch, "f": self.input_feature}, self.input_spatial) + "_"
                + part(rank, {"i": self.kernel_input_feature, "o": self.kernel_output_feature},
                       self.kernel_spatial)
                + "->" + part(rank, {"b": self.output_batch, "f": self.output_feature}, self.output_spatial))


ATTRIBUTE_KINDS: dict[str, str] = {
    # shapes and dimensions
    "dimensions": "ints",
    "slice": "slice",
    "padding": "padding",
    "dynamic_slice_sizes": "ints",
    "iota_dimension": "int",
    "index": "int",
    "window": "window",
    "dim_labels": "dim_labels",
    "feature_group_count": "int",
    "batch_group_count": "int",
    "lhs_batch_dims": "ints",
    "rhs_batch_dims": "ints",
    "lhs_contracting_dims": "ints",
    "rhs_contracting_dims": "ints",
    "operand_precision": "raw",
    "algorithm": "enum",
    # gather / scatter
    "offset_dims": "ints",
    "collapsed_slice_dims": "ints",
    "start_index_map": "ints",
    "operand_batching_dims": "ints",
    "start_indices_batching_dims": "ints",
    "index_vector_dim": "int",
    "slice_sizes": "ints",
    "indices_are_sorted": "bool",
    "update_window_dims": "ints",
    "inserted_window_dims": "ints",
    "scatter_dims_to_operand_dims": "ints",
    "input_batching_dims": "ints",
    "scatter_indices_batching_dims": "ints",
    "unique_indices": "bool",
    # comparison, sort, top-k
    "direction": "enum",
    "type": "enum",
    "is_stable": "bool",
    "k": "int",
    "largest": "bool",
    # batch normalisation
    "epsilon": "float",
    "feature_index": "int",
    # linear algebra, random distributions
    "lower": "bool",
    "left_side": "bool",
    "unit_diagonal": "bool",
    "transpose_a": "enum",
    "distribution": "enum",
    # precision
    "exponent_bits": "int",
    "mantissa_bits": "int",
    # called computations
    "to_apply": "computation",
    "calls": "computation",
    "condition": "computation",
    "body": "computation",
    "select": "computation",
    "scatter": "computation",
    "branch_computations": "computations",
    "called_computations": "computations",
    "true_computation": "computation",
    "false_computation": "computation",
    # fusion and custom calls
    "kind": "enum",
    "custom_call_target": "string",
    "api_version": "enum",
    "custom_call_has_side_effect": "bool",
    "output_to_operand_aliasing": "raw",
    "schedule": "enum",
    # dynamic padding (passes/dynamic_padder/bounded_rows.py): "d:size", the run-time size
    # of dimension d of a value over the symbols; on a fusion, {operand, d}: the operand
    # holding the count of indices of dimension d of its outputs that are needed
    "dynamic_rows": "string",
    "bounded_rows": "ints",
    # annotations that never change a value
    "metadata": "metadata",
    "backend_config": "raw",
    "frontend_attributes": "raw",
    "sharding": "raw",
    "control-predecessors": "names",
    "statistics": "raw",
    "origin": "raw",
    "result_accuracy": "raw",
    "parameter_replication": "raw",
    "is_composite": "bool",
}

# Attributes that describe an instruction without changing what it computes: CSE and
# equality checks ignore them.
NON_SEMANTIC_ATTRIBUTES = frozenset({
    "metadata", "backend_config", "frontend_attributes", "sharding", "control-predecessors",
    "statistics", "origin", "operand_precision", "schedule", "result_accuracy",
    "parameter_replication",   # which replicas hold the same value: pyxla runs one
    "is_composite",            # a call that stands for a named op: still a call
    # rows of a padded value no one reads (passes/dynamic_padder/bounded_rows.py): a fact
    # about this value's shape, so a pass that makes the op anew at another shape drops it
    "dynamic_rows",
})

COMPUTATION_ATTRIBUTES = tuple(n for n, k in ATTRIBUTE_KINDS.items() if k in ("computation", "computations"))


def attribute_kind(name: str) -> str:
    """The kind of value attribute `name` holds; unknown attributes are kept as raw text."""
    return ATTRIBUTE_KINDS.get(name, "raw")
