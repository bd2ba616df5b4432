"""watch_device_nodes: one rediscovery as soon as the watch is active, then one per batch of changes.

Regression: the watch started after the daemon reported ready, so a device node created in
between left no event and was never discovered (test_hotplug failed once in a CI run).
"""

from __future__ import annotations

from pathlib import Path

import anyio
import pytest

from ascend_dra.node.hotplug import watch_device_nodes


@pytest.mark.anyio
async def test_the_watch_asks_for_a_rediscovery_once_active_and_then_on_each_change(tmp_path: Path) -> None:
    calls: list[float] = []
    called = anyio.Event()

    def on_change() -> None:
        calls.append(anyio.current_time())
        called.set()

    (tmp_path / "davinci0").touch()  # present before the watch: only the activation call sees it
    async with anyio.create_task_group() as tg:
        tg.start_soon(watch_device_nodes, tmp_path, on_change)
        with anyio.fail_after(10):
            await called.wait()
        assert len(calls) == 1
        called = anyio.Event()
        (tmp_path / "not-a-device").touch()
        (tmp_path / "davinci1").touch()
        with anyio.fail_after(10):
            await called.wait()
        assert len(calls) == 2
        tg.cancel_scope.cancel()


@pytest.mark.anyio
async def test_a_missing_device_directory_turns_hot_plug_off(tmp_path: Path) -> None:
    calls = []
    with anyio.fail_after(5):
        await watch_device_nodes(tmp_path / "absent", lambda: calls.append(1))
    assert calls == []
