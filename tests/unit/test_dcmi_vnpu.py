"""DCMI's vNPU calls (dcmi/api.py, dcmi/worker.py, dcmi/vnpu.py) against the test libdcmi.so, which
makes vNPUs on the npu-smi simulator's own state (tests/dcmisim/vnpu.c): a vNPU made through one is
listed by the other, the rules and error codes are DCMI's, and the structs are laid out as gcc lays
out the header's."""

from __future__ import annotations

import ctypes
import subprocess
from pathlib import Path

import pytest

from ascend_dra.profiles.ascend.dcmi import api
from ascend_dra.profiles.ascend.dcmi.client import DcmiClient
from ascend_dra.profiles.ascend.dcmi.vnpu import (
    DcmiCallFailed,
    Vdevice,
    create_vdevice,
    destroy_vdevice,
    list_vdevices,
    recover_mode,
)
from ascend_dra.profiles.ascend.npusmi import tables
from ascend_dra.profiles.ascend.sim import npusmi_sim
from tests.dcmisim import SOURCE, build, set_fault
from tests.hardvnpu import SimHost

pytestmark = pytest.mark.anyio

#: Our ctypes structs -> the header's struct names (tests/dcmisim/vnpu.c writes them as the header does).
C_NAMES = {api.CreateVdevRes: "dcmi_create_vdev_res_stru", api.CreateVdevOut: "dcmi_create_vdev_out",
           api.BaseResource: "dcmi_base_resource", api.ComputingResource: "dcmi_computing_resource",
           api.MediaResource: "dcmi_media_resource", api.VdevQueryInfo: "dcmi_vdev_query_info",
           api.VdevQuery: "dcmi_vdev_query_stru", api.SocTotalResource: "dcmi_soc_total_resource"}


def test_every_vnpu_struct_field_sits_where_gcc_puts_the_headers(tmp_path: Path) -> None:
    lines = []
    for struct, c_name in C_NAMES.items():
        lines.append(f'printf("{struct.__name__} size %zu\\n", sizeof(struct {c_name}));')
        for name, *_ in struct._fields_:
            lines.append(f'printf("{struct.__name__} {name} %zu\\n", offsetof(struct {c_name}, {name}));')
    program = tmp_path / "layout.c"
    program.write_text('#include <stddef.h>\n#include <stdio.h>\n#include "vnpu.c"\n'
                       "int main(void) {\n" + "\n".join(lines) + "\nreturn 0;\n}\n")
    exe = tmp_path / "layout"
    subprocess.run(["gcc", "-std=gnu11", f"-I{SOURCE.parent}", "-o", str(exe), str(program), str(SOURCE)], check=True)
    by_gcc = dict(line.rsplit(" ", 1) for line in subprocess.run([str(exe)], capture_output=True, text=True,
                                                                 check=True).stdout.splitlines())
    ours = {}
    for struct in C_NAMES:
        ours[f"{struct.__name__} size"] = str(ctypes.sizeof(struct))
        for name, *_ in struct._fields_:
            ours[f"{struct.__name__} {name}"] = str(getattr(struct, name).offset)
    assert ours == by_gcc
    assert {s: int(by_gcc[f"{s.__name__} size"]) for s in C_NAMES} == dict(api.SIZES)


@pytest.fixture
def host(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> SimHost:
    made = SimHost(tmp_path, chips=((4, 0, 0, 0, "910B4"), (5, 0, 1, 2, "310P3"), (6, 0, 2, 3, "910B")))
    monkeypatch.setenv(npusmi_sim.ENV_DIR, str(made.sim_dir))
    return made


@pytest.fixture
def client():
    made = DcmiClient(build(), timeout_s=2.0)
    yield made
    made.close()


def info_vnpu(host: SimHost, npu_id: int, chip_id: int = 0) -> list[tuple[int, str]]:
    """``npu-smi info -t info-vnpu`` of the simulator, parsed as the npu-smi tier parses it."""
    text = npusmi_sim.run(["info", "-t", "info-vnpu", "-i", str(npu_id), "-c", str(chip_id)], host.sim_dir)
    return [(v.vnpu_id, v.template_name) for v in tables.parse_vnpu_info(text).vnpus]


async def test_a_vnpu_made_through_dcmi_is_listed_by_npu_smi_with_its_node(host: SimHost, client: DcmiClient) -> None:
    assert await create_vdevice(client, 4, 0, 100, "vir10_3c_16g") == 0  # its group
    assert await create_vdevice(client, 5, 0, 132, "vir02") == 0  # 310P3: physical ID 2
    assert info_vnpu(host, 4) == [(100, "vir10_3c_16g")]
    assert info_vnpu(host, 5) == [(132, "vir02")]
    assert sorted(p.name for p in host.vdev.iterdir()) == ["vdavinci100", "vdavinci132"]
    assert npusmi_sim.Sim(host.sim_dir).load() == [
        {"npu_id": 4, "chip_id": 0, "vnpu_id": 100, "vgroup_id": 0, "template": "vir10_3c_16g"},
        {"npu_id": 5, "chip_id": 0, "vnpu_id": 132, "vgroup_id": 0, "template": "vir02"}]


async def test_a_vnpu_made_through_npu_smi_is_listed_and_destroyed_through_dcmi(host: SimHost,
                                                                               client: DcmiClient) -> None:
    for vnpu_id, template in ((101, "vir05_1c_8g"), (100, "vir10_3c_16g")):
        npusmi_sim.run(["set", "-t", "create-vnpu", "-i", "4", "-c", "0", "-f", template, "-v", str(vnpu_id)],
                       host.sim_dir)
    assert await list_vdevices(client, 4, 0) == [Vdevice(100, "vir10_3c_16g", 1, 0, 0),
                                                 Vdevice(101, "vir05_1c_8g", 0, 0, 0)]
    await destroy_vdevice(client, 4, 0, 101)
    assert info_vnpu(host, 4) == [(100, "vir10_3c_16g")]
    assert sorted(p.name for p in host.vdev.iterdir()) == ["vdavinci100"]
    assert await list_vdevices(client, 4, 0) == [Vdevice(100, "vir10_3c_16g", 1, 0, 0)]


@pytest.mark.parametrize(("call", "code"), [
    (("create", 4, 0, 100, "vir10_3c_16g"), -8020),   # the ID is taken (made before)
    (("create", 4, 0, 101, "vir02"), -8001),          # not a template of the 910B4
    (("create", 4, 0, 116, "vir05_1c_8g"), -8001),    # past the chip's 16 IDs (100..115)
    (("create", 4, 0, 101, "vir10_3c_16g"), -8020),   # 20 AI cores: a second 10 fits, then no more ...
    (("create", 6, 0, 148, "vir02"), -8255),          # a 910B (no templates): not supported
    (("create", 9, 0, 100, "vir02"), -8007),          # no NPU 9
    (("destroy", 4, 0, 105), -8001),                  # no such vNPU
    (("list", 6, 0), -8255),
], ids=["ID taken", "unknown template", "ID out of range", "too few resources", "model without vNPUs",
        "no such chip", "destroy a vNPU that does not exist", "list a chip without vNPUs"])
async def test_the_rules_answer_with_dcmis_error_codes(host: SimHost, client: DcmiClient, call: tuple,
                                                       code: int) -> None:
    made = [100]
    await create_vdevice(client, 4, 0, 100, "vir10_3c_16g")
    if call[1:] == (4, 0, 101, "vir10_3c_16g"):
        made.append(102)
        await create_vdevice(client, 4, 0, 102, "vir10_3c_16g")
    kind, *args = call
    function = {"create": create_vdevice, "destroy": destroy_vdevice, "list": list_vdevices}[kind]
    with pytest.raises(DcmiCallFailed) as failed:
        await function(client, *args)
    assert failed.value.answer.code == code and failed.value.answered
    assert [v.vdev_id for v in await list_vdevices(client, 4, 0)] == made


async def test_a_reboot_keeps_the_vnpus_only_while_vnpu_cfg_recover_is_enabled(host: SimHost,
                                                                               client: DcmiClient) -> None:
    await create_vdevice(client, 4, 0, 100, "vir10_3c_16g")
    host.reboot("boot-2")
    assert [v.vdev_id for v in await list_vdevices(client, 4, 0)] == [100]  # enabled: npu-smi's default
    assert await recover_mode(client) is True
    npusmi_sim.run(["set", "-t", "vnpu-cfg-recover", "-d", "0"], host.sim_dir)
    assert await recover_mode(client) is False
    host.reboot("boot-3")
    assert await list_vdevices(client, 4, 0) == [] == info_vnpu(host, 4)
    assert not (host.vdev / "vdavinci100").exists()


async def test_a_fault_after_the_work_leaves_the_vnpu_made_and_the_caller_told_otherwise(
        host: SimHost, client: DcmiClient) -> None:
    set_fault(host.sim_dir, "dcmi_create_vdevice -8005-after")
    with pytest.raises(DcmiCallFailed) as failed:
        await create_vdevice(client, 4, 0, 100, "vir10_3c_16g")
    assert failed.value.answer.code == -8005
    set_fault(host.sim_dir, "dcmi_create_vdevice hang-after")
    with pytest.raises(DcmiCallFailed) as hung:
        await create_vdevice(client, 4, 0, 101, "vir05_1c_8g")
    assert not hung.value.answered
    assert info_vnpu(host, 4) == [(100, "vir10_3c_16g"), (101, "vir05_1c_8g")]


async def test_a_template_name_too_long_for_the_header_is_refused_before_the_library(client: DcmiClient,
                                                                                    host: SimHost) -> None:
    with pytest.raises(DcmiCallFailed) as failed:
        await create_vdevice(client, 4, 0, 100, "v" * 32)
    assert failed.value.answer.code == -8001
    assert info_vnpu(host, 4) == []
