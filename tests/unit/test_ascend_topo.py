"""``npu-smi info -t topo`` layouts: NPU<k> labels (NPU IDs), NIC<k> columns, A3 Phy-ID<k> labels."""

from __future__ import annotations

import pytest

from ascend_dra.profiles.ascend.npusmi.errors import NpuSmiParseError
from ascend_dra.profiles.ascend.npusmi.topo import LABEL_NPU, LABEL_PHYSICAL, parse_topo
from tests.unit.test_ascend_support import fixture


def test_910b3_with_nic_columns_keeps_the_chip_matrix_and_adds_nic_links() -> None:
    plain = parse_topo(fixture("910B3_info_-t_topo.txt"))
    topo = parse_topo(fixture("910B3_info_-t_topo_NIC_constructed.txt"))
    assert (topo.ids, topo.links, topo.cpu_affinity) == (plain.ids, plain.links, plain.cpu_affinity)
    assert (topo.label_kind, topo.nics) == (LABEL_NPU, (0, 1, 2, 3))
    assert topo.nic_links[0] == ("PIX", "SYS", "SYS", "SYS")
    assert topo.nic_links[7] == ("SYS", "SYS", "SYS", "PIX")


def test_a3_phy_id_labels_are_physical_ids() -> None:
    topo = parse_topo(fixture("910C_A3_info_-t_topo_Phy-ID_NIC_constructed.txt"))
    assert (topo.label_kind, topo.ids, topo.nics) == (LABEL_PHYSICAL, (0, 1, 2, 3), (0, 1, 2, 3))
    assert (topo.link(0, 1), topo.link(1, 2), topo.link(3, 3)) == ("SIO", "HCCS_SW", "X")
    assert topo.cpu_affinity == ("0-39", "0-39", "40-79", "40-79")


def test_950_ub_links_are_read() -> None:
    """The 950's legend adds ``UB`` ("Connection traversing UB"); the matrix was refused."""
    topo = parse_topo(fixture("950_info_-t_topo_UB_dual-card.txt"))
    assert (topo.label_kind, topo.ids) == (LABEL_NPU, tuple(range(8)))
    assert (topo.link(0, 1), topo.link(1, 0), topo.link(0, 2), topo.link(6, 7)) == ("UB", "UB", "SYS", "UB")
    assert topo.cpu_affinity[3:5] == ("0-63,128-191", "64-127,192-255")


def test_nic_rows_are_accepted() -> None:
    text = ("   NPU0   NPU1   NIC0   CPU Affinity\nNPU0   X   HCCS   PIX   0-3\nNPU1   HCCS   X   SYS   4-7\n"
            "NIC0   PIX   SYS   X\n")
    topo = parse_topo(text)
    assert (topo.ids, topo.nics, topo.nic_links) == ((0, 1), (0,), (("PIX",), ("SYS",)))


@pytest.mark.parametrize(
    ("text", "line_no", "reason"),
    [
        ("   NPU0   Phy-ID1\nNPU0   X   HCCS\n", 1, "expected a header of NPU<k> or Phy-ID<k> columns (then NIC<k>)"),
        ("   NPU0   GPU1\nNPU0   X   HCCS\n", 1, "unknown label 'GPU1' (known: NPU<k>, Phy-ID<k>, NIC<k>)"),
        ("   NPU0   NPU1   NIC0\nNPU0   X   HCCS\nNPU1   HCCS   X   PIX\n", 2, "expected 3 values"),
        ("   NPU0   NPU1\nNPU0   X   HCCS\nNPU2   HCCS   X\n", 3, "row NPU2 has no column"),
    ],
    ids=["mixed-label-kinds", "unknown-label", "row-missing-its-nic-value", "row-without-column"],
)
def test_unknown_layouts_are_errors_naming_the_line(text: str, line_no: int, reason: str) -> None:
    with pytest.raises(NpuSmiParseError) as caught:
        parse_topo(text)
    assert (caught.value.line_no, caught.value.reason) == (line_no, reason)
