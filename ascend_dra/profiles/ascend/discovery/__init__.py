"""Finding the chips: the tiers (:mod:`.dcmi_tier`, DCMI's calls, and chip health from them;
:mod:`.npusmi_tier`; :mod:`.devfs`, ``/dev/davinci*`` and sysfs;
:mod:`.simulated`), the facts a tier carries over from another (:mod:`.carryover`), the IDs it
resolves (:mod:`.ids`), and the chain that tries them in order (:mod:`.chain`). docs/ascend-discovery.md.

May import :mod:`..dcmi`, :mod:`..npusmi`, :mod:`..chip` and :mod:`..chips`; never a profile.
"""
