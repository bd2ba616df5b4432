"""The values each number npu-smi prints can really take, and where each bound comes from.

Every integer the npu-smi parsers read goes through :func:`._text.to_int` with one of these
bounds; a value outside them is a misprint, damage or hardware we do not know, and is refused
(:class:`.errors.NpuSmiParseError` naming the line), never published. The facts are those of
docs/ascend-hardware.md#value-ranges; a bound marked **[U]** has no Ascend source and is a margin
around the values seen. A new chip with more (memory, AI cores) is then refused loudly, as an
unknown column is, and its fact is added here.
"""

from __future__ import annotations

import attrs

__all__ = (
    "AICORE",
    "AICORE_COUNT",
    "AICPU",
    "CHIPS_PER_NPU",
    "CHIP_ID",
    "FREQUENCY_MHZ",
    "HUGEPAGES",
    "LOGIC_ID",
    "MEDIA_ENGINES",
    "MEMORY_GIB",
    "MEMORY_MIB",
    "NIC",
    "NPUS",
    "NPU_ID",
    "PERCENT",
    "PHYSICAL_ID",
    "PID",
    "POWER_W",
    "RELEASE_PART",
    "SLOT_ID",
    "TEMPERATURE_C",
    "VGROUP_ID",
    "VNPUS",
    "VNPU_ID",
    "VNPU_STATUS",
    "Bounds",
)


@attrs.frozen
class Bounds:
    """An inclusive range and what the number is, for the error: ``out of range 0..131072 (MiB of one chip)``."""

    low: int
    high: int
    meaning: str

    def problem(self, number: float) -> str | None:
        """Why ``number`` is not one of these values, or None when it is."""
        if self.low <= number <= self.high:
            return None
        return f"{number} is out of range {self.low}..{self.high} ({self.meaning})"


# -- IDs (docs/ascend-hardware.md#the-ids) ----------------------------------------------------------
#: DCMI's card ID is a C ``int`` (``dcmi_get_card_num_list(int *card_num, int *card_list, ...)``);
#: samples print 0-7, 215 and 32768 (inside a container).
NPU_ID = Bounds(0, 2**31 - 1, "an NPU ID, a DCMI card ID")
#: At most 4 chips on a card (the 310), then its MCU (chip ID 4 on the 310's ``-m``) and board CPU.
CHIP_ID = Bounds(0, 5, "a chip's index in its NPU: up to 4 chips, then the MCU and the board CPU")
#: Physical IDs are the ``davinci<N>`` numbers, which the Ascend Docker Runtime accepts up to 128
#: (``ASCEND_VISIBLE_DEVICES``); logic IDs number the same chips 0..n-1.
PHYSICAL_ID = Bounds(0, 128, "a physical ID, a davinci number")
LOGIC_ID = Bounds(0, 128, "a logic ID, 0..n-1 over the node's chips")
#: **[U]** a slot holds a chip, so there are no more slot numbers than physical IDs (samples: 0-2).
SLOT_ID = Bounds(0, 128, "a slot number")
#: ``-t topo`` prints ``NIC0`` .. ``NIC3``.
NIC = Bounds(0, 3, "a NIC column of -t topo")

# -- counts ------------------------------------------------------------------------------------------
CHIPS_PER_NPU = Bounds(0, 4, "chips of one NPU: 4 on a 310 card")
NPUS = Bounds(0, 129, "NPUs of a node: at most one per physical ID")
#: Up to 16 vNPUs on a chip (a 910 with 32 AI cores, docs/ascend-hardware.md#compute-and-memory).
VNPUS = Bounds(0, 16, "vNPUs of one chip")

# -- amounts of one chip (docs/ascend-hardware.md#compute-and-memory) -----------------------------------
#: The 950's 128 GB of HBM (``HBM Capacity(MB) : 131072``) is the most of any chip.
MEMORY_MIB = Bounds(0, 131072, "MiB of one chip: 131072 on a 950, the most of any chip")
MEMORY_GIB = Bounds(0, 128, "GiB of one chip: 128 on a 950, the most of any chip")
#: A huge page is 2 MiB, so a chip has at most half as many as it has MiB.
HUGEPAGES = Bounds(0, 65536, "2 MiB huge pages of one chip")
#: 32 on a 910A and in the 950's ``-t common`` sample; a count (or a template's) of 0 means nothing.
AICORE_COUNT = Bounds(1, 32, "AI cores of one chip: 32 on a 910A or 950, the most of any chip")
AICORE = Bounds(0, 32, "AI cores of one chip: 32 on a 910A or 950, the most of any chip")
AICPU = Bounds(0, 14, "AICPUs of one chip: 14 on a 910A, the most of any chip")
#: JPEGD on a 910B4 and PNGD on a 910: 24 each; every other engine has fewer.
MEDIA_ENGINES = Bounds(0, 24, "media engines of one kind on one chip: 24, the most of any chip")

# -- hard vNPUs (docs/ascend-hardware.md#hard-vnpu-templates) -----------------------------------------
#: ``physicalID x 16 + 100 + k``, k <= 15, physical IDs up to 128.
VNPU_ID = Bounds(100, 100 + 16 * 128 + 15, "a vNPU ID, physicalID x 16 + 100 + k")
VGROUP_ID = Bounds(0, 15, "a vgroup, at most one per vNPU")
VNPU_STATUS = Bounds(0, 1, "a vNPU status: 0 created, 1 in use")

# -- readings ----------------------------------------------------------------------------------------
PERCENT = Bounds(0, 100, "percent")
#: **[U]** no Ascend source gives a sensor's range: -55..150 covers what silicon survives.
TEMPERATURE_C = Bounds(-55, 150, "degrees Celsius")
#: **[U]** samples print 100-3200 MHz; no clock of a chip or its memory reaches 20 GHz.
FREQUENCY_MHZ = Bounds(0, 20000, "MHz")
#: **[U]** samples print up to 298.6 W for one chip; no accelerator module draws 2 kW.
POWER_W = Bounds(0, 2000, "watts")
#: Linux's ``PID_MAX_LIMIT`` (2^22 on 64-bit kernels, ``include/linux/threads.h``).
PID = Bounds(1, 2**22, "a process ID")
#: Driver releases seen: 1.9.3 .. 26.0.rc2 (year-numbered since 20.x).
RELEASE_PART = Bounds(0, 999, "a driver release number")
