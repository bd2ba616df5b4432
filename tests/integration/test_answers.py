"""Every CDI id the daemon answers resolves on disk when it answers, over both kubelet API versions.

Operators and other software remove files under the CDI dir (a tmpfs cleaned at boot, a careless
``rm``): the daemon must re-create what it names, or fail that claim, never answer an id that the
container runtime cannot resolve ("unresolvable CDI devices").
"""

from __future__ import annotations

import os
import shutil

import pytest
import yaml

from tests.claimfiles import claim_object, write_claim
from tests.integration.daemon import DaemonProcess, Kubelet


@pytest.fixture
def node(short_tmp):
    d = DaemonProcess(short_tmp / "sa").start()
    k = Kubelet(d)
    yield d, k
    k.close()
    d.stop()


def resolvable(d: DaemonProcess) -> set[str]:
    """Every fully-qualified CDI device id defined by the spec files on disk now."""
    ids = set()
    for file in d.cdi_dir.glob("*.yaml"):
        spec = yaml.safe_load(file.read_text())
        ids.update(f"{spec['kind']}={dev['name']}" for dev in spec["devices"])
    return ids


def assert_answer_resolves(d: DaemonProcess, reply, claim: dict) -> None:
    answer = reply.claims[claim["metadata"]["uid"]]
    assert answer.error == ""
    answered = {cdi_id for device in answer.devices for cdi_id in device.cdi_device_ids}
    assert answered and answered <= resolvable(d), answered - resolvable(d)


@pytest.mark.parametrize("api", ["v1", "v1beta1"])
def test_replayed_and_new_prepares_re_create_a_deleted_common_spec(node, api):
    d, k = node
    held = write_claim(d.root, claim_object("held", results=[("npu", "npu-0-0")]))
    k.prepare(held, api=api)
    for common in d.cdi_dir.glob("*_common.yaml"):
        common.unlink()
    assert_answer_resolves(d, k.prepare(held, api=api), held)  # replayed from the checkpoint
    for common in d.cdi_dir.glob("*_common.yaml"):
        common.unlink()
    fresh = write_claim(d.root, claim_object("fresh", results=[("npu", "npu-1-0")]))
    assert_answer_resolves(d, k.prepare(fresh, api=api), fresh)


@pytest.mark.parametrize("api", ["v1", "v1beta1"])
def test_prepares_re_create_a_removed_cdi_dir(node, api):
    d, k = node
    held = write_claim(d.root, claim_object("held", results=[("npu", "npu-0-0")]))
    k.prepare(held, api=api)
    shutil.rmtree(d.cdi_dir)
    assert_answer_resolves(d, k.prepare(held, api=api), held)
    shutil.rmtree(d.cdi_dir)
    fresh = write_claim(d.root, claim_object("fresh", results=[("npu", "npu-1-0")]))
    assert_answer_resolves(d, k.prepare(fresh, api=api), fresh)


def test_an_undeletable_spec_keeps_its_device_held_and_a_restart_over_it_serves(small_cdi):
    d = DaemonProcess(small_cdi).start()
    k = Kubelet(d)
    first = write_claim(d.root, claim_object("first", results=[("npu", "npu-0-0")]))
    second = write_claim(d.root, claim_object("second", results=[("npu", "npu-0-0")]))
    uid = first["metadata"]["uid"]
    assert k.prepare(first).claims[uid].error == ""
    stray = d.cdi_dir / "k8s.ascend.project-hami.io-npu_0c6f1f3e-0000-4000-8000-000000000002.yaml"
    stray.write_text("kind: k8s.ascend.project-hami.io/npu\ndevices: []\n")  # an orphan no record backs
    assert os.system(f"mount -o remount,ro {d.cdi_dir}") == 0
    try:
        assert "Read-only file system" in k.unprepare(first).claims[uid].error
        # The device is still held: the spec that gives it to the first claim still exists.
        assert "already prepared for ResourceClaim default/first" in k.prepare(second).claims[
            second["metadata"]["uid"]].error
        k.close()
        d.stop()
        d.start()  # over an undeletable orphan and a read-only CDI dir: serves, no crash loop
        k = Kubelet(d)
        assert "Read-only file system" in k.unprepare(first).claims[uid].error
    finally:
        os.system(f"mount -o remount,rw {d.cdi_dir}")
    assert k.unprepare(first).claims[uid].error == ""
    assert k.prepare(second).claims[second["metadata"]["uid"]].error == ""
    k.close()
    d.stop()
    d.start()  # the next start-up removes the orphan
    d.stop()
    assert not stray.exists()
