"""Simulators for tests, benchmarks and the lab: :mod:`.npusmi_sim` (an ``npu-smi`` that answers from
a state file, ``ascend-dra-npu-smi-sim``) and :mod:`.labnode` (Lab 18's node: a device tree and the
simulator, ``python -m ascend_dra.profiles.ascend.sim.labnode``).

The top of the Ascend profiles: nothing imports it but tests and tools.
"""
