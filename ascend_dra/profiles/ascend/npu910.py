"""The ``npu-910`` profile: whole Ascend 910, 910B and 910C chips (training), one device per chip.

A 910C (A3) NPU has two dies, each its own chip in npu-smi (``Chip`` 0 and 1, own ``Phy-ID``) and
its own device here, with 64 GiB of HBM each (docs/ascend-hardware.md#chip-families). ``memory`` is HBM
(``HBM-Usage(MB)`` total of ``npu-smi info``, e.g. ``65536Mi`` on a 910B3, ``910B3_info.txt``).

Extra attributes from ``npu-smi info -t topo`` (``910B3_info_-t_topo.txt``), when it answers:
``hccs`` (bool: the chip has an HCCS link to another chip), ``topologyGroup`` (``hccs-<n>``: the
chips connected to each other through HCCS, numbered by their lowest logic ID, so a claim can ask
for several chips with ``matchAttribute: <driver>/topologyGroup``), ``cpuAffinity`` (the CPU list
npu-smi reports for the chip, e.g. ``144-167``).
"""

from __future__ import annotations

from collections.abc import Mapping

from ascend_dra.model import AttributeValue
from ascend_dra.profiles.ascend.chip import NpuChip
from ascend_dra.profiles.ascend.chips import MODELS, ChipFamily
from ascend_dra.profiles.ascend.profile import AscendChipProfile

__all__ = ("Npu910Profile", "factory")


class Npu910Profile(AscendChipProfile):
    """Whole 910/910B/910C chips; see the module docstring."""

    name = "npu-910"
    families = frozenset({ChipFamily.ASCEND910, ChipFamily.ASCEND910B, ChipFamily.ASCEND910C})
    simulated_model = MODELS["910B3"]
    whole_chips = True

    def extra_attributes(self, chip: NpuChip) -> Mapping[str, AttributeValue | None]:
        """``hccs``, ``topologyGroup``, ``cpuAffinity`` from ``-t topo`` (None = omitted)."""
        return {"hccs": chip.hccs, "topologyGroup": chip.topology_group, "cpuAffinity": chip.cpu_affinity}


def factory() -> Npu910Profile:
    """Entry point ``npu-910`` of group ``ascend_dra.profiles``."""
    return Npu910Profile()
