"""A minimal RFC 6902 applier for what the webhook's patches contain (``add`` and ``replace``)."""

from __future__ import annotations

import copy
from collections.abc import Iterable, Mapping
from typing import Any


def apply_patch(doc: Mapping[str, Any], patch: Iterable[Mapping[str, Any]]) -> dict[str, Any]:
    """Return a patched deep copy of ``doc``. :raises KeyError/IndexError: for a path that does not exist."""
    result: Any = copy.deepcopy(dict(doc))
    for op in patch:
        assert op["op"] in ("add", "replace"), op
        parts = [p.replace("~1", "/").replace("~0", "~") for p in op["path"].split("/")[1:]]
        target = result
        for part in parts[:-1]:
            target = target[int(part)] if isinstance(target, list) else target[part]
        last = parts[-1]
        if isinstance(target, list):
            if last == "-":
                target.append(op["value"])
            else:
                target[int(last)] = op["value"]
        else:
            if op["op"] == "replace":
                assert last in target, op
            target[last] = op["value"]
    return result
