"""Profiles: what discovers a kind of device and says how a container gets it (docs/writing-a-profile.md).

- :mod:`.base`     the contract third-party profiles import (its ``__all__`` is the profile author's API);
- :mod:`.options`  profile options (``--profile-option``); :mod:`.checks` what a profile's inventory
  must satisfy; :mod:`.registry` loading profiles from the ``ascend_dra.profiles`` entry points;
- :mod:`.fake`, :mod:`.gpu`, :mod:`.ascend` the profiles we ship.

May import CDI, the foundations and the data model; never the state, the durable records, the kubelet
or cluster sides, the node daemon, the webhook or the command line.
"""
