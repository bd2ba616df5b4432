"""Seeing what the process does: log set-up and format (:mod:`.logs`), event-loop stalls
(:mod:`.loopstall`), and the crash points and disk faults tests inject (:mod:`.faults`,
``ASCEND_DRA_CRASH_AT``).

Imports nothing of ours.
"""
