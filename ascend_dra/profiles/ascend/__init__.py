"""Ascend NPU profiles (``npu-310P``, ``npu-910``, ``HAMivNPUCore``) and the discovery they share.

Reading order: :mod:`.errors` (what can go wrong with npu-smi), :mod:`.npusmi` (running it),
:mod:`.keyvalue` and :mod:`.tables` (its outputs as attrs objects), :mod:`.chips` (the chip
catalogue), :mod:`.chip` (one discovered chip and its three IDs), the tiers :mod:`.npusmi_tier`,
:mod:`.devfs`, :mod:`.simulated`, the chain :mod:`.discovery`, then :mod:`.attributes`,
:mod:`.config`, :mod:`.host`, :mod:`.profile` and the two profiles :mod:`.npu310p`, :mod:`.npu910`.
The soft-split profile :mod:`.vnpu_core` adds :mod:`.versioninfo`, :mod:`.vnpu_core_host`,
:mod:`.vnpu_core_prereq`, :mod:`.vnpu_core_quota`; :mod:`.labnode` simulates Lab 18's node.
"""
