"""The health stream's messages stay within the kubelet's limits (docs/architecture.md#health-stream)."""

from __future__ import annotations

from ascend_dra.kubelet._gen import v1 as health_v1
from ascend_dra.kubelet.health import (
    MAX_HEALTH_MESSAGE,
    MAX_RESEND_S,
    MAX_STREAM_MESSAGE_BYTES,
    HealthFeed,
    HealthService,
    HealthServiceV1,
)


def _feed(devices: int, message: str = "") -> HealthFeed:
    feed = HealthFeed("node-with-a-long-name.example.com")
    feed.devices = {f"vnpu-{i:05d}-0-template-vir02-c" : i % 3 == 0 or None for i in range(devices)}
    feed.messages = dict.fromkeys(feed.devices, message) if message else {}
    return feed


def test_ten_thousand_devices_fit_one_message_by_a_wide_margin():
    size = len(bytes(HealthServiceV1(_feed(10_000)).snapshot()))
    assert size < MAX_STREAM_MESSAGE_BYTES / 4, size


def test_messages_are_cut_to_what_the_kubelet_keeps():
    snapshot = HealthServiceV1(_feed(2, "x" * 5000)).snapshot()
    assert {len(d.message) for d in snapshot.devices} == {MAX_HEALTH_MESSAGE}
    assert snapshot.devices[0].message.endswith("...")


def test_a_message_over_4_mib_drops_the_device_messages_first():
    snapshot = HealthServiceV1(_feed(5000, "y" * 1000)).snapshot()
    assert len(bytes(snapshot)) < MAX_STREAM_MESSAGE_BYTES
    assert {d.message for d in snapshot.devices} == {""}
    assert len(snapshot.devices) == 5000


def test_the_resend_interval_never_exceeds_a_third_of_the_kubelets_window():
    assert HealthService(_feed(1), resend_s=120).resend_s == MAX_RESEND_S == 10
    assert HealthService(_feed(1), resend_s=2).resend_s == 2


def test_both_versions_encode_the_same_bytes():
    feed = _feed(3, "ok")
    v1 = HealthServiceV1(feed, clock=lambda: 1700000000).snapshot()
    v1alpha1 = HealthService(feed, clock=lambda: 1700000000).snapshot()
    assert isinstance(v1, health_v1.NodeWatchResourcesResponse)
    assert bytes(v1) == bytes(v1alpha1)
