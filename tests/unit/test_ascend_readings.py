"""``-t common`` and ``-t health`` layouts that no published output shows, read as npu-smi's printing code prints them.

The inputs below are **constructed**, not captures: each is built from the format strings of the
open npu-smi source (verylucky01/driver @ ``e29d066f``, ``src/custom/dev_prod/user/npucli/src/``), named
per test. Key/value lines are ``"\\t%-30s : %s\\n"`` there, written here by :func:`_kv`.
"""

from __future__ import annotations

import pytest

from ascend_dra.profiles.ascend.npusmi import readings
from ascend_dra.profiles.ascend.npusmi.errors import NpuSmiParseError
from ascend_dra.profiles.ascend.npusmi.readings import ChipCommon, HealthInfo, McuCommon
from tests.unit.test_ascend_support import fixture


def _kv(key: str, value: object) -> str:
    """One line as npu-smi prints it (``\\t%-30s : %s``)."""
    return f"\t{key:<30} : {value}\n"


# -- -t common: the board's Hi3559 block ----------------------------------------------------------

#: ``print_cpu_common_info`` (``npu_info_print.c``; the same in ``npu_info_print_ch.c``), printed after
#: the chips and the mcu block when DCMI names a CPU in the card (``cpu_id != -1``):
#: ``printf("\n"); "\t%-30s : %s\n", "Chip Name", "3559"; "\t%-30s : %d\n", "Temperature(C)";
#: "\t%-30s : %.1f\n", "Power Dissipation(W)"``. Which boards carry one the source does not say.
CPU_3559 = "\n" + _kv("Chip Name", "3559") + _kv("Temperature(C)", 52) + _kv("Power Dissipation(W)", "3.5")


def test_common_with_a_3559_block_keeps_the_chips_and_reads_the_cpu() -> None:
    """The 3559 block was refused ("a block must start with 'Chip ID' or 'Chip Name'" named only the
    mcu), so the card's AI core count was lost at every discovery."""
    common = readings.parse_common(fixture("910A_info_-t_common_-i_0_with_mcu.txt") + CPU_3559)
    assert common.chips == (ChipCommon(chip_id=0, memory_usage_percent=6, hbm_usage_percent=0,
                                       aicore_usage_percent=0, aicore_freq_mhz=1000, aicore_cur_freq_mhz=1000,
                                       aicore_count=32, temperature_c=46, power_w=69.0),)
    assert common.mcu == McuCommon(temperature_c=48, power_w=45.2)
    assert common.cpu == readings.BoardCpuCommon(temperature_c=52, power_w=3.5)


def test_common_with_a_3559_block_and_no_mcu_block() -> None:
    """``print_mcu_common_info`` prints nothing when the card has no MCU; the 3559 block then follows the chips."""
    text = (_kv("NPU ID", 1) + _kv("Chip Count", 1) + "\n" + _kv("Chip ID", 0) + _kv("Memory Usage Rate(%)", 3)
            + _kv("Aicore Usage Rate(%)", 0) + _kv("Temperature(C)", 60) + CPU_3559)
    common = readings.parse_common(text)
    assert [(c.chip_id, c.temperature_c) for c in common.chips] == [(0, 60)]
    assert (common.mcu, common.cpu) == (None, readings.BoardCpuCommon(temperature_c=52, power_w=3.5))


def test_mcu_power_of_the_310_is_its_power_dissipation() -> None:
    """``print_mcu_common_info``: the 310/310B print the MCU's power as ``Power Dissipation(W)`` (and
    ``Chip Name : MCU`` in upper case), the 310P as ``NPU Real-time Power(W)``."""
    text = (_kv("NPU ID", 6) + _kv("Chip Count", 1) + "\n" + _kv("Chip ID", 0) + _kv("Temperature(C)", 50)
            + "\n" + _kv("Chip Name", "MCU") + _kv("Temperature(C)", 41) + _kv("Power Dissipation(W)", "7.2"))
    assert readings.parse_common(text).mcu == McuCommon(temperature_c=41, power_w=7.2)


@pytest.mark.parametrize(
    ("tail", "line_no", "reason"),
    [
        ("\n" + _kv("Chip Name", "3560") + _kv("Temperature(C)", 52), 18,
         "a block must start with 'Chip ID' or 'Chip Name : mcu' or 'Chip Name : 3559'"),
        ("\n" + _kv("Chip Name", "3559") + _kv("Temperature(C)", "hot"), 19,
         "Temperature(C): 'hot' is not an integer or NA"),
        ("\n" + _kv("Chip Name", "3559") + _kv("Temperature(C)", 52) + _kv("Power Dissipation(W)", "3.5x"), 20,
         "Power Dissipation(W): '3.5x' is not a number or NA"),
        (CPU_3559 + CPU_3559, 22, "a second 'Chip Name : 3559' block"),
        ("\n" + _kv("Chip Name", "mcu") + _kv("Temperature(C)", 48), 18, "a second 'Chip Name : mcu' block"),
    ],
    ids=["other-chip-name", "temperature-not-a-number", "power-not-a-number", "two-3559-blocks", "two-mcu-blocks"],
)
def test_common_board_blocks_that_are_not_the_printed_layout_are_errors(tail: str, line_no: int, reason: str) -> None:
    with pytest.raises(NpuSmiParseError) as caught:
        readings.parse_common(fixture("910A_info_-t_common_-i_0_with_mcu.txt") + tail,
                              command="npu-smi info -t common -i 0")
    assert (caught.value.command, caught.value.line_no, caught.value.reason) == (
        "npu-smi info -t common -i 0", line_no, reason)


# -- -t health: one line per further error -----------------------------------------------------


def _health(status: str, codes: list[int], informations: list[str]) -> str:
    """``print_diagnosis_info`` (``npu_info_print.c``; ``npu_info_print_ch.c`` alike): ``Health Status``,
    then ``"\\t%-30s :"`` ``Error Code`` followed by ``" %04X"`` per code on one line, then ``Error
    Information`` with the first text on its line (``" %s\\n"``) and each further one as
    ``"\\n\\t%-30s : %s\\n"`` with a key of one space: a blank line, then a line with no key."""
    text = _kv("Health Status", status) + f"\t{'Error Code':<30} :" + "".join(f" {c:04X}" for c in codes) + "\n"
    text += f"\t{'Error Information':<30} : {informations[0]}\n"
    for information in informations[1:]:
        text += f"\n\t{' ':<30} : {information}\n"
    return text


def test_health_with_three_error_codes_reads_every_code_and_text() -> None:
    """The continuation lines (no key) were refused as "expected 'key : value'", so the chip's
    health could not be read at all when it had more than one error."""
    text = _health("Alarm", [0x80E18005, 0x80E38003, 0x80CB8009],
                   ["node type=SOC, sensor type=Temperature, event state=over high threshold",
                    "node type=HBM, sensor type=ECC, event state=single bit error",
                    "node type=SOC, sensor type=Heartbeat, event state=lost"])
    health = readings.parse_health(text)
    assert health == HealthInfo(
        status="Alarm", error_code="80E18005 80E38003 80CB8009",
        error_information="node type=SOC, sensor type=Temperature, event state=over high threshold",
        error_codes=("80E18005", "80E38003", "80CB8009"),
        error_informations=("node type=SOC, sensor type=Temperature, event state=over high threshold",
                            "node type=HBM, sensor type=ECC, event state=single bit error",
                            "node type=SOC, sensor type=Heartbeat, event state=lost"))


def test_health_error_without_text_prints_the_code_in_decimal() -> None:
    """``DCMI_ERR_CODE_NOT_SUPPORT`` from the text lookup: ``" %u"`` (decimal) for the first code,
    ``"\\n\\t%-30s : %u\\n"`` for the others (``npu_info_print_ext.c``'s 950 printer uses ``%04X``)."""
    health = readings.parse_health(_health("Warning", [0x1234, 0x80E18005], ["4660", "2162262021"]))
    assert (health.error_codes, health.error_informations) == (("1234", "80E18005"), ("4660", "2162262021"))


def test_health_error_whose_text_lookup_failed_is_read() -> None:
    """A text lookup that fails otherwise prints ``"Failed to get error information for error code :
    0x%04x\\n"``: for the first code right after ``"\\t%-30s :"`` (no space), for the others on a line of
    its own. The sentence is kept as that code's information."""
    first = "Failed to get error information for error code : 0x80e18005"
    second = "Failed to get error information for error code : 0x80e38003"
    text = (_kv("Health Status", "Critical") + f"\t{'Error Code':<30} : 80E18005 80E38003\n"
            + f"\t{'Error Information':<30} :{first}\n" + f"{second}\n")
    health = readings.parse_health(text)
    assert (health.status, health.error_codes, health.error_information, health.error_informations) == (
        "Critical", ("80E18005", "80E38003"), first, (first, second))


def test_health_without_errors_has_empty_tuples() -> None:
    health = readings.parse_health(fixture("910A_info_-t_health.txt"))
    assert (health.error_code, health.error_codes, health.error_informations) == (None, (), ())


@pytest.mark.parametrize(
    ("text", "line_no", "reason"),
    [
        (_kv("Health Status", "Alarm") + _kv("Error Code", "80E18005") + f"\t{' ':<30} : orphan\n", 3,
         "a line without a key must continue 'Error Information'"),
        (f"\t{' ':<30} : orphan\n" + _kv("Health Status", "OK"), 1,
         "a line without a key must continue 'Error Information'"),
        (_kv("Health Status", "OK") + _kv("Error Code", "NA") + _kv("Error Information", "NA")
         + f"\n\t{' ':<30} : orphan\n", 5, "a line without a key must continue 'Error Information'"),
        (_kv("Health Status", "Alarm") + _kv("Error Code", "80E18005 zz") + _kv("Error Information", "x"), 2,
         "Error Code: 'zz' is not a hexadecimal code"),
        (_kv("Health Status", "Alarm") + _kv("Error Code", "80E18005") + _kv("Error Information", "x")
         + _kv("Error Information", "y"), 4, "a second 'Error Information' line (the first is on line 3)"),
    ],
    ids=["continuation-after-error-code", "continuation-first", "continuation-after-na", "code-not-hex",
         "two-information-lines"],
)
def test_health_layouts_that_are_not_printed_are_errors(text: str, line_no: int, reason: str) -> None:
    with pytest.raises(NpuSmiParseError) as caught:
        readings.parse_health(text, command="npu-smi info -t health -i 0 -c 0")
    assert (caught.value.line_no, caught.value.reason) == (line_no, reason)
