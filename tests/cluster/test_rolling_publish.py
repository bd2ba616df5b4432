"""ResourceSlices during a rolling update (``--rolling-update-id``): two instances of different
inventories serve the node at once; only the one that started last publishes, so the two never
rewrite each other's slices, and the older one takes over again when the newer one goes away."""

from __future__ import annotations

import time

import pytest

from tests.cluster.test_publish import our_slices, wait_until
from tests.integration.daemon import DaemonProcess

pytestmark = pytest.mark.cluster


def _devices(cp) -> tuple[int, int] | None:
    """(devices, pool generation) of our one slice, or None."""
    slices = our_slices(cp, cp.node_name)
    if len(slices) != 1:
        return None
    return len(slices[0]["spec"]["devices"]), slices[0]["spec"]["pool"]["generation"]


def test_only_the_newest_instance_publishes_and_the_older_one_resumes_when_it_stops(cp, short_tmp):
    """Before: each instance's write woke the other's watch, which wrote its own inventory back;
    the pool generation rose without end while the scheduler saw devices come and go."""
    root = short_tmp / "node"

    def instance(uid: str, devices: int) -> DaemonProcess:
        return DaemonProcess(root, node=cp.node_name, kubeconfig=cp.kubeconfig, fake_devices=devices,
                             rolling_update_id=uid)

    old = instance("pod-old", 2).start()
    new = None
    try:
        wait_until(lambda: (_devices(cp) or (0,))[0] == 2, "the old instance published", within=20)
        new = instance("pod-new", 3).start()
        _, generation = wait_until(lambda: (d := _devices(cp)) and d[0] == 3 and d, "the new instance published",
                                   within=20)
        time.sleep(3)  # long enough for many rounds of a fight (each takes a watch event and a PUT)
        assert _devices(cp) == (3, generation), "the instances rewrote each other's slices"
        wait_until(lambda: "this one stands by" in old.log_text(), "the old instance stood by", within=5)
        assert "stands by" not in new.log_text()

        new.stop()
        wait_until(lambda: (_devices(cp) or (0,))[0] == 2, "the old instance published again", within=10)
        assert "publishing ResourceSlices again" in old.log_text()
    finally:
        if new is not None:
            new.stop()
        old.stop()


@pytest.fixture
def anyio_backend():
    return "asyncio"


@pytest.mark.anyio
async def test_a_newer_instance_seen_just_before_a_write_stops_it_and_is_not_recorded_as_a_publish(cp):
    """The check before writing (a newer instance may come up while a reconcile retries) must not
    count as this instance's publish: an older one still would take it for a publishing instance."""
    import anyio

    from ascend_dra.cluster import apiclient
    from ascend_dra.cluster import apiserver as cluster
    from ascend_dra.model import Device, Inventory
    from tests.cluster.test_slice_watch import close_api
    from tests.integration.daemon import DRIVER

    answers = iter([None])  # the loop's look: none; every later look (the one before the write): "newer"
    published: list[int] = []
    api = await apiclient.connect_api(str(cp.kubeconfig))
    publisher = cluster.ApiPublisher(str(cp.kubeconfig), driver_name=DRIVER, node_name=cp.node_name, api=api,
                                     newer_instance=lambda: next(answers, "newer"),
                                     published=lambda: published.append(1))
    try:
        async with anyio.create_task_group() as tg:
            await tg.start(publisher.run, Inventory(devices=(Device("npu-0"),), source="test"))
            with anyio.fail_after(10):
                await publisher.first_attempt.wait()
            assert publisher.standing_by_for == "newer"
            tg.cancel_scope.cancel()
    finally:
        await close_api(api)
    assert published == [] and await anyio.to_thread.run_sync(our_slices, cp, cp.node_name) == []
