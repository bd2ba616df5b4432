"""``ascend-dra discover`` output: the table, the ResourceSlice YAML and JSON, failing profiles."""

from __future__ import annotations

from pathlib import Path

import orjson
import pytest
import yaml

from ascend_dra.cli.discover import profile_notes, run
from ascend_dra.model import Inventory
from ascend_dra.profiles.ascend.npu310p import Npu310PProfile
from ascend_dra.profiles.ascend.npu910 import Npu910Profile
from tests.unit.test_ascend_discovery import ANSWERS_910A, tree_910a
from tests.unit.test_ascend_profiles import context, lab_310p3
from tests.unit.test_ascend_support import fake_npu_smi

#: The first note of an Ascend profile on a host root without ``libdcmi.so`` (this machine's ``/``).
NO_DCMI = ("no libdcmi.so in /usr/local/Ascend/driver/lib64/driver, /usr/local/Ascend/driver/lib64/common, "
           "/usr/local/Ascend/driver/lib64, /usr/local/dcmi, /usr/lib64")

pytestmark = pytest.mark.anyio


class Broken:
    name = "broken"

    async def discover(self, ctx: object) -> object:
        raise RuntimeError("no driver")


class OwnTimeout:
    """A discovery that fails at once with a TimeoutError of its own (a tool it ran timed out)."""

    name = "own-timeout"

    async def discover(self, ctx: object) -> object:
        raise TimeoutError("npu-smi did not answer within 10 s")


async def test_a_profile_s_own_timeout_is_not_reported_as_the_discovery_deadline(tmp_path: Path) -> None:
    """The command read any TimeoutError as its own 30 s deadline; it now says what the daemon says
    for the same failure (profiles/registry.py, ``discover_isolated``)."""
    text = await run([OwnTimeout()], lab_310p3(tmp_path), "table")
    assert text.splitlines()[-1] == (
        "own-timeout: discovery failed: TimeoutError: npu-smi did not answer within 10 s")


async def test_table_for_the_lab_host(tmp_path: Path) -> None:
    ctx = lab_310p3(tmp_path)
    text = await run([Npu310PProfile(), Npu910Profile(), Broken()], ctx, "table")
    assert text == (
        "PROFILE   DEVICE   CHIP   MEMORY   NUMA  TOPOLOGY  TIER\n"
        "npu-310P  npu-0-0  310P3  21525Mi  0     -         npu-smi\n"
        "npu-310P  npu-1-0  310P3  21525Mi  1     -         npu-smi\n"
        "npu-910: no devices (tier npu-smi)\n"
        f"npu-310P: dcmi: {NO_DCMI}\n"
        f"npu-310P: npu-smi: {ctx.npu_smi} (as given)\n"
        "npu-310P: physical IDs by rank (no Phy-ID column, sysfs link or phyid-remap answer): "
        "NPU 4 chip 0 -> davinci0, NPU 5 chip 0 -> davinci2\n"
        f"npu-910: dcmi: {NO_DCMI}\n"
        f"npu-910: npu-smi: {ctx.npu_smi} (as given)\n"
        "npu-910: physical IDs by rank (no Phy-ID column, sysfs link or phyid-remap answer): "
        "NPU 4 chip 0 -> davinci0, NPU 5 chip 0 -> davinci2\n"
        "broken: discovery failed: RuntimeError: no driver\n"
    )


async def test_table_with_topology_groups(tmp_path: Path) -> None:
    dev, sys_root = tree_910a(tmp_path)
    ctx = context(tmp_path, fake_npu_smi(tmp_path, ANSWERS_910A), dev, sys_root)
    lines = (await run([Npu910Profile()], ctx, "table")).splitlines()
    assert lines[0] == "PROFILE  DEVICE   CHIP  MEMORY   NUMA  TOPOLOGY  TIER"
    assert lines[1] == "npu-910  npu-0-0  910A  32768Mi  0     hccs-0    npu-smi"
    assert lines[9:] == [f"npu-910: dcmi: {NO_DCMI}", f"npu-910: npu-smi: {ctx.npu_smi} (as given)"]


async def test_yaml_is_the_resource_slices(tmp_path: Path) -> None:
    text = await run([Npu310PProfile(), Broken()], lab_310p3(tmp_path), "yaml")
    assert text.startswith("# broken: discovery failed: RuntimeError: no driver\n")
    (resource_slice,) = list(yaml.safe_load_all(text))
    assert resource_slice["apiVersion"] == "resource.k8s.io/v1"
    assert resource_slice["kind"] == "ResourceSlice"
    spec = resource_slice["spec"]
    assert (spec["driver"], spec["nodeName"], spec["pool"]) == (
        "ascend.project-hami.io", "node-a", {"name": "node-a", "generation": 1, "resourceSliceCount": 1})
    first = spec["devices"][0]
    assert first["name"] == "npu-0-0"
    assert first["capacity"] == {"aicore": {"value": "8"}, "cores": {"value": "100"}, "memory": {"value": "21525Mi"}}
    assert first["attributes"]["driverVersion"] == {"version": "25.5.1"}
    assert first["attributes"]["physicalID"] == {"int": 0}
    assert first["attributes"]["chipName"] == {"string": "310P3"}
    assert [d["attributes"]["physicalID"] for d in spec["devices"]] == [{"int": 0}, {"int": 2}]


async def test_json_is_a_list_of_resource_slices(tmp_path: Path) -> None:
    document = orjson.loads(await run([Npu310PProfile()], lab_310p3(tmp_path), "json"))
    assert (document["apiVersion"], document["kind"], len(document["items"])) == ("v1", "List", 1)
    assert [d["name"] for d in document["items"][0]["spec"]["devices"]] == ["npu-0-0", "npu-1-0"]


async def test_unknown_output_is_refused_before_discovery(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="discover: output 'xml' is not one of table, yaml, json"):
        await run([Broken()], lab_310p3(tmp_path), "xml")


class Noting:
    name = "noting"

    async def discover(self, ctx: object) -> Inventory:
        return Inventory(devices=(), source="here")

    def discovery_notes(self) -> tuple[str, ...]:
        return ("ran /opt/tool", "2 devices not published")


class NotingBadly(Noting):
    name = "noting-badly"

    def discovery_notes(self) -> tuple[str, ...]:
        raise RuntimeError("no notes today")


async def test_notes_of_any_profile_under_the_table_and_on_top_of_the_yaml(tmp_path: Path) -> None:
    ctx = lab_310p3(tmp_path)
    profiles = [Noting(), NotingBadly(), Broken()]
    assert profile_notes(profiles) == {"noting": ("ran /opt/tool", "2 devices not published")}
    assert (await run(profiles, ctx, "table")).splitlines()[-4:] == [
        "noting-badly: no devices (tier here)", "noting: ran /opt/tool", "noting: 2 devices not published",
        "broken: discovery failed: RuntimeError: no driver"]
    assert (await run(profiles, ctx, "yaml")).startswith(
        "# broken: discovery failed: RuntimeError: no driver\n# noting: ran /opt/tool\n"
        "# noting: 2 devices not published\n")
    assert "ran /opt/tool" not in await run(profiles, ctx, "json")


async def test_a_failed_npu_smi_tier_is_named_in_the_table(tmp_path: Path) -> None:
    # The trial of the README: with an npu-smi that fails, discover showed "no devices (tier
    # devfs)" and only the stderr warnings said why; the table now names the tier and the error.
    ctx = lab_310p3(tmp_path)
    failing = tmp_path / "failing-npu-smi"
    failing.write_text("#!/bin/sh\necho 'dcmi module initialize failed. ret is -8005' >&2\nexit 1\n")
    failing.chmod(0o755)
    ctx = context(tmp_path, failing, ctx.dev_root, ctx.sys_root)
    lines = (await run([Npu310PProfile()], ctx, "table")).splitlines()
    assert [line.split()[1::5] for line in lines[1:3]] == [["npu-0-0", "devfs"], ["npu-1-0", "devfs"]]
    failed = [line for line in lines if "tier npu-smi failed" in line]
    assert len(failed) == 1
    assert failed[0].startswith(f"npu-310P: tier npu-smi failed, devfs answered: run '{failing} info': exit status 1")
    assert "dcmi module initialize failed. ret is -8005" in failed[0]


async def test_an_npu_smi_not_found_is_said_once(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # The default bare name, found nowhere: the first note says so; the tier's failure said it again.
    monkeypatch.setenv("PATH", str(tmp_path / "empty-path"))
    ctx = lab_310p3(tmp_path)
    ctx = context(tmp_path, "npu-smi", ctx.dev_root, ctx.sys_root)
    lines = (await run([Npu310PProfile(host_root=tmp_path / "host")], ctx, "table")).splitlines()
    assert [line for line in lines if "not found" in line or "npu-smi failed" in line] == [
        f"npu-310P: npu-smi: npu-smi not found (searched $PATH, {tmp_path}/host/usr/local/bin/npu-smi, "
        f"{tmp_path}/host/usr/local/sbin/npu-smi, {tmp_path}/host/usr/local/Ascend/driver/tools/npu-smi)"]
