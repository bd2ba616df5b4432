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


def _counting_loop_turns() -> list[int]:
    """Count the running asyncio loop's turns (each an ``epoll_wait`` and its callbacks) from now on."""
    import asyncio

    loop = asyncio.get_running_loop()
    turns = [0]
    run_once = loop._run_once  # type: ignore[attr-defined]

    def counted() -> None:
        turns[0] += 1
        run_once()

    loop._run_once = counted  # type: ignore[attr-defined]
    return turns


@pytest.mark.anyio
async def test_an_idle_watch_does_not_wake_the_loop_even_while_other_files_are_written(tmp_path: Path) -> None:
    """Issue 37: watchfiles' thread returned to the loop four times a second and reported every
    write to /dev/null (a modification in the watched dir): 3 ms of CPU a second in an idle
    daemon. The kernel now sends only the events that make or remove a name, and nothing polls."""
    import threading

    active = anyio.Event()
    noise = tmp_path / "null"
    noise.touch()

    def write_noise() -> None:
        for _ in range(200):
            with open(noise, "a") as f:
                f.write("x")

    async with anyio.create_task_group() as tg:
        tg.start_soon(watch_device_nodes, tmp_path, active.set)
        with anyio.fail_after(10):
            await active.wait()
        await anyio.sleep(0.3)  # whatever the start left to do is done
        turns = _counting_loop_turns()
        writer = threading.Thread(target=write_noise)
        writer.start()
        await anyio.sleep(1.0)
        writer.join()
        idle_turns = turns[0]
        tg.cancel_scope.cancel()
    assert idle_turns <= 3  # the sleep's own timer; before: at least 4 (the thread) and the writes' batches


@pytest.mark.anyio
async def test_a_write_to_a_device_node_is_no_hot_plug(tmp_path: Path) -> None:
    """Only a node made or removed asks for a rediscovery: I/O on /dev/davinci0 changes nothing a
    profile discovers (watchfiles reported it as a modification, and the name passed the filter)."""
    calls: list[int] = []
    called = anyio.Event()

    def on_change() -> None:
        calls.append(1)
        called.set()

    node = tmp_path / "davinci0"
    node.touch()
    async with anyio.create_task_group() as tg:
        tg.start_soon(watch_device_nodes, tmp_path, on_change)
        with anyio.fail_after(10):
            await called.wait()
        called = anyio.Event()
        node.write_text("I/O on the device")
        await anyio.sleep(1.0)  # past the debounce: a batch of it alone would have been reported by now
        (tmp_path / "davinci1").touch()
        with anyio.fail_after(10):
            await called.wait()
        tg.cancel_scope.cancel()
    assert len(calls) == 2  # the activation and davinci1


@pytest.mark.anyio
async def test_removing_the_device_directory_ends_the_watch_with_a_warning(tmp_path: Path, caplog) -> None:
    dev = tmp_path / "dev"
    dev.mkdir()
    active = anyio.Event()
    with anyio.fail_after(10):
        async with anyio.create_task_group() as tg:
            tg.start_soon(watch_device_nodes, dev, active.set)
            await active.wait()
            dev.rmdir()
    assert "device directory was removed or moved; hot-plug is off" in caplog.text
