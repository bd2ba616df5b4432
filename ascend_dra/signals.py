"""Running a process's main task until SIGTERM or SIGINT (the daemon and the webhook)."""

from __future__ import annotations

import logging
import signal
from collections.abc import Awaitable, Callable

import anyio

__all__ = ("run_until_signal",)


async def run_until_signal(main: Callable[[], Awaitable[object]], log: logging.Logger) -> None:
    """Await ``main()``; on SIGTERM or SIGINT log ``stopping`` with the signal's name and cancel it."""
    async with anyio.create_task_group() as tg:
        async def stop_on_signal() -> None:
            with anyio.open_signal_receiver(signal.SIGTERM, signal.SIGINT) as signals:
                async for signum in signals:
                    log.info("stopping", extra={"signal": signal.Signals(signum).name})
                    tg.cancel_scope.cancel()
                    return

        tg.start_soon(stop_on_signal)
        await main()
