"""Structured logging: a constant message plus fields under fixed key names (STYLE §1).

``text`` prints ``time level logger message key=value ...``; ``json`` prints one JSON object per
line for log collectors. Fields come from ``extra={...}``.
"""

from __future__ import annotations

import logging
import sys
import time

import orjson

__all__ = ("setup_logging",)

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


def setup_logging(level: str = "info", fmt: str = "text") -> None:
    """Configure the root logger to write to stderr.

    :raises ValueError: unknown level or format (the message lists the allowed values).
    """
    levels = {"debug": logging.DEBUG, "info": logging.INFO, "warning": logging.WARNING, "error": logging.ERROR}
    if level.lower() not in levels:
        raise ValueError(f"log level {level!r} is not one of {', '.join(levels)}")
    if fmt not in ("text", "json"):
        raise ValueError(f"log format {fmt!r} is not one of text, json")
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(_JsonFormatter() if fmt == "json" else _TextFormatter())
    root = logging.getLogger()
    root.handlers[:] = [handler]
    root.setLevel(levels[level.lower()])
