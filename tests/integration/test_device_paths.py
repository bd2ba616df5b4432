"""``--dev-root`` and ``--dev-root-on-host`` through the real daemon: the same meaning for the
whole-chip profile and the soft split on the simulated Lab 18 node (docs/architecture.md, "Device
nodes"). Before issue 40, ``npu-310P`` wrote ``/dev/davinci2`` and ``HAMivNPUCore``
``<dev-root>/davinci2`` for the same flags, and neither could name the host's ``/dev`` for a daemon
that sees it elsewhere."""

from __future__ import annotations

import pytest
import yaml

from ascend_dra.profiles.ascend.sim import labnode
from tests.claimfiles import claim_object, write_claim
from tests.integration.daemon import DRIVER, DaemonProcess, Kubelet

NODE = "node-1"
NAMES = ("davinci2", "davinci_manager", "devmm_svm", "hisi_hdc")


@pytest.mark.parametrize("layout", ["lab", "container"])
@pytest.mark.parametrize("profile", ["npu-310P", "HAMivNPUCore"])
def test_the_spec_names_the_hosts_device_nodes_for_every_profile(short_tmp, profile, layout):
    lab = labnode.build(short_tmp / "lab")
    args = ["--npu-smi", str(lab.npu_smi), "--dev-root", str(lab.dev_root)]
    if profile == "HAMivNPUCore":
        args += ["--profile-option", f"HAMivNPUCore.hostRoot={lab.host_root}"]
    if layout == "container":  # the host's /dev, seen by the daemon at lab/dev
        args += ["--dev-root-on-host", "/dev"]
    result = {"request": "npu", "driver": DRIVER, "pool": NODE, "device": "npu-1-0"}
    if profile == "HAMivNPUCore":
        result.update(shareID="s-1", consumedCapacity={"cores": "50", "memory": "8Gi", "containers": "1"})
    d = DaemonProcess(short_tmp / "sa", node=NODE, profiles=profile, extra_args=args).start()
    k = Kubelet(d)
    try:
        claim = write_claim(d.root, claim_object("c", node=NODE, results=[result]))
        uid = claim["metadata"]["uid"]
        assert k.prepare(claim).claims[uid].error == ""
        [spec_file] = d.cdi_dir.glob(f"*{uid}*")
        [device, _] = yaml.safe_load(spec_file.read_text())["devices"]  # then the device metadata mount
        host = lab.dev_root if layout == "lab" else None
        assert device["containerEdits"]["deviceNodes"] == [
            {"path": f"/dev/{n}", "hostPath": str(host / n)} if host else {"path": f"/dev/{n}"} for n in NAMES]
    finally:
        k.close()
        d.stop()
