"""Fusion heuristics, in one place a backend configures.

`FusionPolicy.refuse(producer, consumer)` says why `producer` may NOT be fused into
`consumer` (a plain instruction or a fusion instruction), or None when it may. The fusion
pass only asks; every "no" it gets is logged with this reason (PYXLA_DEBUG=fusion).
"""
from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from math import prod

from ..hlo.computation import HloComputation
from ..hlo.instruction import HloInstruction
from ..hlo.ops import op_def
from ..hlo.ops.registry import is_expensive
from ..hlo.shape import ArrayShape

# Ops a loop kernel computes from indices alone: fusable into any consumer.
FUSIBLE_KINDS = frozenset({"elementwise", "broadcast", "injective"})
# Data-movement ops that are not worth fusing as producers: they copy, so keep their result.
NEVER_PRODUCERS = frozenset({"parameter", "tuple", "get-tuple-element", "while", "conditional", "call",
                             "custom-call", "rng-bit-generator", "sort", "scatter", "dynamic-update-slice",
                             "opt-barrier", "fusion", "select-and-scatter", "reduce-window", "convolution",
                             "dot", "reduce", "topk"})
# Producers a kernel computes from its indices alone, reading at most a smaller buffer: a copy
# in every consumer costs an index computation, while a materialised one is a full-size array
# written once and read by every consumer (a batch norm's scale broadcast over a feature map,
# shared by every layer whose scale is the same constant).
FREE_TO_DUPLICATE = frozenset({"broadcast", "iota"})
OUTPUT_FUSION_ROOTS = frozenset({"dot", "convolution"})
# Users that read an operand from its buffer whatever the fusion pass does.
BUFFER_READERS = frozenset({"tuple", "while", "conditional", "call", "custom-call", "sort", "scatter",
                            "dynamic-update-slice", "reduce-window", "select-and-scatter", "opt-barrier"})


@dataclass(frozen=True)
class FusionPolicy:
    """What the backend can emit and how much recomputation it accepts."""
    output_fusion: bool = True        # dot/convolution with elementwise epilogues in one kernel
    row_fusion: bool = True           # a row reduction whose result is broadcast back along its rows
    max_duplicated_users: int = 4     # a cheap producer may be recomputed for this many consumers
    max_fused_instructions: int = 200
    max_constant_elements: int = 1    # larger constants stay buffers, not fused literals
    padded_convolution_output: bool = True   # a convolution's epilogue may end in a pad (a border)
    dot_epilogue_reshaped_rows: bool = True  # a dot's epilogue may reshape its rows (same_rows)

    def refuse(self, producer: HloInstruction, consumer: HloInstruction,
               not_duplicated: frozenset[HloInstruction] = frozenset()) -> str | None:
        """`not_duplicated`: the instructions `not_duplicated(computation)` found, which
        join no consumer while they have others."""
        if not isinstance(producer.shape, ArrayShape):
            return "produces a tuple"
        opcode = producer.opcode
        if opcode == "constant":
            if producer.shape.size > self.max_constant_elements:
                return f"constant of {producer.shape.size} elements stays a buffer"
            return None
        if opcode == "reduce" or (opcode == "fusion" and producer.attrs.get("kind") == "kInput"):
            return self._refuse_row_reduction(producer, consumer)
        if opcode == "fusion":
            return self._refuse_fusion_merge(producer, consumer)
        if opcode in OUTPUT_FUSION_ROOTS:
            return self._refuse_output_fusion(producer, consumer)
        if opcode in NEVER_PRODUCERS:
            return f"{opcode} is not fused as a producer"
        if op_def(opcode).fusion_kind not in FUSIBLE_KINDS:
            return f"{opcode} is {op_def(opcode).fusion_kind}, not a loop op"
        if _feeds_gemm(producer, consumer):
            return "feeds the dot/convolution of an output fusion (the GEMM reads plain buffers)"
        outside = [u for u in producer.users if u is not consumer]
        if outside:
            materialized = next((u for u in outside if _reads_buffer(producer, u)), None)
            if materialized is not None and op_def(opcode).fusion_kind == "elementwise":
                # The value is written to memory for that user anyway: recomputing it here
                # would also pull in the chain behind it, and a chain of such producers (a
                # residual stream, each value feeding the next convolution and the next
                # add) would be computed again in every later kernel.
                return f"written to memory for %{materialized.name} anyway: fusing would compute it again"
            if producer in not_duplicated:
                return ("an operand of a value computed again in several consumers: duplicating it "
                        "too would grow every copy by the chain behind it")
            if is_expensive(opcode):
                return f"expensive {opcode} has {len(producer.users)} users: fusing would compute it again"
            if len(producer.users) > self.max_duplicated_users and opcode not in FREE_TO_DUPLICATE:
                return f"{len(producer.users)} users exceed the duplication budget {self.max_duplicated_users}"
        if is_expensive(opcode) and _reads_more_than_once(producer, consumer):
            return f"expensive {opcode} would be recomputed for each of several uses of an element"
        if _fused_size(consumer) >= self.max_fused_instructions:
            return f"the fusion already has {self.max_fused_instructions} instructions"
        return None

    def _refuse_row_reduction(self, producer: HloInstruction, consumer: HloInstruction) -> str | None:
        """A reduction over trailing (row) dimensions may join a consumer that uses its result
        only per row: elementwise on the reduced shape, then broadcast back over the rows. The
        kernel then reduces each row and uses the result on that same row."""
        if not self.row_fusion:
            return "row fusion is off"
        reduce = producer.attrs["calls"].root if producer.opcode == "fusion" else producer
        if reduce.opcode != "reduce":   # a row fusion already: its output is per element of the rows
            if consumer.opcode == "fusion" and _contains(consumer, lambda i: i.opcode == "reduce"):
                return "both fusions hold reductions"
            return self._refuse_fusion_merge(producer, consumer)
        if len(reduce.operands) != 2:
            return "a variadic reduce (argmax) is its own kernel"
        if len(producer.users) != 1:
            return f"{producer.opcode} has {len(producer.users)} users"
        rows = reduce.operands[0].array_shape.dims
        dims = tuple(sorted(reduce.attrs["dimensions"]))
        if dims != tuple(range(len(rows) - len(dims), len(rows))):
            return "reduces dimensions that are not the trailing (row) dimensions"
        kept = tuple(range(len(rows) - len(dims)))
        reduced = reduce.array_shape.dims   # one input, one result: an array
        if consumer.opcode != "fusion":
            if op_def(consumer.opcode).fusion_kind != "elementwise" or consumer.array_shape.dims != reduced:
                return f"{consumer.opcode} is neither an epilogue of the reduction nor a row fusion"
            return None
        problem = _uses_per_row(fused_parameter(consumer, producer), reduced, rows, kept)
        if problem:
            return problem
        root = consumer.attrs["calls"].root
        # A multi-output reduction (a tuple of reduces, as XLA's sibling fusion or
        # multi_output.py makes them) iterates over the rows of each of its outputs.
        for out in root.outputs:
            out_rows = out.operands[0].array_shape.dims if out.opcode == "reduce" else out.array_shape.dims
            if out_rows not in (rows, reduced):
                return "the fusion does not iterate over the reduced rows"
        return None

    def _refuse_output_fusion(self, gemm: HloInstruction, consumer: HloInstruction,
                              merging: HloInstruction | None = None) -> str | None:
        if not self.output_fusion:
            return "output fusion is off"
        if merging is None and len(gemm.users) != 1:
            return f"{gemm.opcode} has {len(gemm.users)} users"
        root = consumer.attrs["calls"].root if consumer.opcode == "fusion" else consumer
        product = gemm.array_shape.dims   # a dot, a convolution, or an output fusion's array root
        if root.opcode == "pad" and self.padded_convolution_output and (gemm.opcode == "convolution" or (
                merging is not None and _contains(merging, lambda i: i.opcode == "convolution"))):
            root = root.operands[0]   # the result inside a border: the next convolution's padded input
            if root.array_shape.dims != product:
                return "pads something else"
            if root.opcode == "parameter" or consumer.opcode != "fusion":
                return None   # the product itself, padded
        reshaped = self.dot_epilogue_reshaped_rows and gemm.opcode == "dot"
        if reshaped and root.opcode in ("reshape", "bitcast") and same_rows(root.array_shape.dims, product) \
                and same_rows(root.operands[0].array_shape.dims, product):
            root = root.operands[0]   # the next MatMul's [b, m, n] -> [b * m, n]: moves no element
        if op_def(root.opcode).fusion_kind != "elementwise" or not (
                root.array_shape.dims == product or reshaped and same_rows(root.array_shape.dims, product)):
            return f"{consumer.opcode} is not an elementwise epilogue of the same shape"
        if consumer.opcode == "fusion" and _contains(consumer, lambda i: i.opcode in OUTPUT_FUSION_ROOTS | {"reduce"}):
            return "the fusion already holds a dot, convolution or reduction"
        return None


    def _refuse_fusion_merge(self, producer: HloInstruction, consumer: HloInstruction) -> str | None:
        """A loop or output fusion read by exactly one consumer merges into it."""
        if len(producer.users) != 1:
            return f"fusion has {len(producer.users)} users"
        root = producer.attrs["calls"].root
        if producer.attrs.get("kind") == "kOutput":
            return self._refuse_output_fusion(root, consumer, merging=producer)
        if op_def(root.opcode).fusion_kind == "opaque":   # XLA's wrapped_scatter, DUS fusions
            return f"its root {root.opcode} is a kernel of its own, not computed per element"
        if _feeds_gemm(producer, consumer):
            return "feeds the dot/convolution of an output fusion (the GEMM reads plain buffers)"
        expensive = [i.opcode for i in producer.attrs["calls"].instructions if is_expensive(i.opcode)]
        if expensive and _reads_more_than_once(producer, consumer):
            return f"expensive {expensive[0]} would be recomputed for each of several uses of an element"
        if _fused_size(consumer) + _fused_size(producer) > self.max_fused_instructions:
            return f"the merged fusion would exceed {self.max_fused_instructions} instructions"
        return None


def same_rows(dims: tuple[int, ...], product: tuple[int, ...]) -> bool:
    """Whether an array of `dims` is a dot's result of dims `product` reshaped so that it moves
    no element: 1s put before the product's dims, or a plain product's rows [m, n] as
    [b..., m / b..., n]. An ONNX MatMul of [4, 128, 768] by [768, n] is a dot of [512, 768]
    reshaped back to [4, 128, n] (and the next MatMul reshapes to [512, n] again); the CPU
    GEMM's epilogue writes element (i, j) of the product at the row i of such a result."""
    lead = len(dims) - len(product)
    if lead >= 0 and dims == (1,) * lead + product:
        return True
    return len(product) == 2 and len(dims) >= 1 and dims[-1] == product[-1] and prod(dims[:-1]) == product[0]


def not_duplicated(comp: HloComputation) -> frozenset[HloInstruction]:
    """The instructions of `comp` that must not be duplicated into several consumers: the
    operands of a cheap value that will be (it has several users) and reads more bytes than it
    writes (XLA's rule for globally unfusible operands). Duplicating the value already reads its
    operands once per consumer; duplicating those operands too would repeat their own inputs, and
    in a chain of such values (a transformer's residual stream, each sum read by the next layer
    norm's kernels and by the next sum) every kernel would recompute every value before it. The
    value itself may still be duplicated: each copy reads its operands from memory."""
    kept: set[HloInstruction] = set()
    for producer in comp.instructions:
        if (len(producer.users) < 2 or not isinstance(producer.shape, ArrayShape)
                or op_def(producer.opcode).fusion_kind not in FUSIBLE_KINDS or producer.opcode in FREE_TO_DUPLICATE):
            continue
        read = sum(o.shape.byte_size for o in producer.operands if isinstance(o.shape, ArrayShape))
        if read <= producer.shape.byte_size:
            continue   # duplicating the operands moves no more bytes than materialising
        kept.update(o for o in producer.operands if o.opcode not in FREE_TO_DUPLICATE and not _no_chain(o))
    return frozenset(kept)


_LEAVES = FREE_TO_DUPLICATE | {"parameter", "constant"}


def _no_chain(operand: HloInstruction) -> bool:
    """An operand with no chain behind it: it reads only parameters and constants (a slice
    of an argument, say), so a copy in every consumer reads what the materialised value's
    readers would read, and repeats no other work."""
    return all(o.opcode in _LEAVES for o in operand.operands)


def _uses_per_row(param: HloInstruction, reduced: tuple[int, ...], rows: tuple[int, ...],
                  kept: tuple[int, ...]) -> str | None:
    """None when every use of a reduced value is elementwise on the reduced shape and ends in a
    broadcast back over the rows; else which use is not."""
    stack = list(param.users)
    seen: set[int] = set()
    while stack:
        user = stack.pop()
        if id(user) in seen:
            continue
        seen.add(id(user))
        if user.opcode == "broadcast":
            if tuple(user.attrs["dimensions"]) == kept and user.array_shape.dims == rows:
                continue
            return "its result is broadcast to something other than its own rows"
        if op_def(user.opcode).fusion_kind == "elementwise" and user.array_shape.dims == reduced:
            assert user.parent is not None   # an instruction of the consumer's fused computation
            if user is user.parent.root:
                continue
            stack.extend(user.users)
            continue
        return f"its result is used by {user.opcode}, not per row"
    return None


def fused_parameter(fusion: HloInstruction, operand: HloInstruction) -> HloInstruction:
    """The parameter of `fusion`'s computation that receives `operand`."""
    number = fusion.operands.index(operand)
    return next(p for p in fusion.attrs["calls"].parameters if p.parameter_number == number)


def _contains(fusion: HloInstruction, test: Callable[[HloInstruction], bool]) -> bool:
    return any(test(i) for i in fusion.attrs["calls"].instructions)


def _fused_size(consumer: HloInstruction) -> int:
    return len(consumer.attrs["calls"].instructions) if consumer.opcode == "fusion" else 1


def _feeds_gemm(producer: HloInstruction, consumer: HloInstruction) -> bool:
    if consumer.opcode in OUTPUT_FUSION_ROOTS:
        return True
    if consumer.opcode != "fusion":
        return False
    param = fused_parameter(consumer, producer)
    return any(u.opcode in OUTPUT_FUSION_ROOTS for u in param.users)


def _reads_buffer(producer: HloInstruction, user: HloInstruction) -> bool:
    """Whether `user` reads `producer` from memory whatever is fused: the operand of a
    GEMM or convolution, of an op that is never a consumer, or a program output."""
    return user.opcode in BUFFER_READERS or _feeds_gemm(producer, user)


def _reads_more_than_once(producer: HloInstruction, consumer: HloInstruction) -> bool:
    """Whether the consumer's kernel would compute some element of `producer` again for
    several of its outputs (a broadcast over inner dimensions, a window, a gather).

    A broadcast along the outer dimensions is not: the broadcast value is the same for a
    whole inner loop, so the loop computes it once per outer iteration (LLVM hoists it).
    Elementwise ops of the producer's size inside the fusion pass the question on to their
    users (a batch norm's rsqrt(var) * gamma, broadcast over a convolution's output).
    """
    if consumer.opcode != "fusion":
        users = [consumer]
    else:
        users = list(fused_parameter(consumer, producer).users)
    seen: set[int] = set()
    while users:
        u = users.pop()
        if id(u) in seen:
            continue
        seen.add(id(u))
        if consumer.opcode == "fusion" and op_def(u.opcode).fusion_kind == "elementwise" and \
                isinstance(u.shape, ArrayShape) and u.shape.size == producer.array_shape.size:
            users.extend(u.users)
        elif u.opcode == "broadcast":
            dims = tuple(u.attrs["dimensions"])
            if dims != tuple(range(len(dims))):
                return True
        elif u.opcode in ("reduce-window", "gather"):
            return True
        elif u.opcode != "reduce" and isinstance(u.shape, ArrayShape) and u.shape.size > producer.array_shape.size:
            return True
    return False
