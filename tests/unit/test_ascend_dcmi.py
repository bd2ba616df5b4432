"""The DCMI tier against the npu-smi tier: one fake host drives both (tests/dcmisim), and they must agree.

Each host is written once (``host.json`` for the npu-smi simulator and the test ``libdcmi.so``, /dev,
sysfs); the same profile discovers it twice, once from a host root without ``libdcmi.so`` (npu-smi
answers) and once from one with it (DCMI answers). Every chip, field by field, and every published
device, attribute by attribute, must be the same.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest

from ascend_dra.profiles.ascend.npu310p import Npu310PProfile
from ascend_dra.profiles.ascend.npu910 import Npu910Profile
from ascend_dra.profiles.ascend.profile import AscendChipProfile
from ascend_dra.profiles.ascend.sim import npusmi_sim
from tests.dcmisim import FakeHost, fake_host

pytestmark = pytest.mark.anyio


def chips(rows: list[tuple[int, int, int, int, str]], **extra: object) -> list[dict[str, object]]:
    """``(npu ID, chip ID, logic ID, physical ID, model)`` rows; each chip gets its own bus."""
    return [{"npu_id": n, "chip_id": c, "logic_id": logic, "physical_id": p, "model": m,
             "bus_id": f"0000:{0x11 + 4 * i:02X}:00.0", **extra} for i, (n, c, logic, p, m) in enumerate(rows)]


#: Hosts, and the profile that publishes their chips.
HOSTS: dict[str, tuple[list[dict[str, object]], type[AscendChipProfile]]] = {
    # Lab 18: NPU IDs 4/5, logic 0/1, physical 0/2 (docs/ascend-hardware.md#the-ids).
    "310P3 Lab 18": (chips([(4, 0, 0, 0, "310P3"), (5, 0, 1, 2, "310P3")]), Npu310PProfile),
    # Two 300I Duo cards: two chips per NPU, both chips of a card printing the card's one bus ID.
    "310P3 Duo, shared bus": ([{**c, "bus_id": f"0000:{0x81 + 4 * (c['npu_id'] - 1):02X}:00.0"}
                              for c in chips([(1, 0, 0, 0, "310P3"), (1, 1, 1, 1, "310P3"),
                                              (2, 0, 2, 2, "310P3"), (2, 1, 3, 3, "310P3")])], Npu310PProfile),
    # Eight 910B4, physical IDs in another order than the logic IDs (sysfs ties them to the buses).
    "910B4 x8, physical order shuffled": (chips([(n, 0, n, p, "910B4") for n, p in
                                                 enumerate((3, 7, 5, 1, 2, 6, 4, 0))]), Npu910Profile),
    "910B3 x16": (chips([(n, 0, n, n, "910B3") for n in range(16)]), Npu910Profile),
    "910A x2, 30 AI cores": (chips([(0, 0, 0, 0, "910A"), (1, 0, 1, 1, "910A")]), Npu910Profile),
    # A3: two dies per NPU.
    "910C x2 (4 dies)": (chips([(0, 0, 0, 0, "Ascend910"), (0, 1, 1, 1, "Ascend910"), (1, 0, 2, 2, "Ascend910"),
                                (1, 1, 3, 3, "Ascend910")]), Npu910Profile),
    "910B4 health: Warning, Alarm, Critical, UNKNOWN": (
        [{**c, "health": h} for c, h in zip(chips([(n, 0, n, n, "910B4") for n in range(5)]),
                                            ("OK", "Warning", "Alarm", "Critical", "UNKNOWN"), strict=True)],
        Npu910Profile),
    # A DCMI health value npu-smi cannot name: npu-smi prints no first row; neither tier publishes it.
    "910B4 health value 7": ([{**c, "health": 7 if c["npu_id"] == 1 else 0}
                              for c in chips([(0, 0, 0, 0, "910B4"), (1, 0, 1, 1, "910B4")])], Npu910Profile),
    # A chip the host does not give a die ID, memory or AI cores for: unknown on both tiers.
    "910B4 facts unknown": ([{**c, "die_id": None, "memory_mib": None, "aicore": None} if c["npu_id"] == 1 else c
                             for c in chips([(0, 0, 0, 0, "910B4"), (1, 0, 1, 1, "910B4")])], Npu910Profile),
    # A chip without a bus ID (npu-smi prints NA; DCMI's PCIe call says "not supported").
    "310P3 bus NA": ([{**c, "bus_id": None} if c["npu_id"] == 1 else c
                      for c in chips([(0, 0, 0, 0, "310P3"), (1, 0, 1, 1, "310P3")])], Npu310PProfile),
}


@pytest.fixture
def dcmi_host(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Callable[[list[dict[str, object]]], FakeHost]:
    def make(rows: list[dict[str, object]]) -> FakeHost:
        host = fake_host(tmp_path, rows)
        monkeypatch.setenv(npusmi_sim.ENV_DIR, str(host.sim_dir))
        return host
    return make


@pytest.mark.parametrize("name", list(HOSTS))
async def test_both_tiers_agree_on_every_chip_and_device(name: str, dcmi_host) -> None:
    rows, profile_type = HOSTS[name]
    host = dcmi_host(rows)
    by_npu_smi = profile_type(host_root=host.plain_root)
    by_dcmi = profile_type(host_root=host.dcmi_root)
    try:
        expected = await by_npu_smi.discover(host.ctx())
        got = await by_dcmi.discover(host.ctx())
    finally:
        by_dcmi.close()
    assert (expected.source, got.source) == ("npu-smi", "dcmi")
    assert by_npu_smi.last_discovery is not None and by_dcmi.last_discovery is not None
    assert by_dcmi.last_discovery.chips == by_npu_smi.last_discovery.chips
    assert got.devices == expected.devices
    assert len(got.devices) == len([r for r in rows if r.get("health", 0) != 7])
    # The same chips left out (DCMI also knows the NPU ID of a chip npu-smi prints without its first row).
    assert [(d.physical_id, d.chip_id) for d in by_dcmi.last_discovery.dropped] == \
        [(d.physical_id, d.chip_id) for d in by_npu_smi.last_discovery.dropped]


async def test_the_dcmi_tier_says_which_library_answered(dcmi_host) -> None:
    host = dcmi_host(HOSTS["310P3 Lab 18"][0])
    profile = Npu310PProfile(host_root=host.dcmi_root)
    try:
        inventory = await profile.discover(host.ctx())
    finally:
        profile.close()
    assert inventory.source == "dcmi"
    library = host.dcmi_root / "usr/local/dcmi/libdcmi.so"
    assert profile.discovery_notes()[:2] == (f"dcmi: {library} (ascend-dra test DCMI 1)",
                                             f"npu-smi: {host.ctx().npu_smi} (as given)")
