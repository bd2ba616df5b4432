"""The Ascend driver's ``version.info``: which driver release is installed.

Source: docs/ascend-hardware.md#driver-paths (``/usr/local/Ascend/driver/version.info`` holds ``Version=25.5.1``
etc.) and docs/ascend-hardware.md#device-share-mode (HAMivNPUCore needs **driver >= 25.5**; Lab 18 ran 25.5.1). The
file is ``key=value``
lines; ``Version`` names the release, ``package_version`` repeats it on the drivers we know of
**[U: only ``Version`` is in the sources of docs/ascend-hardware.md]**. Releases are not semver: ``25.5.1``,
``23.0.rc3``, ``24.1.rc1.b030``; only the leading ``major.minor`` is compared.
"""

from __future__ import annotations

import re

import attrs

from ascend_dra.profiles.ascend.npusmi._text import read_int
from ascend_dra.profiles.ascend.npusmi.bounds import RELEASE_PART

__all__ = ("DriverRelease", "VersionInfoError", "parse_version_info")

# [0-9], not \d, which also matches the digits of other scripts.
_RELEASE = re.compile(r"([0-9]+)\.([0-9]+)(?:[.\-].*)?")
#: A release is a short word (``24.1.rc1.b030``); the API allows 64 characters for a version.
_LONGEST = 64


class VersionInfoError(ValueError):
    """Raised by :func:`parse_version_info` when the file has no usable release.

    :ivar reason: what was wrong, e.g. ``no Version= line``.
    """

    def __init__(self, reason: str) -> None:
        self.reason = reason
        super().__init__(f"version.info: {reason}")


@attrs.frozen(order=True)
class DriverRelease:
    """A driver release reduced to ``(major, minor)`` for comparison; ``text`` is as printed."""

    major: int
    minor: int
    text: str = attrs.field(eq=False, order=False)

    @classmethod
    def parse(cls, text: str) -> DriverRelease:
        """``"25.5.1"`` -> ``DriverRelease(25, 5)``; ``"23.0.rc3"`` -> ``(23, 0)``.

        :raises VersionInfoError: when ``text`` does not start with ``<major>.<minor>``, either is
            out of range (:data:`.bounds.RELEASE_PART`), or it is longer than a release.
        """
        text = text.strip()
        if len(text) > _LONGEST:
            raise VersionInfoError(f"release {text[:_LONGEST]!r}... is {len(text)} characters long; "
                                   f"a release has at most {_LONGEST}")
        match = _RELEASE.fullmatch(text)
        if match is None:
            raise VersionInfoError(f"release {text!r} does not start with <major>.<minor>")
        try:
            major, minor = (read_int(match.group(n), RELEASE_PART) for n in (1, 2))
        except ValueError as exc:
            raise VersionInfoError(f"release {text!r}: {exc}") from None
        return cls(major, minor, text)

    def __str__(self) -> str:
        return self.text


def parse_version_info(text: str) -> DriverRelease:
    """Return the release named by ``Version=`` (else ``package_version=``) in a version.info file.

    :raises VersionInfoError: when neither key is present or the value is not ``<major>.<minor>...``.
    """
    values: dict[str, str] = {}
    for line in text.splitlines():
        key, eq, value = line.partition("=")
        if eq and key.strip():
            values.setdefault(key.strip(), value.strip())
    for key in ("Version", "package_version"):
        if values.get(key):
            return DriverRelease.parse(values[key])
    raise VersionInfoError("no Version= line")
