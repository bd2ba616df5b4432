"""The names the webhook gives what it creates, as HAMi-DRA names them (docs/webhook.md#conversion-of-hami-syntax):
claims, pod claim entries and shared templates, and the CEL string literals of its selectors.
"""

from __future__ import annotations

import hashlib
import secrets
from collections.abc import Mapping
from typing import Any

import orjson

__all__ = ("claim_name", "go_quote", "random5", "template_name", "truncate_dns_label")

_RAND_ALPHABET = "bcdfghjklmnpqrstvwxz2456789"  # apimachinery util/rand: no vowels, no 0/1/3


def go_quote(text: str) -> str:
    """``text`` as Go's ``strconv.Quote`` writes it; also a valid CEL string literal.

    Printable runes stay as they are; ``"`` and ``\\`` are escaped; control and other
    non-printable runes become ``\\a \\b \\f \\n \\r \\t \\v``, ``\\xNN``, ``\\uNNNN`` or ``\\UNNNNNNNN``.
    """
    escapes = {"\a": r"\a", "\b": r"\b", "\f": r"\f", "\n": r"\n", "\r": r"\r", "\t": r"\t", "\v": r"\v",
               '"': r"\"", "\\": r"\\"}
    out = ['"']
    for char in text:
        code = ord(char)
        if char in escapes:
            out.append(escapes[char])
        elif char == " " or (char.isprintable() and code != 0x7F):
            out.append(char)
        elif code < 0x80:
            out.append(f"\\x{code:02x}")
        elif code < 0x10000:
            out.append(f"\\u{code:04x}")
        else:
            out.append(f"\\U{code:08x}")
    out.append('"')
    return "".join(out)


def truncate_dns_label(name: str) -> str:
    """HAMi-DRA's ``truncateDNS1123Label``: names over 63 characters keep a prefix and an 8-hex hash."""
    if len(name) <= 63:
        return name
    suffix = "-" + hashlib.sha256(name.encode()).hexdigest()[:8]
    prefix = name[: 63 - len(suffix)].rstrip("-")
    return prefix + suffix if prefix else suffix[1:]


def claim_name(namespace: str, pod_name: str, container: str, common_word: str) -> str:
    """The direct claim's name (and pod claim name), e.g. ``dra-ascend-e2e-ascend-share-a-app-ascend310p``.

    :param pod_name: the pod's name, or the 5 random characters HAMi-DRA uses with ``generateName``.
    """
    return truncate_dns_label(f"{namespace}-{pod_name.replace('.', '-')}-{container}-{common_word.lower()}")


def template_name(common_word: str, spec: Mapping[str, Any]) -> str:
    """The shared template of one distinct request: ``hami-<lower(commonWord)>-<10 hex of sha256(spec)>``."""
    digest = hashlib.sha256(orjson.dumps(spec, option=orjson.OPT_SORT_KEYS)).hexdigest()[:10]
    return f"hami-{common_word.lower()}-{digest}"


def random5() -> str:
    """5 characters as the API server's ``generateName`` appends them (apimachinery ``util/rand``)."""
    return "".join(secrets.choice(_RAND_ALPHABET) for _ in range(5))
