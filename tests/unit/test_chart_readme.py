"""The chart's README documents every value of values.yaml (an operator's trial found 15 missing)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import yaml

CHART = Path(__file__).resolve().parents[2] / "deployments" / "helm" / "ascend-dra"

#: Maps whose keys are the user's own (node labels, resource names, a profile's options), named as one value.
FREE_FORM = {"profileOptions", "resources", "nodeSelector", "tolerations", "affinity", "podAnnotations",
             "podLabels", "issuerRef", "labels"}


def leaves(values: dict[str, Any], prefix: str = "") -> Iterator[str]:
    """Dotted paths of the values a user sets: the leaves, and free-form maps as a whole."""
    for key, value in values.items():
        path = f"{prefix}.{key}" if prefix else key
        if isinstance(value, dict) and value and key not in FREE_FORM:
            yield from leaves(value, path)
        else:
            yield path


def test_every_value_is_in_the_readme_table() -> None:
    values = yaml.safe_load((CHART / "values.yaml").read_text())
    readme = (CHART / "README.md").read_text()
    table = [line for line in readme.splitlines() if line.startswith("| `")]
    named = " ".join(table)

    def documented(path: str) -> bool:
        # "`webhook.certificate.mode` (`.secretName`, ...)" names a sibling by its last key.
        parent, _, last = path.rpartition(".")
        return f"`{path}`" in named or (f"`.{last}`" in named and f"`{parent}." in named)

    missing = [p for p in leaves(values) if not documented(p)]
    assert not missing, f"values not in deployments/helm/ascend-dra/README.md's table: {missing}"
