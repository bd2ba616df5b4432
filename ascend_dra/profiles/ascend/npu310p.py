"""The ``npu-310P`` profile: whole Ascend 310 and 310P chips (inference), one device per chip.

A 310P Duo card (two chips per NPU, ``310P-duo_*`` samples) gives two devices; an Atlas 300 card
with four 310 chips (``310_info_atlas800-3000_4chips-per-card_npu-smi-21.0.4.txt``) gives four.
``memory`` is DDR (the 310 family has no HBM; docs/ascend-hardware.md#chip-families), e.g. ``21525Mi`` on a 310P3
with driver 25.5.1 (``310P3_info.txt``).

Extra attributes: the chip's media (DVPP) engines where a source gives them -- ``dvppVpc``,
``dvppVdec``, ``dvppJpegd``, ``dvppJpege``, ``dvppVenc`` (310P3: 12, 12, 16, 8, 3 per the hiascend
"Atlas inference, 310P (8 AIC)" row, docs/ascend-hardware.md#compute-and-memory), so video pipelines can select chips
with ``device.attributes["<driver>"].dvppVdec >= 12``. Unknown for the 310: omitted.
"""

from __future__ import annotations

from collections.abc import Mapping

from ascend_dra.model import AttributeValue
from ascend_dra.profiles.ascend.chip import NpuChip
from ascend_dra.profiles.ascend.chips import MODELS, ChipFamily, model_of
from ascend_dra.profiles.ascend.profile import AscendChipProfile

__all__ = ("DVPP_ATTRIBUTES", "Npu310PProfile", "factory")

#: Catalogue engine name -> attribute name.
DVPP_ATTRIBUTES = {"vpc": "dvppVpc", "vdec": "dvppVdec", "jpegd": "dvppJpegd", "jpege": "dvppJpege",
                   "venc": "dvppVenc", "pngd": "dvppPngd"}


class Npu310PProfile(AscendChipProfile):
    """Whole 310/310P chips; see the module docstring."""

    name = "npu-310P"
    families = frozenset({ChipFamily.ASCEND310, ChipFamily.ASCEND310P})
    simulated_model = MODELS["310P3"]
    whole_chips = True

    def extra_attributes(self, chip: NpuChip) -> Mapping[str, AttributeValue | None]:
        """DVPP engine counts from the chip catalogue (:mod:`.chips`), when the model is known."""
        model = model_of(chip.chip_name)
        if model is None:
            return {}
        return {DVPP_ATTRIBUTES[engine]: count for engine, count in model.dvpp.items()}


def factory() -> Npu310PProfile:
    """Entry point ``npu-310P`` of group ``ascend_dra.profiles``."""
    return Npu310PProfile()
