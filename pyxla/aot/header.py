"""NAME.h: the C declarations of an AOT object (usable from C++: extern "C")."""
from __future__ import annotations

import textwrap

from ..hlo.shape import ArrayShape

C_TYPES = {"pred": "bool (one byte)", "s8": "int8_t", "s16": "int16_t", "s32": "int32_t", "s64": "int64_t",
           "u8": "uint8_t", "u16": "uint16_t", "u32": "uint32_t", "u64": "uint64_t", "f16": "IEEE half (uint16_t bits)",
           "bf16": "bfloat16 (uint16_t bits)", "f32": "float", "f64": "double"}


def _describe(kind: str, i: int, shape: ArrayShape, size: int) -> str:
    layout = "row-major" if shape.rank < 2 or shape.is_row_major else \
        "minor_to_major {" + ",".join(map(str, shape.minor_to_major)) + "}"
    element = C_TYPES.get(shape.dtype.name, shape.dtype.name)
    return f" *   {kind} {i}: {shape.to_text()}  {element}, {layout}, {size} bytes"


def header_text(code, source: str = "") -> str:
    """The header of `code` (build.ObjectCode)."""
    name, upper = code.name, code.name.upper()
    enabled = [f for f in code.features.split(",") if f.startswith("+")]
    lines = [f"/* {name}.h: ahead-of-time compiled by pyxla{' from ' + source if source else ''}.",
             f" * Link: cc main.c {name}.o -lm -lpthread",
             f" * Target CPU: {code.cpu}; kernels cut for {code.threads} thread(s)"
             f"{'' if code.pooled else ', no worker pool (no kernel is split)'}.",
             *textwrap.wrap(" ".join(enabled), 88, initial_indent=" * Features: ", subsequent_indent=" *   "),
             " *",
             " * Parameters (args[i]), in parameter order:"]
    lines += [_describe("arg", i, s, n) for i, (s, n) in enumerate(zip(code.arg_shapes, code.arg_sizes))] or \
        [" *   (none)"]
    lines.append(" * Results (results[j]), a tuple root flattened depth first:")
    lines += [_describe("result", j, s, n) for j, (s, n) in enumerate(zip(code.result_shapes, code.result_sizes))]
    lines.append(" */")
    return "\n".join(lines) + f"""
#ifndef PYXLA_AOT_{upper}_H
#define PYXLA_AOT_{upper}_H

#include <stddef.h>

#ifdef __cplusplus
extern "C" {{
#endif

#define {name}_NUM_ARGS    {len(code.arg_sizes)}
#define {name}_NUM_RESULTS {len(code.result_sizes)}

extern const size_t {name}_arg_sizes[];     /* bytes of each parameter, in parameter order */
extern const size_t {name}_result_sizes[];  /* bytes of each result */
extern const size_t {name}_temp_size;       /* bytes of scratch the caller may provide ({code.temp_size}) */

/* Runs the program: args[i] and results[j] point to buffers of the sizes above, in the
   module's layouts (row-major for JAX's modules). temp is NULL (the object allocates its
   scratch itself) or {name}_temp_size bytes aligned to 64. Returns 0 on success, nonzero on
   failure (no memory for the scratch). Safe to call from several threads at once when each
   passes its own temp (with temp NULL, too: a call that finds the object's scratch taken
   allocates its own). */
int {name}_run(const void *const *args, void *const *results, void *temp);

/* The number of threads a call may use, the caller included (n < 1: the cores the process
   may run on, the default). Restarts the worker pool: call it when no run is in progress. */
void {name}_set_num_threads(int n);

#ifdef __cplusplus
}}
#endif

#endif
"""
