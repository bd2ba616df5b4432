"""Running a process's main task until SIGTERM, SIGINT or SIGHUP (the daemon and the webhook)."""

from __future__ import annotations

import logging
import signal
from collections.abc import Awaitable, Callable

import anyio

__all__ = ("STOP_SIGNALS", "run_until_signal")

#: The signals that stop the process cleanly (sockets removed, checkpoint compacted). SIGHUP is
#: among them: its default action would end the process with no cleanup at all.
STOP_SIGNALS = (signal.SIGTERM, signal.SIGINT, signal.SIGHUP)


async def run_until_signal(main: Callable[[], Awaitable[object]], log: logging.Logger) -> None:
    """Await ``main()``; on SIGTERM, SIGINT or SIGHUP log ``stopping`` with the signal's name and cancel it.

    The handlers are installed before ``main()`` starts and stay until it has returned, cleanup
    included: a signal during the (bounded, docs/architecture.md#conventions) shutdown is logged and
    changes nothing, where its default action would kill the process half-way, leaving its sockets
    behind. Once a signal has stopped it, the stop signals stay ignored until the process exits: the
    default action of a second one would otherwise turn a clean stop into death by that signal
    (exit status 128 + its number) in the milliseconds of the interpreter's own exit. A process that
    must die at once gets SIGKILL.
    """
    stopping = anyio.CancelScope()
    async with anyio.create_task_group() as tg:
        with anyio.open_signal_receiver(*STOP_SIGNALS) as signals:
            async def stop_on_signal() -> None:
                async for signum in signals:
                    name = signal.Signals(signum).name
                    if stopping.cancel_called:
                        log.info("already stopping; signal ignored", extra={"signal": name})
                        continue
                    log.info("stopping", extra={"signal": name})
                    stopping.cancel()

            tg.start_soon(stop_on_signal)
            with stopping:
                await main()
            tg.cancel_scope.cancel()
    if stopping.cancel_called:  # the receiver gave the default actions back: stopped by a signal, exit quietly
        for signum in STOP_SIGNALS:
            signal.signal(signum, signal.SIG_IGN)
