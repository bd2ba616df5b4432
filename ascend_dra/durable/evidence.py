"""What on the node says claims were prepared, besides the checkpoint (docs/durable-state.md,
"A damaged checkpoint").

A snapshot that is damaged and names no claim (zero bytes, ``null``, ...) proves nothing about
what it held: it is set aside only when nothing here says a claim was prepared (records.py). The
evidence is what start-up would otherwise destroy: our per-claim CDI specs (removed as orphans)
and the files a profile keeps per claim (hard vNPU: its ledger, whose vNPUs would be destroyed as
orphans). The journal's changes are the records' own evidence (records.py reads them).
"""

from __future__ import annotations

import logging
from collections.abc import Iterable, Mapping
from typing import Any

from ascend_dra.cdi.devicemetadata import MetadataStore
from ascend_dra.cdi.store import CdiStore
from ascend_dra.profiles.base import ProfileContext

__all__ = ("few", "prepared_claims_evidence")

log = logging.getLogger(__name__)

#: Names listed in one line of evidence; the rest are counted.
SHOWN = 3


def few(names: Iterable[str]) -> str:
    """``a, b, c and 2 more``: the first :data:`SHOWN` of ``names``, and how many are left."""
    names = list(names)
    shown = ", ".join(names[:SHOWN])
    return f"{shown} and {len(names) - SHOWN} more" if len(names) > SHOWN else shown


def prepared_claims_evidence(cdi: CdiStore, kinds: Iterable[str], profiles: Mapping[str, Any],
                             ctx: ProfileContext, metadata: MetadataStore | None = None) -> list[str]:
    """One line per thing that says a claim was prepared on this node (blocking: file I/O).

    :param kinds: the CDI kinds whose per-claim specs count (the loaded profiles': the specs that
        start-up would remove as orphans).
    :param profiles: profile name -> profile; each optional ``claim_evidence(ctx)`` hook is asked
        (docs/writing-a-profile.md).
    :param metadata: the claims' device metadata files (their per-claim directories count).
    :return: e.g. ``["2 claim CDI specs under /var/run/cdi: k8s.x-npu_<uid>.yaml, ..."]``; a source
        that cannot be read counts as evidence too (it cannot say that nothing was prepared).
    """
    found: list[str] = []
    try:
        specs = sorted(name for names in cdi.claim_specs(kinds).values() for name in names)
    except OSError as exc:
        found.append(f"the CDI dir {cdi.root} cannot be listed to look for claim specs ({exc.strerror or exc})")
    else:
        if specs:
            found.append(f"{len(specs)} claim CDI spec(s) of ours under {cdi.root}: {few(specs)}")
    if metadata is not None:
        try:
            uids = metadata.claim_uids()
        except OSError as exc:
            found.append(f"the device metadata dir {metadata.root} cannot be listed ({exc.strerror or exc})")
        else:
            if uids:
                found.append(f"{len(uids)} claim device metadata dir(s) under {metadata.root}: {few(uids)}")
    for name, profile in profiles.items():
        hook = getattr(profile, "claim_evidence", None)
        if hook is None:
            continue
        try:
            lines = list(hook(ctx))
        except Exception as exc:  # a profile's bug or an unreadable dir: it cannot vouch for "nothing"
            log.warning("a profile could not say whether claims were prepared", extra={"profile": name,
                                                                                        "error": str(exc)})
            found.append(f"profile {name} cannot tell whether claims were prepared ({type(exc).__name__}: {exc})")
        else:
            if lines:
                found.append(f"{len(lines)} record(s) of profile {name}: {few(lines)}")
    return found
