"""Usage on /metrics (usage.py): per chip and per claim, under HAMi's names; the pods of each claim;
the build on the event loop for a scrape on the server's thread; what the Ascend chips report."""

from __future__ import annotations

import asyncio
import logging
import threading
from collections.abc import Mapping
from typing import Any

import pytest
from prometheus_client import generate_latest

from ascend_dra.durable.checkpoint import PREPARE_COMPLETED, PREPARE_STARTED, ClaimRecord, DeviceRecord
from ascend_dra.model import Capacity, ClaimAllocation, Device, DeviceReading, Inventory
from ascend_dra.node.metrics import Metrics
from ascend_dra.node.usage import REFRESH_BATCH, ConsumerLog, LoggingClaimSource, LoopSamples, usage_samples
from ascend_dra.profiles.ascend.npusmi import tables
from ascend_dra.profiles.ascend.usage import chip_readings
from ascend_dra.profiles.ascend.vnpucore.profile import capacities as share_capacities
from ascend_dra.state.claims import ClaimGone
from tests.unit.test_ascend_support import fixture

NODE = "lab"
UUID_0, UUID_1 = "68496E64-20E05477-92C31323-6E78030A-BD003019", "D8496E64-20C101B1-C0D42F23-AED8030A-40003039"
GIB = 1 << 30


def chip(name: str, index: int, uuid: str | None, **capacities: Capacity) -> Device:
    attributes: dict[str, Any] = {"index": index, "npuID": 4 + index, "chipID": 0, "chipName": "310P3",
                                  "chipFamily": "Ascend310P", "productName": "310P3"}
    if uuid is not None:
        attributes["uuid"] = uuid
    return Device(name=name, attributes=attributes, capacities=capacities or share_capacities(21525))


def record(uid: str, name: str, *devices: DeviceRecord, state: str = PREPARE_COMPLETED) -> ClaimRecord:
    return ClaimRecord(uid=uid, namespace="dra-ascend-e2e", name=name, state=state, boot_id="b", devices=devices)


def share(device: str, memory: str, cores: str, share_id: str) -> DeviceRecord:
    return DeviceRecord("npu", NODE, device, share_id=share_id,
                        consumed_capacity={"memory": memory, "cores": cores, "containers": "1"})


def by_labels(samples: Mapping[str, Any], name: str, *keys: str) -> dict[tuple[str, ...], float]:
    """``{label values picked by keys: value}`` of metric ``name`` (keys index the metric's labels)."""
    from ascend_dra.node.usage import METRICS

    names = METRICS[name][1]
    return {tuple(values[names.index(k)] for k in keys): value for values, value in samples[name]}


LAB = {"HAMivNPUCore": Inventory(devices=(chip("npu-0-0", 0, UUID_0), chip("npu-1-0", 1, UUID_1)), source="npu-smi")}


def test_the_labs_two_shares_are_booked_on_their_chip_and_named_by_their_pods():
    records = {"a": record("a", "claim-a", share("npu-0-0", "8Gi", "50", "s-a")),
               "b": record("b", "claim-b", share("npu-0-0", "8Gi", "50", "s-b")),
               "half": record("half", "half-done", share("npu-1-0", "1Gi", "1", "s-h"), state=PREPARE_STARTED)}
    readings = {"npu-0-0": DeviceReading(core_percent=37.0, memory_used_mib=1848, memory_total_mib=21525,
                                         temperature_c=37.0)}
    samples = usage_samples(NODE, LAB, records, {"npu-0-0": True, "npu-1-0": False}, readings,
                            {"a": ("ascend-share-a",)})
    # Per chip: HAMi's scheduler names, our device name beside them; PrepareStarted counts nothing.
    assert by_labels(samples, "hami_gpu_memory_allocated_bytes", "device", "device_uuid", "device_type",
                     "device_cores") == {("npu-0-0", UUID_0, "Ascend310P", "100"): 16 * GIB,
                                         ("npu-1-0", UUID_1, "Ascend310P", "100"): 0.0}
    assert by_labels(samples, "hami_gpu_core_allocated_ratio", "device") == {("npu-0-0",): 100.0, ("npu-1-0",): 0.0}
    assert by_labels(samples, "hami_gpu_shared_count", "device") == {("npu-0-0",): 2.0, ("npu-1-0",): 0.0}
    assert by_labels(samples, "hami_gpu_memory_limit_bytes", "device", "device_index") == {
        ("npu-0-0", "0"): 21525 * (1 << 20), ("npu-1-0", "1"): 21525 * (1 << 20)}
    # What the chip reports: only where it reported; health of every device.
    assert by_labels(samples, "hami_host_gpu_utilization_ratio", "device") == {("npu-0-0",): 37.0}
    assert by_labels(samples, "hami_host_gpu_memory_used_bytes", "device") == {("npu-0-0",): 1848 * (1 << 20)}
    assert by_labels(samples, "ascend_dra_device_temperature_celsius", "device") == {("npu-0-0",): 37.0}
    assert samples["ascend_dra_device_power_watts"] == []
    assert by_labels(samples, "ascend_dra_device_health", "device") == {("npu-0-0",): 1.0, ("npu-1-0",): 0.0}
    # Per claim and pod: a claim whose pods are not known yet has pod "".
    assert by_labels(samples, "hami_vgpu_memory_allocated_bytes", "namespace", "pod", "claim", "device_uuid") == {
        ("dra-ascend-e2e", "ascend-share-a", "claim-a", UUID_0): 8 * GIB,
        ("dra-ascend-e2e", "", "claim-b", UUID_0): 8 * GIB}
    assert by_labels(samples, "hami_vgpu_core_allocated_ratio", "pod") == {("ascend-share-a",): 50.0, ("",): 50.0}
    assert by_labels(samples, "hami_container_device_utilization_ratio", "pod", "vdevice_index") == {
        ("ascend-share-a", "0"): 37.0, ("", "0"): 37.0}
    assert by_labels(samples, "ascend_dra_claim_device_info", "pod", "claim_uid", "share_id", "request") == {
        ("ascend-share-a", "a", "s-a", "npu"): 1.0, ("", "b", "s-b", "npu"): 1.0}


def test_whole_chips_and_hard_vnpus_book_the_devices_own_capacities_per_chip():
    whole = chip("npu-0-0", 0, None, memory=Capacity("32Gi"), aicore=Capacity("20"), cores=Capacity("100"))
    vnpu = Device(name="vnpu-0-0-vir05-1c-8g-0", attributes={**whole.attributes, "type": "vnpu"},
                  capacities={"memory": Capacity("8192Mi"), "aicore": Capacity("5"), "cores": Capacity("25")})
    other = chip("npu-1-0", 1, None, memory=Capacity("32Gi"), cores=Capacity("100"))
    inventories = {"hard-vNPU": Inventory(devices=(vnpu, whole, other))}
    records = {"v": record("v", "vnpu", DeviceRecord("npu", NODE, vnpu.name)),
               "w": record("w", "whole", DeviceRecord("npu", NODE, "npu-1-0")),
               "admin": record("admin", "debug", DeviceRecord("npu", NODE, "npu-1-0", admin_access=True)),
               "gone": record("gone", "lost", DeviceRecord("npu", NODE, "npu-9-0"))}
    pods = {"v": ("p-v", "p-v2"), "w": ("p-w",)}
    samples = usage_samples(NODE, inventories, records, {}, {}, pods)
    # One chip per index: the vNPU is booked on its chip, named by the whole chip's device.
    assert by_labels(samples, "hami_gpu_memory_allocated_bytes", "device", "device_uuid") == {
        ("npu-0-0", "npu-0-0"): 8 * GIB, ("npu-1-0", "npu-1-0"): 32 * GIB}
    assert by_labels(samples, "hami_gpu_core_allocated_ratio", "device") == {("npu-0-0",): 25.0, ("npu-1-0",): 100.0}
    assert by_labels(samples, "hami_gpu_shared_count", "device") == {("npu-0-0",): 1.0, ("npu-1-0",): 1.0}
    # A claim shared by two pods is shown for each; a device no longer published is named by itself.
    assert by_labels(samples, "hami_vgpu_memory_allocated_bytes", "pod", "device", "device_uuid") == {
        ("p-v", vnpu.name, "npu-0-0"): 8 * GIB, ("p-v2", vnpu.name, "npu-0-0"): 8 * GIB,
        ("p-w", "npu-1-0", "npu-1-0"): 32 * GIB}
    assert by_labels(samples, "ascend_dra_claim_device_info", "claim", "device", "device_uuid") == {
        ("vnpu", vnpu.name, "npu-0-0"): 1.0, ("whole", "npu-1-0", "npu-1-0"): 1.0, ("lost", "npu-9-0", "npu-9-0"): 1.0}
    # Health per published device, with its chip's labels; unknown is -1.
    assert by_labels(samples, "ascend_dra_device_health", "device", "device_uuid") == {
        (vnpu.name, "npu-0-0"): 1.0, ("npu-0-0", "npu-0-0"): 1.0, ("npu-1-0", "npu-1-0"): 1.0}
    unknown = usage_samples(NODE, inventories, {}, {"npu-1-0": None}, {}, {})
    assert by_labels(unknown, "ascend_dra_device_health", "device")[("npu-1-0",)] == -1.0


class Source:
    """A claim source answering from a dict; other claims are gone."""

    def __init__(self, claims: Mapping[str, ClaimAllocation]) -> None:
        self.claims = claims
        self.asked: list[str] = []
        self.closed = False

    async def get(self, namespace: str, name: str, uid: str, *, uid_recorded: bool = False) -> ClaimAllocation:
        self.asked.append(uid)
        if uid not in self.claims:
            raise ClaimGone(f"ResourceClaim {namespace}/{name} does not exist")
        return self.claims[uid]

    async def gone(self, namespace: str, name: str, uid: str, pool: str) -> str | None:
        return None

    async def aclose(self) -> None:
        self.closed = True


@pytest.mark.anyio
async def test_pods_are_noted_at_prepare_and_read_back_after_a_restart_a_batch_at_a_time():
    allocation = ClaimAllocation("a", "ns", "claim-a", (), reserved_pods=("web-0",))
    log = ConsumerLog()
    source = LoggingClaimSource(Source({"a": allocation}), log)
    assert await source.get("ns", "claim-a", "a") is allocation
    assert log.pods == {"a": ("web-0",)}
    await source.aclose()  # what the wrapped source has, it still has
    assert source.inner.closed

    # After a restart: prepared claims not read since are read, REFRESH_BATCH per call; a claim that
    # cannot be read is tried again; claims no longer prepared are forgotten.
    many = {f"c{i}": ClaimAllocation(f"c{i}", "ns", f"n{i}", (), reserved_pods=(f"p{i}",))
            for i in range(REFRESH_BATCH + 2)}
    records = {uid: record(uid, c.name) for uid, c in many.items()} | {"x": record("x", "missing")}
    fresh, reader = ConsumerLog(), Source(many)
    fresh.pods["old"] = ("gone-pod",)
    await fresh.refresh(records, reader)
    assert len(fresh.pods) == REFRESH_BATCH and "old" not in fresh.pods
    await fresh.refresh(records, reader)
    assert fresh.pods == {uid: (f"p{uid[1:]}",) for uid in many}
    assert reader.asked.count("x") == 1
    await fresh.refresh(records, reader)
    assert reader.asked.count("x") == 2 and len(reader.asked) == len(many) + 2


def test_the_samples_are_built_on_the_loop_and_the_last_ones_served_when_it_does_not_answer(caplog):
    loop = asyncio.new_event_loop()
    built_on: list[threading.Thread] = []

    def build() -> dict[str, list]:
        built_on.append(threading.current_thread())
        return {"hami_gpu_shared_count": [(("lab", "u", "0", "Ascend310P", "npu-0-0"), 1.0)]}

    runner = threading.Thread(target=loop.run_forever, name="loop")
    runner.start()
    samples = LoopSamples(loop, build)
    try:
        first = samples()
    finally:
        loop.call_soon_threadsafe(loop.stop)
        runner.join()
    assert built_on == [runner] and first["hami_gpu_shared_count"][0][1] == 1.0
    loop.close()
    with caplog.at_level(logging.WARNING, logger="ascend_dra.node.usage"):
        assert samples() is first  # a closed loop: the last samples, and a WARNING saying so
    assert [r.getMessage() for r in caplog.records] == ["usage metrics not built; serving the last ones"]


def test_metrics_serve_the_usage_families_and_registering_does_not_build_them():
    calls: list[int] = []

    def samples() -> dict[str, list]:
        calls.append(1)
        return usage_samples(NODE, LAB, {}, {}, {}, {})

    metrics = Metrics()
    metrics.follow_usage(samples)
    assert calls == []
    text = generate_latest(metrics.registry).decode()
    assert calls == [1]
    assert (f'hami_gpu_core_limit_ratio{{device="npu-0-0",device_index="0",device_type="Ascend310P",'
            f'device_uuid="{UUID_0}",node="lab"}} 100.0') in text
    assert "# TYPE hami_vgpu_memory_allocated_bytes gauge" in text


@pytest.mark.parametrize(("name", "device", "expected"), [
    ("310P3_info.txt", Device("npu-1-0", {"npuID": 5, "chipID": 0}),
     DeviceReading(core_percent=0.0, memory_used_mib=1849, memory_total_mib=21525, temperature_c=40.0)),
    ("910B3_info.txt", Device("npu-1-0", {"npuID": 1, "chipID": 0}),  # HBM, not the 0 / 0 of DDR
     DeviceReading(core_percent=0.0, memory_used_mib=3314, memory_total_mib=65536, temperature_c=39.0, power_w=92.0)),
    ("950PR_info_Alarm_processes_drv25.7.rc1.txt", Device("npu-0-0", {"npuID": 0, "chipID": 0}),  # NPU Util(%)
     DeviceReading(core_percent=100.0, memory_used_mib=90633, memory_total_mib=114688, temperature_c=71.0,
                   power_w=205.7)),
], ids=["310P DDR", "910B HBM", "950 NPU Util"])
def test_a_chip_reports_what_npu_smi_info_prints(name, device, expected):
    table = tables.parse_info(fixture(name))
    absent = Device("npu-7-0", {"npuID": 99, "chipID": 0})
    assert chip_readings(table, [device, absent]) == {device.name: expected}


@pytest.mark.anyio
async def test_the_ascend_profiles_keep_what_their_last_health_check_read(tmp_path):
    import attrs

    from ascend_dra.profiles.ascend.npusmi.errors import NpuSmiError
    from ascend_dra.profiles.ascend.sim import labnode
    from ascend_dra.profiles.ascend.vnpucore.profile import VnpuCoreProfile
    from tests.unit.test_hami_monitoring_attributes import lab_context

    lab = labnode.build(tmp_path / "lab")
    ctx = lab_context(tmp_path, lab)
    profile = VnpuCoreProfile()
    inventory = await profile.discover(ctx)
    assert profile.readings() == {}
    first, second = lab.chips
    lab.set_info([attrs.evolve(first, aicore_percent=63, memory_used_mib=9000), second])
    assert await profile.health(ctx, inventory) == {"npu-0-0": True, "npu-1-0": True}
    assert profile.readings() == {
        "npu-0-0": DeviceReading(core_percent=63.0, memory_used_mib=9000, memory_total_mib=21525, temperature_c=37.0),
        "npu-1-0": DeviceReading(core_percent=0.0, memory_used_mib=1849, memory_total_mib=21525, temperature_c=40.0)}
    lab.set_info(None)
    with pytest.raises(NpuSmiError):
        await profile.health(ctx, inventory)
    assert profile.readings() == {}  # none rather than the last ones, read as current


@pytest.mark.anyio
async def test_a_scrape_while_the_health_check_runs_sees_the_last_readings(tmp_path):
    """Cleared at the start of each check, every series vanished from the scrapes that fell inside
    the npu-smi call (Prometheus then marks them stale: gaps in every graph)."""
    import os

    import anyio
    import attrs

    from ascend_dra.profiles.ascend.sim import labnode
    from ascend_dra.profiles.ascend.vnpucore.profile import VnpuCoreProfile
    from tests.unit.test_hami_monitoring_attributes import lab_context

    lab = labnode.build(tmp_path / "lab")
    ctx = lab_context(tmp_path, lab)
    gate, started = tmp_path / "gate", tmp_path / "started"
    os.mkfifo(gate)
    os.mkfifo(started)
    slow = tmp_path / "slow-npu-smi"  # says it started, then waits for the test before answering
    slow.write_text(f'#!/bin/sh\necho started > {started}\nread line < {gate}\nexec {lab.npu_smi} "$@"\n')
    slow.chmod(0o755)
    profile = VnpuCoreProfile()
    inventory = await profile.discover(ctx)
    await profile.health(ctx, inventory)
    before = dict(profile.readings())
    assert before["npu-0-0"].core_percent == 0.0
    lab.set_info([attrs.evolve(lab.chips[0], aicore_percent=80), lab.chips[1]])
    async with anyio.create_task_group() as tg:
        tg.start_soon(profile.health, attrs.evolve(ctx, npu_smi=str(slow)), inventory)
        assert await anyio.to_thread.run_sync(started.read_text) == "started\n"
        assert profile.readings() == before  # the call is under way
        await anyio.to_thread.run_sync(gate.write_text, "go\n")
    assert profile.readings()["npu-0-0"].core_percent == 80.0


def test_the_charts_dashboard_queries_only_metrics_the_daemon_serves():
    """The panels of deployments/helm/ascend-dra/dashboards/ascend-dra-usage.json (proved against a real
    Prometheus in tests/cluster/test_hami_monitoring.py) name only families of usage.METRICS."""
    import json
    import re
    from pathlib import Path

    from ascend_dra.node.usage import METRICS

    path = Path(__file__).resolve().parents[2] / "deployments/helm/ascend-dra/dashboards/ascend-dra-usage.json"
    panels = json.loads(path.read_text())["panels"]
    named = {m for p in panels for t in p["targets"] for m in re.findall(r"\b(?:hami|ascend_dra)_\w+", t["expr"])}
    assert named and named <= set(METRICS), named - set(METRICS)
    assert all("pod" in t["legendFormat"] for p in panels for t in p["targets"])
