"""A progress bar for `pyxla tune`: tqdm's when it is installed (the `[tune]` extra), else
one line of text rewritten in place (on a terminal) or printed per kernel (elsewhere)."""
from __future__ import annotations

import sys


class Progress:
    def __init__(self, total: int, description: str, stream=None):
        self.total, self.done, self.description = max(1, total), 0, description
        self.stream = stream or sys.stderr
        self.note = ""
        try:
            from tqdm import tqdm  # type: ignore[import-untyped]
        except ImportError:
            self.bar = None
        else:
            self.bar = tqdm(total=self.total, desc=description, file=self.stream, leave=True)

    def set_total(self, total: int) -> None:
        self.total = max(1, total, self.done)
        if self.bar is not None:
            self.bar.total = self.total
            self.bar.refresh()

    def advance(self, note: str = "") -> None:
        self.done += 1
        self.note = note
        if self.done > self.total:   # (the total is the search's estimate)
            self.set_total(self.done)
        if self.bar is not None:
            self.bar.set_postfix_str(note[:60], refresh=False)
            self.bar.update(1)
            return
        self._line()

    def _line(self) -> None:
        width = 30
        filled = min(width, width * self.done // self.total)
        text = f"{self.description} [{'#' * filled}{'.' * (width - filled)}] {self.done}/{self.total} {self.note[:60]}"
        if self.stream.isatty():
            self.stream.write("\r" + text.ljust(120)[:120])
        else:
            self.stream.write(text + "\n")
        self.stream.flush()

    def close(self) -> None:
        if self.bar is not None:
            self.bar.close()
        elif self.stream.isatty():
            self.stream.write("\n")
            self.stream.flush()
