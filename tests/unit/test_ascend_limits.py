"""Published devices stay within the resource.k8s.io/v1 limits (docs/architecture.md#api-objects-and-limits), for every
fixture-driven node and for generated chips and npu-smi outputs (hypothesis)."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from ascend_dra.model import Device, Inventory, Version
from ascend_dra.profiles.ascend.chip import NpuChip
from ascend_dra.profiles.ascend.chips import ChipFamily, MemoryKind
from ascend_dra.profiles.ascend.npu310p import Npu310PProfile
from ascend_dra.profiles.ascend.npu910 import Npu910Profile
from ascend_dra.profiles.ascend.npusmi.errors import NpuSmiParseError
from ascend_dra.profiles.ascend.npusmi.tables import parse_info
from ascend_dra.profiles.checks import device_problems
from tests.unit.test_ascend_discovery import ANSWERS_910A, SHARED, tree_910a
from tests.unit.test_ascend_profiles import context, lab_310p3
from tests.unit.test_ascend_support import dev_tree, fake_npu_smi, fixture, sys_tree

# The API's rules, written out independently of the code under test.
C_IDENTIFIER = re.compile(r"[A-Za-z_][A-Za-z0-9_]{0,31}")
DNS_SUBDOMAIN = re.compile(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*")


def qualified_name(name: str) -> bool:
    """``<id>`` or ``<domain>/<id>`` (QualifiedName: a DNS subdomain of at most 63, then a C identifier)."""
    domain, slash, ident = name.rpartition("/")
    return bool(C_IDENTIFIER.fullmatch(ident)) and (not slash or (len(domain) <= 63
                                                                 and bool(DNS_SUBDOMAIN.fullmatch(domain))))
DNS_LABEL = re.compile(r"[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?")
N, P, B = r"(0|[1-9]\d*)", r"(0|[1-9]\d*|\d*[a-zA-Z-][0-9a-zA-Z-]*)", r"[0-9a-zA-Z-]+"
SEMVER = re.compile(rf"{N}\.{N}\.{N}(-{P}(\.{P})*)?(\+{B}(\.{B})*)?")


def assert_within_limits(device: Device) -> None:
    assert DNS_LABEL.fullmatch(device.name), device.name
    assert len(device.attributes) + len(device.capacities) <= 32
    for name, value in device.attributes.items():
        assert qualified_name(name), name
        if isinstance(value, Version):
            assert SEMVER.fullmatch(value) and len(value) <= 64, value
        elif isinstance(value, str):
            assert len(value) <= 64, (name, value)
        elif isinstance(value, int) and not isinstance(value, bool):
            assert -(2**63) <= value < 2**63
    for name in device.capacities:
        assert C_IDENTIFIER.fullmatch(name), name
    assert device_problems(device) == []


FIXTURE_NODES = ["310P3-lab", "910A-9010", "310-4chips", "simulated-910", "simulated-310P"]


async def fixture_node(tmp_path: Path, scenario: str) -> Inventory:
    """Discover one of the fixture nodes through a fake npu-smi fed the real outputs (or the simulated tier)."""
    if scenario == "310P3-lab":
        profile, ctx = Npu310PProfile(), lab_310p3(tmp_path)
    elif scenario == "910A-9010":
        dev, sys_root = tree_910a(tmp_path)
        profile, ctx = Npu910Profile(), context(tmp_path, fake_npu_smi(tmp_path, ANSWERS_910A), dev, sys_root)
    elif scenario == "310-4chips":
        exe = fake_npu_smi(tmp_path, {"info": "310_info_atlas800-3000_4chips-per-card_npu-smi-21.0.4.txt",
                                      "info -m": "310_info_-m_atlas800-3000_MiniD_Mcu.txt"})
        dev = dev_tree(tmp_path, ["davinci3", "davinci4", "davinci5", "davinci6", *SHARED])
        profile, ctx = Npu310PProfile(), context(tmp_path, exe, dev, sys_tree(tmp_path, {}))
    else:
        profile = Npu910Profile() if scenario.endswith("910") else Npu310PProfile()
        ctx = context(tmp_path, tmp_path / "none", dev_tree(tmp_path, []), sys_tree(tmp_path, {}), simulate="always")
    return await profile.discover(ctx)


@pytest.mark.anyio
@pytest.mark.parametrize("scenario", FIXTURE_NODES)
async def test_fixture_nodes_publish_within_limits(tmp_path: Path, scenario: str) -> None:
    inventory = await fixture_node(tmp_path, scenario)
    assert inventory.devices
    for device in inventory.devices:
        assert_within_limits(device)


printable = st.text(st.characters(min_codepoint=33, max_codepoint=126), max_size=80)
chips = st.builds(
    NpuChip,
    logic_id=st.integers(0, 2**40),
    physical_id=st.integers(0, 2**40),
    chip_id=st.integers(0, 2**40),
    npu_id=st.none() | st.integers(-(2**70), 2**70),
    chip_name=st.none() | printable,
    family=st.none() | st.sampled_from(ChipFamily),
    health=st.none() | printable,
    pci_address=st.none() | printable,
    numa_node=st.none() | st.integers(-(2**70), 2**70),
    uuid=st.none() | printable,
    memory_mib=st.none() | st.integers(-5, 2**40),
    memory_kind=st.none() | st.sampled_from(MemoryKind),
    aicore_count=st.none() | st.integers(-5, 2**20),
    driver_version=st.none() | printable | st.from_regex(SEMVER, fullmatch=True),
    hccs=st.none() | st.booleans(),
    topology_group=st.none() | printable,
    cpu_affinity=st.none() | printable,
)


@settings(max_examples=300, deadline=None)
@given(chip=chips)
def test_generated_chips_publish_within_limits(chip: NpuChip) -> None:
    for profile in (Npu910Profile(), Npu310PProfile()):
        device = profile.device(chip)
        assert_within_limits(device)
        # The name does not carry the chip ID (only npu-smi knows it): docs/ascend-discovery.md.
        assert device.name == f"npu-{chip.logic_id}-0"
        assert device.attributes["physicalID"] == chip.physical_id
        assert device.attributes.get("chipID") == chip.chip_id
        # DCMI's "not supported" code is never published as an amount.
        assert all(c.value not in ("8255", "8255Mi", "-8255") for c in device.capacities.values())


names = st.text(st.characters(whitelist_categories=("Lu", "Ll", "Nd"), max_codepoint=127) | st.sampled_from("-_."),
                min_size=1, max_size=70)
numbers = st.integers(0, 10**12).map(str) | st.sampled_from(["NA", "-", "8255"])


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(name=names, used=numbers, total=numbers, device=numbers, temp=numbers)
def test_generated_info_tables_parse_exactly_or_fail_loudly(name: str, used: str, total: str, device: str,
                                                            temp: str) -> None:
    """Variations of 310P3_info.txt: each value comes back as printed (None for NA/-), or the parser raises."""
    text = fixture("310P3_info.txt")
    text = text.replace("| 4       310P3 ", f"| 4       {name} ", 1)
    text = text.replace("OK              | NA           37 ", f"OK              | NA           {temp} ", 1)
    text = text.replace("| 0       0                     | 0000:81:00.0    | 0            1848 / 21525",
                        f"| 0       {device}                     | 0000:81:00.0    | 0            {used} / {total}", 1)
    try:
        table = parse_info(text)
    except NpuSmiParseError as exc:
        assert exc.line_no > 0 and exc.command == "npu-smi info"
        return

    def value(raw: str) -> int | None:
        return None if raw in ("NA", "-") else int(raw)

    def amount(raw: str) -> int | None:
        """A total: 8255 is DCMI's "not supported" code, read as unknown like NA."""
        return None if raw == "8255" else value(raw)

    first = table.chips[0]
    assert (first.name, first.temperature_c, first.device, first.memory_used_mib, first.memory_total_mib) == (
        name, value(temp), value(device), value(used), amount(total))
    chip = NpuChip(logic_id=first.device or 0, physical_id=0, npu_id=first.npu_id, chip_name=first.name,
                   memory_mib=first.memory_total_mib, memory_kind=MemoryKind.DDR)
    assert_within_limits(Npu310PProfile().device(chip))
