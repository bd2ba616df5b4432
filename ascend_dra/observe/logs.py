"""Structured logging: a constant message plus fields under fixed key names (docs/logging.md).

``text`` prints ``time level logger message key=value ...``; ``json`` prints one JSON object per
line for log collectors. Fields come from ``extra={...}``.

The level is ``LEVEL[,LOGGER=LEVEL...]``: ``LEVEL`` is ours (and the root logger's); the libraries in
:data:`THIRD_PARTY` stay at ``warning`` (or ``LEVEL`` when that is higher) unless a ``LOGGER=LEVEL``
entry names them, so ``debug`` shows our debug lines without HTTP/2 frames: ``debug,grpclib=debug``
adds grpclib's.
"""

from __future__ import annotations

import logging
import sys
import time

import orjson

__all__ = ("LEVELS", "THIRD_PARTY", "parse_log_level", "setup_logging")

_STANDARD = set(logging.LogRecord("", 0, "", 0, "", None, None).__dict__) | {"message", "asctime", "taskName"}


def _fields(record: logging.LogRecord) -> dict[str, object]:
    return {k: v for k, v in record.__dict__.items() if k not in _STANDARD}


class _TextFormatter(logging.Formatter):
    def format(self, record: logging.LogRecord) -> str:
        stamp = time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(record.created))
        fields = " ".join(f"{k}={v!r}" if isinstance(v, str) and " " in v else f"{k}={v}"
                          for k, v in _fields(record).items())
        line = f"{stamp} {record.levelname:<7} {record.name}: {record.getMessage()}" + (f" {fields}" if fields else "")
        if record.exc_info:
            line += "\n" + self.formatException(record.exc_info)
        return line


class _JsonFormatter(logging.Formatter):
    def format(self, record: logging.LogRecord) -> str:
        doc: dict[str, object] = {"ts": record.created, "level": record.levelname.lower(), "logger": record.name,
                                  "msg": record.getMessage(), **_fields(record)}
        if record.exc_info:
            doc["exc"] = self.formatException(record.exc_info)
        return orjson.dumps(doc, default=str).decode()


#: Level names ``--log-level`` accepts -> logging levels.
LEVELS = {"debug": logging.DEBUG, "info": logging.INFO, "warning": logging.WARNING, "error": logging.ERROR}
#: Loggers of the libraries we use, kept at ``warning`` unless named in the level (their debug is protocol noise).
THIRD_PARTY = ("grpclib", "hpack", "h2", "aiohttp", "kubernetes_asyncio", "urllib3", "asyncio", "watchfiles",
               "anyio")


def _level(text: str, what: str) -> int:
    if text.strip().lower() not in LEVELS:
        raise ValueError(f"{what}{text.strip()!r} is not one of {', '.join(LEVELS)}")
    return LEVELS[text.strip().lower()]


def parse_log_level(spec: str) -> tuple[int, dict[str, int]]:
    """Parse ``LEVEL[,LOGGER=LEVEL...]`` (e.g. ``debug,grpclib=debug,h2=info``).

    :return: ``(our level, {logger name: level})``; the mapping holds every name of
        :data:`THIRD_PARTY` (at ``max(warning, our level)`` unless given) plus the loggers named.
    :raises ValueError: an unknown level name, a ``LOGGER=`` with no name, or no ``LEVEL`` first;
        the message lists the allowed levels.
    """
    head, *rest = spec.split(",")
    ours = _level(head, "") if "=" not in head else None
    if ours is None:
        raise ValueError(f"{spec!r} must start with a level, one of {', '.join(LEVELS)} (then LOGGER=LEVEL, ...)")
    loggers = dict.fromkeys(THIRD_PARTY, max(logging.WARNING, ours))
    for entry in rest:
        name, eq, level = entry.partition("=")
        if not eq or not name.strip():
            raise ValueError(f"{entry!r} in {spec!r} is not LOGGER=LEVEL (e.g. grpclib=debug)")
        loggers[name.strip()] = _level(level, f"the level of {name.strip()}: ")
    return ours, loggers


def setup_logging(level: str = "info", fmt: str = "text") -> None:
    """Configure the root logger to write to stderr, and the third-party loggers (:func:`parse_log_level`).

    :param level: ``LEVEL[,LOGGER=LEVEL...]``.
    :param fmt: ``text`` or ``json``.
    :raises ValueError: unknown level or format (the message lists the allowed values).
    """
    ours, loggers = parse_log_level(level)
    if fmt not in ("text", "json"):
        raise ValueError(f"log format {fmt!r} is not one of text, json")
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(_JsonFormatter() if fmt == "json" else _TextFormatter())
    root = logging.getLogger()
    root.handlers[:] = [handler]
    root.setLevel(ours)
    for name, value in loggers.items():
        logging.getLogger(name).setLevel(value)
