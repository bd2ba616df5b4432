"""Third-party profiles in a real daemon process (standalone mode), and GpuConfig precedence end to end.

Needs the example distribution installed (``pip install -e plugins/example-profile``). Broken
third-party profiles are throw-away distributions written into ``tmp_path`` and put on the
daemon's ``PYTHONPATH``, so the daemon finds them through ``importlib.metadata`` like any wheel.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.claimfiles import claim_object, write_claim
from tests.distributions import write_distribution
from tests.integration.daemon import DRIVER, DaemonProcess, Kubelet

_UUID = re.compile(r"^[0-9a-f]{8}-[0-9a-f]{4}-5[0-9a-f]{3}-[89ab][0-9a-f]{3}-[0-9a-f]{12}$")


def published_devices(root: Path) -> dict[str, dict[str, Any]]:
    """Device name -> device object, over every ResourceSlice file the daemon wrote."""
    devices: dict[str, dict[str, Any]] = {}
    for path in sorted((root / "resourceslices").glob("*.yaml")):
        for obj in yaml.safe_load_all(path.read_text()):
            assert obj["spec"]["driver"] == DRIVER
            for device in obj["spec"].get("devices") or []:
                devices[device["name"]] = device
    return devices


HANGING = '''
import anyio
from ascend_dra.profiles.fake import FakeProfile

class Hangs(FakeProfile):
    name = "hangs"

    async def discover(self, ctx):
        await anyio.sleep_forever()

def factory():
    return Hangs()
'''


@pytest.fixture
def daemon_factory():
    started: list[DaemonProcess] = []
    # Unix socket paths must stay under 108 bytes, so not under pytest's long tmp_path.
    with tempfile.TemporaryDirectory(prefix="tp-") as root:

        def start(profiles: str, **kwargs: Any) -> DaemonProcess:
            daemon = DaemonProcess(Path(root) / "sa", profiles=profiles, **kwargs).start()
            started.append(daemon)
            return daemon

        try:
            yield start
        finally:
            for daemon in started:
                daemon.stop()


def test_the_example_profile_is_published_beside_the_fake_one(daemon_factory) -> None:
    daemon = daemon_factory("fake,example", fake_devices=2)
    devices = published_devices(daemon.root)
    assert sorted(devices) == ["example-0", "example-1", "npu-0-0", "npu-1-0"]
    for index in (0, 1):
        device = devices[f"example-{index}"]
        assert _UUID.match(device["attributes"].pop("uuid")["string"])
        assert device == {
            "name": f"example-{index}",
            "attributes": {"firmwareVersion": {"version": "1.2.3"}, "index": {"int": index},
                           "model": {"string": "Example X1"}, "type": {"string": "example"}},
            "capacity": {"memory": {"value": "8Gi"}},
        }
    log = daemon.log_text()
    assert "profile loaded profile=example distribution='ascend-dra-example-profile 0.1.0'" in log
    # Its CDI class gets a common spec of its own kind.
    assert (daemon.cdi_dir / f"k8s.{DRIVER}-example_common.yaml").exists()


def test_a_profile_whose_discovery_hangs_is_skipped_and_named(daemon_factory, tmp_path: Path) -> None:
    """Discovery is retried at every rediscovery: a profile whose npu-smi hangs today is not a
    configuration error, and the others serve meanwhile."""
    vendor = tmp_path / "vendor"
    write_distribution(vendor, "hanging-vendor-profile", {"hangs": HANGING})
    env = {"PYTHONPATH": os.pathsep.join(filter(None, [str(vendor), os.environ.get("PYTHONPATH")]))}
    daemon = daemon_factory("fake,hangs,example", fake_devices=1, env=env, extra_args=["--discovery-timeout", "0.5"])
    assert sorted(published_devices(daemon.root)) == ["example-0", "npu-0-0"]
    assert "profile 'hangs' from hanging-vendor-profile 1.0: discovery did not finish within 0.5 s" in daemon.log_text()


@pytest.mark.parametrize(("module", "reason"), [
    ("import libvendor_that_is_not_there\n", "ModuleNotFoundError: No module named 'libvendor_that_is_not_there'"),
    ("raise SystemExit('no licence for this node')\n", "SystemExit: no licence for this node"),
], ids=["import error", "sys.exit on import"])
def test_a_named_profile_that_does_not_load_stops_start_up_in_one_line(tmp_path: Path, module: str,
                                                                       reason: str) -> None:
    """A daemon told to run a profile it cannot load would serve a pool short of those devices (it
    skipped the profile with an ERROR traceback and served the others); a module calling sys.exit
    on import ended the daemon with only its own message, naming no profile (an audit)."""
    vendor = tmp_path / "vendor"
    write_distribution(vendor, "broken-vendor-profile", {"broken": module})
    with tempfile.TemporaryDirectory(prefix="tp-") as root:
        result = subprocess.run(
            [sys.executable, "-m", "ascend_dra.cli", "run", "--node-name", "n", "--standalone", root,
             "--profiles", "fake,broken"],
            capture_output=True, text=True, timeout=60,
            env={"PATH": "/usr/bin:/bin", "PYTHONPATH": os.pathsep.join(filter(None, [
                str(vendor), os.environ.get("PYTHONPATH")]))})
        assert result.returncode == 2
        assert result.stderr == (f"ascend-dra run: profile 'broken' from broken-vendor-profile 1.0: {reason}\n")
        assert not (Path(root) / "plugins").exists()


def gpu_config(source: str, requests: list[str], sharing: dict[str, Any]) -> dict[str, Any]:
    return {"source": source, "requests": requests,
            "opaque": {"driver": DRIVER, "parameters": {"apiVersion": f"{DRIVER}/v1alpha1", "kind": "GpuConfig",
                                                         "sharing": sharing}}}


def test_a_claim_gpu_config_wins_over_the_class_config_in_the_cdi_spec(daemon_factory) -> None:
    daemon = daemon_factory("gpu", fake_devices=2, extra_args=["--profile-option", "gpu.simulate=always"])
    claim = write_claim(daemon.root, claim_object(
        "train", node=daemon.node, results=[("train", "gpu-0"), ("eval", "gpu-1")],
        configs=[
            # From the claim, listed first, for request "train" only: it must still win there.
            gpu_config("FromClaim", ["train"], {"strategy": "SpacePartitioning",
                                                "spacePartitioningConfig": {"partitionCount": 2}}),
            # From the DeviceClass, for every request.
            gpu_config("FromClass", [], {"strategy": "TimeSlicing", "timeSlicingConfig": {"interval": "Long"}}),
        ],
    ))
    uid = claim["metadata"]["uid"]
    kubelet = Kubelet(daemon)
    try:
        reply = kubelet.prepare(claim)
    finally:
        kubelet.close()
    assert reply.claims[uid].error == ""
    assert sorted((d.device_name, tuple(d.cdi_device_ids)) for d in reply.claims[uid].devices) == [
        ("gpu-0", (f"k8s.{DRIVER}/gpu={uid}-gpu-0", f"k8s.{DRIVER}/gpu={uid}-metadata_train",
                   f"k8s.{DRIVER}/gpu=common")),
        ("gpu-1", (f"k8s.{DRIVER}/gpu={uid}-gpu-1", f"k8s.{DRIVER}/gpu={uid}-metadata_eval",
                   f"k8s.{DRIVER}/gpu=common")),
    ]
    spec = yaml.safe_load((daemon.cdi_dir / f"k8s.{DRIVER}-gpu_{uid}.yaml").read_text())
    env = {d["name"]: [e for e in d["containerEdits"]["env"] if e.startswith("GPU_")] for d in spec["devices"]
           if "env" in d["containerEdits"]}  # not the device metadata mounts (KEP-5304)
    assert env[f"{uid}-gpu-0"] == ["GPU_SHARING_STRATEGY=SpacePartitioning", "GPU_PARTITION_COUNT=2"]
    assert env[f"{uid}-gpu-1"] == ["GPU_SHARING_STRATEGY=TimeSlicing", "GPU_TIMESLICE_INTERVAL=Long"]
