"""The tuning child process: `python -m pyxla.backends.cpu.tuning.worker PROGRAM --budget S`
runs search.search on the HLO (or StableHLO) text in PROGRAM and writes each event as one
line `PYXLA-TUNE <json>` to its standard output, flushed, so that the parent (tuner.py)
keeps every finished kernel's result even when it must stop the child at the deadline.
It never writes the tuning database: the parent does, once."""
from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

PREFIX = "PYXLA-TUNE "


def emit(event: dict) -> None:
    sys.stdout.write(PREFIX + json.dumps(event) + "\n")
    sys.stdout.flush()


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(prog="pyxla.backends.cpu.tuning.worker")
    parser.add_argument("program")
    parser.add_argument("--budget", type=float, required=True)
    ns = parser.parse_args(argv)
    from .search import Program, search
    program = Program(Path(ns.program).read_text())
    search(program, ns.budget, emit)
    return 0


if __name__ == "__main__":
    sys.exit(main())
