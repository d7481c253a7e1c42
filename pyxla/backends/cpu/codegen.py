"""LLVM IR for a compiled module: one kernel function per ENTRY instruction that computes,
and one entry function that calls them in schedule order on the planned buffers.

    void entry(ptr params, ptr outputs, ptr arena)

`params` and `outputs` are arrays of buffer pointers; temporaries live in `arena` at the
offsets buffer assignment chose; constants are globals. The entry function sets the FTZ and
DAZ bits of MXCSR for its duration, as XLA's CPU runtime does, so f32/f64 arithmetic
flushes subnormals exactly like the evaluator.

Kernels by kind:
  loop          fusion kLoop, or a lone elementwise / data-movement op: one loop nest over
                the output, each element from the elemental emitter
  reduction     fusion kInput, or a lone reduce: an outer loop over rows; per row every
                reduction runs once, then the row's outputs are written
  gemm          dot of f32/f64 in canonical form: a BLAS call per batch element, and for
                fusion kOutput the epilogue loop in place over the result
"""
from __future__ import annotations

from dataclasses import dataclass

import llvmlite.binding as llvm
import llvmlite.ir as ir
import numpy as np

from ...fusion.buffer_assignment import BufferAssignment, _storage
from ...hlo.instruction import HloInstruction
from ...hlo.module import HloModule
from ...hlo.shape import ArrayShape, TupleShape
from ...runtime.analysis import byte_size
from .blas import emit_gemm
from .elemental import RULES, ElementalEmitter, Unsupported, etype, linear_index
from .ir_types import I8, I32, I64, PTR, VOID, compute_type, i64, storage_type, to_compute, to_storage
from .loops import for_range

VIEWS = frozenset({"tuple", "get-tuple-element", "bitcast", "opt-barrier", "parameter", "constant"})

# Kernels for ops that are not elementwise loops (sort, scatter, ...): opcode ->
# emit(kernel_emitter). Files in this package that add one register it here.
KERNELS: dict = {}
MXCSR_FTZ_DAZ = 0x8040


@dataclass
class OutputSlot:
    """Where ROOT leaf i comes from: a native output buffer (with a byte offset inside a
    tuple-valued buffer), or a parameter / constant that passes through."""
    kind: str                 # "buffer", "parameter" or "constant"
    index: int                # output buffer number, or parameter number
    offset: int
    shape: ArrayShape
    literal: np.ndarray | None = None


def tuple_element_offsets(shape: TupleShape) -> list[int]:
    offsets, at = [], 0
    for e in shape.elements:
        offsets.append(at)
        at += byte_size(e)
    return offsets


class ModuleCodegen:
    def __init__(self, module: HloModule, buffers: BufferAssignment):
        self.hlo = module
        self.buffers = buffers
        self.ir = ir.Module(name=module.name)
        self.ir.triple = llvm.get_process_triple()
        self.constants: dict[int, ir.GlobalVariable] = {}
        self.output_buffers: list = []          # Buffer objects, in output slot order
        self.outputs: list[OutputSlot] = []
        self._plan_outputs()

    # --- outputs ------------------------------------------------------------------------------
    def _plan_outputs(self) -> None:
        entry = self.hlo.entry
        leaves = _root_leaves(entry.root)
        for leaf in leaves:
            storage, offset = self._storage_and_offset(leaf)
            if storage.opcode == "parameter":
                self.outputs.append(OutputSlot("parameter", storage.parameter_number, 0, leaf.shape))
            elif storage.opcode == "constant":
                self.outputs.append(OutputSlot("constant", 0, 0, leaf.shape, np.asarray(storage.literal)))
            else:
                buf = self.buffers.of(storage)
                if buf not in self.output_buffers:
                    self.output_buffers.append(buf)
                self.outputs.append(OutputSlot("buffer", self.output_buffers.index(buf), offset, leaf.shape))

    def _storage_and_offset(self, instr: HloInstruction) -> tuple[HloInstruction, int]:
        """The buffer-owning instruction behind a value, and the value's byte offset in it."""
        if instr.opcode in ("bitcast",):
            return self._storage_and_offset(instr.operands[0])
        if instr.opcode == "get-tuple-element":
            source = instr.operands[0]
            if source.opcode == "tuple":
                return self._storage_and_offset(source.operands[instr.attrs["index"]])
            base, offset = self._storage_and_offset(source)
            return base, offset + tuple_element_offsets(source.shape)[instr.attrs["index"]]
        if instr.opcode == "opt-barrier":
            return self._storage_and_offset(instr.operands[0])
        return instr, 0

    # --- the entry function ---------------------------------------------------------------------
    def emit(self) -> str:
        fn = ir.Function(self.ir, ir.FunctionType(VOID, [PTR, PTR, PTR]), name="entry")
        params, outs, arena = fn.args
        b = ir.IRBuilder(fn.append_basic_block("entry"))
        saved = self._set_mxcsr(b)
        for instr in self.hlo.entry.instructions:
            if instr.opcode in VIEWS:
                continue
            kernel = self._kernel(instr)
            operands = list(dict.fromkeys(instr.operands))
            args = [self._pointer(b, instr, params, outs, arena)] + \
                   [self._pointer(b, op, params, outs, arena) for op in operands]
            b.call(kernel, args)
        self._restore_mxcsr(b, saved)
        b.ret_void()
        return str(self.ir)

    def _pointer(self, b: ir.IRBuilder, value: HloInstruction, params, outs, arena) -> ir.Value:
        storage, offset = self._storage_and_offset(value)
        if storage.opcode == "tuple":
            raise Unsupported(f"the CPU backend cannot pass a tuple value to a kernel yet ({value.describe()})")
        if storage.opcode == "parameter":
            slot = b.gep(params, [i64(storage.parameter_number)], source_etype=PTR)
            base = b.load(slot, typ=PTR)
        elif storage.opcode == "constant":
            base = self._constant_global(storage)
        else:
            buf = self.buffers.of(storage)
            if buf.kind == "output":
                slot = b.gep(outs, [i64(self.output_buffers.index(buf))], source_etype=PTR)
                base = b.load(slot, typ=PTR)
            else:
                base = b.gep(arena, [i64(buf.offset)], source_etype=I8)
        return b.gep(base, [i64(offset)], source_etype=I8) if offset else base

    def _constant_global(self, instr: HloInstruction) -> ir.GlobalVariable:
        if id(instr) not in self.constants:
            shape: ArrayShape = instr.shape
            physical = np.ascontiguousarray(np.asarray(instr.literal).transpose(
                tuple(reversed(shape.minor_to_major)))) if shape.rank else np.asarray(instr.literal)
            data = bytearray(physical.astype(shape.dtype.np_dtype).tobytes()) or bytearray(1)
            ty = ir.ArrayType(I8, len(data))
            g = ir.GlobalVariable(self.ir, ty, name=f"constant.{instr.name}")
            g.global_constant = True
            g.linkage = "internal"
            g.align = 64
            g.initializer = ir.Constant(ty, data)
            self.constants[id(instr)] = g
        return self.constants[id(instr)]

    def _set_mxcsr(self, b: ir.IRBuilder):
        if not self.ir.triple.startswith(("x86_64", "i686", "i386")):
            return None
        stmxcsr = ir.Function(self.ir, ir.FunctionType(VOID, [PTR]), name="llvm.x86.sse.stmxcsr")
        ldmxcsr = ir.Function(self.ir, ir.FunctionType(VOID, [PTR]), name="llvm.x86.sse.ldmxcsr")
        saved = b.alloca(I32)
        b.call(stmxcsr, [saved])
        flushed = b.alloca(I32)
        b.store(b.or_(b.load(saved), ir.Constant(I32, MXCSR_FTZ_DAZ)), flushed)
        b.call(ldmxcsr, [flushed])
        return saved, ldmxcsr

    def _restore_mxcsr(self, b: ir.IRBuilder, saved) -> None:
        if saved is not None:
            slot, ldmxcsr = saved
            b.call(ldmxcsr, [slot])

    # --- kernels -------------------------------------------------------------------------------
    def _kernel(self, instr: HloInstruction) -> ir.Function:
        operands = list(dict.fromkeys(instr.operands))
        fn = ir.Function(self.ir, ir.FunctionType(VOID, [PTR] * (1 + len(operands))),
                         name=f"kernel.{instr.name}")
        fn.linkage = "internal"
        b = ir.IRBuilder(fn.append_basic_block("entry"))
        out_ptr = fn.args[0]
        pointers = {id(op): arg for op, arg in zip(operands, fn.args[1:])}
        KernelEmitter(self, b, instr, out_ptr, pointers).emit()
        b.ret_void()
        return fn


def _root_leaves(root: HloInstruction) -> list[HloInstruction]:
    if root.opcode == "tuple":
        out = []
        for o in root.operands:
            out.extend(_root_leaves(o))
        return out
    if isinstance(root.shape, TupleShape):   # a tuple-valued result (while, multi-output fusion)
        return [_Element(root, i) for i in range(len(root.shape.elements))]
    return [root]


class _Element(HloInstruction):
    """A get-tuple-element made up for an output leaf that is part of a tuple-valued result."""

    def __init__(self, source: HloInstruction, index: int):
        super().__init__(f"{source.name}[{index}]", "get-tuple-element", source.shape.elements[index], [source],
                         {"index": index})


class KernelEmitter:
    """The body of one kernel function."""

    def __init__(self, codegen: ModuleCodegen, b: ir.IRBuilder, instr: HloInstruction, out_ptr, pointers):
        self.codegen = codegen
        self.b = b
        self.instr = instr
        self.out_ptr = out_ptr
        self.pointers = pointers
        fused = instr.attrs["calls"] if instr.opcode == "fusion" else None
        self.fused = fused
        self.e = ElementalEmitter(b, codegen.ir, self._read_parameter, self._read_constant)
        if fused is None:   # a lone op: its operands are buffers written by other kernels
            for op in instr.operands:
                self.e.buffer_reads[id(op)] = self._buffer_reader(op)

    # reading buffers
    def _load(self, ptr, shape: ArrayShape, index: tuple) -> ir.Value:
        b = self.b
        offset = linear_index(b, index, shape.dims, shape.minor_to_major) if shape.rank else i64(0)
        st = storage_type(shape.dtype)
        return to_compute(b, b.load(b.gep(ptr, [offset], source_etype=st), typ=st), shape.dtype)

    def _buffer_reader(self, op: HloInstruction):
        ptr = self.pointers[id(op)]
        return lambda index: self._load(ptr, op.shape, index)

    def _read_parameter(self, param: HloInstruction, index: tuple) -> ir.Value:
        operand = self.instr.operands[param.parameter_number]
        return self._load(self.pointers[id(operand)], operand.shape, index)

    def _read_constant(self, const: HloInstruction, index: tuple) -> ir.Value:
        shape: ArrayShape = const.shape
        if shape.rank == 0 or shape.size == 1:
            value = np.asarray(const.literal).reshape(-1)[0]
            t = shape.dtype
            if t.is_pred:
                return ir.Constant(compute_type(t), int(bool(value)))
            if t.is_float:
                return ir.Constant(compute_type(t), float(value))
            return ir.Constant(compute_type(t), int(value))
        return self._load(self.codegen._constant_global(const), shape, index)

    def _store(self, ptr, shape: ArrayShape, index: tuple, value: ir.Value) -> None:
        b = self.b
        offset = linear_index(b, index, shape.dims, shape.minor_to_major) if shape.rank else i64(0)
        st = storage_type(shape.dtype)
        b.store(to_storage(b, value, shape.dtype), b.gep(ptr, [offset], source_etype=st))

    # dispatch
    def emit(self) -> None:
        instr = self.instr
        root = self.fused.root if self.fused is not None else instr
        ops = {i.opcode for i in self.fused.instructions} if self.fused is not None else {instr.opcode}
        special = KERNELS.get(root.opcode)
        if special is not None:
            return special(self)
        if ops & {"dot"} and self._emit_gemm(root):
            return
        if "reduce" in ops:
            return self._emit_rows(root)
        if root.opcode not in RULES or isinstance(root.shape, TupleShape):
            raise Unsupported(f"the CPU backend cannot compile {instr.opcode}"
                              f"{' (' + root.opcode + ')' if root is not instr else ''} yet: {instr.describe()}")
        self._emit_loop(root)

    def _emit_loop(self, root: HloInstruction) -> None:
        shape: ArrayShape = self.instr.shape

        def body(index):
            self.e.push_scope()
            self._store(self.out_ptr, shape, index, self.e.value(root, index))
            self.e.pop_scope()

        for_range(self.b, shape.dims, body)

    def _emit_rows(self, root: HloInstruction) -> None:
        """Per row: every reduction once, then the row's outputs."""
        comp_instrs = self.fused.post_order() if self.fused is not None else [root]
        reduces = [i for i in comp_instrs if i.opcode == "reduce"]
        roots = root.operands if root.opcode == "tuple" else [root]
        rows = reduces[0].shape.dims if not isinstance(reduces[0].shape, TupleShape) else \
            reduces[0].shape.elements[0].dims
        for r in reduces:
            dims = r.shape.elements[0].dims if isinstance(r.shape, TupleShape) else r.shape.dims
            if dims != rows:
                raise Unsupported(f"the CPU backend cannot emit reductions over different rows in one kernel "
                                  f"({self.instr.describe()})")
        leaves = list(_output_leaves(root, self.instr.shape, 0))

        def row_body(row):
            self.e.push_scope()
            for r in reduces:
                self.e.value(r, row)
            for value_of, shape, offset in leaves:
                if shape.dims[:len(rows)] != rows:
                    raise Unsupported(f"the CPU backend cannot emit output {shape.to_text(False)} of a kernel that "
                                      f"reduces rows {list(rows)} "
                                      f"({self.instr.describe()})")
                ptr = self.b.gep(self.out_ptr, [i64(offset)], source_etype=I8) if offset else self.out_ptr

                def body(index, value_of=value_of, shape=shape, ptr=ptr):
                    self.e.push_scope()
                    self._store(ptr, shape, row + index, value_of(self.e, row + index))
                    self.e.pop_scope()

                for_range(self.b, shape.dims[len(rows):], body)
            self.e.pop_scope()

        for_range(self.b, rows, row_body)

    def _emit_gemm(self, root: HloInstruction) -> bool:
        """A BLAS call for an f32/f64 canonical dot whose operands are buffers; False when the
        dot does not fit (the elemental loops then compute it)."""
        dot = root if root.opcode == "dot" else next(
            (i for i in self.fused.instructions if i.opcode == "dot"), None)
        if dot is None:
            return False
        lhs, rhs = dot.operands
        t = etype(dot)
        if t.name not in ("f32", "f64") or etype(lhs) != t or etype(rhs) != t:
            return False
        if self.fused is not None and not (lhs.opcode == "parameter" and rhs.opcode == "parameter"):
            return False
        a = dot.attrs
        nb = len(a.get("lhs_batch_dims", ()))
        if tuple(a.get("lhs_batch_dims", ())) != tuple(range(nb)) or tuple(a.get("rhs_batch_dims", ())) != tuple(range(nb)):
            return False
        if len(a.get("lhs_contracting_dims", ())) != 1 or len(a.get("rhs_contracting_dims", ())) != 1:
            return False
        lshape, rshape, oshape = lhs.shape, rhs.shape, dot.shape
        for s in (lshape, rshape, oshape, self.instr.shape):
            if s.minor_to_major != tuple(range(s.rank - 1, -1, -1)):
                return False
        if oshape.dims != self.instr.shape.dims:
            return False
        lc, rc = a["lhs_contracting_dims"][0], a["rhs_contracting_dims"][0]
        k = lshape.dims[lc]
        m = lshape.size // max(1, k) // max(1, _prod(lshape.dims[:nb]))
        n = rshape.size // max(1, k) // max(1, _prod(rshape.dims[:nb]))
        a_t = lshape.rank == nb + 2 and lc == nb
        b_t = rshape.rank == nb + 2 and rc == nb + 1
        if lshape.rank == nb + 1:
            a_t = False
        if rshape.rank == nb + 1:
            b_t = False
        batch = _prod(oshape.dims[:nb])
        if batch == 0 or m == 0 or n == 0 or k == 0 or self.instr.shape.dtype != t:
            return False
        lptr = self._operand_pointer(lhs)
        rptr = self._operand_pointer(rhs)
        b = self.b
        size = t.bytes

        def one_product(index):
            def at(ptr, elems):
                return b.gep(ptr, [b.mul(index[0], i64(elems * size))], source_etype=I8) if batch > 1 else ptr
            emit_gemm(b, t.name, at(self.out_ptr, m * n), at(lptr, m * k), at(rptr, k * n), m, n, k, a_t, b_t)

        for_range(b, [batch], one_product)
        if root is not dot:   # the epilogue, in place over the product
            shape = self.instr.shape
            self.e.buffer_reads[id(dot)] = lambda index: self._load(self.out_ptr, shape, index)
            self._emit_loop(root)
        return True

    def _operand_pointer(self, value: HloInstruction):
        if value.opcode == "parameter" and self.fused is not None:
            return self.pointers[id(self.instr.operands[value.parameter_number])]
        return self.pointers[id(value)]


def _output_leaves(value: HloInstruction, shape, offset: int):
    """(value_of(emitter, index), array shape, byte offset) for each array a kernel writes:
    a tuple root writes its elements one after another, a variadic reduce its results."""
    if value.opcode == "tuple":
        for operand, element, at in zip(value.operands, shape.elements, tuple_element_offsets(shape)):
            yield from _output_leaves(operand, element, offset + at)
    elif isinstance(shape, TupleShape):
        for k, (element, at) in enumerate(zip(shape.elements, tuple_element_offsets(shape))):
            yield (lambda e, index, k=k: e.value(value, index)[k]), element, offset + at
    else:
        yield (lambda e, index: e.value(value, index)), shape, offset


def _prod(dims) -> int:
    out = 1
    for d in dims:
        out *= d
    return out
