"""Ascend NPU profiles (``npu-310P``, ``npu-910``, ``HAMivNPUCore``, ``hard-vNPU``) and the discovery they share.

Reading order: :mod:`.npusmi` (running npu-smi and parsing what it prints) and :mod:`.dcmi` (DCMI's
library, called from a worker process), :mod:`.chips` (the chip catalogue), :mod:`.chip` (one
discovered chip and its three IDs), :mod:`.discovery` (the tiers: DCMI, npu-smi, ``/dev/davinci*``
and sysfs, simulated; and their chain), then :mod:`.attributes`,
:mod:`.config`, :mod:`.host`, :mod:`.usage`, :mod:`.profile` and the two whole-chip profiles
:mod:`.npu310p`, :mod:`.npu910`. The soft split is :mod:`.vnpucore`, the hard split :mod:`.hardvnpu`;
:mod:`.sim` holds the simulators tests and the lab run (npu-smi, Lab 18's node).

Imports point down that list; the subpackages import nothing of the profiles built on them.
"""
