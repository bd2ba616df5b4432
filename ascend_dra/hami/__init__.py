"""HAMi's resource syntax and its conversion into ResourceClaims (pure: no API calls, no I/O;
docs/webhook.md#conversion-of-hami-syntax).

- :mod:`.convert`     HAMi resources of a pod -> claim specs and the pod patch;
- :mod:`.request`     one container's request; :mod:`.annotations` the ``hami.io/use-*`` annotations;
- :mod:`.chips`       the chip table (also read by the node's usage metrics);
- :mod:`.hamidra`     HAMi-DRA's own claims and rules; :mod:`.claimnames` the names given, as HAMi-DRA
  gives them; :mod:`.volcano` the same conversion for a Volcano Job's task templates.

May import the data model only.
"""
