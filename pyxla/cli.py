"""The `pyxla` command: run, fmt and check HLO programs.

    pyxla run MODULE.hlo --inputs IN.npz [--out OUT.npz] [--backend cpu|interpreter] [--quiet]
    pyxla fmt MODULE.hlo | pyxla fmt --to hlo MODULE.mlir
    pyxla check CORPUS_DIR [--backend NAME] [--level module|optimized|stablehlo|both|all]

Every MODULE may be XLA's HLO text or StableHLO MLIR text (a .mlir file, or text that
starts with `module @` / `func.func`); StableHLO is converted to HLO on reading.
    pyxla opt MODULE.hlo [--passes p1,p2,...] | pyxla opt --list
    pyxla run-onnx MODEL.onnx --inputs IN.npz [--out OUT.npz] [--backend cpu|interpreter]
    pyxla aot MODULE.hlo --name NAME -o DIR [--shared] [--target-cpu CPU] [--features F]
    pyxla tune [PROGRAM ...] [--workload NAME ...] [--budget SECONDS] | pyxla tune --show

Arrays go in and out as .npz files named arg0..argN and out0..outM (for run-onnx: by the
model's input and output names); bf16 is stored as uint16 bit patterns, as in the
conformance corpus.
"""
from __future__ import annotations

import argparse
import sys
import time
import zipfile
import zlib
from pathlib import Path

import ml_dtypes
import numpy as np

from .backends import available_backends, get_backend
from .errors import PyxlaError
from .hlo.lexer import decode_text
from .hlo.printer import print_module
from .hlo.shape import ArrayShape
from .hlo.verifier import verify_module


def _read_module(path: str):
    text = decode_text(Path(path).read_bytes(), path)   # a stray byte: a ParseError at its line
    if path.endswith(".mlir"):
        from .hlo.stablehlo import parse_stablehlo
        return parse_stablehlo(text, source=path)
    from .hlo.stablehlo import parse_program
    return parse_program(text, source=path)


def _read_npz(path: str) -> dict[str, np.ndarray]:
    """Every array of the .npz archive at `path`, by name, read now so that a bad file fails
    here with its name rather than as a NumPy traceback at first use."""
    try:
        archive = np.load(path)     # allow_pickle=False: object arrays are refused, not unpickled
    except (ValueError, EOFError, zipfile.BadZipFile, OSError) as e:
        raise PyxlaError(f"--inputs {path}: not an .npz archive of arrays ({e})") from e
    if not isinstance(archive, np.lib.npyio.NpzFile):
        raise PyxlaError(f"--inputs {path}: a single .npy array, not an .npz archive "
                         f"(write one with np.savez)")
    arrays = {}
    with archive:
        for name in archive.files:
            try:
                arrays[name] = archive[name]
            except ValueError as e:
                raise PyxlaError(f"--inputs {path}: array {name!r} cannot be read without "
                                 f"unpickling (object arrays are not accepted): {e}") from e
            except (EOFError, zipfile.BadZipFile, zlib.error, OSError) as e:
                raise PyxlaError(f"--inputs {path}: array {name!r} is damaged ({e})") from e
    return arrays


def _load_inputs(path: str | None, module) -> list[np.ndarray]:
    params = module.entry.parameters
    if path is None:
        if params:
            raise PyxlaError(f"the module takes {len(params)} parameters: give them with --inputs IN.npz")
        return []
    args = []
    z = _read_npz(path)
    for i, p in enumerate(params):
        key = f"arg{i}"
        if key not in z:
            raise PyxlaError(f"{path} has no {key} for parameter {p.name} ({p.shape.to_text(False)})")
        a = z[key]
        if isinstance(p.shape, ArrayShape) and p.shape.dtype.name == "bf16" and a.dtype == np.uint16:
            a = a.view(ml_dtypes.bfloat16)
        args.append(a)
    return args


def _storable(a: np.ndarray) -> np.ndarray:
    return a.view(np.uint16) if a.dtype == ml_dtypes.bfloat16 else a


def cmd_run(ns) -> int:
    module = _read_module(ns.module)
    args = _load_inputs(ns.inputs, module)
    from .frontend.dynamic_module import compile_dynamic, has_dynamic_dimensions
    if has_dynamic_dimensions(module):   # `f32[?,32]`: the sizes come from the inputs
        executable = compile_dynamic(module, get_backend(ns.backend))
        executable.prepare(args)   # the bucket these sizes need, compiled before the timing
    else:
        executable = get_backend(ns.backend).compile(module)
    start = time.perf_counter()
    outputs = executable.run_flat(args)
    elapsed = time.perf_counter() - start
    if ns.out:
        np.savez(ns.out, **{f"out{i}": _storable(np.asarray(o)) for i, o in enumerate(outputs)})
    if not ns.quiet:
        for i, o in enumerate(outputs):
            o = np.asarray(o)
            print(f"out{i}: {o.dtype.name}{list(o.shape)}")
        print(f"ran on {ns.backend} in {elapsed * 1e3:.2f} ms")
    return 0


def cmd_run_onnx(ns) -> int:
    from .importers.onnx import load  # needs the onnx package (pip install 'pyxla[onnx]')

    model = load(ns.model, backend=ns.backend)
    feeds = {}
    if ns.inputs:
        feeds = _read_npz(ns.inputs)
    start = time.perf_counter()
    model.compile(feeds)
    compiled = time.perf_counter() - start
    start = time.perf_counter()
    outputs = model(feeds)
    elapsed = time.perf_counter() - start
    if ns.out:
        np.savez(ns.out, **{name: _storable(np.asarray(o)) for name, o in outputs.items()})
    if not ns.quiet:
        for name, o in outputs.items():
            print(f"{name}: {o.dtype.name}{list(o.shape)}")
        print(f"imported and compiled in {compiled:.2f} s, ran on {ns.backend} in {elapsed * 1e3:.2f} ms")
    return 0


def cmd_fmt(ns) -> int:
    sys.stdout.write(print_module(_read_module(ns.module)))
    return 0


def cmd_emit(ns) -> int:
    """The GPU backend's kernels of a module: PTX (what `ptxas -arch=sm_90` checks) or the
    LLVM IR before the NVPTX target (`--format llvm`)."""
    from .backends.gpu import kernel_ir
    from .backends.gpu.ptx import compile_ptx
    from .compiler import compile_module

    text, _ = kernel_ir(compile_module(_read_module(ns.module)), "ptx")
    if ns.format == "ptx":
        text = compile_ptx(text, ns.arch)
    if ns.output:
        Path(ns.output).write_text(text)
    else:
        sys.stdout.write(text)
    return 0


def cmd_opt(ns) -> int:
    from .passes.pipeline import all_passes, describe_pipeline, run_pipeline

    if ns.list:
        print(describe_pipeline())
        return 0
    if not ns.module:
        raise PyxlaError("pyxla opt needs MODULE.hlo (or --list)")
    module = _read_module(ns.module)
    verify_module(module)
    items = None
    if ns.passes:
        known = all_passes()
        unknown = [p for p in ns.passes.split(",") if p not in known]
        if unknown:
            raise PyxlaError(f"unknown pass(es) {', '.join(unknown)}; known: {', '.join(sorted(known))}")
        items = [known[p] for p in ns.passes.split(",")]
    run_pipeline(module, items)
    sys.stdout.write(print_module(module))
    return 0


def cmd_check(ns) -> int:
    from .conformance import case_dirs, load_case, run_case
    from .hlo.stablehlo import parse_program

    backend = get_backend(ns.backend)
    levels = {"both": ["module", "optimized"], "all": ["module", "optimized", "stablehlo"]}.get(
        ns.level, [ns.level])

    def run(text, inputs):
        return backend.compile(parse_program(text)).run_flat(inputs)

    passed = failed = 0
    for d in case_dirs(ns.corpus):
        case = load_case(d)
        for level in levels:
            try:
                problems = run_case(case, level, run)
            except Exception as e:   # one case's failure, whatever it is, must not end the run
                problems = [f"{type(e).__name__}: {str(e).splitlines()[0] if str(e) else ''}"]
            if problems:
                failed += 1
                print(f"FAIL {case.name} [{level}]: " + "; ".join(problems))
            else:
                passed += 1
    print(f"{passed} passed, {failed} failed")
    return 1 if failed else 0


def cmd_aot(ns) -> int:
    """Ahead-of-time compilation: DIR/NAME.h and DIR/NAME.o (docs/aot.md)."""
    from . import aot

    aot.check_name(ns.name)       # before the module is read: nothing is written on a bad name or folder
    aot.check_out_dir(ns.output)
    result = aot.compile(_read_module(ns.module), name=ns.name, out_dir=ns.output, shared=ns.shared,
                         target_cpu=ns.target_cpu, features=ns.features, threads=ns.threads, source=ns.module)
    if not ns.quiet:
        for path in (result.header, result.object, result.shared):
            if path is not None:
                print(path)
    return 0


def cmd_cache(ns) -> int:
    """The on-disk cache of compiled code (docs/cache.md): where it is, what it holds, emptying it."""
    from .runtime import disk_cache

    if ns.action == "clear":
        print(f"removed {disk_cache.clear()} entries from {disk_cache.cache_directory()}")
        return 0
    summary = disk_cache.info()
    if summary["directory"] is None:
        print("the cache is off (PYXLA_CACHE_DIR is empty)")
        return 0
    print(f"directory: {summary['directory']}{'' if summary['usable'] else ' (refused: see the warning)'}")
    print(f"{summary['entries']} entries, {summary['bytes']} bytes; limit {summary['max_bytes']} bytes "
          "(PYXLA_CACHE_MAX_BYTES)")
    for kind, counts in sorted(summary["kinds"].items()):
        print(f"  {kind}: {counts['entries']} entries, {counts['bytes']} bytes")
    return 0


def _workload_text(name: str, scale: float) -> str:
    """The HLO text of a benchmark workload (benchmarks/workloads.py, in a source checkout) as
    pyxla.jit traces it on the workload's inputs."""
    try:
        from benchmarks.frameworks.pyxla_impl import FUNCTIONS
        from benchmarks.workloads import BY_NAME
    except ImportError:
        root = Path(__file__).resolve().parents[1]
        if not (root / "benchmarks" / "workloads.py").exists():
            raise PyxlaError("--workload needs the benchmarks folder of a pyxla source checkout") from None
        sys.path.insert(0, str(root))
        from benchmarks.frameworks.pyxla_impl import FUNCTIONS
        from benchmarks.workloads import BY_NAME
    if name not in FUNCTIONS:
        raise PyxlaError(f"--workload {name}: not a workload with one jitted function; "
                         f"choose from {', '.join(sorted(FUNCTIONS))}")
    from . import jit
    inputs = BY_NAME[name].make_inputs(np.random.default_rng(0), scale)
    return jit(FUNCTIONS[name]).lower(*inputs).as_text()


def cmd_tune(ns) -> int:
    """Tune the CPU kernels of programs on this machine (docs/autotuning.md)."""
    from .backends.cpu.tuning import database
    from .backends.cpu.tuning.params import describe
    from .backends.cpu.tuning.tuner import tune_text

    if ns.show:
        db = database.load()
        print(f"tuning database: {database.path()} ({len(db.kernels)} kernels)")
        for key, r in sorted(db.kernels.items()):
            times = f"; {r.default_seconds * 1e3:.3f} -> {r.seconds * 1e3:.3f} ms" if r.seconds and r.default_seconds \
                else ""
            print(f"  {key}\n    {r.route} {describe(r.params)} ({r.program}{times})")
        return 0
    programs = [(path, Path(path).read_text()) for path in ns.programs]
    programs += [(name, _workload_text(name, ns.scale)) for name in ns.workload]
    if not programs:
        raise PyxlaError("give programs (HLO or StableHLO files) or --workload NAME")
    if database.path() is None:
        raise PyxlaError("the cache is off (PYXLA_CACHE_DIR is empty): there is nowhere to keep the tuning database")
    for name, text in programs:
        report = tune_text(text, name, ns.budget, show_progress=not ns.quiet)
        print(report.summary())
        if report.error:
            return 1
    return 0


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="pyxla", description="pyxla, an XLA-style compiler")
    sub = parser.add_subparsers(dest="command", required=True)

    def runner(name, what, source, inputs, outputs, func):
        cmd = sub.add_parser(name, help=what)
        cmd.add_argument(source)
        cmd.add_argument("--inputs", help=f".npz with {inputs}")
        cmd.add_argument("--out", help=f"write outputs to this .npz ({outputs})")
        cmd.add_argument("--backend", default="cpu", choices=available_backends())
        cmd.add_argument("--quiet", action="store_true")
        cmd.set_defaults(func=func)

    runner("run", "parse, verify and run an HLO module", "module", "arg0..argN", "out0..outM", cmd_run)
    runner("run-onnx", "import an ONNX model and run it", "model", "one array per model input, by name",
           "by output name", cmd_run_onnx)

    fmt = sub.add_parser("fmt", help="print an HLO module (or StableHLO converted to HLO) in canonical text")
    fmt.add_argument("module")
    fmt.add_argument("--to", default="hlo", choices=["hlo"], help="the output format (HLO text)")
    fmt.set_defaults(func=cmd_fmt)

    opt = sub.add_parser("opt", help="optimise an HLO module and print it")
    opt.add_argument("module", nargs="?")
    opt.add_argument("--passes", help="comma-separated pass names instead of the default pipeline")
    opt.add_argument("--list", action="store_true", help="print the default pipeline")
    opt.set_defaults(func=cmd_opt)

    emit = sub.add_parser("emit", help="write the GPU kernels of an HLO module (PTX or LLVM IR)")
    emit.add_argument("module")
    emit.add_argument("--backend", default="gpu", choices=["gpu"])
    emit.add_argument("--format", default="ptx", choices=["ptx", "llvm"])
    emit.add_argument("--arch", help="GPU architecture (default: PYXLA_GPU_ARCH, else sm_90)")
    emit.add_argument("-o", "--output", help="write here instead of standard output")
    emit.set_defaults(func=cmd_emit)

    aot = sub.add_parser("aot", help="compile a module ahead of time to DIR/NAME.o and DIR/NAME.h")
    aot.add_argument("module")
    aot.add_argument("--name", required=True, help="the C name prefix: NAME_run, NAME.h, NAME.o")
    aot.add_argument("-o", "--output", required=True, metavar="DIR", help="the folder to write to")
    aot.add_argument("--shared", action="store_true", help="also link DIR/libNAME.so with cc")
    aot.add_argument("--target-cpu", help="LLVM CPU name, or generic (baseline x86-64); default: this host")
    aot.add_argument("--features", help="LLVM feature string, e.g. +avx2,+fma (default: the CPU's)")
    aot.add_argument("--threads", type=int, help="threads the kernels are cut for (default: this machine's)")
    aot.add_argument("--quiet", action="store_true")
    aot.set_defaults(func=cmd_aot)

    check = sub.add_parser("check", help="run a conformance corpus and compare with its outputs")
    check.add_argument("corpus")
    check.add_argument("--backend", default="cpu", choices=available_backends())
    check.add_argument("--level", default="both", choices=["module", "optimized", "stablehlo", "both", "all"])
    check.set_defaults(func=cmd_check)

    cache = sub.add_parser("cache", help="show (info) or empty (clear) the on-disk cache of compiled code")
    cache.add_argument("action", choices=["info", "clear"])
    cache.set_defaults(func=cmd_cache)

    tune = sub.add_parser("tune", help="measure the CPU kernels' parameters on this machine and keep the fastest")
    tune.add_argument("programs", nargs="*", metavar="PROGRAM", help="HLO or StableHLO files")
    tune.add_argument("--workload", action="append", default=[], help="a benchmark workload (mlp, cnn_block, ...)")
    tune.add_argument("--scale", type=float, default=1.0, help="shrink the workloads' dimensions (default 1)")
    tune.add_argument("--budget", type=float, default=120.0, metavar="SECONDS", help="search time per program")
    tune.add_argument("--show", action="store_true", help="print this machine's tuning database")
    tune.add_argument("--quiet", action="store_true", help="no progress bar")
    tune.set_defaults(func=cmd_tune)
    return parser


def main(argv=None) -> int:
    ns = build_parser().parse_args(argv)
    try:
        return ns.func(ns)
    except (PyxlaError, NotImplementedError, OSError) as e:
        print(f"pyxla {ns.command}: {type(e).__name__}: {e}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
