"""canonical_quantity: the form kube-apiserver stores a Quantity in (apimachinery resource.Quantity).

The expectations were read back from the real kube-apiserver 1.35 (tests/cluster/test_ascend_slices.py
stores every fixture node's slices and compares them byte for byte).
"""

import pytest

from ascend_dra.model import canonical_quantity


@pytest.mark.parametrize(
    ("given", "stored"),
    [
        ("65536Mi", "64Gi"), ("32768Mi", "32Gi"), ("8192Mi", "8Gi"), ("21525Mi", "21525Mi"), ("1536Mi", "1536Mi"),
        ("1024Ki", "1Mi"), ("1.5Gi", "1536Mi"), ("32Gi", "32Gi"), ("0.5Ki", "512"), ("1023Mi", "1023Mi"),
        ("100", "100"), ("20", "20"), ("1000", "1k"), ("1500", "1500"), ("1200000", "1200k"), ("3k", "3k"),
        ("0.5", "500m"), (".5", "500m"), ("0", "0"), ("1e3", "1e3"), ("1e4", "10e3"), (64, "64"),
    ],
    ids=lambda v: str(v),
)
def test_canonical_form(given, stored):
    assert canonical_quantity(given) == stored


@pytest.mark.parametrize("bad", ["1ki", "1KiB", "abc", "1.2.3", ""])
def test_not_a_quantity(bad):
    with pytest.raises(ValueError, match="invalid quantity"):
        canonical_quantity(bad)
