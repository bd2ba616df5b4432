"""kill -9 of a HAMivNPUCore daemon between creating a claim's local dir (and its ld.so.preload beside
it) and its Unprepare: a restart (or the kubelet's retry) leaves no claim dir that no prepared claim
owns, and none is lost. Also
``ascend-dra call --uid`` against that daemon, as the README's lab walkthrough uses it."""

from __future__ import annotations

import os
import subprocess
import sys

import orjson
import pytest

from ascend_dra.profiles.ascend.sim import labnode
from tests.claimfiles import claim_object, write_claim
from tests.integration.daemon import DRIVER, DaemonProcess, Kubelet
from tests.integration.test_crash import call_and_die

NODE = "aio-node74-arm"
PRELOAD = "/hami-vnpu-core/libvnpu.so\n"


def setup(short_tmp):
    node = labnode.build(short_tmp / "lab")
    d = DaemonProcess(short_tmp / "sa", node=NODE, profiles="HAMivNPUCore", extra_args=node.flags())
    result = {"request": "npu", "driver": DRIVER, "pool": NODE, "device": "npu-1-0", "shareID": "s-1",
              "consumedCapacity": {"cores": "50", "memory": "8Gi", "containers": "1"}}
    claim = write_claim(d.root, claim_object("share", namespace="dra-ascend-e2e", node=NODE, results=[result]))
    local = node.host_root / "usr/local/hami-vnpu-core/containers" / claim["metadata"]["uid"]
    return d, claim, local


@pytest.mark.parametrize("point", ["prepare:side-effects-done-unrecorded", "prepare:after-side-effects",
                                   "prepare:after-cdi-write"])
def test_kill9_after_the_local_dir_is_made_rolls_it_back_at_start_up(short_tmp, point):
    d, claim, local = setup(short_tmp)
    d.start(extra_env={"ASCEND_DRA_CRASH_AT": point})
    k = Kubelet(d)
    call_and_die(d, lambda: k.prepare(claim))
    k.close()
    assert (local / "npu").is_dir()  # made; the PrepareStarted record names the profile (its result maybe not)
    assert (local / "ld.so.preload").read_text() == PRELOAD  # the claim's own, beside its local dir

    d.start()
    assert not local.exists()  # start-up rolled the PrepareStarted claim back
    k = Kubelet(d)
    try:
        uid = claim["metadata"]["uid"]
        assert k.prepare(claim).claims[uid].error == ""  # the kubelet's retry
        assert (local / "npu").is_dir()
        assert (local / "ld.so.preload").read_text() == PRELOAD
        assert k.unprepare(claim).claims[uid].error == ""
        assert not local.exists()
    finally:
        k.close()
        d.stop()


@pytest.mark.parametrize("point", ["unprepare:after-checkpoint-write", "unprepare:after-cdi-remove"])
def test_kill9_inside_unprepare_removes_the_local_dir_at_start_up(short_tmp, point):
    d, claim, local = setup(short_tmp)
    uid = claim["metadata"]["uid"]
    d.start()
    k = Kubelet(d)
    assert k.prepare(claim).claims[uid].error == ""
    k.close()
    d.stop()
    d.start(extra_env={"ASCEND_DRA_CRASH_AT": point})
    k = Kubelet(d)
    call_and_die(d, lambda: k.unprepare(claim))
    k.close()

    d.start()
    try:
        assert not local.exists()
        k = Kubelet(d)
        assert k.unprepare(claim).claims[uid].error == ""  # the kubelet's retry succeeds
        k.close()
    finally:
        d.stop()


def test_call_with_uid_prepares_through_the_kubelet_directories(short_tmp):
    """``ascend-dra call --uid`` (cluster mode, as the README's lab walkthrough uses it): the kubelet
    directories instead of ``--standalone``, the uid given instead of read from a claim file."""
    d, claim, local = setup(short_tmp)
    uid = claim["metadata"]["uid"]
    d.start()
    dirs = ["--kubelet-registrar-directory-path", str(d.root / "plugins_registry"),
            "--kubelet-plugins-directory-path", str(d.root / "plugins")]
    try:
        no_kubeconfig = {k: v for k, v in os.environ.items() if k != "KUBECONFIG"}
        without = subprocess.run([sys.executable, "-m", "ascend_dra.cli", "call", *dirs, "prepare",
                                  "dra-ascend-e2e/share"], capture_output=True, text=True, env=no_kubeconfig)
        assert without.returncode != 0
        assert "need the claim's uid: give --uid, or --kubeconfig" in without.stderr
        done = subprocess.run([sys.executable, "-m", "ascend_dra.cli", "call", *dirs, "prepare",
                               "dra-ascend-e2e/share", "--uid", uid], capture_output=True, text=True)
        assert done.returncode == 0, done.stderr
        assert orjson.loads(done.stdout)["claims"][uid]["devices"][0]["deviceName"] == "npu-1-0"
        assert (local / "npu").is_dir()
        undone = subprocess.run([sys.executable, "-m", "ascend_dra.cli", "call", *dirs, "unprepare",
                                 "dra-ascend-e2e/share", "--uid", uid], capture_output=True, text=True)
        assert undone.returncode == 0, undone.stderr
        assert not local.exists()
    finally:
        d.stop()
