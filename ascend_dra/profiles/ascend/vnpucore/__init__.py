"""The soft split (``HAMivNPUCore``, docs/hami-vnpu-core.md): :mod:`.profile` the profile,
:mod:`.host` its options and container paths, :mod:`.assets` the limiter library it installs,
:mod:`.prereq` what the host must have, :mod:`.quota` each container's limits, :mod:`.versioninfo`
the driver's ``version.info``.

May import the shared Ascend modules (:mod:`..profile`, :mod:`..discovery`, :mod:`..npusmi`, ...)
and the profile contract.
"""
