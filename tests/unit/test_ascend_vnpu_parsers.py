"""The vNPU commands' outputs parsed (template-info, info-vnpu, the create-vnpu answer) and ``npu-smi info -h``,
with the expected values written out (split from test_ascend_parsers.py)."""

from __future__ import annotations

import pytest

from ascend_dra.profiles.ascend.npusmi import keyvalue, tables
from ascend_dra.profiles.ascend.npusmi.errors import NpuSmiParseError
from ascend_dra.profiles.ascend.npusmi.tables import Template, Vnpu
from tests.unit.test_ascend_support import fixture, parts

# -- npu-smi info -t template-info ----------------------------------------------------------------


def test_template_info_310p3_seven_templates() -> None:
    assert tables.parse_template_info(fixture("310P3_info_-t_template-info_drv22.0.4.txt")) == (
        Template("vir01", 1, 3, 1, 1, 0, 2, 0, 1, 1),
        Template("vir02", 2, 6, 2, 3, 1, 4, 0, 3, 2),
        Template("vir02_1c", 2, 6, 1, 3, 0, 4, 0, 3, 2),
        Template("vir04", 4, 12, 4, 6, 2, 8, 0, 6, 4),
        Template("vir04_3c", 4, 12, 3, 6, 1, 8, 0, 6, 4),
        Template("vir04_3c_ndvpp", 4, 12, 3, 0, 0, 0, 0, 0, 0),
        Template("vir04_4c_dvpp", 4, 12, 4, 12, 3, 16, 0, 12, 8),
    )


def test_template_info_910b4_four_templates() -> None:
    assert tables.parse_template_info(fixture("910B4_A2-inference_info_-t_template-info.txt")) == (
        Template("vir10_3c_16g", 10, 16, 3, 4, 0, 12, 0, 1, 2),
        Template("vir10_4c_16g_m", 10, 16, 4, 9, 0, 24, 0, 2, 4),
        Template("vir10_3c_16g_nm", 10, 16, 3, 0, 0, 0, 0, 0, 0),
        Template("vir05_1c_8g", 5, 8, 1, 2, 0, 6, 0, 0, 1),
    )


# -- npu-smi info -t info-vnpu (and the create-vnpu answer) ---------------------------------------


def test_vnpu_info_910b4_empty_then_two() -> None:
    empty, two, created = parts("910B4_A2-inference_info_-t_info-vnpu_empty_and_2vnpus.txt")
    first = tables.parse_vnpu_info(empty)
    assert first.total == 0 and first.vnpus == ()
    assert dict(first.resources) == {"AICORE": (20, 20), "Memory": (28, 32), "AICPU": (6, 6), "VPC": (9, 9),
                                     "VENC": (0, 0), "VDEC": (2, 2), "JPEGD": (24, 24), "JPEGE": (4, 4),
                                     "PNGD": (None, None)}
    second = tables.parse_vnpu_info(two)
    assert dict(second.resources)["Memory"] == (0, 32) and dict(second.resources)["AICPU"] == (1, 7)
    assert second.vnpus == (Vnpu(100, 0, "000000000000", 0, "vir10_3c_16g"),
                            Vnpu(101, 1, "000000000000", 0, "vir10_3c_16g"))
    (block,) = keyvalue.parse_key_values(created)
    assert block.as_dict() == {"Status": "OK", "Message": "Create vnpu success"}


def test_vnpu_info_910b4_1_no_row_header_when_empty() -> None:
    empty, two, created = parts("910B4-1_64G_info_-t_info-vnpu_empty_and_2vnpus.txt")
    first = tables.parse_vnpu_info(empty)
    assert (first.total, first.vnpus, dict(first.resources)["Memory"]) == (0, (), (60, 64))
    second = tables.parse_vnpu_info(two)
    assert second.vnpus == (Vnpu(212, 0, "000000000000", 0, "vir10_3c_32g"),
                            Vnpu(213, 1, "000000000000", 0, "vir10_3c_32g"))
    assert keyvalue.parse_key_values(created)[0].as_dict() == {"Status": "OK", "Message": "Create vnpu success"}


def test_vnpu_info_310p3_fragment_in_use() -> None:
    info = tables.parse_vnpu_info(fixture("310P3_info_-t_info-vnpu_fragment_drv22.0.4.txt"))
    assert dict(info.resources) == {}
    assert info.vnpus == (Vnpu(100, 0, "ffffffffffff", 1, "vir01"), Vnpu(101, 1, "ffffffffffff", 1, "vir02"),
                          Vnpu(102, 2, "ffffffffffff", 1, "vir04"))


def test_vnpu_info_cut_off_list_is_an_error() -> None:
    text = "| Total number of vnpu: 2 |\n|  Vnpu ID  |  Vgroup ID  |  Container ID  |  Status  |  Template Name  |\n" \
           "|  100  |  0  |  ffffffffffff  |  1  |  vir01  |\n"
    with pytest.raises(NpuSmiParseError) as caught:
        tables.parse_vnpu_info(text)
    assert (caught.value.line_no, caught.value.reason) == (1, "says 2 vNPUs but 1 rows are printed")


# -- npu-smi info -t vnpu-cfg-recover ---------------------------------------------------------------


@pytest.mark.parametrize(("text", "enabled"), [
    ("VNPU config recover mode : Enable\n", True),  # as MindCluster "Creating vNPUs" prints it
    ("\tVNPU config recover mode       : Disable\n", False),  # the \\t%-30s form of npu-smi's key/value lines
], ids=["Enable (documented)", "Disable, TAB and padding"])
def test_vnpu_cfg_recover(text: str, enabled: bool) -> None:
    assert keyvalue.parse_vnpu_cfg_recover(text) is enabled


@pytest.mark.parametrize(("text", "reason"), [
    ("VNPU config recover mode : On\n", "VNPU config recover mode: 'On' is not Enable or Disable"),
    ("Status : OK\n", "missing 'VNPU config recover mode'"),
], ids=["unknown value", "missing line"])
def test_vnpu_cfg_recover_refuses_what_it_does_not_know(text: str, reason: str) -> None:
    with pytest.raises(NpuSmiParseError) as caught:
        keyvalue.parse_vnpu_cfg_recover(text)
    assert caught.value.reason == reason


# -- npu-smi info -h ------------------------------------------------------------------------------


def test_help_lists_every_type() -> None:
    types = tables.parse_help_types(fixture("npu-smi_info_-h_23.0.rc2.txt"))
    assert len(types) == 45
    assert types[:3] == ("board", "flash", "memory")
    assert types[-1] == "topo"
    assert {"template-info", "info-vnpu", "device-share", "usages", "common", "health"} <= set(types)
