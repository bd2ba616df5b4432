"""The publisher's watch of our ResourceSlices (cluster.py ``ApiPublisher._watch`` on apiclient.py
``KubeApi.stream``), in-process against the real API server: it wakes the reconcile loop on a
change, even for a watch event longer than aiohttp's 128 KiB line limit, and it makes no API
client of its own (kubernetes-asyncio's ``Watch`` did, loading the system CA bundle on the event
loop: 55 ms each time the watch began)."""

from __future__ import annotations

import itertools
import uuid

import anyio
import pytest

from ascend_dra.cluster import apiclient, slicewatch
from ascend_dra.cluster import apiserver as cluster
from tests.cluster.test_publish import RES, delete_our_slices, ok, our_slices
from tests.integration.daemon import DRIVER

pytestmark = [pytest.mark.cluster, pytest.mark.anyio]


@pytest.fixture
def anyio_backend():
    return "asyncio"


async def close_api(api) -> None:
    """Close the client, then let its TLS connections finish closing: an SSL transport closes its
    socket a loop turn or more later, and a socket left to the garbage collector is a
    ResourceWarning in whichever test runs next (aiohttp's docs: graceful shutdown)."""
    await api.client.close()
    await anyio.sleep(0.25)


def _large_slice(node: str) -> dict:
    """One slice of 128 devices with 31 long string attributes each: a watch event of ~500 KiB."""
    attributes = {f"attr{a}": {"string": "x" * 64} for a in range(31)}
    return {"apiVersion": "resource.k8s.io/v1", "kind": "ResourceSlice",
            "metadata": {"name": f"{node}-watch-test"},
            "spec": {"driver": DRIVER, "nodeName": node, "pool": {"name": node, "generation": 1,
                                                                  "resourceSliceCount": 1},
                     "devices": [{"name": f"d{i}", "attributes": attributes} for i in range(128)]}}


async def test_the_watch_wakes_on_a_large_event_and_makes_no_client_of_its_own(cp, monkeypatch):
    from kubernetes_asyncio.client import ApiClient

    api = await apiclient.connect_api(str(cp.kubeconfig))
    made: list[object] = []
    real_init = ApiClient.__init__
    monkeypatch.setattr(ApiClient, "__init__", lambda self, *a, **k: made.append(self) or real_init(self, *a, **k))
    publisher = cluster.ApiPublisher(str(cp.kubeconfig), driver_name=DRIVER, node_name=cp.node_name, api=api)
    try:
        async with anyio.create_task_group() as tg:
            publisher.first_attempt.set()  # the watch begins once the first reconcile ended (none runs here)
            tg.start_soon(publisher._watch)
            await anyio.sleep(1)  # the watch is established (an event before it would be missed)
            publisher._wake = anyio.Event()
            await anyio.to_thread.run_sync(ok, cp, "POST", f"{RES}/resourceslices", _large_slice(cp.node_name))
            with anyio.fail_after(10):
                await publisher._wake.wait()
            tg.cancel_scope.cancel()
    finally:
        await close_api(api)
    assert made == []


async def test_our_own_writes_cause_no_further_reconcile_and_a_foreign_change_does(cp):
    """Each write of ours came back as watch events that woke a full reconcile (a LIST of every
    slice and a compare of every device: ~20 ms of the loop for 1,000 devices)."""
    from ascend_dra.model import Device, Inventory
    from tests.cluster.test_publish import delete_our_slices, our_slices

    api = await apiclient.connect_api(str(cp.kubeconfig))
    publisher = cluster.ApiPublisher(str(cp.kubeconfig), driver_name=DRIVER, node_name=cp.node_name, api=api,
                                     resync_interval=3600)
    syncs: list[bool] = []
    real_sync = publisher.sync

    async def counted() -> bool:
        syncs.append(await real_sync())
        return syncs[-1]

    publisher.sync = counted
    inventory = Inventory(devices=tuple(Device(f"npu-{i}") for i in range(3)), source="test")
    try:
        async with anyio.create_task_group() as tg:
            await tg.start(publisher.run, inventory)
            with anyio.fail_after(10):
                await publisher.first_attempt.wait()
            await anyio.sleep(3)  # the events of our own write have long arrived
            assert syncs == [True]
            await anyio.to_thread.run_sync(delete_our_slices, cp, cp.node_name)  # someone else's change
            for _ in range(100):
                if len(syncs) >= 2 and await anyio.to_thread.run_sync(our_slices, cp, cp.node_name):
                    break
                await anyio.sleep(0.1)
            await anyio.sleep(2)  # the events of putting them back have arrived too
            assert syncs[1:] == [True]  # put back at once, and then left alone
            tg.cancel_scope.cancel()
    finally:
        await close_api(api)


async def _publisher_without_resync(cp) -> tuple[apiclient.KubeApi, cluster.ApiPublisher]:
    api = await apiclient.connect_api(str(cp.kubeconfig))
    return api, cluster.ApiPublisher(str(cp.kubeconfig), driver_name=DRIVER, node_name=cp.node_name, api=api,
                                     resync_interval=3600)


async def _run_until_put_back(cp, api, publisher, deleted: anyio.Event) -> None:
    """Run ``publisher`` (two devices) until ``deleted`` is set and its slices exist again (30 s at most)."""
    from ascend_dra.model import Device, Inventory

    inventory = Inventory(devices=tuple(Device(f"npu-{i}") for i in range(2)), source="test")
    try:
        async with anyio.create_task_group() as tg:
            await tg.start(publisher.run, inventory)
            with anyio.fail_after(30):
                await deleted.wait()
                while not await anyio.to_thread.run_sync(our_slices, cp, cp.node_name):  # noqa: ASYNC110 (polls)
                    await anyio.sleep(0.1)
            tg.cancel_scope.cancel()
    finally:
        await close_api(api)
        delete_our_slices(cp, cp.node_name)


def _count_syncs(publisher: cluster.ApiPublisher, list_versions: list[str | None] | None = None) -> list[bool]:
    """Wrap ``publisher.sync``; the list it returns grows by each sync's result as it ends, and
    ``list_versions`` (when given) by the resourceVersion of its LIST."""
    real_sync, syncs = publisher.sync, []

    async def sync() -> bool:
        result = await real_sync()
        if list_versions is not None:
            list_versions.append(publisher._list_version)
        syncs.append(result)
        return result

    publisher.sync = sync
    return syncs


async def _delete_after_sync(cp, publisher: cluster.ApiPublisher, syncs: list[bool], deleted: anyio.Event) -> None:
    """Once the second sync (the one a watch's end or failure woke) has listed and ended, delete
    our slices and set ``deleted``."""
    while len(syncs) < 2 or publisher._syncing:  # noqa: ASYNC110 (polls the publisher)
        await anyio.sleep(0.01)
    await anyio.to_thread.run_sync(delete_our_slices, cp, cp.node_name)
    deleted.set()


async def test_a_deletion_between_two_watches_is_seen_before_the_next_resync(cp):
    """Each watch began at "now": slices deleted after the reconcile that the end of a watch woke
    had listed them, and before the next watch began (or during a back-off), stayed deleted until
    the next resync (60 s by default; the kubelet deletes a node's slices when it starts). The next
    watch now begins at the last resourceVersion seen, and replays the deletion."""
    api, publisher = await _publisher_without_resync(cp)
    real_watch_once, syncs = publisher._watch_once, _count_syncs(publisher)
    watches: list[int] = []
    deleted = anyio.Event()

    async def watch_once(query, limits):
        watches.append(len(watches))
        if len(watches) == 2:  # the first watch ended: once the reconcile it woke has listed, delete
            await _delete_after_sync(cp, publisher, syncs, deleted)
        # The first watch ends at once; the second outlasts the test (its end would wake a reconcile).
        seconds = "1" if len(watches) == 1 else "60"
        await real_watch_once([(k, seconds if k == "timeoutSeconds" else v) for k, v in query], limits)

    publisher._watch_once = watch_once
    await _run_until_put_back(cp, api, publisher, deleted)
    assert len(watches) == 2  # put back by the replayed DELETED event, during the second watch, not a resync


async def test_a_deletion_between_the_first_list_and_the_first_watch_is_seen(cp):
    """The first watch began at "now", beside the first reconcile: slices deleted after that
    reconcile had listed them and before the watch began stayed deleted until the next resync. The
    first watch now begins, once the first reconcile ended, at the resourceVersion of its LIST."""
    api, publisher = await _publisher_without_resync(cp)
    real_watch_once = publisher._watch_once
    watches: list[list[tuple[str, str]]] = []
    deleted = anyio.Event()

    async def watch_once(query, limits):
        watches.append(query)
        if len(watches) == 1:  # the first reconcile listed and published: delete before the watch begins
            await anyio.to_thread.run_sync(delete_our_slices, cp, cp.node_name)
            deleted.set()
        await real_watch_once(query, limits)

    publisher._watch_once = watch_once
    await _run_until_put_back(cp, api, publisher, deleted)
    assert len(watches) == 1  # put back by the first watch's DELETED event, not a resync
    assert any(key == "resourceVersion" for key, _ in watches[0])


async def test_a_deletion_between_the_relist_after_a_410_and_the_next_watch_is_seen(cp):
    """After a 410 Gone the next watch began at "now", beside the reconcile the 410 woke: slices
    deleted after that reconcile had listed them and before the watch began stayed deleted until the
    next resync. The watch now waits for that LIST and begins at its resourceVersion. (The 410 is
    injected: a watch at a version older than the watch cache is served here, not refused.)"""
    api, publisher = await _publisher_without_resync(cp)
    list_versions: list[str | None] = []
    real_watch_once, syncs = publisher._watch_once, _count_syncs(publisher, list_versions)
    watches: list[list[tuple[str, str]]] = []
    deleted = anyio.Event()

    async def watch_once(query, limits):
        watches.append(query)
        if len(watches) == 1:  # the API server's answer to a version it no longer has (etcd compacted it)
            raise apiclient.ApiError(410, "too old resource version")
        if len(watches) == 2:  # once the reconcile the 410 woke has listed and ended, delete
            await _delete_after_sync(cp, publisher, syncs, deleted)
        await real_watch_once(query, limits)

    publisher._watch_once = watch_once
    await _run_until_put_back(cp, api, publisher, deleted)
    assert len(watches) == 2  # put back by the second watch's DELETED event, not a resync
    # Not the expired version again (a server that keeps answering 410 to it would be asked in a
    # loop): the version of the LIST of the sync the 410 woke.
    assert dict(watches[1])["resourceVersion"] == list_versions[1]


async def test_410s_in_a_row_back_off(cp):
    """Each 410 costs a LIST and a new watch: a server that answers 410 every time must not be asked
    in a loop (before the pause applied to 410s: 1,293 watch requests in 3.5 s)."""
    from ascend_dra.model import Device, Inventory

    api, publisher = await _publisher_without_resync(cp)
    watches: list[float] = []

    async def watch_once(query, limits):
        watches.append(anyio.current_time())
        raise apiclient.ApiError(410, "too old resource version")

    publisher._watch_once = watch_once
    try:
        async with anyio.create_task_group() as tg:
            await tg.start(publisher.run, Inventory(devices=(Device("npu-0"),), source="test"))
            await anyio.sleep(3.5)
            tg.cancel_scope.cancel()
    finally:
        await close_api(api)
        delete_our_slices(cp, cp.node_name)
    assert 2 <= len(watches) <= 3  # at once, then after 1 s (and the LIST), then after 2 s more
    gaps = [b - a for a, b in itertools.pairwise(watches)]
    assert all(gap >= pause - 0.05 for gap, pause in zip(gaps, (1.0, 2.0), strict=False))


class _Chunks:
    def __init__(self, chunks: list[bytes]) -> None:
        self.chunks = chunks

    async def iter_any(self):
        for chunk in self.chunks:
            yield chunk


async def test_event_lines_are_split_wherever_the_chunks_end():
    big = b'{"type":"MODIFIED","object":"' + b"y" * 300_000 + b'"}'
    body = b'{"type":"ADDED"}\n\n' + big + b"\n" + b'{"type":"DELETED"}'
    chunks = [body[i:i + 7000] for i in range(0, len(body), 7000)]
    lines = [line async for line in slicewatch._lines(_Chunks(chunks))]
    assert lines == [b'{"type":"ADDED"}', big, b'{"type":"DELETED"}']
    assert [line async for line in slicewatch._lines(_Chunks([b"a\nb", b"c\n", b"\n"]))] == [b"a", b"bc"]


async def test_slices_follow_a_node_created_again_under_the_same_name(cp):
    """A Node deleted and created again (re-imaged, re-registered) has a new uid; the publisher
    kept the uid it read first, so its slices named an owner that no longer existed, and the
    garbage collector deleted them after every republish (the class of fault of
    qvest-digital/mxl-k8s#233: an owner reference cached across its owner's re-creation)."""
    from ascend_dra.model import Device, Inventory

    node = f"owner-{uuid.uuid4().hex[:8]}"
    body = {"apiVersion": "v1", "kind": "Node", "metadata": {"name": node}}
    first = (await anyio.to_thread.run_sync(ok, cp, "POST", "/api/v1/nodes", body))["metadata"]["uid"]
    api = await apiclient.connect_api(str(cp.kubeconfig))
    publisher = cluster.ApiPublisher(str(cp.kubeconfig), driver_name=DRIVER, node_name=node, api=api)
    publisher._inventory = Inventory(devices=(Device("npu-0"),), source="test")

    async def owners() -> list[str]:
        slices = await anyio.to_thread.run_sync(our_slices, cp, node)
        return [ref["uid"] for s in slices for ref in s["metadata"].get("ownerReferences") or ()]

    try:
        assert await publisher.sync()
        assert await owners() == [first]
        await anyio.to_thread.run_sync(ok, cp, "DELETE", f"/api/v1/nodes/{node}")
        second = (await anyio.to_thread.run_sync(ok, cp, "POST", "/api/v1/nodes", body))["metadata"]["uid"]
        assert second != first
        await publisher.sync()
        assert await owners() == [second]  # rewritten (or, if the collector was first, created) with the new uid
        assert not await publisher.sync()  # and then left alone
    finally:
        await anyio.to_thread.run_sync(delete_our_slices, cp, node)
        await anyio.to_thread.run_sync(cp.api, "DELETE", f"/api/v1/nodes/{node}")
        await close_api(api)


async def _count_calls(api: apiclient.KubeApi) -> list[tuple[str, str]]:
    real_call, calls = api.call, []

    async def call(method: str, path: str, **kwargs):
        calls.append((method, path))
        return await real_call(method, path, **kwargs)

    api.call = call
    return calls


async def _wait_for(condition, within: float = 30) -> None:
    with anyio.fail_after(within):
        while not condition():  # noqa: ASYNC110 (polls the publisher)
            await anyio.sleep(0.02)


async def test_a_resync_while_the_watch_streams_sends_no_request_and_still_marks_the_pool_current(cp):
    """Issue 37: every resync (60 s) sent a GET of the Node and a LIST of our slices, two requests a
    minute from every node on top of the watch, though the watch reports any change to them (a
    Node created again too: the garbage collector deletes the slices that named the old one). A
    resync with the watch streaming since the last LIST now asks nothing, and still tells a
    rolling update's other instances that this one publishes (``published``)."""
    from ascend_dra.model import Device, Inventory

    api = await apiclient.connect_api(str(cp.kubeconfig))
    published: list[float] = []
    publisher = cluster.ApiPublisher(str(cp.kubeconfig), driver_name=DRIVER, node_name=cp.node_name, api=api,
                                     resync_interval=0.1, published=lambda: published.append(1))
    calls = await _count_calls(api)
    inventory = Inventory(devices=(Device("npu-0"),), source="test")
    try:
        async with anyio.create_task_group() as tg:
            await tg.start(publisher.run, inventory)
            await _wait_for(lambda: publisher._streaming and len(published) >= 2)
            requests, resyncs = len(calls), len(published)
            await _wait_for(lambda: len(published) >= resyncs + 5)
            assert calls[requests:] == []
            tg.cancel_scope.cancel()
    finally:
        await close_api(api)
        delete_our_slices(cp, cp.node_name)


async def test_a_resync_while_the_watch_is_down_lists_again(cp):
    """Without a watch that streams, a resync is the full reconcile it always was (GET and LIST)."""
    from ascend_dra.model import Device, Inventory

    api = await apiclient.connect_api(str(cp.kubeconfig))
    published: list[float] = []
    publisher = cluster.ApiPublisher(str(cp.kubeconfig), driver_name=DRIVER, node_name=cp.node_name, api=api,
                                     resync_interval=0.1, published=lambda: published.append(1))

    async def refused(query, limits):
        raise apiclient.ApiError(403, "watch refused")

    publisher._watch_once = refused
    calls = await _count_calls(api)
    inventory = Inventory(devices=(Device("npu-0"),), source="test")
    try:
        async with anyio.create_task_group() as tg:
            await tg.start(publisher.run, inventory)
            await _wait_for(lambda: len(published) >= 4)
            lists = [c for c in calls if c[0] == "GET" and c[1].endswith("/resourceslices")]
            assert len(lists) >= 4
            tg.cancel_scope.cancel()
    finally:
        await close_api(api)
        delete_our_slices(cp, cp.node_name)
