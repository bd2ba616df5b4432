"""The daemon never lets a whole chip and a vNPU cut from it run at once, whatever the scheduler
allocated: the guard sums what the prepared devices consume of the chip's shared counter set
(guard.check_counters). The scheduler does this itself only while the claims are allocated and
the DRAPartitionableDevices gate is on; a claim force-deleted before its Unprepare frees its
counters in the scheduler while its devices still run (a hard-vNPU user's trial)."""

from __future__ import annotations

import pytest

from tests.claimfiles import claim_object, write_claim
from tests.hardvnpu import SimHost, daemon_args
from tests.integration.daemon import DRIVER, DaemonProcess, Kubelet


@pytest.fixture
def node(short_tmp):
    root = short_tmp / "sa"
    host = SimHost(root)
    host.state_dir = root / "plugins" / DRIVER / "profiles"
    d = DaemonProcess(root, profiles="hard-vNPU", env=host.env, extra_args=daemon_args(host)).start()
    k = Kubelet(d)
    yield d, host, k
    k.close()
    d.stop()


def test_a_vnpu_is_refused_while_another_claim_holds_its_chip_whole_and_the_reverse(node):
    d, host, k = node
    whole = write_claim(d.root, claim_object("whole", results=[("npu", "npu-0-0")]))
    vnpu = write_claim(d.root, claim_object("cut", results=[("npu", "vnpu-0-0-vir05-1c-8g-0")]))
    other_chip = write_claim(d.root, claim_object("other", results=[("npu", "vnpu-1-0-vir05-1c-8g-0")]))
    uid = {c["metadata"]["name"]: c["metadata"]["uid"] for c in (whole, vnpu, other_chip)}

    assert k.prepare(whole).claims[uid["whole"]].error == ""
    refused = k.prepare(vnpu).claims[uid["cut"]].error
    assert "device vnpu-0-0-vir05-1c-8g-0 needs aicore 5 of counter set" in refused, refused
    assert "which has 0 of 20 free (held: npu-0-0 by ResourceClaim default/whole" in refused, refused
    assert host.vnpus() == []  # nothing was created for the refused claim
    assert k.prepare(other_chip).claims[uid["other"]].error == ""  # the other chip is not affected

    assert k.unprepare(whole).claims[uid["whole"]].error == ""
    assert k.prepare(vnpu).claims[uid["cut"]].error == ""
    refused = k.prepare(whole).claims[uid["whole"]].error
    assert "(held: vnpu-0-0-vir05-1c-8g-0 by ResourceClaim default/cut" in refused, refused
    assert sorted(v["vnpu_id"] for v in host.vnpus()) == [105, 137]  # one vNPU on each chip
