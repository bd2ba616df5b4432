"""What a refused Prepare says about the claims in its way: :class:`GuardRefusal`, and which of
their holders are gone from the API server (docs/operations.md).

A claim deleted or deallocated without an Unprepare (the kubelet lost its state; a claim
force-deleted) holds its devices until one comes, and every claim the scheduler then gives them is
refused by the double-allocation guard (guard.py). The refusal then names the holder and how to
release it by hand. It is only named, never released here: its container may still run.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence
from typing import Any

import anyio

from ascend_dra.durable.checkpoint import ClaimRecord
from ascend_dra.state.claims import ClaimSource, PrepareError

__all__ = ("GONE_CHECKS", "GONE_WAIT_S", "GuardRefusal", "name_gone_holders")

# Logged under the state's name, as every module of ascend_dra.state is, so `--log-level` settings by name apply.
log = logging.getLogger("ascend_dra.state")

#: Holders asked about per Prepare call whose claims the guard refused, and the seconds the asking
#: may take in all (a hint: the refusal must not wait long for it).
GONE_CHECKS = 4
GONE_WAIT_S = 2.0


class GuardRefusal(PrepareError):
    """A claim the double-allocation guard refused (its message names the device and the holder).

    :ivar holders: ``(namespace, name, uid)`` of the prepared claims in the way (:class:`guard.GuardError`).
    """

    def __init__(self, message: str, holders: Sequence[tuple[str, str, str]] = ()) -> None:
        super().__init__(message)
        self.holders = tuple(holders)


async def name_gone_holders(results: dict[str, Any], records: Mapping[str, ClaimRecord],
                            claim_source: ClaimSource) -> None:
    """Add to each :class:`GuardRefusal` in ``results`` (claim uid -> devices or error) which of
    its holders is gone (:meth:`ClaimSource.gone` asked with the holder's first pool), in place.

    Call it after the claims' locks are let go: at most :data:`GONE_CHECKS` holders are asked
    about, within :data:`GONE_WAIT_S` seconds in all; a holder not answered in time is not named.
    """
    holders = list(dict.fromkeys(h for r in results.values() if isinstance(r, GuardRefusal)
                                 for h in r.holders))[:GONE_CHECKS]
    if not holders:
        return
    gone = {}
    with anyio.move_on_after(GONE_WAIT_S):
        for namespace, name, uid in holders:
            record = records.get(uid)
            pools = [d.pool for d in getattr(record, "devices", ()) if d.pool]
            if not pools:
                continue
            reason = await claim_source.gone(namespace, name, uid, pools[0])
            if reason is not None:
                gone[(namespace, name, uid)] = reason
                log.warning("a prepared claim holds devices but is gone; release it if no pod on this node "
                            "uses it", extra={"claim": f"{namespace}/{name}", "claim_uid": uid, "reason": reason})
    for claim_uid, result in list(results.items()):
        if isinstance(result, GuardRefusal) and (notes := [
                f"ResourceClaim {ns}/{n} (uid {u}) {gone[(ns, n, u)]}: if no pod on this node uses it any "
                f"more (its NodeUnprepareResources never came), release it with `ascend-dra call unprepare "
                f"{ns}/{n} --uid {u}`" for ns, n, u in result.holders if (ns, n, u) in gone]):
            results[claim_uid] = GuardRefusal(f"{result}. " + "; ".join(notes), result.holders)
