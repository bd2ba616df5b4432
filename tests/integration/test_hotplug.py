"""Hot-plug: a device node appearing in --dev-root is republished without waiting for the periodic rediscovery."""

from __future__ import annotations

import os
import time

import yaml

from tests.distributions import write_distribution
from tests.integration.daemon import DaemonProcess

# A profile that publishes one device per /dev/davinciN it finds under ctx.dev_root.
DEVNODES = '''
import anyio
import attrs
from ascend_dra.profiles.base import ContainerEdits, Device, Inventory

@attrs.frozen
class NodesConfig:
    pass

class Nodes:
    name = "devnodes"
    cdi_class = "npu"
    config_types = {"NodesConfig": NodesConfig}

    def default_config(self):
        return NodesConfig()

    async def discover(self, ctx):
        names = await anyio.to_thread.run_sync(lambda: sorted(p.name for p in ctx.dev_root.glob("davinci[0-9]*")))
        return Inventory(devices=tuple(Device(name=f"npu-{n[len('davinci'):]}-0") for n in names), source="devfs")

    def validate(self, config):
        pass

    def apply_config(self, config, devices, ctx):
        return {d.device: ContainerEdits(env=("X=1",)) for d in devices}

def factory():
    return Nodes()
'''


def published(d: DaemonProcess) -> list[str]:
    names = []
    for path in sorted((d.root / "resourceslices").glob("*.yaml")):
        obj = yaml.safe_load(path.read_text())
        names += [dev["name"] for dev in obj["spec"].get("devices") or []]
    return names


def wait_for(probe, within: float = 10.0):
    deadline = time.monotonic() + within
    while time.monotonic() < deadline:
        if probe():
            return time.monotonic()
        time.sleep(0.02)
    raise AssertionError(f"condition not met within {within} s")


def test_device_nodes_coming_and_going_are_republished(short_tmp):
    vendor = short_tmp / "vendor"
    write_distribution(vendor, "devnodes-profile", {"devnodes": DEVNODES})
    dev = short_tmp / "dev"
    dev.mkdir()
    (dev / "davinci0").touch()
    env = {"PYTHONPATH": os.pathsep.join(filter(None, [str(vendor), os.environ.get("PYTHONPATH")]))}
    d = DaemonProcess(short_tmp / "sa", profiles="devnodes", env=env,
                      extra_args=["--dev-root", str(dev), "--rediscover-interval", "3600"]).start()
    try:
        assert published(d) == ["npu-0-0"]
        (dev / "davinci1").touch()
        (dev / "unrelated-file").touch()
        wait_for(lambda: published(d) == ["npu-0-0", "npu-1-0"])
        (dev / "davinci0").unlink()
        wait_for(lambda: published(d) == ["npu-1-0"])
        generations = {yaml.safe_load(p.read_text())["spec"]["pool"]["generation"]
                       for p in (d.root / "resourceslices").glob("*.yaml")}
        assert generations == {3}
        assert "device nodes changed; rediscovering" in d.log_text()
    finally:
        d.stop()
