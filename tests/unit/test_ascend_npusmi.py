"""The npu-smi runner against real subprocesses: success, missing, failing, hanging, garbage."""

from __future__ import annotations

from pathlib import Path

import pytest

from ascend_dra.profiles.ascend.npusmi.errors import NpuSmiFailed, NpuSmiNotFound, NpuSmiParseError, NpuSmiTimeout
from ascend_dra.profiles.ascend.npusmi.runner import NpuSmi
from tests.unit.test_ascend_support import fake_npu_smi, fixture, script

pytestmark = pytest.mark.anyio


async def test_run_returns_stdout_of_the_fixture(tmp_path: Path) -> None:
    exe = fake_npu_smi(tmp_path, {"info": "310P3_info.txt"})
    assert await NpuSmi(str(exe)).run("info") == fixture("310P3_info.txt")


async def test_parsed_calls_pass_arguments_as_a_list(tmp_path: Path) -> None:
    exe = fake_npu_smi(tmp_path, {"info -t board -i 0 -c 0": "910A_info_-t_board_-i_-c_VDieID.txt",
                                  "info -m": "910A_info_-m_atlas800-9010.txt"})
    npu_smi = NpuSmi(str(exe))
    board = await npu_smi.chip_board(0, 0)
    assert board.vdie_id == "42C711D4-20B03704-4A10C8D4-14CC040A-D2102003"
    assert [row.logic_id for row in await npu_smi.mapping()] == [0, 1, 2, 3, 4, 5, 6, 7]


async def test_runs_with_the_c_locale_and_no_stdin(tmp_path: Path) -> None:
    exe = script(tmp_path, '#!/bin/sh\necho "LC_ALL=$LC_ALL"\nread line && echo "stdin:$line" || echo "stdin closed"\n')
    assert await NpuSmi(str(exe)).run("info") == "LC_ALL=C\nstdin closed\n"


async def test_missing_executable(tmp_path: Path) -> None:
    missing = str(tmp_path / "no-such-npu-smi")
    with pytest.raises(NpuSmiNotFound) as caught:
        await NpuSmi(missing).run("info")
    assert caught.value.executable == missing
    assert caught.value.command == f"{missing} info"
    assert caught.value.reason == "No such file or directory"


async def test_non_executable_file(tmp_path: Path) -> None:
    path = tmp_path / "npu-smi"
    path.write_text("#!/bin/sh\n")
    with pytest.raises(NpuSmiNotFound) as caught:
        await NpuSmi(str(path)).run("info")
    assert caught.value.reason == "Permission denied"


async def test_failing_exit_status_and_stderr(tmp_path: Path) -> None:
    exe = script(tmp_path, "#!/bin/sh\necho 'dcmi module initialize failed. ret is -8005' >&2\nexit 1\n")
    with pytest.raises(NpuSmiFailed) as caught:
        await NpuSmi(str(exe)).run("info", "-m")
    assert (caught.value.command, caught.value.returncode) == (f"{exe} info -m", 1)
    assert caught.value.stderr == "dcmi module initialize failed. ret is -8005\n"
    assert str(caught.value) == f"run '{exe} info -m': exit status 1: dcmi module initialize failed. ret is -8005"


async def test_failure_reported_on_stdout_only(tmp_path: Path) -> None:
    exe = script(tmp_path, "#!/bin/sh\necho 'Error: card id is invalid'\nexit 2\n")
    with pytest.raises(NpuSmiFailed) as caught:
        await NpuSmi(str(exe)).run("info", "-t", "board", "-i", "9")
    assert (caught.value.returncode, caught.value.stderr) == (2, "Error: card id is invalid\n")


async def test_hanging_npu_smi_times_out(tmp_path: Path) -> None:
    exe = script(tmp_path, "#!/bin/sh\nexec sleep 30\n")
    with pytest.raises(NpuSmiTimeout) as caught:
        await NpuSmi(str(exe), timeout_s=0.3).run("info")
    assert (caught.value.command, caught.value.timeout_s) == (f"{exe} info", 0.3)
    assert str(caught.value) == f"run '{exe} info': no answer within 0.3 s; the process was killed"


async def test_garbage_output_is_a_parse_error_naming_the_command(tmp_path: Path) -> None:
    exe = script(tmp_path, "#!/bin/sh\necho 'Segmentation fault (core dumped)'\n")
    with pytest.raises(NpuSmiParseError) as caught:
        await NpuSmi(str(exe)).mapping()
    assert caught.value.command == f"{exe} info -m"
    assert caught.value.line_no == 1
    assert caught.value.reason.startswith("unknown header")
