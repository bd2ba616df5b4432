"""Finding npu-smi: $PATH, then the driver's install locations under a host root (real executables, no mocks)."""

from __future__ import annotations

from pathlib import Path

import pytest

from ascend_dra.cli.discover import run
from ascend_dra.profiles.ascend.discovery.chain import discover_chips
from ascend_dra.profiles.ascend.npu310p import Npu310PProfile
from ascend_dra.profiles.ascend.npusmi.locate import STANDARD_LOCATIONS, locate_npu_smi
from tests.unit.test_ascend_discovery import SHARED
from tests.unit.test_ascend_profiles import context
from tests.unit.test_ascend_support import dev_tree, fake_npu_smi, sys_tree


def install(host: Path, location: str, answers: dict[str, str] | None = None) -> Path:
    """Put a real npu-smi stand-in (printing the Lab 18 table) at ``location`` under ``host``."""
    target = host / location.lstrip("/")
    target.parent.mkdir(parents=True, exist_ok=True)
    made = fake_npu_smi(target.parent, answers or {"info": "310P3_info.txt"})
    assert made == target
    return target


def lab_tree(tmp_path: Path) -> tuple[Path, Path]:
    dev = dev_tree(tmp_path, ["davinci0", "davinci2", *SHARED])
    sys_root = sys_tree(tmp_path, {"0000:81:00.0": ("0x19e5", "0xd500", 0), "0000:85:00.0": ("0x19e5", "0xd500", 1)})
    return dev, sys_root


@pytest.mark.parametrize("location", STANDARD_LOCATIONS, ids=["usr-local-bin", "usr-local-sbin", "driver-tools"])
def test_the_default_name_is_found_in_each_standard_location(tmp_path: Path, location: str) -> None:
    host = tmp_path / "host"
    exe = install(host, location)
    located = locate_npu_smi("npu-smi", host_root=host, search_path=str(tmp_path / "empty-path"))
    assert (located.executable, located.how, located.found) == (str(exe), "standard location", True)
    assert located.describe() == f"{exe} (not on $PATH; found in the driver's install location)"


def test_path_wins_over_the_standard_locations(tmp_path: Path) -> None:
    host = tmp_path / "host"
    install(host, "/usr/local/Ascend/driver/tools/npu-smi")
    on_path = tmp_path / "bin"
    on_path.mkdir()
    exe = fake_npu_smi(on_path, {"info": "310P3_info.txt"})
    located = locate_npu_smi("npu-smi", host_root=host, search_path=str(on_path))
    assert (located.executable, located.how) == (str(exe), "on PATH")


def test_standard_locations_are_searched_in_reference_order(tmp_path: Path) -> None:
    host = tmp_path / "host"
    install(host, "/usr/local/Ascend/driver/tools/npu-smi")
    sbin = install(host, "/usr/local/sbin/npu-smi")
    assert locate_npu_smi("npu-smi", host_root=host, search_path="").executable == str(sbin)


def test_a_non_executable_file_in_a_standard_location_is_skipped(tmp_path: Path) -> None:
    host = tmp_path / "host"
    (host / "usr/local/bin").mkdir(parents=True)
    (host / "usr/local/bin/npu-smi").write_text("#!/bin/sh\n")
    tools = install(host, "/usr/local/Ascend/driver/tools/npu-smi")
    assert locate_npu_smi("npu-smi", host_root=host, search_path="").executable == str(tools)


def test_an_explicit_path_or_name_is_used_as_given(tmp_path: Path) -> None:
    host = tmp_path / "host"
    install(host, "/usr/local/bin/npu-smi")
    for requested in (str(tmp_path / "elsewhere" / "npu-smi"), "my-npu-smi"):
        located = locate_npu_smi(requested, host_root=host, search_path="")
        assert (located.executable, located.how, located.searched) == (requested, "as given", ())


def test_nothing_found_names_every_place_searched(tmp_path: Path) -> None:
    host = tmp_path / "host"
    located = locate_npu_smi("npu-smi", host_root=host, search_path="/nowhere")
    assert (located.executable, located.found) == ("npu-smi", False)
    assert located.searched == ("$PATH=/nowhere", *(str(host / p.lstrip("/")) for p in STANDARD_LOCATIONS))
    assert located.describe() == ("npu-smi not found (searched $PATH, " + ", ".join(
        str(host / p.lstrip("/")) for p in STANDARD_LOCATIONS) + ")")


@pytest.mark.anyio
async def test_a_node_without_npu_smi_on_path_still_uses_the_npu_smi_tier(tmp_path: Path) -> None:
    """Before: PATH only, so this node fell back to devfs and lost memory, AI cores and NPU IDs."""
    host = tmp_path / "host"
    exe = install(host, "/usr/local/Ascend/driver/tools/npu-smi")
    dev, sys_root = lab_tree(tmp_path)
    found = await discover_chips(npu_smi="npu-smi", dev_root=dev, sys_root=sys_root, node_name="node-a",
                                 host_root=host, search_path=str(tmp_path / "empty-path"))
    assert found.source == "npu-smi"
    assert [(c.npu_id, c.memory_mib, c.aicore_count) for c in found.chips] == [(4, 21525, 8), (5, 21525, 8)]
    assert found.npu_smi is not None and found.npu_smi.executable == str(exe)


@pytest.mark.anyio
async def test_discover_says_which_binary_was_used(tmp_path: Path) -> None:
    host = tmp_path / "host"
    exe = install(host, "/usr/local/sbin/npu-smi")
    dev, sys_root = lab_tree(tmp_path)
    ctx = context(tmp_path, "npu-smi", dev, sys_root)
    profile = Npu310PProfile(host_root=host, search_path="")
    table = (await run([profile], ctx, "table")).splitlines()
    assert table[1].split()[-1] == "npu-smi"
    assert f"npu-310P: npu-smi: {exe} (not on $PATH; found in the driver's install location)" in table
    lines = (await run([Npu310PProfile(host_root=host, search_path="")], ctx, "yaml")).splitlines()
    assert lines[0].startswith(f"# npu-310P: dcmi: no libdcmi.so in {host}/usr/local/Ascend/driver/lib64/driver, ")
    assert lines[1] == f"# npu-310P: npu-smi: {exe} (not on $PATH; found in the driver's install location)"


@pytest.mark.anyio
async def test_npu_smi_found_nowhere_falls_back_with_the_places_searched(tmp_path: Path) -> None:
    host = tmp_path / "host"
    dev, sys_root = lab_tree(tmp_path)
    found = await discover_chips(npu_smi="npu-smi", dev_root=dev, sys_root=sys_root, node_name="node-a",
                                 host_root=host, search_path="/nowhere")
    assert found.source == "devfs"
    places = ", ".join(str(host / p.lstrip("/")) for p in STANDARD_LOCATIONS)
    assert found.failures == (f"run 'npu-smi info': npu-smi executable 'npu-smi' not usable: not on $PATH nor in "
                              f"the driver's install locations ({places})",)
