"""``--log-level LEVEL[,LOGGER=LEVEL...]``: ours at LEVEL, the protocol libraries at warning unless named."""

from __future__ import annotations

import logging

import pytest

from ascend_dra.observe.logs import THIRD_PARTY, parse_log_level, setup_logging


def test_the_libraries_stay_at_warning_when_we_are_at_debug() -> None:
    ours, loggers = parse_log_level("debug")
    assert ours == logging.DEBUG
    assert loggers == dict.fromkeys(THIRD_PARTY, logging.WARNING)
    assert {"grpclib", "hpack", "h2", "aiohttp", "kubernetes_asyncio", "urllib3", "asyncio"} <= set(THIRD_PARTY)


def test_a_named_logger_gets_its_own_level_and_error_stays_above_warning() -> None:
    ours, loggers = parse_log_level("info, grpclib=debug,my.lib=error")
    assert (ours, loggers["grpclib"], loggers["my.lib"], loggers["h2"]) == (
        logging.INFO, logging.DEBUG, logging.ERROR, logging.WARNING)
    assert parse_log_level("error")[1]["hpack"] == logging.ERROR


@pytest.mark.parametrize(("spec", "message"), [
    ("verbose", "'verbose' is not one of debug, info, warning, error"),
    ("grpclib=debug", "must start with a level, one of debug, info, warning, error"),
    ("debug,grpclib", "'grpclib' in 'debug,grpclib' is not LOGGER=LEVEL"),
    ("debug,=info", "is not LOGGER=LEVEL"),
    ("debug,h2=loud", "the level of h2: 'loud' is not one of debug, info, warning, error"),
])
def test_a_bad_level_names_the_allowed_ones(spec: str, message: str) -> None:
    with pytest.raises(ValueError) as raised:
        parse_log_level(spec)
    assert message in str(raised.value)


def test_setup_logging_sets_the_levels() -> None:
    before = {name: logging.getLogger(name).level for name in ("", "hpack", "grpclib")}
    handlers = logging.getLogger().handlers[:]
    try:
        setup_logging("debug,grpclib=info")
        assert logging.getLogger().level == logging.DEBUG
        assert logging.getLogger("hpack").level == logging.WARNING
        assert logging.getLogger("grpclib").level == logging.INFO
        assert not logging.getLogger("hpack.hpack").isEnabledFor(logging.DEBUG)
    finally:
        logging.getLogger().handlers[:] = handlers
        for name, level in before.items():
            logging.getLogger(name).setLevel(level)
