"""A compiled module on a GPU backend: the host's walk over its ENTRY computation (and the
computations its control flow runs), launching kernels on one stream of its own.

Memory per call: the executable's arena (arena.py; allocated at the first call and reused:
calls of one executable take turns), the parameters (device arrays as they are, host arrays
copied in when a kernel first reads them), and one allocation per ENTRY output, which the
caller receives as a DeviceArray. Instructions placement.py puts on the host are evaluated
there on NumPy values (OnHost), which go to the device only when a kernel, control flow or
the results need them; a conditional's selector computed there is read without a copy.
Kernels get offsets into the arena for every temp. A value that leaves the computation
whose arena region holds it (a loop's state that is still its caller's temp when the loop
ends, a branch that returns its operand) is first copied out of the arena on the device.
"""
from __future__ import annotations

import threading
from collections.abc import Sequence
from typing import Any

import numpy as np

from ...errors import ArgumentError
from ...hlo.evaluator import EvalContext, check_argument
from ...hlo.module import HloModule
from ...hlo.ops import op_def
from ...hlo.shape import ArrayShape, TupleShape
from .arena import ArenaPlan, array_sizes
from .arrays import DeviceArray, logical, physical, same_layout
from .kernels import ALIASES, GpuUnsupported, KernelSpec, is_identity_custom_call
from .memory import Buffer, Memory
from .placement import Placement
from .program import Program
from .simt import Launch


class SimKernelSet:
    """gpu-sim's kernels: host wrappers run over their grid (sim.py)."""

    def __init__(self, ir_text: str, specs: list[KernelSpec]):
        from .sim import SimKernels
        self.kernels = SimKernels(ir_text, [launch.name for s in specs for launch in s.launches])

    def launch(self, launch: Launch, addresses: list[int], stream: Any) -> None:
        self.kernels.launch(launch, addresses)


class DeviceKernelSet:
    """The GPU's kernels: PTX loaded by the driver."""

    def __init__(self, ir_text: str, specs: list[KernelSpec]):
        from .device import device
        from .ptx import compile_ptx
        self.device = device()
        self.ptx = compile_ptx(ir_text)
        module = self.device.load(self.ptx)
        self.functions = {launch.name: self.device.function(module, launch.name)
                          for s in specs for launch in s.launches}

    def launch(self, launch: Launch, addresses: list[int], stream: Any) -> None:
        self.device.launch(self.functions[launch.name], launch.name, (launch.blocks, launch.threads), addresses, stream)


class OnHost:
    """A value the host holds (a logical NumPy array), and its device copy once made."""

    __slots__ = ("array", "buffer")

    def __init__(self, array: np.ndarray):
        self.array = array
        self.buffer: Buffer | None = None


class GpuExecutable:
    """`run_device(args)` -> DeviceArrays; `run_flat` / `run_unchecked` / `__call__` copy the
    results to the host (the backend interface's NumPy arrays)."""

    def __init__(self, module: HloModule, program: Program, specs: list[KernelSpec], memory: Memory,
                 kernels: Any, arena: ArenaPlan, placements: dict[int, Placement]):
        self.module = module
        self.placements = placements   # id(program) -> where its instructions run
        self.placement = placements[id(program)]
        self._eval = EvalContext(module)
        self.program = program
        self.memory = memory
        self.kernels = kernels
        self.plan = arena
        self.stream = memory.new_stream()
        self._arena: Buffer | None = None
        self._lock = threading.Lock()
        self._last_kernel = ""
        # constants live on the device for the executable's life: the computations', and the
        # array constants kernels read from memory (a fusion's scalars are IR constants)
        constants = [i for c in module.computations for i in c.instructions
                     if i.opcode == "constant" and isinstance(i.shape, ArrayShape)]
        constants += [c for s in specs for c in s.constants]
        self.literals = {id(c): np.asarray(c.literal) for c in constants}
        self.constants = {id(c): memory.upload(physical(self.literals[id(c)], c.shape), self.stream)
                          for c in constants}

    # --- the backend interface -----------------------------------------------------------------
    def __call__(self, *args: Any) -> Any:
        outs = self.run_flat(args)
        return outs[0] if isinstance(self.module.entry.root.shape, ArrayShape) else tuple(outs)

    def run_flat(self, args: Sequence[Any]) -> list[np.ndarray]:
        return [out.to_numpy() for out in self.run_device(args)]

    def run_unchecked(self, arrays: Sequence[Any]) -> list[np.ndarray]:
        return self.run_flat(arrays)

    def prepare_argument(self, number: int, array: Any) -> Any:
        return array

    # --- device arrays -------------------------------------------------------------------------
    def run_device(self, args: Sequence[Any]) -> list[DeviceArray]:
        """Run on `args` (DeviceArrays or host arrays, one per ENTRY parameter); the results
        as DeviceArrays (tuples flattened, depth first), ready when their marker is."""
        entry = self.module.entry
        if len(args) != len(entry.parameters):
            raise ArgumentError(f"{entry.name} takes {len(entry.parameters)} arguments "
                                f"({', '.join(p.name for p in entry.parameters)}), got {len(args)}")
        with self._lock:   # the arena is the executable's: its calls take turns
            parameters = [self._parameter(p, args[p.parameter_number]) for p in entry.parameters]
            if self._arena is None:
                self._arena = self.memory.alloc(self.plan.size, self.stream)
            result = self._run(self.program, parameters)
            leaves = [(self._device(v, shape), shape) for v, shape in _leaves(result, entry.root.shape)]
            leaves = [(self._detach(v), shape) for v, shape in leaves]
            ready = self.memory.record(self.stream, f"{self.module.name}'s kernels (the last: {self._last_kernel})")
        return [DeviceArray(self.memory, buffer, shape, ready) for buffer, shape in leaves]

    def _parameter(self, param, arg: Any) -> Buffer | OnHost:
        shape = param.shape
        if getattr(arg, "__pyxla_device_array__", False):
            if arg.shape != tuple(shape.dims) or arg.dtype != shape.dtype.np_dtype:
                raise ArgumentError(f"parameter {param.name}: expected {shape.to_text(False)}, "
                                    f"got a device array of {arg.dtype}{list(arg.shape)}")
            if arg.memory is self.memory and same_layout(arg.hlo_shape, shape):
                self.memory.wait(self.stream, arg.ready)
                return arg.buffer
            arg = arg.to_numpy()   # another memory, or another layout: through the host
        return OnHost(np.asarray(check_argument(param, arg)))

    # --- where values are ------------------------------------------------------------------------
    def _device(self, value: Any, shape) -> Any:
        """`value` with every leaf on the device (a host leaf copied in once)."""
        if isinstance(value, list):
            return [self._device(v, s) for v, s in zip(value, shape.elements)]
        if isinstance(value, OnHost):
            if value.buffer is None:
                value.buffer = self.memory.upload(physical(value.array, shape), self.stream)
            return value.buffer
        return value

    def _host(self, value: Any, shape) -> Any:
        """`value` as the evaluator takes it: a logical NumPy array (a tuple for a tuple)."""
        if isinstance(value, list):
            return tuple(self._host(v, s) for v, s in zip(value, shape.elements))
        if isinstance(value, OnHost):
            return value.array
        return logical(self.memory.download(value, shape.byte_size, self.stream), shape)

    def _on_host(self, instr, values: dict) -> Any:
        result = op_def(instr.opcode).evaluate(instr, [self._host(values[id(o)], o.shape) for o in instr.operands],
                                               self._eval)
        if isinstance(instr.shape, TupleShape):
            return [OnHost(np.asarray(r)) for r in result]
        return OnHost(np.asarray(result))

    # --- the walk ------------------------------------------------------------------------------
    def _run(self, program: Program, parameters: list) -> Any:
        """The value (a buffer, or nested lists of them for a tuple) of `program`'s root."""
        values: dict[int, Any] = {}
        for instr in program.computation.instructions:
            values[id(instr)] = self._value(program, instr, parameters, values)
        return values[id(program.computation.root)]

    def _value(self, program: Program, instr, parameters: list, values: dict) -> Any:
        op = instr.opcode
        if op == "parameter":
            return parameters[instr.parameter_number]
        if op == "constant":
            if not isinstance(instr.shape, ArrayShape):
                raise GpuUnsupported(f"the GPU backend cannot hold the tuple constant {instr.describe()} yet")
            held = OnHost(self.literals[id(instr)])   # on both sides: host work reads it without a copy
            held.buffer = self.constants[id(instr)]
            return held
        if op in ALIASES or is_identity_custom_call(instr):
            if op == "tuple":
                return [values[id(o)] for o in instr.operands]
            if op == "get-tuple-element":
                return values[id(instr.operands[0])][instr.attrs["index"]]
            if op == "bitcast":   # the same bytes, read in another shape: on the device
                return self._device(values[id(instr.operands[0])], instr.operands[0].shape)
            return values[id(instr.operands[0])]   # shares its operand's bytes
        if op == "while":
            condition, body = program.called[id(instr)]
            state = values[id(instr.operands[0])]   # (host leaves go to the device when a kernel reads them)
            while self._read_scalar(self._run(condition, [state]), np.bool_):
                state = self._run(body, [state])
            return self._detach(state)
        if op == "conditional":
            branches = program.called[id(instr)]
            selector = instr.operands[0]
            if "branch_computations" in instr.attrs:
                index = int(self._read_scalar(values[id(selector)], np.int32))
                index = index if 0 <= index < len(branches) else len(branches) - 1
            else:
                index = 0 if self._read_scalar(values[id(selector)], np.bool_) else 1
            return self._detach(self._run(branches[index], [values[id(instr.operands[1 + index])]]))
        if op == "call":
            (callee,) = program.called[id(instr)]
            return self._detach(self._run(callee, [values[id(o)] for o in instr.operands]))
        if self.placements[id(program)].on_host(instr):
            return self._on_host(instr, values)
        spec = program.kernels[id(instr)]
        outputs = self._outputs(instr, spec)
        arena = self._arena
        assert arena is not None
        scratch = [arena.view(at, n, arena) for at, n in zip(self.plan.scratch[spec.name], spec.scratch)]
        addresses = [b.address for b in outputs + [self._device(values[id(o)], o.shape) for o in spec.operands]
                     + [self.constants[id(c)] for c in spec.constants] + scratch]
        for launch in spec.launches:
            self._last_kernel = launch.name
            self.kernels.launch(launch, addresses, self.stream)
        return outputs[0] if isinstance(instr.shape, ArrayShape) else outputs

    def _outputs(self, instr, spec: KernelSpec) -> list[Buffer]:
        """A kernel's output buffers: its place in the arena, or memory of its own."""
        arena = self._arena
        assert arena is not None
        sizes = [s.byte_size for s in spec.outputs]
        offsets = self.plan.leaves.get(id(instr))
        if offsets is None:
            return [self.memory.alloc(n, self.stream) for n in sizes]
        return [arena.view(at, n, arena) for at, n in zip(offsets, sizes)]

    def _detach(self, value: Any) -> Any:
        """`value` with every leaf in the arena copied to memory of its own."""
        if isinstance(value, list):
            return [self._detach(v) for v in value]
        if isinstance(value, OnHost) or value.arena is None:
            return value
        copy = self.memory.alloc(value.nbytes, self.stream)
        self.memory.copy(copy, value, value.nbytes, self.stream)
        return copy

    def _read_scalar(self, buffer: Buffer | OnHost, dtype) -> Any:
        if isinstance(buffer, OnHost):   # computed on the host: no copy
            return np.asarray(buffer.array).astype(dtype).reshape(())[()]
        data = self.memory.download(buffer, np.dtype(dtype).itemsize, self.stream)
        return np.frombuffer(data.tobytes(), dtype)[0]


def _leaves(value: Any, shape) -> list[tuple[Any, ArrayShape]]:
    if isinstance(shape, TupleShape):
        return [leaf for v, s in zip(value, shape.elements) for leaf in _leaves(v, s)]
    return [(value, shape)]


__all__ = ["GpuExecutable", "SimKernelSet", "DeviceKernelSet", "array_sizes"]
