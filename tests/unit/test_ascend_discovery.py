"""The discovery chain end to end: fake npu-smi scripts that print the real fixtures, fake /dev and sysfs trees."""

from __future__ import annotations

from pathlib import Path

import pytest

from ascend_dra.profiles.ascend.chip import NpuChip
from ascend_dra.profiles.ascend.chips import MODELS, ChipFamily, MemoryKind
from ascend_dra.profiles.ascend.discovery.chain import SimulateMode, discover_chips
from ascend_dra.profiles.ascend.discovery.devfs import scan
from ascend_dra.profiles.ascend.discovery.npusmi_tier import topology_groups
from ascend_dra.profiles.ascend.npusmi.tables import Topology, parse_topo
from tests.unit.test_ascend_support import dev_tree, fake_npu_smi, fixture, script, sys_tree

pytestmark = pytest.mark.anyio

SHARED = ["davinci_manager", "devmm_svm", "hisi_hdc"]
# 910A Atlas 800 9010 (910A_info_atlas800-9010_npu-smi-22.0.3.1.txt): NPU i sits at BUSES[i]. The fake
# sysfs numbers the davinci nodes in bus order, so physical IDs differ from logic IDs on purpose.
BUSES_910A = ["0000:61:00.0", "0000:db:00.0", "0000:b2:00.0", "0000:3e:00.0", "0000:60:00.0", "0000:da:00.0",
              "0000:b1:00.0", "0000:3d:00.0"]
PHYSICAL_910A = [3, 7, 5, 1, 2, 6, 4, 0]


def davinci_names_from_layout() -> list[str]:
    """The device nodes of ``910B1_dev_layout.txt`` (its ``ls /dev/davinci*`` line and the two ``ll`` lines)."""
    lines = fixture("910B1_dev_layout.txt").splitlines()
    listing = lines[lines.index("$ ls /dev/davinci*") + 1].split()
    others = [line.split()[-1] for line in lines if line.startswith("crw")]
    return [Path(p).name for p in listing + others]


def tree_910a(tmp_path: Path, *, links: bool = True) -> tuple[Path, Path]:
    names = davinci_names_from_layout()
    assert names == [f"davinci{i}" for i in range(8)] + ["davinci_manager", "hisi_hdc", "devmm_svm"]
    dev = dev_tree(tmp_path, names)
    functions = {bus: ("0x19e5", "0xd801", 0 if bus[5] in "36" else 1) for bus in BUSES_910A}
    davinci = {PHYSICAL_910A[i]: bus for i, bus in enumerate(BUSES_910A)} if links else {}
    return dev, sys_tree(tmp_path, functions, davinci)


ANSWERS_910A = {
    "info": "910A_info_atlas800-9010_npu-smi-22.0.3.1.txt",
    "info -m": "910A_info_-m_atlas800-9010.txt",
    "info -t board -i 0": "910A_info_-t_board_-i.txt",
    "info -t board -i 0 -c 0": "910A_info_-t_board_-i_-c_VDieID.txt",
    "info -t common -i 0": "910A_info_-t_common_-i_0_with_mcu.txt",
    "info -t topo": "910B3_info_-t_topo.txt",
}


async def run_chain(tmp_path: Path, exe: Path | str, dev: Path, sys_root: Path, **kwargs: object):
    return await discover_chips(npu_smi=str(exe), dev_root=dev, sys_root=sys_root, node_name="node-a", **kwargs)


async def test_npu_smi_tier_310p3_lab_host(tmp_path: Path) -> None:
    """Lab 13/18 host: NPU IDs 4/5, logic IDs 0/1 (Device column), physical IDs 0/2 (davinci0, davinci2)."""
    exe = fake_npu_smi(tmp_path, {"info": "310P3_info.txt"})
    dev = dev_tree(tmp_path, ["davinci0", "davinci2", *SHARED])
    sys_root = sys_tree(tmp_path, {"0000:81:00.0": ("0x19e5", "0xd500", 0), "0000:85:00.0": ("0x19e5", "0xd500", 1)})
    found = await run_chain(tmp_path, exe, dev, sys_root)
    assert found.source == "npu-smi"
    assert found.failures == ()
    common = {"chip_id": 0, "chip_name": "310P3", "family": ChipFamily.ASCEND310P, "health": "OK",
              "memory_mib": 21525, "memory_kind": MemoryKind.DDR, "aicore_count": 8, "driver_version": "25.5.1"}
    assert found.chips == (
        NpuChip(logic_id=0, physical_id=0, npu_id=4, pci_address="0000:81:00.0", numa_node=0, **common),
        NpuChip(logic_id=1, physical_id=2, npu_id=5, pci_address="0000:85:00.0", numa_node=1, **common),
    )


async def test_npu_smi_tier_950_npu_id_table_physical_ids_from_sysfs(tmp_path: Path) -> None:
    """Three 950PR (``Ascend950PR``, HBM, two in Alarm) with only ``npu-smi info`` answering: the
    physical IDs come from the davinci nodes' PCI addresses, the logic IDs by the devfs rule."""
    exe = fake_npu_smi(tmp_path, {"info": "950PR_info_Alarm_processes_drv25.7.rc1.txt"})
    dev = dev_tree(tmp_path, ["davinci0", "davinci1", "davinci2", *SHARED])
    davinci = {2: "0000:71:00.0", 1: "0000:61:00.0", 0: "0000:81:00.0"}  # NPU 0, 1, 2 in table order
    sys_root = sys_tree(tmp_path, {bus: ("0x19e5", "0xd806", 0) for bus in davinci.values()}, davinci)
    found = await run_chain(tmp_path, exe, dev, sys_root)
    assert found.source == "npu-smi"
    assert found.failures == ()
    assert [(c.logic_id, c.physical_id, c.npu_id, c.chip_id, c.pci_address, c.health, c.memory_mib)
            for c in found.chips] == [(0, 0, 2, 0, "0000:81:00.0", "OK", 131072),
                                      (1, 1, 1, 0, "0000:61:00.0", "Alarm", 114688),
                                      (2, 2, 0, 0, "0000:71:00.0", "Alarm", 114688)]
    assert {(c.chip_name, c.family, c.memory_kind, c.driver_version) for c in found.chips} == {
        ("Ascend950PR", ChipFamily.ASCEND950, MemoryKind.HBM, "25.7.rc1")}


async def test_npu_smi_tier_950_uuid_from_the_card_level_ddie_id(tmp_path: Path,
                                                                caplog: pytest.LogCaptureFixture) -> None:
    """The 950's npu-smi takes no ``-c``: its board ``-i N`` names one device and prints its
    ``DDie ID``, which becomes the uuid; no chip-level board call is made (none fails)."""
    exe = fake_npu_smi(tmp_path, {"info": "950PR_info_Alarm_processes_drv25.7.rc1.txt",
                                  "info -t board -i 0": "950_info_-t_board_-i.txt"})
    dev = dev_tree(tmp_path, ["davinci0", "davinci1", "davinci2", *SHARED])
    davinci = {2: "0000:71:00.0", 1: "0000:61:00.0", 0: "0000:81:00.0"}
    sys_root = sys_tree(tmp_path, {bus: ("0x19e5", "0xd806", 0) for bus in davinci.values()}, davinci)
    with caplog.at_level("INFO"):
        found = await run_chain(tmp_path, exe, dev, sys_root)
    assert found.source == "npu-smi"
    assert {c.npu_id: c.uuid for c in found.chips} == {
        0: "870408E3-2120D518-77936EE6-80B40A0A-D4100003", 1: None, 2: None}
    asked = [str(getattr(r, "what", "")) for r in caplog.records]
    assert [w for w in asked if "-c" in w] == []
    assert "board -i 1" in asked  # the other NPUs' board calls failed (no answer in the fake)


async def test_npu_smi_tier_910a_with_enrichments_sysfs_ids_and_topology(tmp_path: Path) -> None:
    exe = fake_npu_smi(tmp_path, ANSWERS_910A)
    dev, sys_root = tree_910a(tmp_path)
    found = await run_chain(tmp_path, exe, dev, sys_root)
    assert found.source == "npu-smi"
    chips = found.chips
    assert [c.logic_id for c in chips] == list(range(8))
    assert [c.npu_id for c in chips] == list(range(8))
    assert [c.physical_id for c in chips] == PHYSICAL_910A
    assert [c.pci_address for c in chips] == BUSES_910A
    assert [c.numa_node for c in chips] == [0, 1, 1, 0, 0, 1, 1, 0]
    assert chips[0] == NpuChip(
        logic_id=0, physical_id=3, chip_id=0, npu_id=0, chip_name="910A", family=ChipFamily.ASCEND910,
        health="OK", pci_address="0000:61:00.0", numa_node=0, uuid="42C711D4-20B03704-4A10C8D4-14CC040A-D2102003",
        memory_mib=32768, memory_kind=MemoryKind.HBM, aicore_count=32, driver_version="23.0.5", hccs=True,
        topology_group="hccs-0", cpu_affinity="144-167")
    # The fake npu-smi answers board/common only for NPU 0: the others lack those attributes.
    assert [c.uuid for c in chips[1:]] == [None] * 7
    assert [c.aicore_count for c in chips[1:]] == [None] * 7
    assert [c.driver_version for c in chips[1:]] == ["22.0.3.1"] * 7
    assert {c.topology_group for c in chips} == {"hccs-0"}
    assert [c.cpu_affinity for c in chips] == ["144-167", "144-167", "96-119", "96-119", "0-23", "0-23",
                                               "48-71", "48-71"]


async def test_missing_npu_smi_falls_back_to_devfs(tmp_path: Path) -> None:
    dev, sys_root = tree_910a(tmp_path)
    found = await run_chain(tmp_path, tmp_path / "absent" / "npu-smi", dev, sys_root)
    assert found.source == "devfs"
    assert len(found.failures) == 1 and "No such file or directory" in found.failures[0]
    by_physical = {bus: PHYSICAL_910A[i] for i, bus in enumerate(BUSES_910A)}
    assert found.chips == tuple(
        NpuChip(logic_id=n, physical_id=n, family=ChipFamily.ASCEND910, memory_kind=MemoryKind.HBM,
                pci_address=bus, numa_node=0 if bus[5] in "36" else 1)
        for n, bus in sorted((p, b) for b, p in by_physical.items()))


async def test_failing_npu_smi_falls_back_to_devfs(tmp_path: Path) -> None:
    exe = fake_npu_smi(tmp_path, {"info": (1, "dcmi module initialize failed. ret is -8005")})
    dev, sys_root = tree_910a(tmp_path)
    found = await run_chain(tmp_path, exe, dev, sys_root)
    assert found.source == "devfs"
    assert found.failures == (f"run '{exe} info': exit status 1: dcmi module initialize failed. ret is -8005",)
    assert [c.physical_id for c in found.chips] == list(range(8))


async def test_hanging_npu_smi_falls_back_to_devfs(tmp_path: Path) -> None:
    exe = script(tmp_path, "#!/bin/sh\nexec sleep 30\n")
    dev, sys_root = tree_910a(tmp_path)
    found = await run_chain(tmp_path, exe, dev, sys_root, timeout_s=0.3)
    assert found.source == "devfs"
    assert found.failures == (f"run '{exe} info': no answer within 0.3 s; the process was killed",)


async def test_garbage_npu_smi_falls_back_to_devfs(tmp_path: Path) -> None:
    exe = script(tmp_path, "#!/bin/sh\necho 'Segmentation fault'\necho '| 0 | 1 |'\n")
    dev, sys_root = tree_910a(tmp_path)
    found = await run_chain(tmp_path, exe, dev, sys_root)
    assert found.source == "devfs"
    assert found.failures == (f"parse '{exe} info': line 2 '| 0 | 1 |': table row before the "
                              "'npu-smi ... Version:' title",)


async def test_910c_dies_sharing_a_phy_id_fail_the_tier(tmp_path: Path) -> None:
    """The anonymised in-container 910C sample prints Phy-ID 0 for both dies: never published."""
    mapping = tmp_path / "mapping.txt"
    mapping.write_text("NPU ID    Chip ID    Chip Logic ID    Chip Name\n0    0    0    Ascend910\n"
                       "0    1    1    Ascend910\n")
    exe = fake_npu_smi(tmp_path, {"info": "910C_A3_info_in_container_vcann-rt_anonymised.txt",
                                  "info -m": str(mapping)})
    dev = dev_tree(tmp_path, SHARED)
    found = await run_chain(tmp_path, exe, dev, sys_tree(tmp_path, {}))
    assert (found.source, found.chips) == ("devfs", ())
    assert found.failures == (f"parse '{exe} info': output: NPU 0 chip 0 and NPU 0 chip 1 share physical ID 0",)


async def test_no_physical_id_fails_the_tier(tmp_path: Path) -> None:
    exe = fake_npu_smi(tmp_path, {"info": "310P3_info.txt"})
    dev = dev_tree(tmp_path, ["davinci0", *SHARED])
    found = await run_chain(tmp_path, exe, dev, sys_tree(tmp_path, {}))
    assert found.source == "devfs"
    assert [c.physical_id for c in found.chips] == [0]
    assert "no physical ID for NPU 4 chip 0" in found.failures[0]


async def test_enrichments_stop_after_the_first_timeout(tmp_path: Path) -> None:
    log = tmp_path / "calls.log"
    info = fixture("910B3_info.txt").replace("'", "'\\''")
    exe = script(tmp_path, f"""#!/bin/sh
echo "$*" >> {log}
case "$*" in
  info) printf '%s' '{info}' ;;
  "info -m") exec cat {Path(__file__).parent.parent / 'fixtures' / 'npu-smi' / '910A_info_-m_atlas800-9010.txt'} ;;
  *) exec sleep 30 ;;
esac
""")
    dev = dev_tree(tmp_path, [f"davinci{i}" for i in range(8)] + SHARED)
    found = await run_chain(tmp_path, exe, dev, sys_tree(tmp_path, {}), timeout_s=0.5)
    assert found.source == "npu-smi"
    assert [(c.logic_id, c.physical_id, c.memory_mib, c.aicore_count, c.uuid) for c in found.chips] == [
        (i, i, 65536, 20, None) for i in range(8)]
    calls = log.read_text().splitlines()
    # info, info -m, then at most the 4 enrichment calls in flight when the first one timed out.
    assert calls[:2] == ["info", "info -m"]
    assert 1 <= len(calls) - 2 <= 4
    assert "info -t topo" not in calls


async def test_simulated_only_when_asked(tmp_path: Path) -> None:
    dev = dev_tree(tmp_path, [])
    sys_root = sys_tree(tmp_path, {})
    missing = tmp_path / "npu-smi"
    never = await run_chain(tmp_path, missing, dev, sys_root)
    assert (never.source, never.chips) == ("devfs", ())
    fallback = await run_chain(tmp_path, missing, dev, sys_root, simulate=SimulateMode.FALLBACK,
                               simulated_model=MODELS["910B3"], simulated_count=2)
    assert fallback.source == "simulated"
    assert fallback.failures[-1] == f"no davinci<N> device node under {dev}"
    assert fallback.chips[1] == NpuChip(
        logic_id=1, physical_id=1, chip_id=0, npu_id=1, chip_name="910B3", family=ChipFamily.ASCEND910B,
        health="OK", uuid="9B3BE81B-C9959B1E-F6FD9718-10A88745-EAB9E4EE", memory_mib=65536,
        memory_kind=MemoryKind.HBM, aicore_count=20, driver_version="25.5.1")


async def test_simulate_always_skips_a_working_npu_smi(tmp_path: Path) -> None:
    exe = fake_npu_smi(tmp_path, {"info": "310P3_info.txt"})
    found = await run_chain(tmp_path, exe, dev_tree(tmp_path, []), sys_tree(tmp_path, {}),
                            simulate=SimulateMode.ALWAYS, simulated_model=MODELS["310P3"], simulated_count=3)
    assert found.source == "simulated"
    assert [(c.physical_id, c.memory_mib, c.aicore_count) for c in found.chips] == [(i, 21527, 8) for i in range(3)]


def test_devfs_without_links_uses_the_node_wide_family(tmp_path: Path) -> None:
    dev, sys_root = tree_910a(tmp_path, links=False)
    chips = scan(dev, sys_root)
    assert [(c.logic_id, c.physical_id, c.family, c.pci_address, c.numa_node) for c in chips] == [
        (i, i, ChipFamily.ASCEND910, None, None) for i in range(8)]


def test_devfs_without_davinci_nodes_finds_nothing(tmp_path: Path) -> None:
    assert scan(dev_tree(tmp_path, SHARED), sys_tree(tmp_path, {})) == ()
    assert scan(tmp_path / "no-dev", tmp_path / "no-sys") == ()


def test_topology_groups_910b3_is_one_hccs_group() -> None:
    groups = topology_groups(parse_topo(fixture("910B3_info_-t_topo.txt")))
    assert groups == {i: "hccs-0" for i in range(8)}


def test_topology_groups_two_rings_and_a_pcie_only_chip() -> None:
    hccs, sys_ = "HCCS", "SYS"
    links = []
    for a in range(5):
        links.append(tuple("X" if a == b else hccs if a < 4 and b < 4 and (a < 2) == (b < 2) else sys_
                           for b in range(5)))
    topo = Topology(ids=(0, 1, 2, 3, 4), links=tuple(links), cpu_affinity=(None,) * 5)
    assert topology_groups(topo) == {0: "hccs-0", 1: "hccs-0", 2: "hccs-1", 3: "hccs-1"}


async def test_a_vdie_id_reported_by_two_chips_is_dropped(tmp_path: Path) -> None:
    answers = {**ANSWERS_910A, "info -t board -i 1 -c 0": "910A_info_-t_board_-i_-c_VDieID.txt",
               "info -t board -i 2 -c 0": "910_info_-t_board_-i_-c_VDie_NDie_gpustack.txt"}
    dev, sys_root = tree_910a(tmp_path)
    found = await run_chain(tmp_path, fake_npu_smi(tmp_path, answers), dev, sys_root)
    assert [c.uuid for c in found.chips[:3]] == [None, None, "901421D4-02103514-1711E613-6DA7040A-00102001"]


async def test_npu_smi_tier_950_aicore_count_from_the_one_block_common(tmp_path: Path) -> None:
    """The 950's ``-t common -i N`` prints one block without ``Chip ID``: its ``Aicore Count`` is
    the count of the NPU's one chip (chip 0 in ``npu-smi info``); the catalogue has no 950 model."""
    exe = fake_npu_smi(tmp_path, {"info": "950PR_info_Alarm_processes_drv25.7.rc1.txt",
                                  "info -t common -i 0": "950_info_-t_common_-i_0.txt"})
    dev = dev_tree(tmp_path, ["davinci0", "davinci1", "davinci2", *SHARED])
    davinci = {2: "0000:71:00.0", 1: "0000:61:00.0", 0: "0000:81:00.0"}
    sys_root = sys_tree(tmp_path, {bus: ("0x19e5", "0xd806", 0) for bus in davinci.values()}, davinci)
    found = await run_chain(tmp_path, exe, dev, sys_root)
    assert {c.npu_id: c.aicore_count for c in found.chips} == {0: 32, 1: None, 2: None}
