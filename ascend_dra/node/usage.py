"""Usage on ``/metrics``: what each device of the node is given, to which pod, and what it reports.

Built on the event loop when ``/metrics`` is scraped (:func:`usage_samples`, from the published
inventories, the prepared claims of the checkpoint, the health feed and the profiles' readings),
so it is never older than the scrape and costs nothing between scrapes. Names and labels are
HAMi's where HAMi exports the same thing, so dashboards written for HAMi keep working; each
series carries, beside HAMi's labels, ``device`` (our device name), and the per-claim ones
``claim`` too. Sources of HAMi's names (Project-HAMi):

* ``cmd/scheduler/metrics.go`` of HAMi (what the scheduler booked): per chip
  ``hami_gpu_memory_limit_bytes``, ``hami_gpu_core_limit_ratio``, ``hami_gpu_shared_count`` and
  ``hami_gpu_core_allocated_ratio`` with labels ``node, device_uuid, device_index, device_type``;
  ``hami_gpu_memory_allocated_bytes`` with ``device_cores`` besides; per container
  ``hami_vgpu_memory_allocated_bytes`` and ``hami_vgpu_core_allocated_ratio`` with
  ``namespace, node, pod, container_index, device_uuid``. Memory in bytes, cores in percent of a chip;
* ``internal/monitor/collector.go`` of ascend-device-plugin (what a chip reports, DCMI there, npu-smi
  here): ``hami_host_gpu_memory_used_bytes`` and ``hami_host_gpu_utilization_ratio`` (AI core
  percent, 0..100) with ``device_index, device_uuid, device_type`` (we add ``node``, as HAMi's
  vGPUmonitor does for the same names); per container ``hami_container_device_utilization_ratio``
  (its chip's AI core percent) with ``namespace, pod, container, vdevice_index, device_uuid``.

HAMi has nothing for these, so they are ours: ``ascend_dra_device_temperature_celsius`` and
``ascend_dra_device_power_watts`` per chip, ``ascend_dra_device_health`` per device (1 healthy, 0
unhealthy, -1 unknown) and ``ascend_dra_claim_device_info`` (1 per prepared claim device and pod,
for joining a chip's series to the pods on it, docs/monitoring.md).

A *chip* is the set of published devices with one ``uuid`` attribute (else one ``index``, else
one name): a whole chip, a HAMivNPUCore chip, or a hard-vNPU chip with its template vNPUs; its
limits are those of its device with the most memory. ``device_uuid`` is that ``uuid`` (else the
device name), ``device_index`` the ``index`` attribute (the logic ID), ``device_type`` HAMi's
commonWord for the chip (``Ascend310P``, ``Ascend910B3``; the webhook's table,
webhook/hamichips.py) or else its ``productName``. A claim's device counts what it consumed
(``consumedCapacity``) or else the device's own ``memory`` and ``cores``; ``adminAccess`` results
count nothing. Container labels are empty: a claim's Prepare does not say which container uses it.

The pods come from the claims' ``status.reservedFor``: :class:`ConsumerLog` notes them each time a
claim is read for a Prepare (:class:`LoggingClaimSource`), and after a restart reads the claims it
has not seen again, a few per health interval (:meth:`ConsumerLog.refresh`).
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import logging
from collections.abc import Callable, Iterator, Mapping, Sequence
from typing import Any

import anyio
from prometheus_client.core import GaugeMetricFamily

from ascend_dra.durable.checkpoint import PREPARE_COMPLETED, ClaimRecord
from ascend_dra.hami.chips import CHIP_SELECTORS, COMMON_WORDS
from ascend_dra.model import ClaimAllocation, Device, DeviceReading, Inventory, parse_quantity
from ascend_dra.state.claims import ClaimSource

__all__ = ("METRICS", "ConsumerLog", "LoggingClaimSource", "LoopSamples", "Samples", "UsageCollector",
           "refresh_consumers", "usage_samples")

log = logging.getLogger(__name__)

#: Metric name -> [(label values, value)].
Samples = Mapping[str, Sequence[tuple[tuple[str, ...], float]]]

MIB = 1 << 20
_CHIP = ("node", "device_uuid", "device_index", "device_type", "device")
_BOOKED = ("namespace", "node", "pod", "container_index", "device_uuid", "claim", "device")
_CONTAINER = ("namespace", "pod", "container", "vdevice_index", "device_uuid", "node", "claim", "device")
_INFO = ("namespace", "pod", "claim", "claim_uid", "node", "device", "device_uuid", "device_index", "request",
         "share_id")

#: Name -> (help, label names), in exposition order.
METRICS: Mapping[str, tuple[str, tuple[str, ...]]] = {
    "hami_gpu_memory_limit_bytes": ("memory of the chip, bytes (HAMi's name)", _CHIP),
    "hami_gpu_core_limit_ratio": ("compute of the chip, percent (100 = whole; HAMi's name)", _CHIP),
    "hami_gpu_memory_allocated_bytes": ("memory of the chip given to prepared claims, bytes (HAMi's name)",
                                        ("node", "device_uuid", "device_index", "device_cores", "device_type",
                                         "device")),
    "hami_gpu_core_allocated_ratio": ("compute of the chip given to prepared claims, percent (HAMi's name)", _CHIP),
    "hami_gpu_shared_count": ("prepared claim devices on the chip: shares and vNPUs (HAMi's name)", _CHIP),
    "hami_host_gpu_memory_used_bytes": ("memory in use on the chip as it reports it, bytes (HAMi's name)", _CHIP),
    "hami_host_gpu_utilization_ratio": ("AI core use of the chip as it reports it, percent (HAMi's name)", _CHIP),
    "ascend_dra_device_temperature_celsius": ("temperature of the chip as it reports it", _CHIP),
    "ascend_dra_device_power_watts": ("power of the chip as it reports it", _CHIP),
    "ascend_dra_device_health": ("1 healthy, 0 unhealthy, -1 unknown (as reported to the kubelet)", _CHIP),
    "hami_vgpu_memory_allocated_bytes": ("memory a claim device was given, bytes, per pod (HAMi's name)", _BOOKED),
    "hami_vgpu_core_allocated_ratio": ("compute a claim device was given, percent, per pod (HAMi's name)", _BOOKED),
    "hami_container_device_utilization_ratio": ("AI core use of the chip of a claim device, percent, per pod "
                                                "(HAMi's name)", _CONTAINER),
    "ascend_dra_claim_device_info": ("1 per prepared claim device and pod: join a chip's series to its pods",
                                     _INFO),
}

#: Claims :meth:`ConsumerLog.refresh` reads at most per call.
REFRESH_BATCH = 16


class ConsumerLog:
    """Claim uid -> the names of the pods it is reserved for (``status.reservedFor``), as last read."""

    def __init__(self) -> None:
        self.pods: dict[str, tuple[str, ...]] = {}

    def note(self, claim: ClaimAllocation) -> None:
        """Remember ``claim``'s pods (called with every claim read for a Prepare)."""
        self.pods[claim.uid] = claim.reserved_pods

    async def refresh(self, records: Mapping[str, ClaimRecord], source: ClaimSource) -> None:
        """Forget claims no longer prepared; read up to :data:`REFRESH_BATCH` prepared ones not seen
        since the daemon started (their pods unknown until then). A claim that cannot be read is
        tried again at the next call; the error is logged at DEBUG (the metric's ``pod`` is empty)."""
        for uid in set(self.pods) - set(records):
            del self.pods[uid]
        unseen = [r for uid, r in records.items() if uid not in self.pods and r.state == PREPARE_COMPLETED]
        for record in unseen[:REFRESH_BATCH]:
            try:
                self.note(await source.get(record.namespace, record.name, record.uid, uid_recorded=True))
            except Exception as exc:
                log.debug("reading a prepared claim's pods failed", extra={
                    "claim_uid": record.uid, "claim": f"{record.namespace}/{record.name}", "error": str(exc)})


class LoggingClaimSource:
    """A claim source that tells a :class:`ConsumerLog` every claim it reads (otherwise ``inner``)."""

    def __init__(self, inner: ClaimSource, consumers: ConsumerLog) -> None:
        self.inner = inner
        self.consumers = consumers

    async def get(self, namespace: str, name: str, uid: str, *, uid_recorded: bool = False) -> ClaimAllocation:
        """``inner.get``; the claim's pods are noted."""
        claim = await self.inner.get(namespace, name, uid, uid_recorded=uid_recorded)
        self.consumers.note(claim)
        return claim

    async def gone(self, namespace: str, name: str, uid: str, pool: str) -> str | None:
        """``inner.gone``."""
        return await self.inner.gone(namespace, name, uid, pool)

    def __getattr__(self, name: str) -> Any:  # aclose and whatever else the inner source has
        return getattr(self.inner, name)


def device_type(device: Device) -> str:
    """HAMi's commonWord for the chip of ``device`` (the first of :data:`COMMON_WORDS` whose selector
    matches its attributes), else its ``productName``, else ``""``."""
    for word in COMMON_WORDS:
        attribute, value = CHIP_SELECTORS[word]
        if device.attributes.get(attribute) == value:
            return word
    product = device.attributes.get("productName")
    return product if isinstance(product, str) else ""


def _amount(device: Device | None, consumed: Mapping[str, str], name: str) -> float | None:
    """What an allocation of ``device`` takes of capacity ``name``: its consumed share, else all of it."""
    quantity = consumed.get(name)
    if quantity is None and device is not None and name in device.capacities:
        quantity = device.capacities[name].value
    try:
        return None if quantity is None else float(parse_quantity(quantity))
    except ValueError:
        return None


def _chip_key(device: Device) -> str:
    for attribute in ("uuid", "index"):
        value = device.attributes.get(attribute)
        if value is not None and not isinstance(value, bool):
            return f"{attribute}={value}"
    return f"name={device.name}"


def _memory(device: Device) -> float:
    return _amount(device, {}, "memory") or 0.0


def usage_samples(node: str, inventories: Mapping[str, Inventory], records: Mapping[str, ClaimRecord],
                  health: Mapping[str, bool | None], readings: Mapping[str, DeviceReading],
                  pods: Mapping[str, Sequence[str]]) -> dict[str, list[tuple[tuple[str, ...], float]]]:
    """The samples of :data:`METRICS` (see the module docstring). Pure; O(devices + claim devices).

    :param inventories: profile -> what it publishes.
    :param records: claim uid -> checkpoint record (only ``PrepareCompleted`` ones count).
    :param health: device name -> True / False / None (the kubelet's health feed).
    :param readings: device name -> what it reported (the profiles' ``readings()``).
    :param pods: claim uid -> pod names (:class:`ConsumerLog`); a claim missing gets ``pod=""``.
    """
    out: dict[str, list[tuple[tuple[str, ...], float]]] = {name: [] for name in METRICS}
    devices = {d.name: d for inventory in inventories.values() for d in inventory.devices}
    chips: dict[str, list[Device]] = {}
    for device in sorted(devices.values(), key=lambda d: d.name):
        chips.setdefault(_chip_key(device), []).append(device)
    chip_of: dict[str, Device] = {}  # device name -> its chip's representative device
    for members in chips.values():
        head = max(members, key=_memory)  # the first with the most memory: the whole chip
        chip_of.update((d.name, head) for d in members)

    def labels(head: Device, name: str | None = None) -> tuple[str, str, str, str, str]:
        uuid, index = head.attributes.get("uuid"), head.attributes.get("index")
        return (node, str(uuid) if uuid is not None else head.name, "" if index is None else str(index),
                device_type(head), name or head.name)

    booked: dict[str, list[float]] = {}  # head name -> [memory bytes, core percent, count]
    for record in records.values():
        if record.state != PREPARE_COMPLETED:
            continue
        consumers = tuple(pods.get(record.uid) or ("",))
        for vindex, held in enumerate(record.devices):
            if held.admin_access:
                continue
            device = devices.get(held.device)
            head = chip_of.get(held.device)
            memory = _amount(device, held.consumed_capacity, "memory")
            cores = _amount(device, held.consumed_capacity, "cores")
            if head is not None:
                total = booked.setdefault(head.name, [0.0, 0.0, 0.0])
                total[0] += memory or 0.0
                total[1] += cores or 0.0
                total[2] += 1
            if head is None:  # no longer published (a rediscovery lost it): named by itself
                uuid, index, reading = held.device, "", None
            else:
                _, uuid, index, _, _ = labels(head, held.device)
                reading = readings.get(head.name)
            for pod in consumers:
                where = (record.namespace, node, pod, "", uuid, record.name, held.device)
                if memory is not None:
                    out["hami_vgpu_memory_allocated_bytes"].append((where, memory))
                if cores is not None:
                    out["hami_vgpu_core_allocated_ratio"].append((where, cores))
                if reading is not None and reading.core_percent is not None:
                    out["hami_container_device_utilization_ratio"].append(
                        ((record.namespace, pod, "", str(vindex), uuid, node, record.name, held.device),
                         reading.core_percent))
                out["ascend_dra_claim_device_info"].append(((record.namespace, pod, record.name, record.uid, node,
                                                             held.device, uuid, index, held.request,
                                                             held.share_id or ""), 1.0))
    for members in chips.values():
        head = chip_of[members[0].name]
        chip = labels(head)
        memory, cores = _amount(head, {}, "memory"), _amount(head, {}, "cores")
        used_memory, used_cores, count = booked.get(head.name, [0.0, 0.0, 0.0])
        if memory is not None:
            out["hami_gpu_memory_limit_bytes"].append((chip, memory))
            out["hami_gpu_memory_allocated_bytes"].append(
                ((*chip[:3], f"{cores:g}" if cores is not None else "", *chip[3:]), used_memory))
        if cores is not None:
            out["hami_gpu_core_limit_ratio"].append((chip, cores))
            out["hami_gpu_core_allocated_ratio"].append((chip, used_cores))
        out["hami_gpu_shared_count"].append((chip, count))
        reading = readings.get(head.name)
        if reading is not None:
            for name, value in (("hami_host_gpu_memory_used_bytes",
                                 None if reading.memory_used_mib is None else reading.memory_used_mib * MIB),
                                ("hami_host_gpu_utilization_ratio", reading.core_percent),
                                ("ascend_dra_device_temperature_celsius", reading.temperature_c),
                                ("ascend_dra_device_power_watts", reading.power_w)):
                if value is not None:
                    out[name].append((chip, float(value)))
        for device in members:
            state = health.get(device.name, True)  # the feed's default: healthy
            value = 1.0 if state is True else 0.0 if state is False else -1.0
            out["ascend_dra_device_health"].append((labels(head, device.name), value))
    return out


class UsageCollector:
    """A prometheus-client collector of :data:`METRICS` over ``samples``, called at every scrape
    from the HTTP server's thread (the callable must be safe there)."""

    def __init__(self, samples: Callable[[], Samples]) -> None:
        self.samples = samples

    def describe(self) -> Iterator[GaugeMetricFamily]:
        """The families without samples (so registering does not call :attr:`samples`)."""
        for name, (text, names) in METRICS.items():
            yield GaugeMetricFamily(name, text, labels=names)

    def collect(self) -> Iterator[GaugeMetricFamily]:
        """Every family of :data:`METRICS`, with the samples :attr:`samples` returns now."""
        samples = self.samples()
        for name, (text, names) in METRICS.items():
            family = GaugeMetricFamily(name, text, labels=names)
            for values, value in samples.get(name, ()):
                family.add_metric(list(values), value)
            yield family


async def refresh_consumers(consumers: ConsumerLog, records: Mapping[str, ClaimRecord], source: ClaimSource,
                            timeout_s: float) -> None:
    """:meth:`ConsumerLog.refresh` within ``timeout_s`` seconds (an API server that hangs must not
    hold the health loop)."""
    with anyio.move_on_after(timeout_s):
        await consumers.refresh(records, source)


#: Seconds a scrape waits, at most, for the event loop to build the samples (then it serves the last ones).
LOOP_WAIT_S = 2.0


class LoopSamples:
    """Builds the samples on the event loop for a scrape on another thread (:meth:`__call__`).

    :param loop: the daemon's event loop.
    :param build: returns the samples; called on ``loop`` (it reads the daemon's state).
    """

    def __init__(self, loop: asyncio.AbstractEventLoop, build: Callable[[], Samples]) -> None:
        self.loop = loop
        self.build = build
        self.last: Samples = {}

    def __call__(self) -> Samples:
        """The samples as the loop builds them now; the last ones, with a WARNING, if it does not
        within :data:`LOOP_WAIT_S` (a loop that is stopped or busy) or the build raises."""
        done: concurrent.futures.Future[Samples] = concurrent.futures.Future()

        def build() -> None:
            if done.set_running_or_notify_cancel():
                try:
                    done.set_result(self.build())
                except BaseException as exc:  # handed to the scrape's thread
                    done.set_exception(exc)

        try:
            self.loop.call_soon_threadsafe(build)
            self.last = done.result(timeout=LOOP_WAIT_S)
        except Exception as exc:  # a closed loop, a busy one, or a bug in build: never fail the scrape
            done.cancel()
            log.warning("usage metrics not built; serving the last ones",
                        extra={"error": f"{type(exc).__name__}: {exc}"})
        return self.last
