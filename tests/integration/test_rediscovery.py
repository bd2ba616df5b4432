"""Rediscovery keeps what it knows when a profile fails, and takes in a profile that recovers."""

from __future__ import annotations

import os
import time

import yaml

from tests.claimfiles import claim_object, write_claim
from tests.distributions import write_distribution
from tests.integration.daemon import DaemonProcess, Kubelet

# One device per /dev/davinciN under ctx.dev_root; discovery raises while ctx.dev_root/FAIL exists.
FLAKY = '''
import anyio
import attrs
from ascend_dra.profiles.base import ContainerEdits, Device, Inventory

@attrs.frozen
class FlakyConfig:
    pass

class Flaky:
    name = "flaky"
    cdi_class = "flaky"
    config_types = {"FlakyConfig": FlakyConfig}

    def default_config(self):
        return FlakyConfig()

    async def discover(self, ctx):
        def scan():
            if (ctx.dev_root / "FAIL").exists():
                raise RuntimeError("driver not answering")
            return sorted(p.name for p in ctx.dev_root.glob("davinci[0-9]*"))
        names = await anyio.to_thread.run_sync(scan)
        return Inventory(devices=tuple(Device(name=f"flaky-{n[len('davinci'):]}") for n in names), source="devfs")

    def validate(self, config):
        pass

    def apply_config(self, config, devices, ctx):
        return {d.device: ContainerEdits(env=("FLAKY=1",)) for d in devices}

def factory():
    return Flaky()
'''


def published(d: DaemonProcess) -> list[str]:
    names = []
    for path in sorted((d.root / "resourceslices").glob("*.yaml")):
        names += [dev["name"] for dev in yaml.safe_load(path.read_text())["spec"].get("devices") or []]
    return sorted(names)


def wait_for(probe, what: str, within: float = 10.0) -> None:
    deadline = time.monotonic() + within
    while not probe():
        assert time.monotonic() < deadline, what
        time.sleep(0.02)


def start(short_tmp, dev) -> DaemonProcess:
    vendor = short_tmp / "vendor"
    write_distribution(vendor, "flaky-profile", {"flaky": FLAKY})
    env = {"PYTHONPATH": os.pathsep.join(filter(None, [str(vendor), os.environ.get("PYTHONPATH")]))}
    return DaemonProcess(short_tmp / "sa", profiles="fake,flaky", fake_devices=1, env=env,
                         extra_args=["--dev-root", str(dev), "--rediscover-interval", "3600"]).start()


def test_a_failed_rediscovery_keeps_the_published_devices(short_tmp):
    dev = short_tmp / "dev"
    dev.mkdir()
    (dev / "davinci0").touch()
    d = start(short_tmp, dev)
    try:
        assert published(d) == ["flaky-0", "npu-0-0"]
        (dev / "FAIL").touch()
        (dev / "davinci1").touch()  # hot-plug: rediscover now
        wait_for(lambda: "driver not answering" in d.log_text(), "the failed rediscovery logged")
        time.sleep(0.3)
        assert published(d) == ["flaky-0", "npu-0-0"]
        (dev / "FAIL").unlink()
        (dev / "davinci2").touch()
        wait_for(lambda: published(d) == ["flaky-0", "flaky-1", "flaky-2", "npu-0-0"], "the recovery published")
    finally:
        d.stop()


def test_a_profile_that_failed_at_start_is_taken_in_when_it_recovers(short_tmp):
    dev = short_tmp / "dev"
    dev.mkdir()
    (dev / "FAIL").touch()
    d = start(short_tmp, dev)
    k = Kubelet(d)
    try:
        assert published(d) == ["npu-0-0"]
        (dev / "FAIL").unlink()
        (dev / "davinci5").touch()
        wait_for(lambda: published(d) == ["flaky-5", "npu-0-0"], "the recovered profile published")
        claim = write_claim(d.root, claim_object("late", results=[("dev", "flaky-5")]))
        assert k.prepare(claim).claims[claim["metadata"]["uid"]].error == ""
    finally:
        k.close()
        d.stop()


def test_start_up_is_refused_when_every_profile_fails_to_discover(short_tmp):
    """An empty pool because nothing could be discovered is a broken node, not an idle one: the
    daemon stops (the kubelet never sees it) instead of serving nothing."""
    dev = short_tmp / "dev"
    dev.mkdir()
    (dev / "FAIL").touch()
    vendor = short_tmp / "vendor"
    write_distribution(vendor, "flaky-profile", {"flaky": FLAKY})
    env = {"PYTHONPATH": os.pathsep.join(filter(None, [str(vendor), os.environ.get("PYTHONPATH")]))}
    d = DaemonProcess(short_tmp / "sa", profiles="flaky", env=env, extra_args=["--dev-root", str(dev)])
    d.start(wait=False)
    assert d.wait_exit(30) == 1
    log = d.log_text()
    assert "refusing to start: no profile discovered its devices (flaky: discovery failed: RuntimeError: " \
           "driver not answering)" in log
    assert not [p for p in d.root.rglob("*") if p.is_socket()]


def test_a_node_with_no_devices_serves_an_empty_pool_and_says_so(short_tmp):
    dev = short_tmp / "dev"
    dev.mkdir()
    vendor = short_tmp / "vendor"
    write_distribution(vendor, "flaky-profile", {"flaky": FLAKY})
    env = {"PYTHONPATH": os.pathsep.join(filter(None, [str(vendor), os.environ.get("PYTHONPATH")]))}
    d = DaemonProcess(short_tmp / "sa", profiles="flaky", env=env, extra_args=["--dev-root", str(dev)]).start()
    try:
        assert published(d) == []
        assert "no devices found; the pool is empty until a rediscovery finds some" in d.log_text()
    finally:
        d.stop()
