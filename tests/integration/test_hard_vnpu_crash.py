"""kill -9 of a daemon serving the hard-vNPU profile at every crash point of vNPU create/destroy and
of Prepare/Unprepare, then restart: no orphan vNPU in the simulated npu-smi, no lost claim.

After every restart the vNPUs the simulator holds are exactly those the checkpoint's claim records
name (a vNPU the daemon made but did not record is destroyed at start-up through its ledger), and
the kubelet's retry (Prepare or Unprepare) succeeds and ends clean.
"""

from __future__ import annotations

import shutil

import grpc
import pytest

from ascend_dra.observe.faults import POINTS
from ascend_dra.profiles.ascend.hardvnpu.ops import CRASH_POINTS
from ascend_dra.profiles.ascend.sim import npusmi_sim
from tests.claimfiles import claim_object, write_claim
from tests.hardvnpu import TIERS, SimHost, daemon_args, vnpu_keys, vnpus_of_records
from tests.integration.daemon import DRIVER, DaemonProcess, Kubelet

PREPARE_POINTS = [p for p in POINTS if p.startswith("prepare:")] + list(CRASH_POINTS[:2])
#: (point, vnpu-cfg-recover enabled): the replay's own points either way; the create's points only
#: where the vNPUs died with the boot (enabled, the replay takes the restored ones back, creating nothing).
REPLAY_POINTS = [(p, recover) for p in POINTS if p.startswith("replay:") for recover in (True, False)] + \
    [(p, False) for p in CRASH_POINTS[:2]]
UNPREPARE_POINTS = [p for p in POINTS if p.startswith("unprepare:")] + list(CRASH_POINTS[2:])
DEVICES = ("vnpu-0-0-vir10-3c-16g-0", "vnpu-0-0-vir05-1c-8g-0")


def records(d: DaemonProcess) -> dict:
    return d.records()


def specs(d: DaemonProcess) -> set[str]:
    return {p.name for p in d.cdi_dir.glob(f"k8s.{DRIVER}-vnpu_*.yaml") if not p.name.endswith("_common.yaml")}


@pytest.fixture(params=TIERS)
def hard_vnpu(short_tmp, request):
    """A daemon serving only ``hard-vNPU`` over a simulated Lab 18 host, its vNPUs made through
    npu-smi or through DCMI (the test libdcmi.so under the profile's host root); stopped at teardown."""
    root = short_tmp / "sa"
    host = SimHost(root, dcmi=request.param == "dcmi")
    host.state_dir = root / "plugins" / DRIVER / "profiles"  # the daemon's ProfileContext.state_dir
    d = DaemonProcess(root, profiles="hard-vNPU", env=host.env, extra_args=daemon_args(host))
    yield d, host
    d.stop()
    made = [line for line in d.log_text().splitlines() if "created a vNPU" in line]
    assert all(f"tier={request.param}" in line for line in made), made  # the tier asked, alone
    assert "DCMI vNPU call failed" not in d.log_text()


def assert_no_orphan(d: DaemonProcess, host: SimHost) -> None:
    assert all(r["state"] == "PrepareCompleted" for r in records(d).values())
    assert vnpu_keys(host.vnpus()) == vnpus_of_records(records(d))
    assert len(host.ledger()) == len(host.vnpus())


def call_and_die(d: DaemonProcess, call) -> None:
    with pytest.raises(grpc.RpcError):
        call()
    assert d.wait_exit() == -9


@pytest.mark.parametrize("point", PREPARE_POINTS)
def test_kill9_inside_prepare_then_restart_leaves_no_orphan_and_replay_prepares(hard_vnpu, point):
    d, host = hard_vnpu
    d.start(extra_env={"ASCEND_DRA_CRASH_AT": point})
    claim = write_claim(d.root, claim_object("two-vnpus", results=[("npu", DEVICES[0]), ("npu", DEVICES[1])]))
    uid = claim["metadata"]["uid"]
    k = Kubelet(d)
    call_and_die(d, lambda: k.prepare(claim))
    k.close()

    d.start()
    assert_no_orphan(d, host)
    k = Kubelet(d)
    reply = k.prepare(claim)
    assert reply.claims[uid].error == ""
    assert [dev.device_name for dev in reply.claims[uid].devices] == list(DEVICES)
    assert vnpu_keys(host.vnpus()) == {(4, 0, 100), (4, 0, 105)}
    assert specs(d) == {f"k8s.{DRIVER}-vnpu_{uid}.yaml"}
    assert "vdavinci105" in (d.cdi_dir / f"k8s.{DRIVER}-vnpu_{uid}.yaml").read_text()
    assert_no_orphan(d, host)
    assert k.unprepare(claim).claims[uid].error == ""
    assert host.vnpus() == [] and host.ledger() == [] and records(d) == {} and specs(d) == set()
    k.close()
    d.stop()


@pytest.mark.parametrize("point", UNPREPARE_POINTS)
def test_kill9_inside_unprepare_then_restart_leaves_no_orphan_and_retry_unprepares(hard_vnpu, point):
    d, host = hard_vnpu
    d.start(extra_env={"ASCEND_DRA_CRASH_AT": point})
    claim = write_claim(d.root, claim_object("two-vnpus", results=[("npu", DEVICES[0]), ("npu", DEVICES[1])]))
    uid = claim["metadata"]["uid"]
    k = Kubelet(d)
    assert k.prepare(claim).claims[uid].error == ""
    assert len(host.vnpus()) == 2
    call_and_die(d, lambda: k.unprepare(claim))
    k.close()

    d.start()
    assert_no_orphan(d, host)
    k = Kubelet(d)
    assert k.unprepare(claim).claims[uid].error == ""
    assert host.vnpus() == [] and host.ledger() == [] and records(d) == {} and specs(d) == set()
    k.close()
    d.stop()


@pytest.mark.parametrize(("point", "recover"), REPLAY_POINTS)
def test_kill9_inside_a_replay_after_a_reboot_then_restart_leaves_no_orphan_and_retry_prepares(hard_vnpu, point,
                                                                                              recover):
    d, host = hard_vnpu
    if not recover:
        npusmi_sim.run(["set", "-t", "vnpu-cfg-recover", "-d", "0"], host.sim_dir)  # the vNPUs die with a reboot
    d.start()
    claim = write_claim(d.root, claim_object("two-vnpus", results=[("npu", DEVICES[0]), ("npu", DEVICES[1])]))
    uid = claim["metadata"]["uid"]
    k = Kubelet(d)
    assert k.prepare(claim).claims[uid].error == ""
    k.close()
    d.stop()
    shutil.rmtree(d.cdi_dir)  # a tmpfs: empty after the reboot
    host.reboot("boot-2")
    d.start(extra_env={"ASCEND_DRA_CRASH_AT": point})
    k = Kubelet(d)
    call_and_die(d, lambda: k.prepare(claim))
    k.close()

    d.start()
    # Every vNPU is named by a record (none made and unrecorded) and has its ledger entry; a record
    # of the earlier boot may still name vNPUs that died with it (cfg-recover off), until the retry.
    assert all(r["state"] == "PrepareCompleted" for r in records(d).values())
    assert vnpu_keys(host.vnpus()) <= vnpus_of_records(records(d))
    assert {f"vnpu-{n}-{c}-{v}.json" for n, c, v in vnpu_keys(host.vnpus())} <= set(host.ledger())
    k = Kubelet(d)
    reply = k.prepare(claim)
    assert reply.claims[uid].error == ""
    assert [dev.device_name for dev in reply.claims[uid].devices] == list(DEVICES)
    assert records(d)[uid]["boot_id"] == "boot-2"
    assert vnpu_keys(host.vnpus()) == {(4, 0, 100), (4, 0, 105)}
    assert specs(d) == {f"k8s.{DRIVER}-vnpu_{uid}.yaml"}
    assert_no_orphan(d, host)
    assert k.unprepare(claim).claims[uid].error == ""
    assert host.vnpus() == [] and host.ledger() == [] and records(d) == {} and specs(d) == set()
    k.close()
    d.stop()


def test_a_claim_deleted_while_the_daemon_was_down_after_create_leaves_no_vnpu(hard_vnpu):
    d, host = hard_vnpu
    d.start(extra_env={"ASCEND_DRA_CRASH_AT": "hard-vnpu:after-create"})
    claim = write_claim(d.root, claim_object("gone", results=[("npu", DEVICES[1])]))
    k = Kubelet(d)
    call_and_die(d, lambda: k.prepare(claim))
    k.close()
    assert len(host.vnpus()) == 1  # made, not recorded as a side effect
    d.start()
    assert host.vnpus() == [] and host.ledger() == []
    d.stop()


def test_after_a_reboot_a_replayed_prepare_takes_back_the_vnpu_the_device_restored(hard_vnpu):
    d, host = hard_vnpu
    d.start()
    claim = write_claim(d.root, claim_object("survivor", results=[("npu", DEVICES[1])]))
    uid = claim["metadata"]["uid"]
    k = Kubelet(d)
    assert k.prepare(claim).claims[uid].error == ""
    k.close()
    d.stop()
    host.reboot("boot-2")
    assert vnpu_keys(host.vnpus()) == {(4, 0, 105)}  # vnpu-cfg-recover is Enable by default
    d.start()
    k = Kubelet(d)
    assert k.prepare(claim).claims[uid].error == ""
    assert vnpu_keys(host.vnpus()) == {(4, 0, 105)}
    assert records(d)[uid]["side_effects"]["hard-vNPU"]["vnpus"][0]["boot_id"] == "boot-2"
    assert k.unprepare(claim).claims[uid].error == ""
    assert host.vnpus() == []
    k.close()
    d.stop()


def test_the_same_vnpu_twice_in_one_claim_is_refused_and_nothing_is_made(hard_vnpu):
    d, host = hard_vnpu
    d.start()
    claim = write_claim(d.root, claim_object("twice", results=[("a", DEVICES[1]), ("b", DEVICES[1])]))
    k = Kubelet(d)
    error = k.prepare(claim).claims[claim["metadata"]["uid"]].error
    assert error == (f"ResourceClaim default/twice: device {DEVICES[1]} is allocated twice in this claim and does "
                     "not allow multiple allocations")
    assert host.vnpus() == [] and host.ledger() == [] and records(d) == {}
    k.close()


def test_a_vnpu_whose_node_never_appears_fails_the_prepare_and_is_destroyed(hard_vnpu):
    d, host = hard_vnpu
    chips = [{"npu_id": n, "chip_id": 0, "logic_id": logic, "physical_id": p, "model": "910B4"}
             for n, logic, p in ((4, 0, 0), (5, 1, 2))]
    npusmi_sim.write_host(host.sim_dir, chips, boot_id_file=host.boot_id_file, dev_dir=None)  # makes no nodes
    d.start()
    claim = write_claim(d.root, claim_object("no-node", results=[("npu", DEVICES[1])]))
    k = Kubelet(d)
    error = k.prepare(claim).claims[claim["metadata"]["uid"]].error
    assert f"device nodes {host.vdev}/vdavinci105 named by its CDI spec no longer exist" in error
    assert host.vnpus() == [] and host.ledger() == [] and records(d) == {} and specs(d) == set()
    k.close()
