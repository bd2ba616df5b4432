"""The scale bed, small (part of ``make test``; ``make scale`` runs it large): five nodes of each kind,
each served by its own daemon in cluster mode, a kubelet stand-in per node, a few pods.

What is checked is what the bed's figures rest on, not their values: every pod runs; the stand-in
of the pod's node prepared exactly the pod's claims (namespace, name and UID as the API server has
them) on the daemon of the node the scheduler chose, and the daemon made what the claim needs on
that node (its CDI spec; a hard vNPU in the simulator); a job's pod is unprepared before it is
reported Succeeded; deleting the pods unprepares every claim, and nothing is left on any node. The
hami and hard nodes carry the driver's libdcmi.so (the test one): their daemons found their chips
through DCMI, and the hard ones made their vNPUs through it.
"""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from ascend_dra.durable.journal import load_state
from ascend_dra.profiles.ascend.sim import npusmi_sim
from tests.cluster.controlplane import ADMIN_USER
from tests.scale.api import Api
from tests.scale.bed import KUBELET_USER, Bed
from tests.scale.fleet import OUR_DRIVER, SHAPES, Fleet, NodeHost
from tests.scale.kubelet import StandIns
from tests.scale.observe import Observer
from tests.scale.workloads import LABEL_RUN, job, pod, template

pytestmark = pytest.mark.cluster

NODES = 5
RESOURCE = "/apis/resource.k8s.io/v1"


@pytest.fixture(scope="module")
def bed() -> Iterator[Bed]:
    bed = Bed(NODES).start()
    try:
        yield bed
    finally:
        bed.stop()


def _api(bed: Bed, user: str, agent: str) -> Api:
    return Api(bed.cp.server, bed.cp.user_tokens[user], str(bed.cp.ca_file), user_agent=agent)


def _claim_specs(host: NodeHost) -> set[str]:
    """The claim UIDs that have a CDI spec on the node (files ``k8s.<driver>-<class>_<uid>.yaml``)."""
    return {p.name.rsplit("_", 1)[1].removesuffix(".yaml") for p in host.cdi.glob(f"k8s.{OUR_DRIVER}-*_*.yaml")
            if not p.name.endswith("_common.yaml")}


def _vnpus(host: NodeHost) -> list[dict[str, Any]]:
    """The vNPUs the node's npu-smi simulator holds (none on the other kinds)."""
    return npusmi_sim.Sim(host.root / "sim").load() if (host.root / "sim").is_dir() else []


async def _scenario(bed: Bed, shape: str, hook: Any) -> None:
    hosts = {h.name: h for h in bed.hosts(shape)}
    fleet = Fleet(list(hosts.values()), "ours", bed.driver_kubeconfig)
    run = uuid.uuid4().hex[:8]
    labels = {LABEL_RUN: run}
    async with _api(bed, ADMIN_USER, "smoke") as api, _api(bed, KUBELET_USER, "smoke-kubelet") as kubelets:
        observer = Observer(api, f"{LABEL_RUN}={run}")
        standins = StandIns(bed.names, lambda n: hosts[n].registry, OUR_DRIVER, kubelets)
        tasks = [asyncio.create_task(observer.run())]
        try:
            await asyncio.to_thread(fleet.start)
            await asyncio.to_thread(bed.wait_published, OUR_DRIVER)
            tasks.append(asyncio.create_task(standins.run()))
            await standins.wait_registered(120)
            assert all("v1.DRAPlugin" in s for s in standins.record.services.values())
            ns = f"smoke-{shape}-{run}"
            if hook is not None:
                await asyncio.to_thread(hook.namespace, ns)
            else:
                await api.call("POST", "/api/v1/namespaces", {"metadata": {"name": ns}})
            body = template(shape, "ours")
            if body is not None:
                await api.call("POST", f"{RESOURCE}/namespaces/{ns}/resourceclaimtemplates", body)
            for i in range(6):
                await api.call("POST", f"/api/v1/namespaces/{ns}/pods", pod(shape, "ours", labels, name=f"p{i}"))
            await api.call("POST", f"/apis/batch/v1/namespaces/{ns}/jobs",
                           job("short", shape, "ours", labels, completions=2, run_seconds=1))
            await observer.wait(lambda: sum(1 for t in observer.pods.values() if t.running) >= 6
                                and sum(1 for t in observer.pods.values() if t.done) >= 2, 240, "pods running")
            assert not standins.record.errors, standins.record.errors

            pods = (await api.call("GET", f"/api/v1/namespaces/{ns}/pods"))["items"]
            claims = {c["metadata"]["name"]: c for c in
                      (await api.call("GET", f"{RESOURCE}/namespaces/{ns}/resourceclaims"))["items"]}
            prepared = {(c.node, key) for c in standins.record.of("prepare") if not c.error for key in c.claims}
            running = [p for p in pods if p["status"]["phase"] == "Running"]
            assert len(running) == 6, [(p["metadata"]["name"], p["status"].get("phase")) for p in pods]
            held: dict[str, str] = {}  # claim uid -> node
            for p in running:
                node = p["spec"]["nodeName"]
                [status] = p["status"]["resourceClaimStatuses"]
                claim = claims[status["resourceClaimName"]]
                uid = claim["metadata"]["uid"]
                [result] = claim["status"]["allocation"]["devices"]["results"]
                assert result["pool"] == node and result["driver"] == OUR_DRIVER
                assert (node, (ns, claim["metadata"]["name"], uid)) in prepared
                assert uid in _claim_specs(hosts[node])
                if shape == "hami":  # the webhook's conversion, allocated as a share of one chip
                    assert result["consumedCapacity"]["cores"] == "50"
                    assert result["consumedCapacity"]["memory"] == "8Gi"
                held[uid] = node
            if shape == "hard":
                vnpus = {name: _vnpus(h) for name, h in hosts.items()}
                records = {name: load_state(h.root / "plugins" / OUR_DRIVER).raw for name, h in hosts.items()}
                assert sum(len(v) for v in vnpus.values()) == 6, (vnpus, records, held)
                # Made through DCMI (each node carries libdcmi.so, as with the Ascend driver), not npu-smi.
                assert not bed.npusmi_mutations(), bed.npusmi_mutations()
            if shape in ("hami", "hard"):  # every node's daemon found its chips through DCMI
                no_dcmi = [h.name for h in hosts.values() if "discovery tier used tier=dcmi" not in fleet.log(h)]
                assert all(h.dcmi for h in hosts.values()) and not no_dcmi, no_dcmi
            # The job's pods: unprepared before they were reported Succeeded.
            unprepared = {key[2]: c.at for c in standins.record.of("unprepare") if not c.error for key in c.claims}
            done = [p for p in pods if p["status"]["phase"] == "Succeeded"]
            assert len(done) == 2
            for p in done:
                [status] = p["status"]["resourceClaimStatuses"]
                claim_name = status["resourceClaimName"]
                uids = [k[2] for c in standins.record.of("prepare") for k in c.claims if k[1] == claim_name]
                assert uids and uids[0] in unprepared

            await api.call("DELETE", f"/api/v1/namespaces/{ns}")
            await observer.wait(lambda: all(t.deleted for t in observer.pods.values()), 240, "pods deleted")
            unprepared = {(c.node, key[2]) for c in standins.record.of("unprepare") if not c.error for key in c.claims}
            assert {(node, uid) for uid, node in held.items()} <= unprepared
            for host in hosts.values():
                assert not _claim_specs(host), host.name
                assert not _vnpus(host), host.name
            await asyncio.to_thread(fleet.stop)
            for host in hosts.values():  # the daemons' durable records: no claim left
                assert not load_state(host.root / "plugins" / OUR_DRIVER).raw, host.name
        finally:
            for task in tasks:
                task.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)
            await asyncio.to_thread(fleet.stop)
            await asyncio.to_thread(bed.delete_slices, OUR_DRIVER)


@pytest.mark.anyio
@pytest.mark.parametrize("shape", SHAPES)
async def test_pods_run_on_their_prepared_claims_and_are_unprepared_after(bed: Bed, shape: str, tmp_path: Path):
    if shape != "hami":
        await _scenario(bed, shape, None)
        return
    from tests.cluster.webhook_process import installed_hook

    with installed_hook(bed.cp, tmp_path, "template", profiles="HAMivNPUCore,npu-310P") as hook:
        await _scenario(bed, shape, hook)
