"""Finding the chips: the tiers (:mod:`.npusmi_tier`; :mod:`.devfs`, ``/dev/davinci*`` and sysfs;
:mod:`.simulated`), the facts a tier carries over from another (:mod:`.carryover`), the IDs it
resolves (:mod:`.ids`), and the chain that tries them in order (:mod:`.chain`). docs/ascend-discovery.md.

May import :mod:`..npusmi`, :mod:`..chip` and :mod:`..chips`; never a profile.
"""
