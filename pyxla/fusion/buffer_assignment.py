"""Buffer assignment: every array value of the entry computation gets memory.

Over the schedule, each value that needs a buffer of its own lives from the instruction
that defines it to its last reader. Parameters live in the caller's buffers, constants in
the executable's, outputs in fresh buffers the caller receives (so all three stay out of
the arena); every other value gets a slice of one temporary arena. Slices are placed
largest first at the lowest offset where they overlap no slice live at the same time, so
memory whose value is dead is reused. An elementwise result whose operand dies at that
instruction and has the same size is written in place over it. A donated parameter whose
shape matches an output becomes that output's buffer.
"""
from __future__ import annotations

from dataclasses import dataclass, field

from ..hlo.computation import HloComputation
from ..hlo.instruction import HloInstruction
from ..hlo.module import HloModule
from ..hlo.ops import op_def
from ..hlo.shape import ArrayShape, TupleShape
from ..runtime.analysis import byte_size

VIEWS = frozenset({"tuple", "get-tuple-element", "bitcast", "opt-barrier"})   # no memory of their own
ALIGNMENT = 64


@dataclass
class Buffer:
    """Memory for one or more values that share it (a value and the in-place results over it)."""
    values: list[HloInstruction]
    size: int
    start: int          # schedule position of the first definition
    end: int            # schedule position of the last use
    kind: str           # "temp", "parameter", "constant", "output"
    offset: int = -1    # in the arena, for temps

    @property
    def name(self) -> str:
        return "+".join("%" + v.name for v in self.values)

    def overlaps_in_time(self, other: "Buffer") -> bool:
        return self.start <= other.end and other.start <= self.end


@dataclass
class BufferAssignment:
    computation: HloComputation
    buffers: list[Buffer]
    arena_size: int
    donated_aliases: dict[int, int] = field(default_factory=dict)   # output leaf -> parameter number

    def of(self, instr: HloInstruction) -> Buffer | None:
        for b in self.buffers:
            if instr in b.values:
                return b
        return None

    def bytes(self, kind: str) -> int:
        return sum(b.size for b in self.buffers if b.kind == kind)

    @property
    def temps(self) -> list[Buffer]:
        return [b for b in self.buffers if b.kind == "temp"]

    def peak_temp_bytes(self) -> int:
        """The largest total of temp bytes live at one schedule position."""
        if not self.temps:
            return 0
        last = max(b.end for b in self.temps)
        return max(sum(b.size for b in self.temps if b.start <= t <= b.end) for t in range(last + 1))

    def to_text(self) -> str:
        lines = [f"buffer assignment of {self.computation.name}: arena {self.arena_size} bytes "
                 f"(temps total {self.bytes('temp')}, peak live {self.peak_temp_bytes()})"]
        for b in sorted(self.buffers, key=lambda b: (b.kind, b.offset, b.start)):
            where = f"arena[{b.offset}:{b.offset + b.size}]" if b.kind == "temp" else b.kind
            lines.append(f"  {where:<24} {b.size:>10} B  live {b.start}..{b.end}  {b.name}")
        for out, param in self.donated_aliases.items():
            lines.append(f"  output {out} aliases donated parameter {param}")
        return "\n".join(lines)


def _output_values(comp: HloComputation) -> list[HloInstruction]:
    """The instructions whose buffers hold the ROOT's value."""
    return _storages(comp.root)


def _storage(instr: HloInstruction) -> HloInstruction:
    """The instruction whose buffer `instr` lives in (views point through to it)."""
    while True:
        if instr.opcode in ("bitcast", "opt-barrier") and instr.operands[0].opcode != "tuple":
            instr = instr.operands[0]
        elif instr.opcode == "get-tuple-element":
            source = _storage(instr.operands[0])
            while source.opcode == "opt-barrier":
                source = _storage(source.operands[0])
            if source.opcode != "tuple":
                return source   # an element of a tuple-valued result: that result's buffer
            instr = source.operands[instr.attrs["index"]]
        else:
            return instr


def _storages(instr: HloInstruction) -> list[HloInstruction]:
    """Every buffer a value reads: a tuple reads all of its elements' buffers."""
    s = _storage(instr)
    if s.opcode in ("tuple", "opt-barrier"):
        out = []
        for o in s.operands:
            out.extend(_storages(o))
        return out
    return [s]


def _can_write_in_place(instr: HloInstruction, operand: HloInstruction) -> bool:
    if not (isinstance(instr.shape, ArrayShape) and isinstance(operand.shape, ArrayShape)):
        return False
    if byte_size(instr.shape) != byte_size(operand.shape) or instr.shape.dims != operand.shape.dims:
        return False
    if instr.opcode == "fusion":
        comp = instr.attrs["calls"]
        if instr.attrs.get("kind") != "kLoop":
            return False
        param = next(p for p in comp.parameters if p.parameter_number == instr.operands.index(operand))
        # every element is read only by the computation of the same output element
        return all(op_def(u.opcode).fusion_kind == "elementwise" and u.shape.dims == operand.shape.dims
                   for u in param.users)
    return op_def(instr.opcode).fusion_kind == "elementwise"


def assign_buffers(module: HloModule, comp: HloComputation | None = None,
                   donated: tuple[int, ...] = ()) -> BufferAssignment:
    comp = comp or module.entry
    schedule = comp.instructions   # scheduled order
    position = {id(i): n for n, i in enumerate(schedule)}
    end_of_program = len(schedule)
    outputs = {id(v) for v in _output_values(comp)}

    # last use of each storage instruction, following views
    last_use: dict[int, int] = {}
    for instr in schedule:
        if instr.opcode in VIEWS:
            continue   # a view's readers are the readers of what it views
        for op in instr.operands:
            for s in _storages(op):
                last_use[id(s)] = max(last_use.get(id(s), -1), position[id(instr)])
    buffers: list[Buffer] = []
    buffer_of: dict[int, Buffer] = {}
    for instr in schedule:
        if instr.opcode in VIEWS or not isinstance(instr.shape, (ArrayShape, TupleShape)):
            continue
        kind = ("parameter" if instr.opcode == "parameter" else "constant" if instr.opcode == "constant"
                else "output" if id(instr) in outputs else "temp")
        end = end_of_program if id(instr) in outputs else last_use.get(id(instr), position[id(instr)])
        if kind == "temp":
            host = _in_place_host(instr, buffer_of, last_use, position)
            if host is not None:
                host.values.append(instr)
                host.end = max(host.end, end)
                buffer_of[id(instr)] = host
                continue
        b = Buffer([instr], byte_size(instr.shape), position[id(instr)], end, kind)
        buffers.append(b)
        buffer_of[id(instr)] = b
    arena = _place(b for b in buffers if b.kind == "temp")
    assignment = BufferAssignment(comp, buffers, arena)
    _alias_donations(assignment, comp, donated)
    return assignment


def _in_place_host(instr, buffer_of, last_use, position) -> Buffer | None:
    for op in dict.fromkeys(instr.operands):
        s = _storage(op)
        if s.opcode == "tuple":
            continue
        host = buffer_of.get(id(s))
        if (host is not None and host.kind == "temp" and last_use.get(id(s)) == position[id(instr)]
                and host.end == position[id(instr)] and _can_write_in_place(instr, s)):
            return host
    return None


def _place(temps) -> int:
    """Offsets for temp buffers: largest first, each at the lowest aligned offset free for
    its whole live range. Returns the arena size."""
    placed: list[Buffer] = []
    arena = 0
    for b in sorted(temps, key=lambda b: (-b.size, b.start)):
        busy = sorted((p.offset, p.offset + p.size) for p in placed if p.overlaps_in_time(b))
        offset = 0
        for lo, hi in busy:
            if offset + b.size <= lo:
                break
            offset = max(offset, _align(hi))
        b.offset = offset
        placed.append(b)
        arena = max(arena, offset + b.size)
    return arena


def _align(n: int) -> int:
    return -(-n // ALIGNMENT) * ALIGNMENT


def _alias_donations(assignment: BufferAssignment, comp: HloComputation, donated: tuple[int, ...]) -> None:
    if not donated:
        return
    params = {p.parameter_number: p for p in comp.parameters}
    free = [n for n in donated if n in params]
    for i, value in enumerate(_output_values(comp)):
        for n in free:
            if value.shape.compatible(params[n].shape) and value.opcode != "parameter":
                assignment.donated_aliases[i] = n
                free.remove(n)
                break
