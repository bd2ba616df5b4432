"""ClusterLoader2's DRA test shape (kubernetes/perf-tests, clusterloader2/testing/dra) for each of the
bed's node kinds, and the load generator that plays it.

CL2's test, with its README's settings (one namespace; ``CL2_LOAD_TEST_THROUGHPUT`` 10, or 20 for a
fast fill; ``CL2_STEADY_STATE_QPS`` 5): a ResourceClaimTemplate for one device; the cluster filled
to 90 % of its devices with long-running Jobs of one pod each, created at the fill rate; then the
rest of the devices churned by short Jobs (parallelism 1, 10 completions, each pod running 30 s),
the Jobs created at 5 a second. Per kind, one pod's claim here is:

* ``whole``: one whole chip (ours: DeviceClass ``fake.ascend.project-hami.io``; Go: one GPU);
* ``hami``: half a 310P3 chip in HAMi's own syntax, converted by our webhook (``huawei.com/Ascend310P: 1``,
  ``-memory: 8192`` MiB, ``-core: 50`` percent, so two pods a chip); the Go driver's pods ask
  its consumable capacity for the same half (40Gi of its 80Gi and 50 of its 100 compute) with a
  template;
* ``hard``: a ``vir04`` hard vNPU of a 310P3 (4 of its 8 AI cores, two a chip; the chip's shared
  counters); the Go driver's pods one of its two partitions of a GPU (``--gpu-partitions 2``).

So a node has 8 slots for ``whole`` and 16 for the others, and "90 %" is of the slots.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Sequence
from typing import Any

import attrs

from tests.scale.api import Api, ApiError
from tests.scale.kubelet import RUN_SECONDS

__all__ = ("LABEL_PHASE", "LABEL_RUN", "Load", "create_at_rate", "job", "pod", "slots_per_node", "template")

LABEL_RUN = "scale.ascend-dra/run"
LABEL_PHASE = "scale.ascend-dra/phase"
RESOURCE = "/apis/resource.k8s.io/v1"
OUR_DRIVER = "ascend.project-hami.io"
GO_DRIVER = "gpu.example.com"


def slots_per_node(shape: str, chips: int = 8) -> int:
    """Pods of the shape's claim that fill one node."""
    return chips if shape == "whole" else 2 * chips


def template(shape: str, driver: str) -> dict[str, Any] | None:
    """The ResourceClaimTemplate ``one`` a pod of ``shape`` uses, or None (HAMi pods: the webhook makes it)."""
    if driver == "ours" and shape == "hami":
        return None
    if driver == "ours":
        exactly: dict[str, Any] = {"deviceClassName": "fake.ascend.project-hami.io"} if shape == "whole" else {
            "deviceClassName": "ascend310p-vnpu.ascend.project-hami.io",
            "selectors": [{"cel": {"expression": f'device.attributes["{OUR_DRIVER}"].vnpuTemplate == "vir04"'}}]}
    elif shape == "whole":
        exactly = {"deviceClassName": GO_DRIVER}
    elif shape == "hami":
        exactly = {"deviceClassName": GO_DRIVER, "capacity": {"requests": {"memory": "40Gi", "compute": "50"}}}
    else:
        exactly = {"deviceClassName": GO_DRIVER, "selectors": [
            {"cel": {"expression": f'!device.attributes["{GO_DRIVER}"].?full.orValue(false)'}}]}
    return {"apiVersion": "resource.k8s.io/v1", "kind": "ResourceClaimTemplate", "metadata": {"name": "one"},
            "spec": {"spec": {"devices": {"requests": [{"name": "dev", "exactly": exactly}]}}}}


def pod(shape: str, driver: str, labels: dict[str, str], run_seconds: float | None = None,
        name: str | None = None) -> dict[str, Any]:
    """A pod (or a Job's pod template, without ``name``) of ``shape``; it ends after ``run_seconds``."""
    container: dict[str, Any] = {"name": "c", "image": "registry.k8s.io/pause:3.10"}
    spec: dict[str, Any] = {"containers": [container], "restartPolicy": "Never", "terminationGracePeriodSeconds": 30}
    if driver == "ours" and shape == "hami":
        container["resources"] = {"limits": {"huawei.com/Ascend310P": "1", "huawei.com/Ascend310P-memory": "8192",
                                             "huawei.com/Ascend310P-core": "50"}}
    else:
        container["resources"] = {"claims": [{"name": "dev"}]}
        spec["resourceClaims"] = [{"name": "dev", "resourceClaimTemplateName": "one"}]
    meta: dict[str, Any] = {"labels": dict(labels)}
    if run_seconds is not None:
        meta["annotations"] = {RUN_SECONDS: f"{run_seconds:g}"}
    if name is not None:
        meta["name"] = name
    return {"apiVersion": "v1", "kind": "Pod", "metadata": meta, "spec": spec}


def job(name: str, shape: str, driver: str, labels: dict[str, str], *, completions: int = 1,
        run_seconds: float | None = None) -> dict[str, Any]:
    """A Job as CL2's: parallelism 1, Indexed, ``completions`` pods one after the other."""
    template_pod = pod(shape, driver, labels, run_seconds)
    return {"apiVersion": "batch/v1", "kind": "Job", "metadata": {"name": name, "labels": dict(labels)},
            "spec": {"parallelism": 1, "completions": completions, "completionMode": "Indexed", "backoffLimit": 6,
                     "template": {"metadata": template_pod["metadata"], "spec": template_pod["spec"]}}}


@attrs.define
class Load:
    """What one paced creation did: each request's latency (seconds) and how late the last began."""

    latencies: list[float] = attrs.Factory(list)
    refused: list[str] = attrs.Factory(list)  # the refusals' messages (only with ``tolerate``)
    behind_s: float = 0.0
    began: float = 0.0
    ended: float = 0.0


async def create_at_rate(api: Api, path: str, bodies: Sequence[dict[str, Any]], rate: float | None,
                         concurrency: int = 64, *, tolerate: bool = False) -> Load:
    """POST each body to ``path``, the i-th at ``i / rate`` seconds from now (CL2's qpsLoad); with
    ``rate`` None, all at once (at most ``concurrency`` in flight).

    :param tolerate: a refused create is recorded in ``Load.refused`` (an outcome to report: the
        webhook denying pods of a burst) instead of raised.
    :raises ApiError: a create was refused (without ``tolerate``).
    """
    load = Load(began=time.time())
    start = time.monotonic()
    gate = asyncio.Semaphore(concurrency)

    async def one(i: int, body: dict[str, Any]) -> None:
        if rate:
            await asyncio.sleep(max(0.0, start + i / rate - time.monotonic()))
        async with gate:
            if rate:
                load.behind_s = max(load.behind_s, time.monotonic() - (start + i / rate))
            began = time.perf_counter()
            try:
                await api.call("POST", path, body)
            except ApiError as exc:
                if not tolerate:
                    raise
                load.refused.append(str(exc))
                return
            load.latencies.append(time.perf_counter() - began)

    async with asyncio.TaskGroup() as tg:
        for i, body in enumerate(bodies):
            tg.create_task(one(i, body))
    load.ended = time.time()
    return load
