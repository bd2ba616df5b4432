"""Opaque config ``kind: NpuConfig`` of the ``npu-310P`` and ``npu-910`` profiles.

apiVersion ``<driver-name>/v1alpha1`` (docs/architecture.md#names); JSON keys in camelCase, unknown keys rejected
(:func:`ascend_dra.profiles.base.decode_config`). Only what a workload can really choose for a
whole chip: how CANN logs, and whether the node's management tools are visible in the container.
Example::

    {"apiVersion": "ascend.project-hami.io/v1alpha1", "kind": "NpuConfig",
     "logLevel": "warning", "logToStdout": true, "mountTools": false}
"""

from __future__ import annotations

import enum
from collections.abc import Mapping

import attrs

from ascend_dra.profiles.base import ConfigError

__all__ = ("LOG_LEVEL_ENV", "LOG_TO_STDOUT_ENV", "LogLevel", "NpuConfig", "log_level_number", "validate_config")

#: CANN's global log level variable: 0 debug, 1 info, 2 warning, 3 error, 4 null (CANN
#: "Environment Variables" reference; not among the sources of docs/ascend-hardware.md **[U]**).
LOG_LEVEL_ENV = "ASCEND_GLOBAL_LOG_LEVEL"
#: CANN: ``1`` prints logs to stdout instead of files under ``~/ascend/log`` (same source **[U]**).
LOG_TO_STDOUT_ENV = "ASCEND_SLOG_PRINT_TO_STDOUT"


class LogLevel(enum.StrEnum):
    """Allowed ``NpuConfig.logLevel`` values (``inherit`` = leave the image's own setting alone)."""

    INHERIT = "inherit"
    DEBUG = "debug"
    INFO = "info"
    WARNING = "warning"
    ERROR = "error"
    NULL = "null"  # CANN logs nothing


_LOG_LEVEL_NUMBER: Mapping[LogLevel, int] = {
    LogLevel.DEBUG: 0, LogLevel.INFO: 1, LogLevel.WARNING: 2, LogLevel.ERROR: 3, LogLevel.NULL: 4,
}


def log_level_number(level: LogLevel) -> int | None:
    """The ``ASCEND_GLOBAL_LOG_LEVEL`` number of ``level`` (0..4); None for ``inherit`` (not set)."""
    return _LOG_LEVEL_NUMBER.get(level)


@attrs.frozen
class NpuConfig:
    """Opaque config ``kind: NpuConfig``. The default (no config) is ``NpuConfig()``.

    :ivar log_level: ``logLevel``: CANN log level (env ``ASCEND_GLOBAL_LOG_LEVEL``); ``inherit``
        (default) leaves the image's own setting alone.
    :ivar log_to_stdout: ``logToStdout``: CANN logs to stdout (env ``ASCEND_SLOG_PRINT_TO_STDOUT=1``),
        so ``kubectl logs`` shows them. Default false (the variable is not set).
    :ivar mount_tools: ``mountTools``: mount ``/usr/local/dcmi`` and ``/usr/local/bin/npu-smi``
        read-only (the Ascend Docker Runtime's ``base.list`` does, docs/ascend-hardware.md#driver-paths). Default
        true; false for workloads that must not query or configure the chip.
    """

    log_level: LogLevel = LogLevel.INHERIT
    log_to_stdout: bool = False
    mount_tools: bool = True


def validate_config(config: object) -> None:
    """Check a decoded :class:`NpuConfig`.

    :raises ConfigError: naming the field (``logLevel``, ``logToStdout``, ``mountTools``) and what is
        allowed, for every wrong field at once.
    """
    if not isinstance(config, NpuConfig):
        raise ConfigError.at("kind", f"{type(config).__name__} is not NpuConfig")
    problems = []
    if config.log_level not in tuple(LogLevel):
        allowed = ", ".join(m.value for m in LogLevel)
        problems.append(("logLevel", f"{config.log_level!r} is not one of {allowed}"))
    for field, value in (("logToStdout", config.log_to_stdout), ("mountTools", config.mount_tools)):
        if not isinstance(value, bool):
            problems.append((field, f"{value!r} is not true or false"))
    if problems:
        raise ConfigError(problems)
