"""Reading a device metadata file (KEP-5304) as a workload does, for the tests of every tier.

The file is a JSON stream: the same ``DeviceMetadata`` object once per API version, newest first
(ascend_dra/cdi/devicemetadata.py writes ``metadata.resource.k8s.io/v1beta1`` then ``v1alpha1``).
"""

from __future__ import annotations

import json
from typing import Any

__all__ = ("json_stream", "newest_object")


def json_stream(text: str) -> list[dict[str, Any]]:
    """Decode concatenated JSON objects the way a consumer does (one ``raw_decode`` after another)."""
    decoder, out, at = json.JSONDecoder(), [], 0
    while text[at:].strip():
        while text[at].isspace():
            at += 1
        obj, at = decoder.raw_decode(text, at)
        out.append(obj)
    return out


def newest_object(text: str) -> dict[str, Any]:
    """The stream's v1beta1 object, after checking that the stream is v1beta1 then v1alpha1 of the
    same object (v1beta1 is required from 1.37, v1alpha1 is what 1.36's readers know)."""
    beta, alpha = json_stream(text)
    assert (beta["apiVersion"], alpha["apiVersion"]) == ("metadata.resource.k8s.io/v1beta1",
                                                         "metadata.resource.k8s.io/v1alpha1")
    assert {**alpha, "apiVersion": beta["apiVersion"]} == beta
    return beta
