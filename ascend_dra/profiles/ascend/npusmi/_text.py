"""Value conversions, line reading and box-table helpers shared by the npu-smi parsers.

npu-smi prints an absent or unsupported value as ``NA``, ``-`` or a sentence such as
``NA: Currently, query is not supported`` (docs/ascend-hardware.md#npu-smi-output-format). These helpers turn such
values into None, and anything else that is not a number into an :class:`NpuSmiParseError`,
so a sentinel can never be published as a number.

A second kind of sentinel is numeric: DCMI answers a query it does not support with the code
8255 ("not supported"; the peer driver publishes it as ``aicore: 8255`` / ``memory: 8255Mi``,
docs/ascend-hardware.md#peer-gaps), and the tools pass it through as if it were the value. DCMI
return codes are negative (``ret is -8005``, docs/ascend-hardware.md#hard-vnpu-templates), so ``-8255`` is the same
code with its sign. :func:`to_amount` reads a quantity (a capacity, a total, a count) and
turns both into None, like ``NA``; use it for every value that can become a published amount.

Three rules every parser shares, so that damaged or repeated output is refused the same way
everywhere (docs/ascend-discovery.md#damaged-or-repeated-output):

* a number is ASCII digits within the real range of what it counts (:mod:`.bounds`): a
  fullwidth or an Arabic-Indic digit is none, and a 5000-digit number is out of range before
  ``int()`` sees it;
* a line is at most :data:`MAX_LINE` characters (:func:`numbered_lines`), and no parser's
  work on a line grows faster than its length, so a huge cell costs no more than its reading;
* what an output prints once (its title, a chip, a key of a block) printed twice is an error
  naming the second line (:class:`Once`).
"""

from __future__ import annotations

import re

from ascend_dra.profiles.ascend.npusmi.bounds import Bounds
from ascend_dra.profiles.ascend.npusmi.errors import SHOWN, NpuSmiParseError

#: Values npu-smi prints for "no value" (compared case-insensitively).
ABSENT = frozenset({"", "na", "n/a", "-", "--", "not supported", "unknown"})
#: The longest line a parser reads. npu-smi's widest lines are ~150 characters (its tables,
#: ``-t topo``); a process name in the table is a path (Linux's PATH_MAX is 4096): twice that.
MAX_LINE = 8192

# [0-9], not \d: \d also matches the digits of other scripts, which int() reads as numbers.
_INT = re.compile(r"[+-]?[0-9]+")
_FLOAT = re.compile(r"[+-]?[0-9]+(\.[0-9]+)?")
_RULE = re.compile(r"^\s*[+|][-=+|]*[+|]\s*$")
#: More digits than any bound has: a longer number is out of range unread (int() of 20 digits is cheap).
_MAX_DIGITS = 20


#: DCMI's "not supported" code, as npu-smi may print it in place of a quantity (see the module docstring).
DCMI_NOT_SUPPORTED = frozenset({8255, -8255})


def numbered_lines(command: str, text: str) -> list[tuple[int, str]]:
    """The lines of ``text`` with their 1-based numbers.

    :raises NpuSmiParseError: naming the first line longer than :data:`MAX_LINE` characters.
    """
    lines = list(enumerate(text.splitlines(), start=1))
    for line_no, line in lines:
        if len(line) > MAX_LINE:
            raise NpuSmiParseError(command, line_no, line,
                                   f"a line of {len(line)} characters; npu-smi prints at most {MAX_LINE}")
    return lines


class Once:
    """What an output prints once (a title, a chip, a key of a block), with the line that printed it.

    :param command: named in the error.
    """

    def __init__(self, command: str) -> None:
        self.command = command
        self.seen: dict[object, int] = {}

    def add(self, key: object, line_no: int, line: str, label: str) -> None:
        """Note that ``key`` was printed on ``line_no``.

        :param label: how the error names it, e.g. ``"chip NPU 0 chip 0"`` -> ``a second chip NPU 0 chip 0``.
        :raises NpuSmiParseError: naming ``line_no`` when ``key`` was printed before, on this line too
            (two columns of one header).
        """
        if key in self.seen:
            raise NpuSmiParseError(self.command, line_no, line,
                                   f"a second {shown(label)} (the first is on line {self.seen[key]})")
        self.seen[key] = line_no


def shown(value: str) -> str:
    """``value`` as an error shows it: its first :data:`SHOWN` characters and ``...`` (a damaged
    value can be thousands of characters long)."""
    return value if len(value) <= SHOWN else f"{value[:SHOWN]}..."


def read_int(value: str, bounds: Bounds) -> int:
    """``value`` (stripped, not absent) as an int within ``bounds``.

    The digits are counted before ``int()`` runs, which refuses more than 4300 of them with a bare
    ValueError and takes quadratic time below that.

    :raises ValueError: with the reason, when ``value`` is not ASCII digits (with an optional sign)
        or lies outside ``bounds``.
    """
    if not _INT.fullmatch(value):
        raise ValueError(f"{shown(value)!r} is not an integer or NA")
    digits = value.lstrip("+-").lstrip("0")
    if len(digits) > _MAX_DIGITS:
        sign = "-" if value.startswith("-") else ""
        raise ValueError(f"{sign}{digits[:_MAX_DIGITS]}... ({len(digits)} digits) is out of range "
                         f"{bounds.low}..{bounds.high} ({bounds.meaning})")
    number = int(value)
    problem = bounds.problem(number)
    if problem is not None:
        raise ValueError(problem)
    return number


def is_absent(value: str) -> bool:
    """True when ``value`` is one of npu-smi's "no value" spellings (``NA``, ``-``, ...)."""
    return value.strip().lower() in ABSENT


def to_int(command: str, line_no: int, line: str, value: str, what: str, bounds: Bounds) -> int | None:
    """Return ``value`` as an int within ``bounds``, None when absent.

    :raises NpuSmiParseError: naming ``what`` when the value is neither absent nor an integer
        (ASCII digits), or lies outside ``bounds``.
    """
    value = value.strip()
    if is_absent(value):
        return None
    try:
        return read_int(value, bounds)
    except ValueError as exc:
        raise NpuSmiParseError(command, line_no, line, f"{what}: {exc}") from None


def to_amount(command: str, line_no: int, line: str, value: str, what: str, bounds: Bounds) -> int | None:
    """Return a quantity (memory MiB, a count) as an int within ``bounds``; None when absent or
    DCMI's sentinel 8255 (recognised before the range is checked, since ``-8255`` is below any).

    :raises NpuSmiParseError: naming ``what`` when the value is neither absent nor an integer within ``bounds``.
    """
    value = value.strip()
    if _INT.fullmatch(value) and len(value) <= _MAX_DIGITS and int(value) in DCMI_NOT_SUPPORTED:
        return None
    return to_int(command, line_no, line, value, what, bounds)


def is_not_supported(number: int | None) -> bool:
    """True when ``number`` is DCMI's "not supported" sentinel (:data:`DCMI_NOT_SUPPORTED`)."""
    return number in DCMI_NOT_SUPPORTED


def to_float(command: str, line_no: int, line: str, value: str, what: str, bounds: Bounds) -> float | None:
    """Return ``value`` as a float within ``bounds``, None when absent.

    :raises NpuSmiParseError: naming ``what`` when the value is neither absent nor a decimal number
        (ASCII digits), or lies outside ``bounds``.
    """
    value = value.strip()
    if is_absent(value):
        return None
    if not _FLOAT.fullmatch(value):
        raise NpuSmiParseError(command, line_no, line, f"{what}: {shown(value)!r} is not a number or NA")
    whole = value.lstrip("+-").partition(".")[0].lstrip("0")
    number = float(value) if len(whole) <= _MAX_DIGITS else float("inf")
    problem = bounds.problem(number)
    if problem is not None:
        raise NpuSmiParseError(command, line_no, line, f"{what}: {problem}")
    return number


def to_pair(command: str, line_no: int, line: str, value: str, what: str,
            bounds: Bounds) -> tuple[int | None, int | None]:
    """Return ``"part / whole"`` (``used / total``, ``free/total``; spaces optional) as ``(part, whole)``,
    each within ``bounds`` and None when absent; the part is at most the whole when both are known.

    The whole is read with :func:`to_amount` (a total of 8255 is DCMI's "not supported"); the
    part as printed, since 8255 MiB in use is a plausible reading.

    :raises NpuSmiParseError: when the value is not two values around a ``/``, a side is not an
        integer within ``bounds``, or the part is more than the whole.
    """
    part, slash, whole = value.strip().partition("/")
    if not slash or len(part.split()) != 1 or len(whole.split()) != 1:
        raise NpuSmiParseError(command, line_no, line, f"{what}: {shown(value)!r} is not 'used / total'")
    used = to_int(command, line_no, line, part, what, bounds)
    total = to_amount(command, line_no, line, whole, what, bounds)
    if used is not None and total is not None and used > total:
        raise NpuSmiParseError(command, line_no, line, f"{what}: {used} is more than the total {total}")
    return used, total


def to_bool(command: str, line_no: int, line: str, value: str, what: str) -> bool | None:
    """Return ``True``/``False`` (also ``Enable``/``Disable``) as a bool, None when absent.

    :raises NpuSmiParseError: for any other value.
    """
    value = value.strip()
    if is_absent(value):
        return None
    lowered = value.lower()
    if lowered in ("true", "enable", "enabled", "yes"):
        return True
    if lowered in ("false", "disable", "disabled", "no"):
        return False
    raise NpuSmiParseError(command, line_no, line, f"{what}: {shown(value)!r} is not True or False")


def text_or_none(value: str) -> str | None:
    """Return the stripped value, None when absent."""
    value = value.strip()
    return None if is_absent(value) else value


def is_rule(line: str) -> bool:
    """True for a box table's rule line (``+----+====+``, ``|----|``), not for a row of cells."""
    return bool(_RULE.match(line)) and any(c in line for c in "-=")


def cells(line: str) -> list[str]:
    """The ``|``-separated cells of a box table row, stripped."""
    return [cell.strip() for cell in line.strip().strip("|").split("|")]
