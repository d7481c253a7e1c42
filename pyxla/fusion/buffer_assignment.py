"""Buffer assignment: every array value of the entry computation gets memory.

Over the schedule, each value that needs a buffer of its own lives from the instruction
that defines it to its last reader. Parameters live in the caller's buffers, constants in
the executable's, outputs in fresh buffers the caller receives (so all three stay out of
the arena); every other value gets a slice of one temporary arena. Slices are placed
largest first at the lowest offset where they overlap no slice live at the same time, so
memory whose value is dead is reused. A result whose operand dies at that instruction and
has the same bytes is written in place over it when that is legal: an elementwise op or a
loop fusion that reads each operand element only for the output element over it, or an
update op (dynamic-update-slice, scatter, a fusion whose root is one) over the array it
rewrites, which then stores only the updated elements. In a while body, an update of a
loop-carried array that nothing reads afterwards writes into the loop state itself. A
donated parameter whose shape matches an output becomes that output's buffer.
"""
from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field

from ..hlo.computation import HloComputation
from ..hlo.cost_analysis import byte_size
from ..hlo.instruction import HloInstruction
from ..hlo.module import HloModule
from ..hlo.ops import op_def
from ..hlo.shape import ArrayShape, Shape, TupleShape

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
    in_parameter: int | None = None   # a while body's result kept in leaf k of its parameter (the loop state)

    @property
    def name(self) -> str:
        return "+".join("%" + v.name for v in self.values)

    def overlaps_in_time(self, other: Buffer) -> bool:
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
            where = (f"arena[{b.offset}:{b.offset + b.size}]" if b.kind == "temp" else
                     f"in parameter leaf {b.in_parameter}" if b.in_parameter is not None else b.kind)
            lines.append(f"  {where:<24} {b.size:>10} B  live {b.start}..{b.end}  {b.name}")
        for out, param in self.donated_aliases.items():
            lines.append(f"  output {out} aliases donated parameter {param}")
        return "\n".join(lines)


def _output_values(comp: HloComputation) -> list[HloInstruction]:
    """The instructions whose buffers hold the ROOT's value."""
    assert comp.root is not None, f"computation {comp.name} has no ROOT"
    return _storages(comp.root)


def _leaves(value: HloInstruction) -> list[tuple[HloInstruction, int]]:
    """The arrays a value is made of, each as (the instruction whose memory holds it, the array's
    number in that instruction's flattened shape): a tuple is its elements' arrays, and views
    (get-tuple-element, bitcast, opt-barrier) are the arrays they view."""
    op = value.opcode
    if op == "tuple":
        return [leaf for o in value.operands for leaf in _leaves(o)]
    if op == "get-tuple-element":
        source = value.operands[0]
        start = sum(_leaf_count(e) for e in source.tuple_shape.elements[:value.attrs["index"]])
        return _leaves(source)[start:start + _leaf_count(value.shape)]
    if op in ("bitcast", "opt-barrier"):
        return _leaves(value.operands[0])
    return [(value, k) for k in range(_leaf_count(value.shape))]


def _leaf_count(shape: Shape) -> int:
    if isinstance(shape, ArrayShape):
        return 1
    return sum(_leaf_count(e) for e in shape.elements) if isinstance(shape, TupleShape) else 0


def _storages(value: HloInstruction) -> list[HloInstruction]:
    """Every instruction whose buffer `value` reads."""
    return list(dict.fromkeys(owner for owner, _ in _leaves(value)))


def _storage(value: HloInstruction) -> HloInstruction | None:
    """The array-valued instruction whose buffer is the array `value` (None for a tuple, or an
    element of a tuple-valued result)."""
    leaves = _leaves(value)
    if len(leaves) == 1 and isinstance(value.shape, ArrayShape) and isinstance(leaves[0][0].shape, ArrayShape):
        return leaves[0][0]
    return None


# --- which results may be written over an operand ------------------------------------------------

# Ops whose result is operand 0 with some elements replaced: written in place, only the
# replaced elements are stored (XLA's CanShareOperandBufferWithUser).
UPDATES = frozenset({"dynamic-update-slice", "scatter"})


def _same_bytes(a: ArrayShape, b: ArrayShape) -> bool:
    """Element i of both arrays is at the same place in memory."""
    def physical(s: ArrayShape) -> tuple[int, ...]:
        return tuple(d for d in s.minor_to_major if s.dims[d] != 1)
    return a.dims == b.dims and a.dtype.bytes == b.dtype.bytes and physical(a) == physical(b)


def _can_write_in_place(instr: HloInstruction, operand: HloInstruction) -> bool:
    """Whether `instr` may write its result over its operand `operand`: each element of the
    operand is read only to compute the output element stored over it (elementwise ops and
    loop fusions of them), or the operand is the array that an update op rewrites."""
    if not (isinstance(instr.shape, ArrayShape) and isinstance(operand.shape, ArrayShape)):
        return False
    if not _same_bytes(instr.shape, operand.shape):
        return False
    if instr.opcode == "fusion":
        comp = instr.attrs["calls"]
        param = next(p for p in comp.parameters if p.parameter_number == instr.operands.index(operand))
        if comp.root.opcode in UPDATES:
            return (_only_the_updated_operand(comp.root, param) and all(u is comp.root for u in param.users)
                    and not _read_elsewhere(instr, operand))
        return instr.attrs.get("kind") == "kLoop" and elementwise_reach(param) is not None
    if instr.opcode in UPDATES:
        return _only_the_updated_operand(instr, operand) and not _read_elsewhere(instr, operand)
    return op_def(instr.opcode).fusion_kind == "elementwise"


def _only_the_updated_operand(update: HloInstruction, value: HloInstruction) -> bool:
    """`value` is the array `update` rewrites (its operand 0) and nothing else of it."""
    return isinstance(update.shape, ArrayShape) and update.operands[0] is value and value not in update.operands[1:]


def _read_elsewhere(instr: HloInstruction, operand: HloInstruction) -> bool:
    """Another operand of `instr` reads memory of `operand` (a second view of the same array)."""
    mine = set(_leaves(operand))
    return any(o is not operand and mine & set(_leaves(o)) for o in instr.operands)


def elementwise_reach(value: HloInstruction, stop: HloInstruction | None = None) -> set[int] | None:
    """The ids of every instruction `value` flows into inside its computation (short of
    `stop`, which may read it any way), when each is elementwise over arrays of value's
    dims (so output element i reads only element i of value); None otherwise."""
    pending, seen = [value], set()
    while pending:
        v = pending.pop()
        for u in v.users:
            if id(u) in seen or u is stop:
                continue
            seen.add(id(u))
            if (op_def(u.opcode).fusion_kind != "elementwise" or not isinstance(u.shape, ArrayShape)
                    or u.shape.dims != value.array_shape.dims):
                return None
            pending.append(u)
    return seen


def read_elementwise(value: HloInstruction, root: HloInstruction, stop: HloInstruction | None = None) -> bool:
    """Whether `root` reads `value` only through elementwise ops of value's dims, so that
    root's element i depends on value's element i alone (an epilogue may then run on a part
    of value, in place, as soon as that part is computed); `stop`, a user of root's, may
    read root any way."""
    if root is value:
        return True
    reach = elementwise_reach(value, stop)
    return reach is not None and id(root) in reach


def assign_buffers(module: HloModule, comp: HloComputation | None = None,
                   donated: tuple[int, ...] = ()) -> BufferAssignment:
    comp = comp or module.entry
    assert comp is not None, f"module {module.name} has no ENTRY computation"
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
    in_state = _loop_state_updates(module, comp) if comp is not module.entry else {}
    buffers: list[Buffer] = []
    buffer_of: dict[int, Buffer] = {}
    for instr in schedule:
        if instr.opcode in VIEWS or not isinstance(instr.shape, (ArrayShape, TupleShape)):
            continue
        kind = ("parameter" if instr.opcode == "parameter" else "constant" if instr.opcode == "constant"
                else "output" if id(instr) in outputs else "temp")
        end = end_of_program if id(instr) in outputs else last_use.get(id(instr), position[id(instr)])
        if id(instr) in in_state:
            b = Buffer([instr], byte_size(instr.shape), position[id(instr)], end, "parameter",
                       in_parameter=in_state[id(instr)])
            buffers.append(b)
            buffer_of[id(instr)] = b
            continue
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


def _in_place_host(instr: HloInstruction, buffer_of: dict[int, Buffer], last_use: dict[int, int],
                   position: dict[int, int]) -> Buffer | None:
    for op in dict.fromkeys(instr.operands):
        s = _storage(op)
        if s is None:
            continue
        host = buffer_of.get(id(s))
        # (_storage found s, so op and s both have array shapes)
        if (host is not None and host.kind == "temp" and last_use.get(id(s)) == position[id(instr)]
                and host.end == position[id(instr)] and _same_bytes(op.array_shape, s.array_shape)
                and _can_write_in_place(instr, op)):
            return host
    return None


# --- while loops: updating the loop state in place -----------------------------------------------

def _loop_state_updates(module: HloModule, body: HloComputation) -> dict[int, int]:
    """The results of a while body written straight into the loop state: id -> state leaf.

    A while body reads its parameter from the loop's state, and its results are copied into
    the state after each run. An update op (dynamic-update-slice, scatter, or a fusion whose
    root is one) whose result is state leaf k and whose rewritten operand is parameter leaf k
    writes into the state itself when nothing reads parameter leaf k after it, not even the
    copy of the results (a result that is parameter leaf k at another position): the
    carried array is then never copied, as in XLA, where a while body's parameter and root
    share their buffers. Only a computation that runs as nothing but a while body owns its
    parameter's memory this way."""
    if not _only_a_while_body(module, body) or len(body.parameters) != 1:
        return {}
    (param,) = body.parameters
    schedule = body.instructions
    position = {id(i): n for n, i in enumerate(schedule)}
    last_read: dict[int, int] = {}   # parameter leaf -> last schedule position reading it
    for instr in schedule:
        if instr.opcode not in VIEWS:
            for op in instr.operands:
                for owner, k in _leaves(op):
                    if owner is param:
                        last_read[k] = max(last_read.get(k, -1), position[id(instr)])
    assert body.root is not None, f"computation {body.name} has no ROOT"
    results = _leaves(body.root)
    for j, (owner, k) in enumerate(results):
        if owner is param and k != j:
            last_read[k] = len(schedule)   # read when the results are copied into the state
    chosen = {}
    for k, (value, index) in enumerate(results):
        if index != 0 or not isinstance(value.shape, ArrayShape) or sum(v is value for v, _ in results) != 1:
            continue
        # (views of parameter leaf k, bitcasts included, are its bytes: the result fits them)
        updated = value.operands[0] if value.operands else None
        if (updated is None or _leaves(updated) != [(param, k)] or last_read.get(k) != position.get(id(value))
                or not _can_write_in_place(value, updated)):
            continue
        if value.opcode in UPDATES or (value.opcode == "fusion" and value.attrs["calls"].root.opcode in UPDATES):
            chosen[id(value)] = k
    return chosen


def _uses(module: HloModule, comp: HloComputation) -> list[tuple[HloInstruction, str]]:
    """(instruction, attribute name) of every place that calls `comp`."""
    return [(instr, name) for c in module.computations for instr in c.instructions
            for name, value in instr.attrs.items()
            if value is comp or (isinstance(value, (list, tuple)) and any(v is comp for v in value))]


def _only_a_while_body(module: HloModule, comp: HloComputation) -> bool:
    """`comp` runs only as the body of while loops (so its parameter is the loops' own state)."""
    uses = _uses(module, comp)
    return bool(uses) and all(instr.opcode == "while" and name == "body" for instr, name in uses)


CONTROL_FLOW = frozenset({"while", "conditional", "call"})


def module_assignment_text(module: HloModule, entry: BufferAssignment) -> str:
    """The entry computation's assignment, then that of each computation control flow runs
    (a backend assigns their buffers apart, computation by computation): the dump's text."""
    called = [c for c in module.computations if c is not module.entry
              and any(instr.opcode in CONTROL_FLOW for instr, _ in _uses(module, c))]
    return "\n\n".join([entry.to_text()] + [assign_buffers(module, c).to_text() for c in called])


def _place(temps: Iterable[Buffer]) -> int:
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
