"""Smoke tests of the real control plane: ResourceSlice -> DeviceClass -> ResourceClaimTemplate -> Pod,
allocated by the real kube-scheduler and bound to the fake Node, claims created by the real
kube-controller-manager. Also: consumable-capacity fields survive the apiserver, restart_apiserver()."""

from __future__ import annotations

import contextlib
import time
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any, TypeVar

import pytest
from kubernetes_asyncio import client, config
from kubernetes_asyncio.client.exceptions import ApiException

pytestmark = [pytest.mark.anyio, pytest.mark.cluster]

DRIVER = "smoke.example.com"
T = TypeVar("T")


async def wait_for(
    probe: Callable[[], Awaitable[T | None]], what: str, within: float = 30.0, interval: float = 0.2
) -> T:
    """Poll ``probe`` until it returns something truthy; fail after ``within`` seconds."""
    import anyio

    deadline = time.monotonic() + within
    last: Any = None
    while True:
        try:
            last = await probe()
        except ApiException as e:
            last = f"ApiException {e.status}: {e.reason}"
        else:
            if last:
                return last
        if time.monotonic() > deadline:
            pytest.fail(f"timed out after {within:.0f}s waiting for {what}; last: {last!r}")
        await anyio.sleep(interval)


@contextlib.asynccontextmanager
async def api_client(kubeconfig: Any) -> AsyncIterator[client.ApiClient]:
    cfg = client.Configuration()
    await config.load_kube_config(config_file=str(kubeconfig), client_configuration=cfg)
    async with client.ApiClient(cfg) as api:
        yield api


async def _ignore_404(coro: Awaitable[Any]) -> None:
    try:
        await coro
    except ApiException as e:
        if e.status != 404:
            raise


def _slice(name: str, node: str, pool: str) -> client.V1ResourceSlice:
    return client.V1ResourceSlice(
        metadata=client.V1ObjectMeta(name=name),
        spec=client.V1ResourceSliceSpec(
            driver=DRIVER,
            node_name=node,
            pool=client.V1ResourcePool(name=pool, generation=1, resource_slice_count=1),
            devices=[
                client.V1Device(
                    name="dev-0",
                    attributes={
                        "model": client.V1DeviceAttribute(string="smoke-x"),
                        "index": client.V1DeviceAttribute(int=0),
                    },
                    capacity={"memory": client.V1DeviceCapacity(value="16Gi")},
                ),
                client.V1Device(
                    name="shared-0",
                    allow_multiple_allocations=True,
                    attributes={
                        "model": client.V1DeviceAttribute(string="smoke-shared"),
                        "index": client.V1DeviceAttribute(int=1),
                    },
                    capacity={
                        "memory": client.V1DeviceCapacity(
                            value="32Gi",
                            request_policy=client.V1CapacityRequestPolicy(
                                default="1Gi",
                                valid_range=client.V1CapacityRequestPolicyRange(min="1Gi", max="32Gi", step="1Gi"),
                            ),
                        )
                    },
                ),
            ],
        ),
    )


def _claim_spec(device_class: str, model: str, memory: str | None = None) -> client.V1ResourceClaimSpec:
    return client.V1ResourceClaimSpec(
        devices=client.V1DeviceClaim(
            requests=[
                client.V1DeviceRequest(
                    name="npu",
                    exactly=client.V1ExactDeviceRequest(
                        device_class_name=device_class,
                        selectors=[
                            client.V1DeviceSelector(
                                cel=client.V1CELDeviceSelector(
                                    expression=f'device.attributes["{DRIVER}"].model == "{model}"'
                                )
                            )
                        ],
                        capacity=(client.V1CapacityRequirements(requests={"memory": memory}) if memory else None),
                    ),
                )
            ]
        )
    )


def _pod(name: str, pod_claim: client.V1PodResourceClaim) -> client.V1Pod:
    return client.V1Pod(
        metadata=client.V1ObjectMeta(name=name),
        spec=client.V1PodSpec(
            containers=[
                client.V1Container(
                    name="main",
                    image="registry.invalid/pause:none",  # never pulled: there is no kubelet
                    resources=client.V1ResourceRequirements(claims=[client.CoreV1ResourceClaim(name=pod_claim.name)]),
                )
            ],
            resource_claims=[pod_claim],
            termination_grace_period_seconds=0,
        ),
    )


@pytest.fixture
async def dra_env(control_plane: Any) -> AsyncIterator[dict[str, Any]]:
    """A fresh namespace, a ResourceSlice (2 devices) on the node and a DeviceClass for DRIVER."""
    sfx = uuid.uuid4().hex[:8]
    env = {
        "ns": f"smoke-{sfx}",
        "slice": f"smoke-{sfx}",
        "pool": f"smoke-pool-{sfx}",
        "class": f"smoke-{sfx}",
        "node": control_plane.node_name,
    }
    async with api_client(control_plane.kubeconfig) as api:
        core, res = client.CoreV1Api(api), client.ResourceV1Api(api)
        await core.create_namespace(client.V1Namespace(metadata=client.V1ObjectMeta(name=env["ns"])))
        try:
            await res.create_resource_slice(_slice(env["slice"], env["node"], env["pool"]))
            await res.create_device_class(
                client.V1DeviceClass(
                    metadata=client.V1ObjectMeta(name=env["class"]),
                    spec=client.V1DeviceClassSpec(
                        selectors=[
                            client.V1DeviceSelector(
                                cel=client.V1CELDeviceSelector(expression=f'device.driver == "{DRIVER}"')
                            )
                        ]
                    ),
                )
            )

            # Pods are admitted only once the serviceaccount controller made the namespace's "default" SA.
            async def sa() -> Any:
                return await core.read_namespaced_service_account("default", env["ns"])

            await wait_for(sa, f"ServiceAccount {env['ns']}/default")
            env["api"] = api
            yield env
        finally:
            # No kubelet: pods bound to the node only go away with grace period 0.
            pods = await core.list_namespaced_pod(env["ns"])
            for p in pods.items:
                await _ignore_404(core.delete_namespaced_pod(p.metadata.name, env["ns"], grace_period_seconds=0))
            await _ignore_404(res.delete_collection_namespaced_resource_claim(env["ns"]))
            await _ignore_404(res.delete_collection_namespaced_resource_claim_template(env["ns"]))
            await _ignore_404(res.delete_resource_slice(env["slice"]))
            await _ignore_404(res.delete_device_class(env["class"]))
            await _ignore_404(core.delete_namespace(env["ns"]))


async def test_claim_template_allocated_and_pod_bound(dra_env: dict[str, Any]) -> None:
    api, ns = dra_env["api"], dra_env["ns"]
    core, res = client.CoreV1Api(api), client.ResourceV1Api(api)

    await res.create_namespaced_resource_claim_template(
        ns,
        client.V1ResourceClaimTemplate(
            metadata=client.V1ObjectMeta(name="npu-template"),
            spec=client.V1ResourceClaimTemplateSpec(spec=_claim_spec(dra_env["class"], "smoke-x")),
        ),
    )
    await core.create_namespaced_pod(
        ns, _pod("smoke", client.V1PodResourceClaim(name="npu", resource_claim_template_name="npu-template"))
    )

    # kube-controller-manager (resourceclaim controller) creates the claim and records it in the pod.
    async def claim_name() -> str | None:
        pod = await core.read_namespaced_pod("smoke", ns)
        for st in (pod.status and pod.status.resource_claim_statuses) or []:
            if st.name == "npu" and st.resource_claim_name:
                return st.resource_claim_name
        return None

    name = await wait_for(claim_name, "the ResourceClaim generated from the template")

    # kube-scheduler allocates it and reserves it for the pod ...
    async def allocated() -> Any:
        claim = await res.read_namespaced_resource_claim(name, ns)
        if claim.status and claim.status.allocation and claim.status.reserved_for:
            return claim
        return None

    claim = await wait_for(allocated, f"allocation of ResourceClaim {name}")
    results = claim.status.allocation.devices.results
    assert [(r.request, r.driver, r.pool, r.device) for r in results] == [("npu", DRIVER, dra_env["pool"], "dev-0")]
    pod = await core.read_namespaced_pod("smoke", ns)
    assert [(r.resource, r.name, r.uid) for r in claim.status.reserved_for] == [("pods", "smoke", pod.metadata.uid)]
    assert claim.metadata.owner_references[0].uid == pod.metadata.uid

    # ... and binds the pod to our node.
    async def bound() -> str | None:
        p = await core.read_namespaced_pod("smoke", ns)
        return p.spec.node_name

    assert await wait_for(bound, "pod binding") == dra_env["node"]


async def test_consumable_capacity_round_trip_and_allocation(dra_env: dict[str, Any]) -> None:
    """DRAConsumableCapacity must be on in apiserver (fields kept) and scheduler (capacity consumed)."""
    api, ns = dra_env["api"], dra_env["ns"]
    core, res = client.CoreV1Api(api), client.ResourceV1Api(api)

    sl = await res.read_resource_slice(dra_env["slice"])
    shared = {d.name: d for d in sl.spec.devices}["shared-0"]
    assert shared.allow_multiple_allocations is True
    policy = shared.capacity["memory"].request_policy
    assert policy is not None, "requestPolicy dropped: DRAConsumableCapacity is off in kube-apiserver"
    assert (policy.default, policy.valid_range.min, policy.valid_range.max, policy.valid_range.step) == (
        "1Gi",
        "1Gi",
        "32Gi",
        "1Gi",
    )

    # Two claims share the multi-allocatable device, each consuming part of its memory.
    for i in range(2):
        await res.create_namespaced_resource_claim(
            ns,
            client.ResourceV1ResourceClaim(
                metadata=client.V1ObjectMeta(name=f"shared-{i}"),
                spec=_claim_spec(dra_env["class"], "smoke-shared", memory="4Gi"),
            ),
        )
        await core.create_namespaced_pod(
            ns, _pod(f"shared-{i}", client.V1PodResourceClaim(name="npu", resource_claim_name=f"shared-{i}"))
        )

    for i in range(2):

        async def allocated(i: int = i) -> Any:
            claim = await res.read_namespaced_resource_claim(f"shared-{i}", ns)
            return claim if claim.status and claim.status.allocation and claim.status.reserved_for else None

        claim = await wait_for(allocated, f"allocation of ResourceClaim shared-{i}")
        (r,) = claim.status.allocation.devices.results
        assert (r.driver, r.pool, r.device) == (DRIVER, dra_env["pool"], "shared-0")
        assert r.consumed_capacity == {"memory": "4Gi"}
        assert r.share_id, "shareID missing: consumable capacity not active in kube-scheduler"

        async def bound(i: int = i) -> str | None:
            return (await core.read_namespaced_pod(f"shared-{i}", ns)).spec.node_name

        assert await wait_for(bound, f"binding of pod shared-{i}") == dra_env["node"]


async def test_restart_apiserver(control_plane: Any) -> None:
    async with api_client(control_plane.kubeconfig) as api:
        core = client.CoreV1Api(api)
        before = await core.read_node(control_plane.node_name)

        t0 = time.monotonic()
        control_plane.restart_apiserver()  # blocking on purpose: nothing else runs meanwhile
        elapsed = time.monotonic() - t0
        print(f"restart_apiserver took {elapsed:.1f}s")

        # The same client (same kubeconfig, port, CA, token) works again; state survived in etcd.
        async def node() -> Any:
            return await core.read_node(control_plane.node_name)

        after = await wait_for(node, "the API after restart", within=30)
        assert after.metadata.uid == before.metadata.uid
        ns = await core.list_namespace()
        assert "default" in {n.metadata.name for n in ns.items}
