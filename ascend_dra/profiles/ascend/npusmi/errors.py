"""What can go wrong when we ask ``npu-smi`` about the node.

Every error keeps its facts as attributes (the command, the exit status, the line) and builds its
message from them, so callers and tests read attributes and never parse text.
"""

from __future__ import annotations

__all__ = ("NpuSmiError", "NpuSmiFailed", "NpuSmiNotFound", "NpuSmiParseError", "NpuSmiTimeout")


#: Characters of an offending line an :class:`NpuSmiParseError` message shows (a damaged line
#: can be thousands of characters long, and the message goes into logs and notes).
SHOWN = 200


class NpuSmiError(Exception):
    """Base class of every npu-smi problem; ``command`` is the command line as a string."""

    command: str


class NpuSmiNotFound(NpuSmiError):
    """Raised by the runner when the npu-smi executable does not exist or cannot be executed.

    :ivar executable: the path or name we tried (``ProfileContext.npu_smi``).
    :ivar reason: the operating system's reason.
    """

    def __init__(self, command: str, executable: str, reason: str) -> None:
        self.command = command
        self.executable = executable
        self.reason = reason
        super().__init__(f"run {command!r}: npu-smi executable {executable!r} not usable: {reason}")


class NpuSmiFailed(NpuSmiError):
    """Raised by the runner when npu-smi exits with a non-zero status.

    :ivar returncode: the exit status (negative: killed by that signal).
    :ivar stderr: what it wrote on stderr (decoded, at most 2000 characters).
    """

    def __init__(self, command: str, returncode: int, stderr: str) -> None:
        self.command = command
        self.returncode = returncode
        self.stderr = stderr
        detail = stderr.strip() or "(no stderr)"
        super().__init__(f"run {command!r}: exit status {returncode}: {detail}")


class NpuSmiTimeout(NpuSmiError):
    """Raised by the runner when npu-smi has not finished within ``timeout_s`` seconds (it is killed)."""

    def __init__(self, command: str, timeout_s: float) -> None:
        self.command = command
        self.timeout_s = timeout_s
        super().__init__(f"run {command!r}: no answer within {timeout_s:g} s; the process was killed")


class NpuSmiParseError(NpuSmiError):
    """Raised by a parser when the output does not have a layout we know.

    :ivar line_no: 1-based line number in the output (0 when the problem is the output as a whole).
    :ivar line: the offending line, as printed (the message shows its first :data:`SHOWN` characters).
    :ivar reason: what was expected (the message shows its first ``4 * SHOWN`` characters).
    """

    def __init__(self, command: str, line_no: int, line: str, reason: str) -> None:
        self.command = command
        self.line_no = line_no
        self.line = line
        self.reason = reason
        shown = line.strip()
        shown = shown if len(shown) <= SHOWN else f"{shown[:SHOWN]}..."
        where = f"line {line_no} {shown!r}" if line_no else "output"
        told = reason if len(reason) <= 4 * SHOWN else f"{reason[:4 * SHOWN]}..."
        super().__init__(f"parse {command!r}: {where}: {told}")
