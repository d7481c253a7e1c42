"""Relocatable objects loaded into this process without LLVM, for code the on-disk cache kept.

LLVM's JIT loader (MCJIT, through llvmlite) is only reachable by importing llvmlite, whose
native library (about 180 MB with LLVM inside) takes a warm process 20-50 ms to load: more
than loading and relocating a small model's code. The objects pyxla keeps are of one
narrow kind, which this module loads itself:

- ELF64, little-endian, x86-64, relocatable (`ET_REL`), made by LLVM with the JIT's large
  code model, so every reference is a 64-bit absolute (`R_X86_64_64`) or 64-bit
  PC-relative (`R_X86_64_PC64`) relocation: a function or data anywhere in the address
  space is reachable, no GOT or PLT stubs are needed;
- sections that occupy memory (`SHF_ALLOC`): code, read-only data (constant pools and
  tables), writable data and zero-filled data (the worker pool's state); `.eh_frame` (C++
  unwinding, which nothing here needs) is left out;
- undefined symbols bound to the addresses the caller gives (the runtime's helpers), else
  found in the process as the dynamic linker would (libc's, libm's: `dlsym` on the
  process).

Anything else (another machine or format, a relocation of another type, a symbol the
process lacks, a section or symbol pointing outside the object) raises UnsupportedObject
naming it, and the caller loads the object with LLVM instead. Several objects (the parts
of one module compiled on several threads) load together into one mapping and are linked
to each other by their global symbols.

The mapping is made writable, filled and relocated, then its code made read-and-execute
and its constants read-only (never writable and executable at once); it is unmapped when
the LoadedObject is dropped.
"""
from __future__ import annotations

import ctypes
import mmap
import struct
import weakref
from dataclasses import dataclass

_ELF_HEADER = struct.Struct("<16sHHIQQQIHHHHHH")
_SECTION = struct.Struct("<IIQQQQIIQQ")
_SYMBOL = struct.Struct("<IBBHQQ")
_RELA = struct.Struct("<QQq")

ET_REL, EM_X86_64 = 1, 62
SHT_NOBITS, SHT_RELA, SHT_SYMTAB, SHT_X86_64_UNWIND = 8, 4, 2, 0x70000001
SHF_WRITE, SHF_ALLOC, SHF_EXECINSTR = 0x1, 0x2, 0x4
SHN_UNDEF, SHN_ABS, SHN_COMMON, SHN_LORESERVE = 0, 0xFFF1, 0xFFF2, 0xFF00
STB_LOCAL, STB_WEAK = 0, 2
R_X86_64_64, R_X86_64_PC64 = 1, 24
PAGE = mmap.PAGESIZE
_MASK = (1 << 64) - 1

_libc = ctypes.CDLL(None, use_errno=True)
_libc.mmap.restype = ctypes.c_void_p
_libc.mmap.argtypes = (ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int, ctypes.c_int, ctypes.c_int, ctypes.c_long)
_libc.munmap.argtypes = (ctypes.c_void_p, ctypes.c_size_t)
_libc.mprotect.argtypes = (ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int)
_MAP_FAILED = ctypes.c_void_p(-1).value


# several objects in one blob (the parts split_compile.py compiles on several threads)
MAGIC = b"pyxla-objects\0"


def pack_objects(objects: list[bytes]) -> bytes:
    """One blob for a list of relocatable objects; a single object stays as it is."""
    if len(objects) == 1:
        return objects[0]
    return MAGIC + struct.pack(f"<I{len(objects)}Q", len(objects), *map(len, objects)) + b"".join(objects)


def unpack_objects(blob: bytes) -> list[bytes]:
    """The objects in a blob pack_objects made (or [blob], a single object). A ValueError
    when the blob is cut short."""
    if not blob.startswith(MAGIC):
        return [blob]
    at = len(MAGIC)
    (count,) = struct.unpack_from("<I", blob, at)
    sizes = struct.unpack_from(f"<{count}Q", blob, at + 4)
    at += 4 + 8 * count
    objects = []
    for size in sizes:
        objects.append(blob[at:at + size])
        at += size
    if at != len(blob) or any(len(o) != s for o, s in zip(objects, sizes)):
        raise ValueError("a packed object blob is cut short or too long")
    return objects


class UnsupportedObject(ValueError):
    """An object this loader does not load (LLVM's loader may)."""


@dataclass
class _Section:
    name: str
    type: int
    flags: int
    offset: int
    size: int
    link: int
    info: int
    align: int


@dataclass
class _Part:
    data: bytes
    sections: list[_Section]
    symbols: list[tuple[str, int, int, int]]   # (name, binding, section index, value)
    bases: dict[int, int]                       # loaded section index -> address


class LoadedObject:
    """Machine code mapped into this process; unmapped when this object is dropped."""

    def __init__(self, base: int, size: int, addresses: dict[str, int]):
        self.addresses = addresses
        weakref.finalize(self, _libc.munmap, base, size).atexit = False


def load_objects(objects: list[bytes], functions: tuple[str, ...],
                 symbols: dict[str, int] | None = None) -> LoadedObject:
    """Load `objects` together and give the addresses of `functions`; an undefined symbol
    resolves to `symbols`' address for it, else to the process's. UnsupportedObject when
    an object is not of the kind this loader handles."""
    parts = [_parse(obj) for obj in objects]
    regions = ([], [], [])   # code, read-only, writable: (part, section index)
    for part in parts:
        for index, s in enumerate(part.sections):
            if s.flags & SHF_ALLOC and s.type != SHT_X86_64_UNWIND and s.name != ".eh_frame":
                kind = 0 if s.flags & SHF_EXECINSTR else 2 if s.flags & SHF_WRITE else 1
                regions[kind].append((part, index))
    offsets, sizes, total = [], [], 0
    for region in regions:
        start, at = total, 0
        placed = []
        for part, index in region:
            s = part.sections[index]
            at = -(-at // max(1, s.align)) * max(1, s.align)
            placed.append((part, index, start + at))
            at += s.size
        offsets.append(placed)
        sizes.append(-(-at // PAGE) * PAGE)
        total += sizes[-1]
    total = max(total, PAGE)
    base = _libc.mmap(None, total, mmap.PROT_READ | mmap.PROT_WRITE, mmap.MAP_PRIVATE | mmap.MAP_ANONYMOUS, -1, 0)
    if base in (None, _MAP_FAILED):
        raise MemoryError(f"mmap of {total} bytes for machine code failed (errno {ctypes.get_errno()})")
    try:
        memory = (ctypes.c_char * total).from_address(base)
        view = memoryview(memory).cast("B")
        for placed in offsets:
            for part, index, at in placed:
                s = part.sections[index]
                part.bases[index] = base + at
                if s.type != SHT_NOBITS:
                    view[at:at + s.size] = part.data[s.offset:s.offset + s.size]
        exported = _exported(parts)
        for part in parts:
            _relocate(part, view, base, exported, symbols or {})
        start = 0
        protections = (mmap.PROT_READ | mmap.PROT_EXEC, mmap.PROT_READ, mmap.PROT_READ | mmap.PROT_WRITE)
        for size, prot in zip(sizes, protections):
            if size and _libc.mprotect(base + start, size, prot) != 0:
                raise MemoryError(f"mprotect of machine code failed (errno {ctypes.get_errno()})")
            start += size
        missing = [f for f in functions if f not in exported]
        if missing:
            raise UnsupportedObject(f"the objects define no {', '.join(missing)}")
        del view, memory
        return LoadedObject(base, total, {f: exported[f] for f in functions})
    except BaseException:
        _libc.munmap(base, total)
        raise


def _parse(obj: bytes) -> _Part:
    if len(obj) < _ELF_HEADER.size or obj[:4] != b"\x7fELF":
        raise UnsupportedObject("not an ELF object")
    ident, e_type, machine, _, _, _, shoff, _, _, _, _, shentsize, shnum, shstrndx = _ELF_HEADER.unpack_from(obj)
    if ident[4] != 2 or ident[5] != 1 or e_type != ET_REL or machine != EM_X86_64:
        raise UnsupportedObject(f"an ELF object of class {ident[4]}, data {ident[5]}, type {e_type}, "
                                f"machine {machine} (this loader takes 64-bit little-endian x86-64 relocatable ones)")
    if shentsize != _SECTION.size or shoff + shnum * shentsize > len(obj) or shstrndx >= shnum:
        raise UnsupportedObject("its section headers lie outside it")
    raw = [_SECTION.unpack_from(obj, shoff + i * shentsize) for i in range(shnum)]
    names = raw[shstrndx]
    sections = []
    for name, type_, flags, _, offset, size, link, info, align, _ in raw:
        if type_ != SHT_NOBITS and offset + size > len(obj):
            raise UnsupportedObject("a section lies outside the object")
        sections.append(_Section(_string(obj, names[4], name), type_, flags, offset, size, link, info, align))
    symbols: list[tuple[str, int, int, int]] = []
    for s in sections:
        if s.type == SHT_SYMTAB:
            strings = sections[s.link].offset
            for at in range(s.offset, s.offset + s.size, _SYMBOL.size):
                name, info, _, shndx, value, _ = _SYMBOL.unpack_from(obj, at)
                symbols.append((_string(obj, strings, name), info >> 4, shndx, value))
    return _Part(obj, sections, symbols, {})


def _string(obj: bytes, table: int, offset: int) -> str:
    end = obj.find(b"\0", table + offset)
    return obj[table + offset:end].decode("utf-8", "replace")


def _exported(parts: list[_Part]) -> dict[str, int]:
    """Every global symbol the objects define, by name."""
    out = {}
    for part in parts:
        for name, binding, shndx, value in part.symbols:
            if binding != STB_LOCAL and name and shndx != SHN_UNDEF:
                out[name] = _defined(part, name, shndx, value)
    return out


def _defined(part: _Part, name: str, shndx: int, value: int) -> int:
    if shndx == SHN_ABS:
        return value
    if shndx >= SHN_LORESERVE or shndx == SHN_COMMON:
        raise UnsupportedObject(f"symbol {name!r} is in special section {shndx:#x}")
    if shndx not in part.bases:
        raise UnsupportedObject(f"symbol {name!r} is in section {part.sections[shndx].name!r}, which is not loaded")
    return part.bases[shndx] + value


def _relocate(part: _Part, view: memoryview, base: int, exported: dict[str, int], given: dict[str, int]) -> None:
    for rela in part.sections:
        if rela.type != SHT_RELA or rela.info not in part.bases:
            continue   # (the relocations of a section not loaded: .eh_frame's)
        target = part.sections[rela.info]
        where = part.bases[rela.info]
        for at in range(rela.offset, rela.offset + rela.size, _RELA.size):
            offset, info, addend = _RELA.unpack_from(part.data, at)
            kind, number = info & 0xFFFFFFFF, info >> 32
            if offset + 8 > target.size or number >= len(part.symbols):
                raise UnsupportedObject(f"a relocation in {target.name!r} lies outside it")
            value = _symbol_value(part, number, exported, given) + addend
            if kind == R_X86_64_PC64:
                value -= where + offset
            elif kind != R_X86_64_64:
                raise UnsupportedObject(f"relocation type {kind} in {target.name!r}")
            struct.pack_into("<Q", view, where + offset - base, value & _MASK)


def _symbol_value(part: _Part, number: int, exported: dict[str, int], given: dict[str, int]) -> int:
    name, binding, shndx, value = part.symbols[number]
    if shndx != SHN_UNDEF:
        return _defined(part, name, shndx, value)
    if name in given:
        return given[name]
    if name in exported:
        return exported[name]
    try:
        return ctypes.cast(_libc[name], ctypes.c_void_p).value or 0
    except AttributeError:
        if binding == STB_WEAK:
            return 0
        raise UnsupportedObject(f"symbol {name!r} is not in this process") from None
