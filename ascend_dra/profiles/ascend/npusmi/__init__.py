"""npu-smi: finding it (:mod:`.locate`), running it (:mod:`.runner`), what can go wrong
(:mod:`.errors`), and its outputs parsed into attrs objects (:mod:`.keyvalue`, :mod:`.readings`,
:mod:`.tables`, :mod:`.mapping`, :mod:`.topo`, :mod:`.remap`, :mod:`.vnpu_tables`; the bounds they
check, :mod:`.bounds`, and the shared text helpers, :mod:`._text`). docs/ascend-discovery.md.

Imports nothing of ours outside this package: it knows npu-smi, not chips or profiles.
"""
