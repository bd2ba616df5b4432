"""DCMI, the driver's device management library (``libdcmi.so``): its C interface as ctypes sees it
(:mod:`.api`, written from the published header), the worker process that loads the library and makes
the calls (:mod:`.worker`), and the daemon's side, which finds the library, runs the worker and gives
each call a deadline (:mod:`.client`). docs/ascend-discovery.md#dcmi.

Imports nothing of ours outside this package but :mod:`ascend_dra.profiles.options`: it knows DCMI,
not chips or profiles (the DCMI discovery tier is :mod:`..discovery.dcmi_tier`).
"""
