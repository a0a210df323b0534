"""Capture what a compile writes on the process's stdout and stderr, at the file-descriptor level.

Triton's compiler is C++: a failing MLIR pass prints its reproducer dump (hundreds of
lines of IR) and LLVM prints its errors on file descriptor 2 directly, and ptxas runs as
a child process that inherits descriptors 1 and 2. Python's ``sys.stderr`` never sees any
of it, so the measuring processes (the benchmark worker, the compile pool) point both
descriptors at a temporary file around each compile: the text goes into the trial's
record instead of onto the user's terminal.
"""

from __future__ import annotations

import ctypes
import os
import re
import sys
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass

#: Most characters kept of one compile's output: a reproducer dump of the attention kernel
#: is about 12 KB; a runaway one keeps its head and its tail (where the error is).
MAX_KEPT_CHARS = 64_000

#: Lines that say what went wrong, best first: the MLIR pass that failed, then any line
#: that reports an error, then LLVM's and ptxas' own wording.
_MEANINGFUL = (
    re.compile(r"Pipeline failed while executing \[`([^`]+)`"),
    re.compile(r"\berror:\s*(.+)"),
    re.compile(r"(LLVM ERROR:.+)"),
    re.compile(r"(ptxas.*(?:error|fatal).*)", re.IGNORECASE),
    re.compile(r"(Assertion .+ failed\.?)"),
)


@dataclass
class CompilerOutput:
    """The text a block wrote on descriptors 1 and 2 (set when the block exits)."""

    text: str = ""

    @property
    def summary(self) -> str:
        """The first meaningful line of :attr:`text`, or "" when there is none."""
        return first_meaningful_line(self.text)


def first_meaningful_line(text: str) -> str:
    """The line of a compiler's output that says what went wrong, trimmed to 300 characters.

    The failing MLIR pass is named as ``MLIR pass <name> failed``; otherwise the first
    error line wins, then the first non-blank line that is not IR (a dump's ``module {``,
    ``#loc`` and ``//`` lines say nothing by themselves).
    """
    lines = [line.strip() for line in text.splitlines() if line.strip()]
    for number, pattern in enumerate(_MEANINGFUL):
        for line in lines:
            found = pattern.search(line)
            if found:
                return (f"MLIR pass {found.group(1)} failed" if number == 0 else found.group(1))[:300]
    for line in lines:
        if not line.startswith(("//", "#", "module", "}", "{-#", "#-}", "%", "tt.", "^")):
            return line[:300]
    return ""


def _clip(text: str) -> str:
    if len(text) <= MAX_KEPT_CHARS:
        return text
    half = MAX_KEPT_CHARS // 2
    return f"{text[:half]}\n[... {len(text) - MAX_KEPT_CHARS} characters left out ...]\n{text[-half:]}"


def _flush() -> None:
    """Write out what Python's and C's stdio buffers hold, so it lands on the right side of a switch."""
    for stream in {id(s): s for s in (sys.stdout, sys.stderr, sys.__stdout__, sys.__stderr__)}.values():
        try:
            if stream is not None:
                stream.flush()
        except (OSError, ValueError):  # closed or detached: nothing of ours to write out
            pass
    try:
        ctypes.CDLL(None).fflush(None)  # printf from native code
    except (OSError, AttributeError):
        pass


@contextmanager
def captured_output() -> Iterator[CompilerOutput]:
    """Send everything written on descriptors 1 and 2 inside the block to a temporary file.

    Not thread-safe (descriptors are per process): the measuring processes compile one
    config at a time. A process that keeps its own protocol channel must hold it on a
    descriptor of its own (the worker does).

    Yields:
        A :class:`CompilerOutput` whose ``text`` is filled when the block exits.
    """
    captured = CompilerOutput()
    _flush()
    with tempfile.TemporaryFile() as sink:
        saved = (os.dup(1), os.dup(2))
        try:
            os.dup2(sink.fileno(), 1)
            os.dup2(sink.fileno(), 2)
            yield captured
        finally:
            _flush()
            os.dup2(saved[0], 1)
            os.dup2(saved[1], 2)
            os.close(saved[0])
            os.close(saved[1])
            sink.seek(0)
            captured.text = _clip(sink.read().decode("utf-8", errors="replace"))


def describe_failure(exc: BaseException, output: CompilerOutput) -> str:
    """A trial's error line: the exception, with the compiler's own first meaningful line."""
    message = f"{type(exc).__name__}: {exc}"
    summary = output.summary
    if summary and summary not in message:
        message = f"{message} ({summary})"
    return message
