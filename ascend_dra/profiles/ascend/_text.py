"""Value conversions and box-table helpers shared by the npu-smi parsers.

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
"""

from __future__ import annotations

import re

from ascend_dra.profiles.ascend.errors import NpuSmiParseError

#: Values npu-smi prints for "no value" (compared case-insensitively).
ABSENT = frozenset({"", "na", "n/a", "-", "--", "not supported", "unknown"})

_INT = re.compile(r"^[+-]?\d+$")
_FLOAT = re.compile(r"^[+-]?\d+(\.\d+)?$")
_PAIR = re.compile(r"^(\S+?)\s*/\s*(\S+)$")
_RULE = re.compile(r"^\s*[+|][-=+|]*[+|]\s*$")


#: DCMI's "not supported" code, as npu-smi may print it in place of a quantity (see the module docstring).
DCMI_NOT_SUPPORTED = frozenset({8255, -8255})


def is_absent(value: str) -> bool:
    """True when ``value`` is one of npu-smi's "no value" spellings (``NA``, ``-``, ...)."""
    return value.strip().lower() in ABSENT


def to_int(command: str, line_no: int, line: str, value: str, what: str) -> int | None:
    """Return ``value`` as an int, None when absent.

    :raises NpuSmiParseError: naming ``what`` when the value is neither absent nor an integer.
    """
    value = value.strip()
    if is_absent(value):
        return None
    if not _INT.fullmatch(value):
        raise NpuSmiParseError(command, line_no, line, f"{what}: {value!r} is not an integer or NA")
    return int(value)


def to_amount(command: str, line_no: int, line: str, value: str, what: str) -> int | None:
    """Return a quantity (memory MiB, a count) as an int; None when absent or a DCMI sentinel (8255).

    :raises NpuSmiParseError: naming ``what`` when the value is neither absent nor an integer.
    """
    number = to_int(command, line_no, line, value, what)
    return None if number is None or is_not_supported(number) else number


def is_not_supported(number: int | None) -> bool:
    """True when ``number`` is DCMI's "not supported" sentinel (:data:`DCMI_NOT_SUPPORTED`)."""
    return number in DCMI_NOT_SUPPORTED


def to_float(command: str, line_no: int, line: str, value: str, what: str) -> float | None:
    """Return ``value`` as a float, None when absent.

    :raises NpuSmiParseError: naming ``what`` when the value is neither absent nor a decimal number.
    """
    value = value.strip()
    if is_absent(value):
        return None
    if not _FLOAT.fullmatch(value):
        raise NpuSmiParseError(command, line_no, line, f"{what}: {value!r} is not a number or NA")
    return float(value)


def to_pair(command: str, line_no: int, line: str, value: str, what: str) -> tuple[int | None, int | None]:
    """Return ``"used / total"`` (spaces optional) as ``(used, total)``, each None when absent.

    The total is read with :func:`to_amount` (a total of 8255 is DCMI's "not supported"); the
    used side is read as printed, since 8255 MiB in use is a plausible reading.

    :raises NpuSmiParseError: when the value has no ``/`` or a side is not an integer.
    """
    match = _PAIR.match(value.strip())
    if not match:
        raise NpuSmiParseError(command, line_no, line, f"{what}: {value!r} is not 'used / total'")
    return (
        to_int(command, line_no, line, match.group(1), what),
        to_amount(command, line_no, line, match.group(2), what),
    )


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
    raise NpuSmiParseError(command, line_no, line, f"{what}: {value!r} is not True or False")


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
