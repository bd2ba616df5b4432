"""The device names the documents print are the names the profiles publish (issue 40: hard-vnpu.md
said whole chips were ``npu-<logicID>-<chipID>``, ascend-discovery.md ``npu-<logicID>-0``).

Each example is found in its document by a line it holds, its names are read from the text, and the
host it describes is discovered for real: the hard-vNPU simulator's npu-smi (``npusmi_sim``) and the
simulated Lab 18 node (``labnode``), both through the real npu-smi parsing path."""

from __future__ import annotations

import re
from collections.abc import Sequence
from pathlib import Path

import pytest

from ascend_dra.model import Inventory
from ascend_dra.profiles.ascend.hardvnpu.profile import HardVnpuProfile
from ascend_dra.profiles.ascend.npu910 import Npu910Profile
from ascend_dra.profiles.ascend.sim import labnode
from ascend_dra.profiles.ascend.vnpucore.profile import VnpuCoreProfile
from ascend_dra.profiles.base import ProfileContext
from tests.hardvnpu import SimHost

pytestmark = pytest.mark.anyio

REPO = Path(__file__).resolve().parents[2]
NAME = re.compile(r"\bv?npu-\d+-\d+(?:-[a-z0-9]+)*\b")
#: A 910C host: NPUs 0 and 1, two dies each, logic and physical IDs 0..3 in that order.
A3 = ((0, 0, 0, 0, "Ascend910"), (0, 1, 1, 1, "Ascend910"), (1, 0, 2, 2, "Ascend910"), (1, 1, 3, 3, "Ascend910"))
B4 = ((0, 0, 0, 0, "910B4"),)


def example(document: str, anchor: str, blocks: int = 1) -> str:
    """The paragraph (blank-line delimited) of ``document`` holding ``anchor``, and the ``blocks - 1``
    that follow it."""
    text = (REPO / document).read_text()
    assert anchor in text, f"{document} no longer holds {anchor!r}: move this test's anchor with the example"
    paragraphs = re.split(r"\n\s*\n", text)
    at = next(i for i, p in enumerate(paragraphs) if anchor in p)
    return "\n\n".join(paragraphs[at:at + blocks])


def printed(text: str) -> set[str]:
    return set(NAME.findall(text))


def published(inventory: Inventory) -> set[str]:
    return {d.name for d in inventory.devices} | {s.name for s in inventory.counter_sets}


async def sim_discover(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, chips: Sequence[tuple[int, int, int, int, str]],
                       profile: Npu910Profile) -> Inventory:
    host = SimHost(tmp_path / "sim", chips)
    for key, value in host.env.items():
        monkeypatch.setenv(key, value)
    return await profile.discover(host.ctx())


def lab_context(lab: labnode.LabNode, tmp_path: Path) -> ProfileContext:
    return ProfileContext(node_name="node-1", driver_name="ascend.project-hami.io", npu_smi=str(lab.npu_smi),
                          dev_root=lab.dev_root, sys_root=tmp_path / "sys", state_dir=tmp_path / "state",
                          options={"HAMivNPUCore.hostRoot": str(lab.host_root)})


def ids(inventory: Inventory) -> set[tuple[str, int, int, int]]:
    return {(d.name, d.attributes["npuID"], d.attributes["chipID"], d.attributes["index"])  # type: ignore[misc]
            for d in inventory.devices if d.name.startswith("npu-")}


def table_of_ascend_discovery() -> set[tuple[str, int, int, int]]:
    rows = re.findall(r"^\| `(npu-\d+-\d+)` \| (\d+) \| (\d+) \| (\d+) \|$",
                      example("docs/ascend-discovery.md", "| device | NPU ID | chip ID | logic ID |"), re.MULTILINE)
    assert len(rows) == 4
    return {(name, int(npu), int(chip), int(logic)) for name, npu, chip, logic in rows}


@pytest.mark.parametrize("profile", [Npu910Profile, HardVnpuProfile], ids=["npu-910", "hard-vNPU"])
async def test_the_910c_table_of_ascend_discovery_is_what_the_whole_chip_profiles_publish(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, profile: type[Npu910Profile]) -> None:
    inventory = await sim_discover(tmp_path, monkeypatch, A3, profile())
    assert ids(inventory) == table_of_ascend_discovery()


async def test_hamivnpucore_names_the_chips_of_that_table_the_same_way(tmp_path: Path) -> None:
    """The same IDs on a lab node of two 310P3 Duo cards (chip IDs 0 and 1)."""
    chips = [labnode.LabChip(npu, chip, logic, physical, f"0000:{0x81 + 4 * logic:02x}:00.0",
                             f"{logic:08X}-20E05477-92C31323-6E78030A-BD003019")
             for npu, chip, logic, physical, _ in A3]
    lab = labnode.build(tmp_path / "lab", chips)
    inventory = await VnpuCoreProfile().discover(lab_context(lab, tmp_path))
    assert ids(inventory) == table_of_ascend_discovery()


async def test_the_names_hard_vnpu_md_prints_for_a_910b4_are_published(tmp_path: Path,
                                                                      monkeypatch: pytest.MonkeyPatch) -> None:
    text = example("docs/hard-vnpu.md", "For a 910B4 with logic ID 0", blocks=2)
    names = printed(text)
    assert {"npu-0-0", "npu-0-0-counters", "vnpu-0-0-vir05-1c-8g-0"} <= names
    assert names <= published(await sim_discover(tmp_path, monkeypatch, B4, HardVnpuProfile()))


async def test_the_names_hard_vnpu_md_prints_for_die_1_of_a_910c_are_published(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    names = printed(example("docs/hard-vnpu.md", "On the 910C host of"))
    assert {"npu-1-0", "npu-1-0-counters", "vnpu-1-1-vir05-1c-16g-3", "npu-3-0", "vnpu-3-1-vir05-1c-16g-0"} <= names
    assert names <= published(await sim_discover(tmp_path, monkeypatch, A3, HardVnpuProfile()))


@pytest.mark.parametrize(("document", "anchor"), [
    ("README.md", "ascend-dra discover --profiles HAMivNPUCore --node-name node-1 $LAB"),
    ("docs/ascend-hardware.md", "Lab 18's slice:"),
], ids=["README-lab-discover", "ascend-hardware-lab-slice"])
async def test_the_lab_18_names_the_documents_print_are_published(tmp_path: Path, document: str,
                                                                  anchor: str) -> None:
    line = next(line for line in example(document, anchor).splitlines() if anchor in line)
    lab = labnode.build(tmp_path / "lab")
    inventory = await VnpuCoreProfile().discover(lab_context(lab, tmp_path))
    assert printed(line) == published(inventory) == {"npu-0-0", "npu-1-0"}


async def test_the_chip_operations_md_says_is_not_offered_is_the_one_discover_names(tmp_path: Path) -> None:
    text = example("docs/operations.md", "not offered: device-share is off")
    said = re.search(r"`(npu-\d+-\d+ \(NPU \d+ chip \d+\) not offered: device-share is off)", text)
    assert said is not None
    lab = labnode.build(tmp_path / "lab")
    lab.set_device_share(5, 0, False)
    profile = VnpuCoreProfile()
    await profile.discover(lab_context(lab, tmp_path))
    assert any(note.startswith(said.group(1)) for note in profile.discovery_notes()), profile.discovery_notes()


def test_no_text_names_a_whole_chip_by_its_chip_id() -> None:
    """Whole chips are ``npu-<logicID>-0`` on every tier; only hard-vNPU's vNPU names carry the chip ID."""
    files = [REPO / "README.md", *(REPO / "docs").glob("*.md"), *(REPO / "ascend_dra").rglob("*.py")]
    wrong = [f"{f.relative_to(REPO)}: {m.group(0)}" for f in files
             for m in re.finditer(r"(?<![v\w])npu-<logicID>-<chip\w*>", f.read_text())]
    assert wrong == []
