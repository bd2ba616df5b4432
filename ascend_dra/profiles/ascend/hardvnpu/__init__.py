"""The hard split (``hard-vNPU``, docs/hard-vnpu.md): :mod:`.profile` the profile, :mod:`.templates`
what each chip model can be cut into, :mod:`.ops` creating and destroying vNPUs with npu-smi,
:mod:`.ledger` the vNPUs we made, on disk.

May import the shared Ascend modules (:mod:`..profile`, :mod:`..discovery`, :mod:`..npusmi`, ...)
and the profile contract.
"""
