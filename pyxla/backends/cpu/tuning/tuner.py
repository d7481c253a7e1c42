"""Tuning a program on this machine: the search runs in a child process (worker.py) with a time
budget, so a candidate that crashes or hangs costs the child, not the caller; the parent
shows the progress, stops the child DEADLINE_GRACE seconds after the budget, records the
winners of every kernel the child finished in this machine's tuning database
(database.py), and returns a report of what changed and what was discarded.

`tune_text` is what `pyxla tune` calls; `autotune` what a compile calls under
PYXLA_AUTOTUNE=1 (selection.parameters_for_compile), for a module with kernels the
database does not know yet.
"""
from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field

from ....hlo.module import HloModule
from ....hlo.printer import print_module
from . import database
from .database import Record
from .params import describe, from_json
from .progress import Progress
from .worker import PREFIX

DEADLINE_GRACE = 60.0     # seconds past the budget before the child is stopped
DEFAULT_BUDGET = 120.0    # seconds per program (`pyxla tune --budget`, PYXLA_AUTOTUNE_BUDGET)


@dataclass
class Report:
    program: str
    kernels: list[dict] = field(default_factory=list)     # the child's "kernels" event
    results: list[dict] = field(default_factory=list)     # "result" events: one per finished kernel
    discarded: list[dict] = field(default_factory=list)   # candidates "rejected" or "failed"
    unconfirmed: list[dict] = field(default_factory=list)  # winners not faster than the defaults at the end
    tried: int = 0
    stopped: bool = False                                 # the child was stopped at the deadline
    error: str = ""                                       # the child's failure, if it failed
    previous: dict[str, Record] = field(default_factory=dict)   # the database's records before

    def add(self, event: dict) -> None:
        """Take one of the search's events (search.search's emit)."""
        kind = event["event"]
        if kind == "kernels":
            self.kernels = event["kernels"]
        elif kind == "candidate":
            self.tried += 1
            if event["status"] in ("rejected", "failed"):
                self.discarded.append(event)
        elif kind == "result":
            self.results.append(event)
        elif kind == "unconfirmed":
            self.unconfirmed.append(event)

    def summary(self) -> str:
        lines = [f"{self.program}: {len(self.kernels)} tunable kernels, {self.tried} candidates tried, "
                 f"{len(self.discarded)} discarded"]
        if self.error:
            lines.append(f"  the tuning process failed: {self.error}")
        if self.stopped:
            lines.append("  stopped at the deadline (kernels not finished keep their previous choice)")
        for r in self.results:
            old = self.previous.get(r["kernel"])
            old_text = f"{old.route} {describe(old.params)}" if old is not None else f"{r['default_route']} default"
            new_text = f"{r['route']} {describe(from_json(r['params']))}"
            state = "changed" if new_text != old_text else "kept"
            lines.append(f"  {state}: {r['kernel']}")
            lines.append(f"    {old_text} -> {new_text}; program {_time(r['default_seconds'])} with the "
                         f"defaults, {_time(r['seconds'])} tuned")
        for u in self.unconfirmed:
            lines.append(f"  not confirmed against the defaults, defaults kept: {describe(from_json(u['params']))} "
                         f"for {u['kernel']} ({_time(u['seconds'])} against {_time(u['default_seconds'])})")
        for d in self.discarded:
            lines.append(f"  discarded ({d['status']}): {d['route']} {describe(from_json(d['params']))} for "
                         f"{d['kernel']}: {d['reason']}")
        return "\n".join(lines)


def _time(seconds: float) -> str:
    return f"{seconds * 1e3:.3f} ms" if seconds >= 1e-3 else f"{seconds * 1e6:.2f} us"


def tune_text(text: str, name: str, budget: float = DEFAULT_BUDGET, show_progress: bool = True) -> Report:
    """Tune the program in `text` (HLO or StableHLO) and record the winners."""
    report = Report(name)
    with tempfile.TemporaryDirectory(prefix="pyxla-tune-") as folder:
        path = os.path.join(folder, "program.hlo")
        with open(path, "w") as f:
            f.write(text)
        env = dict(os.environ)
        env.pop("PYXLA_AUTOTUNE", None)
        env["PYXLA_CACHE_DIR"] = ""   # candidates' executables are not worth keeping
        child = subprocess.Popen([sys.executable, "-m", "pyxla.backends.cpu.tuning.worker", path,
                                  "--budget", str(budget)], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                 text=True, env=env)
        progress = Progress(1, f"tuning {name}") if show_progress else None
        deadline = time.monotonic() + budget + DEADLINE_GRACE
        try:
            _follow(child, report, progress, deadline)
            child.wait(timeout=max(0.1, min(10.0, deadline - time.monotonic())))
        except subprocess.TimeoutExpired:
            pass
        finally:
            if child.poll() is None:
                child.kill()
                report.stopped = True
            child.wait()
            errors = child.stderr.read() if child.stderr else ""
            if progress is not None:
                progress.close()
        if child.returncode not in (0, None) and not report.stopped:
            report.error = f"exit status {child.returncode}: {errors.strip()[-2000:]}"
    record(report)
    return report


def _follow(child: subprocess.Popen, report: Report, progress: Progress | None, deadline: float) -> None:
    import selectors
    assert child.stdout is not None
    selector = selectors.DefaultSelector()
    selector.register(child.stdout, selectors.EVENT_READ)
    buffer = ""
    while time.monotonic() < deadline:
        if not selector.select(timeout=min(1.0, max(0.0, deadline - time.monotonic()))):
            if child.poll() is not None:
                break
            continue
        chunk = os.read(child.stdout.fileno(), 1 << 16).decode(errors="replace")
        if not chunk:
            break
        buffer += chunk
        *lines, buffer = buffer.split("\n")
        for line in lines:
            if line.startswith(PREFIX):
                _event(json.loads(line[len(PREFIX):]), report, progress)


def _event(event: dict, report: Report, progress: Progress | None) -> None:
    report.add(event)
    if progress is None:
        return
    if event["event"] == "kernels":
        progress.set_total(event["estimate"])
    elif event["event"] == "candidate":
        progress.advance(f"{event['route']} {describe(from_json(event['params']))}: {event['status']}")


def record(report: Report) -> None:
    """The finished kernels' winners into this machine's database (read again just before,
    so that other programs' records written meanwhile are kept)."""
    db = database.load()
    report.previous = dict(db.kernels)
    if not report.results:
        return
    for r in report.results:
        db.kernels[r["kernel"]] = Record(from_json(r["params"]), r["route"], r["seconds"], r["default_seconds"],
                                         report.program)
    database.store(db)


_attempted: set[frozenset[str]] = set()
_warned: set[str] = set()


def _warn_once(message: str) -> None:
    if message not in _warned:
        _warned.add(message)
        import warnings
        warnings.warn(f"pyxla tuning: {message}", RuntimeWarning, stacklevel=4)


def autotune(module: HloModule) -> Report | None:
    """Tune an optimised module's kernels that this machine's database has no record of
    (PYXLA_AUTOTUNE=1), within PYXLA_AUTOTUNE_BUDGET seconds (default DEFAULT_BUDGET); the
    summary goes to standard error. None when there was nothing to tune."""
    from .search import find_kernels
    if database.path() is None:
        _warn_once("PYXLA_AUTOTUNE=1 needs the on-disk cache (PYXLA_CACHE_DIR is empty): nothing is tuned")
        return None
    known = database.load().kernels
    keys = frozenset(k.key for k in find_kernels(module))
    if keys <= known.keys() or keys in _attempted:
        return None
    _attempted.add(keys)   # (a search that failed is not run again for these kernels in this process)
    setting = os.environ.get("PYXLA_AUTOTUNE_BUDGET", "").strip()
    try:
        budget = float(setting) if setting else DEFAULT_BUDGET
    except ValueError:
        raise ValueError(f"PYXLA_AUTOTUNE_BUDGET must be a number of seconds, got {setting!r}") from None
    report = tune_text(print_module(module, print_metadata=False), module.name, budget,
                       show_progress=sys.stderr.isatty())
    print(report.summary(), file=sys.stderr)
    return report
