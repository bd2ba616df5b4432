"""Value conversions shared by the npu-smi parsers.

npu-smi prints an absent or unsupported value as ``NA``, ``-`` or a sentence such as
``NA: Currently, query is not supported`` (reference ascend.md §4.2). These helpers turn such
values into None, and anything else that is not a number into an :class:`NpuSmiParseError`,
so a sentinel can never be published as a number.
"""

from __future__ import annotations

import re

from ascend_dra.profiles.ascend.errors import NpuSmiParseError

#: Values npu-smi prints for "no value" (compared case-insensitively).
ABSENT = frozenset({"", "na", "n/a", "-", "--", "not supported", "unknown"})

_INT = re.compile(r"^[+-]?\d+$")
_FLOAT = re.compile(r"^[+-]?\d+(\.\d+)?$")
_PAIR = re.compile(r"^(\S+?)\s*/\s*(\S+)$")


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

    :raises NpuSmiParseError: when the value has no ``/`` or a side is not an integer.
    """
    match = _PAIR.match(value.strip())
    if not match:
        raise NpuSmiParseError(command, line_no, line, f"{what}: {value!r} is not 'used / total'")
    return (
        to_int(command, line_no, line, match.group(1), what),
        to_int(command, line_no, line, match.group(2), what),
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
