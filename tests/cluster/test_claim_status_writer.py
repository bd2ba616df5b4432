"""The claim-status writer (claimstatus.py) against the real API server: what it sends, and what stays.

A :class:`Recording` client forwards every call to the real API server and notes its method, so the
tests see how many requests a status costs; the writer is driven directly with the claims a real
scheduler allocated from the daemon's published slices.
"""

from __future__ import annotations

import contextlib
import itertools
import random
import time
import uuid
from collections.abc import AsyncIterator

import anyio
import pytest

from ascend_dra.cluster.apiclient import KubeApi, open_api
from ascend_dra.cluster.claimstatus import ClaimStatusWriter
from ascend_dra.cluster.statusentries import PreparedClaim
from ascend_dra.model import PreparedDevice
from tests.claimfiles import claim_object, create_in_api
from tests.cluster.test_k8s_versions import claim_and_pod, claim_of, delete_claim_and_pod, our_status
from tests.cluster.test_publish import RES, apply_examples, ok, our_slices, wait_until
from tests.integration.daemon import DRIVER

pytestmark = [pytest.mark.cluster, pytest.mark.anyio]


class Recording(KubeApi):
    """The real client; ``calls`` lists ``(method, path)`` of every request it forwarded."""

    def __init__(self, client) -> None:
        super().__init__(client)
        self.calls: list[tuple[str, str]] = []
        self.sent_at: list[float] = []  # time.monotonic() of each request

    async def call(self, method, path, **kwargs):
        self.calls.append((method, path))
        self.sent_at.append(time.monotonic())
        return await super().call(method, path, **kwargs)


def allocated_claims(cp, start_daemon, count: int, creator: str = "kubectl") -> list[dict]:
    start_daemon(fake_devices=count)
    return claims_allocated(cp, count, creator)


def claims_allocated(cp, count: int, creator: str = "kubectl") -> list[dict]:
    """``count`` claims, each with a pod, allocated from the running daemon's slices and reserved."""
    wait_until(lambda: our_slices(cp, cp.node_name), "published")
    apply_examples(cp)
    names = [claim_and_pod(cp, creator) for _ in range(count)]
    return [wait_until(lambda n=n: (c := claim_of(cp, "default", n)).get("status", {}).get("reservedFor") and c,
                       "allocated and reserved", within=30) for n in names]


def prepared(claim: dict) -> PreparedClaim:
    meta = claim["metadata"]
    [result] = claim["status"]["allocation"]["devices"]["results"]
    device = PreparedDevice(("npu",), result["pool"], result["device"], (f"k8s.{DRIVER}/npu={result['device']}",))
    return PreparedClaim(meta["namespace"], meta["name"], meta["uid"], (device,), {result["device"]: {"physicalID": 7}})


@contextlib.asynccontextmanager
async def running(writer: ClaimStatusWriter) -> AsyncIterator[None]:
    """The writer's workers run inside the block and are cancelled when it ends (as the daemon stops)."""
    async with anyio.create_task_group() as tg:
        await tg.start(writer.run)
        yield
        tg.cancel_scope.cancel()


async def run_until_idle(writer: ClaimStatusWriter, expected_writes: int) -> None:
    async with running(writer):
        with anyio.fail_after(30):
            while writer.applied + writer.failed < expected_writes:  # noqa: ASYNC110 (polls counters)
                await anyio.sleep(0.05)


@contextlib.asynccontextmanager
async def api_server_down(cp) -> AsyncIterator[None]:
    """kube-apiserver stopped inside the block (a real outage), started again and ready after it."""
    await anyio.to_thread.run_sync(cp.stop_apiserver)
    try:
        yield
    finally:
        await anyio.to_thread.run_sync(cp.start_apiserver)


async def until_written(writer: ClaimStatusWriter, seconds: float = 60) -> None:
    """Return once no job is pending, being written or deferred (``backlog`` 0)."""
    with anyio.fail_after(seconds):
        while writer.backlog:  # noqa: ASYNC110 (polls the queue)
            await anyio.sleep(0.05)


async def until_deferred(writer: ClaimStatusWriter, count: int, seconds: float = 30) -> None:
    """Return once ``count`` rounds of attempts have failed and been deferred."""
    with anyio.fail_after(seconds):
        while writer.deferrals < count:  # noqa: ASYNC110 (polls the counter)
            await anyio.sleep(0.05)


async def until_idle(writer: ClaimStatusWriter, seconds: float = 30) -> None:
    """Return once no job is pending or being written."""
    with anyio.fail_after(seconds):
        while writer._pending or writer._busy:  # noqa: ASYNC110 (polls the queue)
            await anyio.sleep(0.01)


@pytest.fixture
async def api(cp):
    client = Recording(await open_api(str(cp.kubeconfig)))
    yield client
    await client.client.close()


async def test_a_claim_unprepared_before_its_status_went_out_costs_one_request(cp, start_daemon, api):
    [claim] = allocated_claims(cp, start_daemon, 1)
    writer = ClaimStatusWriter(api, DRIVER)
    writer.prepared(prepared(claim))
    writer.unprepared(claim["metadata"]["namespace"], claim["metadata"]["name"], claim["metadata"]["uid"])
    try:
        await run_until_idle(writer, 1)
        assert [m for m, _ in api.calls] == ["PATCH"]  # the removal only: no write, no GET
        assert our_status(claim_of(cp, "default", claim["metadata"]["name"])) == []
    finally:
        delete_claim_and_pod(cp, claim["metadata"]["name"])


async def test_removing_applied_entries_needs_no_get(cp, start_daemon, api):
    [claim] = allocated_claims(cp, start_daemon, 1)
    name = claim["metadata"]["name"]
    writer = ClaimStatusWriter(api, DRIVER)
    try:
        writer.prepared(prepared(claim))
        await run_until_idle(writer, 1)
        assert [e["device"] for e in our_status(claim_of(cp, "default", name))] == [
            claim["status"]["allocation"]["devices"]["results"][0]["device"]]
        api.calls.clear()
        writer.unprepared("default", name, claim["metadata"]["uid"])
        await run_until_idle(writer, 2)
        assert [m for m, _ in api.calls] == ["PATCH"]
        assert our_status(claim_of(cp, "default", name)) == []
    finally:
        delete_claim_and_pod(cp, name)


async def test_entries_a_merge_patch_wrote_are_removed_too(cp, start_daemon, api):
    """A claim created by a Go client can only be patched by merge (ClaimStatusWriter._merge): the
    removal's apply leaves those entries, its answer shows them, and a merge patch removes them."""
    [claim] = allocated_claims(cp, start_daemon, 1, creator="go")
    name = claim["metadata"]["name"]
    writer = ClaimStatusWriter(api, DRIVER)
    try:
        writer.prepared(prepared(claim))
        await run_until_idle(writer, 1)
        assert our_status(claim_of(cp, "default", name))
        writer.unprepared("default", name, claim["metadata"]["uid"])
        await run_until_idle(writer, 2)
        assert our_status(claim_of(cp, "default", name)) == []
        assert writer.failed == 0
    finally:
        delete_claim_and_pod(cp, name)


async def test_a_merge_patch_keeps_what_others_wrote_into_our_entries(cp, start_daemon, api):
    """The merge fallback replaced the whole list with our bare entries: the conditions a
    binding-conditions controller (KEP-5007) writes on our device's entry before the pod is bound,
    so before the Prepare, were wiped by our write (kubernetes-sigs/dra-example-driver#266)."""
    [claim] = allocated_claims(cp, start_daemon, 1, creator="go")
    name = claim["metadata"]["name"]
    [result] = claim["status"]["allocation"]["devices"]["results"]
    writer = ClaimStatusWriter(api, DRIVER)
    condition = {"type": "Ready", "status": "True", "reason": "Attached", "message": "by another controller",
                 "lastTransitionTime": "2026-12-03T00:00:00Z"}
    try:
        status, reply = cp.api("PATCH", f"{RES}/namespaces/default/resourceclaims/{name}/status?fieldManager=other",
                               {"status": {"devices": [{"driver": DRIVER, "pool": result["pool"],
                                                        "device": result["device"], "conditions": [condition],
                                                        "networkData": {"interfaceName": "eth1"}}]}},
                               content_type="application/merge-patch+json")
        assert status == 200, reply
        writer.prepared(prepared(claim))
        await run_until_idle(writer, 1)
        assert [m for m, _ in api.calls][-2:] == ["GET", "PATCH"]  # the merge fallback wrote it
        [entry] = our_status(claim_of(cp, "default", name))
        assert entry["conditions"] == [condition] and entry["networkData"] == {"interfaceName": "eth1"}
        assert entry["data"] and writer.failed == 0
        writer.unprepared("default", name, claim["metadata"]["uid"])
        await run_until_idle(writer, 2)
        assert our_status(claim_of(cp, "default", name)) == []
    finally:
        delete_claim_and_pod(cp, name)


async def test_each_claim_ends_in_its_last_state_whatever_the_interleaving(cp, start_daemon, api):
    claims = allocated_claims(cp, start_daemon, 6)
    writer = ClaimStatusWriter(api, DRIVER, workers=4, quiet_s=0, max_delay_s=0)  # no lull: writes overlap
    rng = random.Random(4817)
    last: dict[str, bool] = {}
    try:
        async with running(writer):
            for _ in range(60):  # jobs arrive while earlier ones of the same claim are in flight
                claim = rng.choice(claims)
                meta = claim["metadata"]
                if rng.random() < 0.5:
                    writer.prepared(prepared(claim))
                    last[meta["name"]] = True
                else:
                    writer.unprepared(meta["namespace"], meta["name"], meta["uid"])
                    last[meta["name"]] = False
                await anyio.sleep(rng.random() * 0.01)
            await until_idle(writer)
        assert writer.failed == 0
        for name, has_entries in last.items():
            assert bool(our_status(claim_of(cp, "default", name))) == has_entries, name
    finally:
        for claim in claims:
            delete_claim_and_pod(cp, claim["metadata"]["name"])


async def stream_of_jobs(writer: ClaimStatusWriter, claims: list[dict], seconds: float,
                         puts: list[float] | None = None) -> float:
    """Queue a claim's status every 5 ms for ``seconds``, as a node busy preparing does; its end time.
    ``puts`` gets the time.monotonic() of each job queued."""
    end = time.monotonic() + seconds
    i = 0
    while time.monotonic() < end:
        writer.prepared(prepared(claims[i % len(claims)]))
        if puts is not None:
            puts.append(time.monotonic())
        i += 1
        await anyio.sleep(0.005)
    return time.monotonic()


class Stream:
    """When the writer may begin writes, given the jobs a stream queued: a loaded machine can hold
    the test's task for more than ``quiet_s`` between two jobs, which is a lull to the writer (it
    measures the jobs, not the test's intent), so the assertions follow the stream as it went."""

    EPS = 0.002  # clock reads around the writer's own

    def __init__(self, quiet_s: float) -> None:
        self.quiet_s = quiet_s
        self.puts: list[float] = []

    def in_lull(self, t: float) -> bool:
        """Whether ``t`` is at least ``quiet_s`` after the last job queued before it."""
        before = [p for p in self.puts if p <= t]
        return not before or t - before[-1] >= self.quiet_s - self.EPS

    def lulls(self) -> int:
        """Gaps of at least ``quiet_s`` between two jobs of the stream (0 when the test ran as meant)."""
        return sum(b - a >= self.quiet_s - self.EPS for a, b in itertools.pairwise(self.puts))


async def test_statuses_wait_for_a_lull_in_the_prepares_then_all_go_out(cp, start_daemon, api):
    claims = allocated_claims(cp, start_daemon, 4)
    writer = ClaimStatusWriter(api, DRIVER, quiet_s=0.05, max_delay_s=1.0)
    stream = Stream(writer.quiet_s)
    try:
        async with running(writer):
            ended = await stream_of_jobs(writer, claims, 0.5, stream.puts)
            with anyio.fail_after(30):
                while writer.applied < len(claims):  # noqa: ASYNC110 (polls a counter)
                    await anyio.sleep(0.01)
        # Nothing competed with the Prepares: every write began in a lull (after the stream, unless
        # the machine stalled the stream itself for quiet_s).
        assert all(stream.in_lull(t) for t in api.sent_at), (api.sent_at, stream.puts)
        if not stream.lulls():
            assert min(api.sent_at) >= ended + 0.04
        # One apply per claim and lull, however many jobs it had.
        assert len(claims) <= len(api.calls) <= len(claims) * (1 + stream.lulls())
        for claim in claims:
            assert our_status(claim_of(cp, "default", claim["metadata"]["name"]))
    finally:
        for claim in claims:
            delete_claim_and_pod(cp, claim["metadata"]["name"])


async def test_a_stream_without_a_lull_still_writes_within_the_longest_delay(cp, start_daemon, api):
    claims = allocated_claims(cp, start_daemon, 2)
    writer = ClaimStatusWriter(api, DRIVER, quiet_s=0.05, max_delay_s=0.5)
    stream = Stream(writer.quiet_s)
    try:
        async with running(writer):
            began = time.monotonic()
            ended = await stream_of_jobs(writer, claims, 1.4, stream.puts)
            await until_idle(writer)
        during = [t for t in api.sent_at if t < ended]
        # The oldest job waited about max_delay_s, no longer (earlier only in a lull: a loaded
        # machine can stall the stream itself for quiet_s).
        assert during and all(t - began >= 0.45 or stream.in_lull(t) for t in during), (during, stream.puts)
        if not stream.lulls():
            assert min(during) - began <= 0.9
        # In bursts (one a max_delay_s, or a lull), not after every job.
        assert len(during) <= (3 + stream.lulls()) * len(claims)
        assert writer.failed == 0
    finally:
        for claim in claims:
            delete_claim_and_pod(cp, claim["metadata"]["name"])


class Overlap(Recording):
    """The real client; notes, at each request's start, how many requests were then in flight and
    when the others in flight began."""

    def __init__(self, client) -> None:
        super().__init__(client)
        self.began: dict[int, float] = {}  # requests in flight -> time.monotonic() each began
        self.overlap: list[tuple[float, int]] = []  # (time.monotonic(), requests in flight with it)
        self.others: list[list[float]] = []  # per request, when the others in flight at its start began

    async def call(self, method, path, **kwargs):
        now = time.monotonic()
        self.others.append(list(self.began.values()))
        key = len(self.overlap)
        self.began[key] = now
        self.overlap.append((now, len(self.began)))
        try:
            return await super().call(method, path, **kwargs)
        finally:
            del self.began[key]


async def test_while_calls_still_come_statuses_go_out_one_at_a_time_and_together_in_the_lull(cp, start_daemon):
    """At most one write in flight and one beginning every busy_interval_s (0.05) while calls come."""
    claims = allocated_claims(cp, start_daemon, 8)
    api = Overlap(await open_api(str(cp.kubeconfig)))
    writer = ClaimStatusWriter(api, DRIVER, workers=4, quiet_s=0.05, max_delay_s=0.3)
    stream = Stream(writer.quiet_s)
    try:
        async with running(writer):
            ended = await stream_of_jobs(writer, claims, 1.0, stream.puts)
            for claim in claims:  # the stream's last burst: every claim pending when the lull begins
                writer.prepared(prepared(claim))
            await until_idle(writer)
        during = [(t, n, others) for (t, n), others in zip(api.overlap, api.others, strict=True) if t < ended]
        after = [n for t, n in api.overlap if t >= ended]
        assert len(during) >= len(claims)  # the stream's flushes went out while it lasted...
        # ...one write at a time (four at once before): a write begins beside others only in a lull
        # (which a loaded machine can make by stalling the stream) or once each of them has been
        # under way for max_delay_s (an API server slow under load)...
        for t, n, others in during:
            assert n == 1 or stream.in_lull(t) or all(t - o >= writer.max_delay_s - Stream.EPS for o in others), \
                (t, n, others, stream.puts)
        # ...and at most one every busy_interval_s outside a lull
        busy = [(a, b) for (a, _, _), (b, _, _) in itertools.pairwise(during) if not stream.in_lull(b)]
        assert all(b - a >= 0.045 for a, b in busy), busy
        if not stream.lulls():
            assert max(n for _, n, _ in during) == 1
        assert max(after) > 1  # the lull's flush: the workers together
        assert writer.failed == 0
        for claim in claims:
            assert our_status(claim_of(cp, "default", claim["metadata"]["name"]))
    finally:
        await api.client.close()
        for claim in claims:
            delete_claim_and_pod(cp, claim["metadata"]["name"])


def prepare_each(kubelet, claims: list[dict]) -> None:
    """Prepare each claim in its own call, as the kubelet would; each must succeed."""
    for claim in claims:
        assert not kubelet.prepare(claim).claims[claim["metadata"]["uid"]].error


def test_a_daemon_stopped_right_after_its_prepares_still_writes_their_statuses(cp, start_daemon):
    """The statuses wait for a lull (50 ms); a SIGTERM within it must not lose them (drain at shutdown)."""
    from tests.integration.daemon import Kubelet

    d = start_daemon(fake_devices=2)
    claims = claims_allocated(cp, 2)
    names = [c["metadata"]["name"] for c in claims]
    k = Kubelet(d)
    try:
        prepare_each(k, claims)
        assert d.stop() == 0  # at once: the statuses were still waiting for a lull
        for name in names:
            assert [e["device"] for e in our_status(claim_of(cp, "default", name))]
    finally:
        k.close()
        for name in names:
            delete_claim_and_pod(cp, name)


def test_a_restarted_daemon_writes_the_status_of_the_claims_it_holds(cp, start_daemon):
    """A status is written after the answer and is not in the checkpoint, so one the daemon lost
    (killed within its lull, deferred by an outage) or never wrote (``--claim-status false`` then,
    the deterministic case here) must be written by the next start, from the records."""
    from tests.integration.daemon import Kubelet

    d = start_daemon(fake_devices=2, extra_args=("--claim-status", "false"))
    claims = claims_allocated(cp, 2)
    names = [c["metadata"]["name"] for c in claims]
    k = Kubelet(d)
    try:
        prepare_each(k, claims)
        k.close()
        time.sleep(1.2)  # the writer's longest wait: had --claim-status false been ignored, they would show
        assert not any(our_status(claim_of(cp, "default", n)) for n in names)
        d.kill9()
        # One claim's spec is gone too: it is repaired first, and only then are the statuses
        # restored (a claim without its spec is not restored; the kubelet never asks again).
        lost = d.cdi_dir / f"k8s.{DRIVER}-npu_{claims[0]['metadata']['uid']}.yaml"
        lost.unlink()
        d.extra_args = []
        d.start()
        wait_until(lost.exists, "spec re-created", within=20)
        for claim, name in zip(claims, names, strict=True):
            [result] = claim["status"]["allocation"]["devices"]["results"]
            entries = wait_until(lambda n=name: our_status(claim_of(cp, "default", n)), "status written", within=20)
            assert [(e["pool"], e["device"]) for e in entries] == [(result["pool"], result["device"])]
            assert entries[0]["data"]["env"]  # from the CDI spec the first run wrote
        assert "writing the claim status of the prepared claims again" in d.log_text()
        k = Kubelet(d)
        for claim, name in zip(claims, names, strict=True):  # and the next Unprepare removes them as usual
            assert not k.unprepare(claim).claims[claim["metadata"]["uid"]].error
            wait_until(lambda n=name: not our_status(claim_of(cp, "default", n)), "status removed", within=20)
    finally:
        k.close()
        for name in names:
            delete_claim_and_pod(cp, name)


def test_during_a_rolling_update_the_statuses_are_written_again_once_the_older_instance_is_gone(cp, short_tmp):
    """The older instance still serves calls the kubelet began with it: a claim it unprepares after
    the newer one read the records would get its entries back from the newer one's restore."""
    from tests.integration.daemon import DaemonProcess, Kubelet

    def instance(uid: str, *extra: str) -> DaemonProcess:
        return DaemonProcess(short_tmp / "node", node=cp.node_name, kubeconfig=cp.kubeconfig, fake_devices=2,
                             rolling_update_id=uid, extra_args=extra)

    old = instance("pod-old", "--claim-status", "false").start()
    new, names = None, []
    k = Kubelet(old)
    try:
        claims = claims_allocated(cp, 2)
        names = [c["metadata"]["name"] for c in claims]
        prepare_each(k, claims)
        new = instance("pod-new").start()
        time.sleep(2)
        assert not any(our_status(claim_of(cp, "default", n)) for n in names)  # the older one still serves
        assert not k.unprepare(claims[1]).claims[claims[1]["metadata"]["uid"]].error  # and ends a call
        old.stop()
        wait_until(lambda: our_status(claim_of(cp, "default", names[0])), "status written", within=20)
        time.sleep(1.5)  # the writer's longest wait: had it queued the unprepared claim, it would show now
        assert not our_status(claim_of(cp, "default", names[1]))
        assert "writing the claim status of the prepared claims again" in new.log_text()
    finally:
        k.close()
        if new is not None:
            new.stop()
        old.stop()
        for name in names:
            delete_claim_and_pod(cp, name)


class Slow(Recording):
    """The real client, but the first write of each claim named in ``delays`` waits that many seconds first."""

    def __init__(self, client, delays: dict[str, float]) -> None:
        super().__init__(client)
        self.delays = dict(delays)

    async def call(self, method, path, **kwargs):
        name = path.removesuffix("/status").rsplit("/", 1)[-1]
        if name in self.delays:
            await anyio.sleep(self.delays.pop(name))
        return await super().call(method, path, **kwargs)


def sent_for(api: Recording, name: str) -> list[float]:
    return [t for (_, path), t in zip(api.calls, api.sent_at, strict=True) if f"/resourceclaims/{name}/" in path]


async def test_a_slow_write_holds_back_no_other_claim(cp, start_daemon):
    """Two workers; a flush of X, Y and W: X's write hangs 2 s, Y's takes 0.5 s. A newer job of X
    and claim Z's job come meanwhile. Z goes out after its own lull, once W is taken; the flush used
    to stay open until X's write ended, because X's newer job was pending under X's name."""
    x, y, w, z = allocated_claims(cp, start_daemon, 4)
    name = lambda c: c["metadata"]["name"]  # noqa: E731
    api = Slow(await open_api(str(cp.kubeconfig)), {name(x): 2.0, name(y): 0.5})
    writer = ClaimStatusWriter(api, DRIVER, workers=2, quiet_s=0.05, max_delay_s=1.0)
    try:
        async with running(writer):
            for claim in (x, y, w):
                writer.prepared(prepared(claim))
            await anyio.sleep(0.2)  # the flush began: X's and Y's writes are under way
            writer.prepared(prepared(x))
            queued = time.monotonic()
            writer.prepared(prepared(z))
            await until_idle(writer)
        assert sent_for(api, name(z))[0] - queued < 1.0
        assert len(sent_for(api, name(x))) == 2 and writer.failed == 0
    finally:
        await api.client.close()
        for claim in (x, y, w, z):
            delete_claim_and_pod(cp, name(claim))


async def test_a_job_after_a_quiet_spell_still_waits_for_its_lull(cp, start_daemon, api):
    """A job replaced during a flush left the writer thinking an old job waited: the first job after
    the next quiet spell then went out at once, between two Prepares."""
    a, b, c = allocated_claims(cp, start_daemon, 3)
    writer = ClaimStatusWriter(api, DRIVER, workers=1, quiet_s=0.1, max_delay_s=1.0)
    try:
        async with running(writer):
            writer.prepared(prepared(a))
            writer.prepared(prepared(b))
            with anyio.fail_after(10):
                while not api.calls:  # noqa: ASYNC110 (the flush of A and B has begun)
                    await anyio.sleep(0.001)
            writer.prepared(prepared(b))  # B is replaced while the flush writes A
            await anyio.sleep(1.5)
            queued = time.monotonic()
            writer.prepared(prepared(c))
            await until_idle(writer)
        assert sent_for(api, c["metadata"]["name"])[0] - queued >= 0.09
    finally:
        for claim in (a, b, c):
            delete_claim_and_pod(cp, claim["metadata"]["name"])


async def test_a_write_the_shutdown_cancelled_is_written_by_the_drain(cp, start_daemon):
    [x] = allocated_claims(cp, start_daemon, 1)
    api = Slow(await open_api(str(cp.kubeconfig)), {x["metadata"]["name"]: 30.0})
    writer = ClaimStatusWriter(api, DRIVER, quiet_s=0, max_delay_s=0)
    try:
        async with running(writer):  # its end cancels the workers, as a stopping daemon does
            writer.prepared(prepared(x))
            await anyio.sleep(0.2)  # its write hangs
            assert set(writer._busy) == {x["metadata"]["uid"]}
        with anyio.fail_after(10):
            await writer.drain()
        assert our_status(claim_of(cp, "default", x["metadata"]["name"]))
    finally:
        await api.client.close()
        delete_claim_and_pod(cp, x["metadata"]["name"])


async def test_statuses_that_failed_during_an_api_server_outage_are_written_once_it_is_back(cp, start_daemon, api):
    """kube-apiserver stopped: X prepared, Y prepared then unprepared, each after its first round of
    attempts failed. Once the API server is back X carries its entry and Y none. The writer gave
    both up after its four tries (about 3.5 s) and never wrote X's status."""
    x, y = allocated_claims(cp, start_daemon, 2)
    writer = ClaimStatusWriter(api, DRIVER, attempts=2, quiet_s=0, max_delay_s=0, retry_s=0.2, retry_max_s=1.0)
    try:
        async with running(writer):
            async with api_server_down(cp):
                writer.prepared(prepared(x))
                writer.prepared(prepared(y))
                await until_deferred(writer, 2)  # both found no API server
                writer.unprepared("default", y["metadata"]["name"], y["metadata"]["uid"])
                await anyio.sleep(1.5)  # rounds go on failing meanwhile
                assert writer.backlog == 2 and writer.applied == 0 and writer.failed == 0
            await until_written(writer)  # the pause is at most 1 s
        assert [e["device"] for e in our_status(claim_of(cp, "default", x["metadata"]["name"]))] == [
            x["status"]["allocation"]["devices"]["results"][0]["device"]]
        assert our_status(claim_of(cp, "default", y["metadata"]["name"])) == []
        assert writer.failed == 0
    finally:
        for claim in (x, y):
            delete_claim_and_pod(cp, claim["metadata"]["name"])


def moved_claim(cp, name: str) -> dict:
    """A claim allocated on node-a's pool (device npu-0-0), as the scheduler leaves it."""
    return create_in_api(cp, claim_object(name, node="node-a", results=[("npu", "npu-0-0")]))


def on_pool(claim: dict, pool: str) -> PreparedClaim:
    meta = claim["metadata"]
    device = PreparedDevice(("npu",), pool, "npu-0-0", (f"k8s.{DRIVER}/npu=npu-0-0",))
    return PreparedClaim(meta["namespace"], meta["name"], meta["uid"], (device,))


def reallocate(cp, claim: dict, pool: str) -> None:
    """Deallocate ``claim`` and allocate npu-0-0 of ``pool`` to it, as the scheduler would."""
    path = f"{RES}/namespaces/default/resourceclaims/{claim['metadata']['name']}/status"
    current = cp.api("GET", path.removesuffix("/status"))[1]
    reserved = current["status"]["reservedFor"]
    for status in ({}, {"allocation": {"devices": {"results": [
            {"request": "npu", "driver": DRIVER, "pool": pool, "device": "npu-0-0"}]}}}):
        current["status"] = status
        current = ok(cp, "PUT", path, current)
    current["status"]["reservedFor"] = reserved
    ok(cp, "PUT", path, current)


async def test_a_late_removal_from_one_node_leaves_the_entries_of_another(cp, api):
    """Node A prepared the claim; it was deallocated, allocated on node B and prepared there; then
    A's removal (queued at A's Unprepare, written late) went out. B's entry must stay: with one field
    manager for every node, A's empty apply removed it too."""
    name = f"moved-{uuid.uuid4().hex[:6]}"
    claim = moved_claim(cp, name)
    a = ClaimStatusWriter(api, DRIVER, pool="node-a")
    b = ClaimStatusWriter(api, DRIVER, pool="node-b")
    try:
        a.prepared(on_pool(claim, "node-a"))
        await run_until_idle(a, 1)
        assert [e["pool"] for e in our_status(claim_of(cp, "default", name))] == ["node-a"]
        reallocate(cp, claim, "node-b")
        b.prepared(on_pool(claim, "node-b"))
        await run_until_idle(b, 1)
        a.unprepared("default", name, claim["metadata"]["uid"])
        await run_until_idle(a, 2)
        assert [(e["pool"], e["device"]) for e in our_status(claim_of(cp, "default", name))] == [("node-b", "npu-0-0")]
        assert a.failed == b.failed == 0
    finally:
        cp.api("DELETE", f"{RES}/namespaces/default/resourceclaims/{name}")


async def test_entries_an_older_release_wrote_under_the_driver_name_are_removed(cp, api):
    """Before 2026-12-03 every node wrote under the driver name; a claim prepared then and
    unprepared after the upgrade still loses its entry (the apply's answer shows it; a merge patch
    removes it)."""
    name = f"old-{uuid.uuid4().hex[:6]}"
    claim = moved_claim(cp, name)
    old = ClaimStatusWriter(api, DRIVER)  # the driver name as the field manager
    new = ClaimStatusWriter(api, DRIVER, pool="node-a")
    try:
        old.prepared(on_pool(claim, "node-a"))
        await run_until_idle(old, 1)
        assert DRIVER in status_managers(claim_of(cp, "default", name))
        new.unprepared("default", name, claim["metadata"]["uid"])
        await run_until_idle(new, 1)
        assert our_status(claim_of(cp, "default", name)) == []
    finally:
        cp.api("DELETE", f"{RES}/namespaces/default/resourceclaims/{name}")


def status_managers(claim: dict) -> set[str]:
    return {f["manager"] for f in claim["metadata"]["managedFields"] if f.get("subresource") == "status"}


async def test_a_write_that_fails_while_a_newer_job_waits_is_not_deferred(cp, start_daemon, api):
    """Prepared X's status fails during an outage while X's Unprepare is already queued. The failed
    write used to be deferred anyway: once the API server was back the removal went out, then the
    deferred write came due and put X's entry back, for good."""
    [x] = allocated_claims(cp, start_daemon, 1)
    name, uid = x["metadata"]["name"], x["metadata"]["uid"]
    writer = ClaimStatusWriter(api, DRIVER, attempts=2, quiet_s=0, max_delay_s=0, retry_s=0.3, retry_max_s=0.3)
    try:
        async with running(writer):
            async with api_server_down(cp):
                writer.prepared(prepared(x))
                with anyio.fail_after(10):
                    while uid not in writer._busy:  # noqa: ASYNC110 (the prepared job's write began)
                        await anyio.sleep(0.001)
                writer.unprepared("default", name, uid)
                await until_deferred(writer, 1)  # the removal found no API server either
            await until_written(writer)
            await anyio.sleep(1.0)  # longer than any pause: a deferred prepared job would be back by now
            assert writer.backlog == 0
        assert our_status(claim_of(cp, "default", name)) == []
        assert writer.deferrals == 1 and writer.failed == 0
    finally:
        delete_claim_and_pod(cp, name)
