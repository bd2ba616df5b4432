"""Opaque configs take JSON types as they are: no silent int("50"), int(50.5) or int(True).

Regression: cattrs' built-in conversions ran before our strict hooks (registered as predicates),
so FakeConfig accepted aicoreLimit 50.5 as 50, true as 1 and "50" as 50.
"""

import pytest

from ascend_dra.profiles.base import ConfigError, decode_config
from ascend_dra.profiles.fake import FakeConfig, FakeProfile, LogLevel
from ascend_dra.profiles.gpu import GpuProfile

DRIVER = "ascend.project-hami.io"


def fake(**fields):
    profile = FakeProfile()
    return decode_config({"apiVersion": f"{DRIVER}/v1alpha1", "kind": "FakeConfig", **fields},
                         profile.config_types, DRIVER, profile)


@pytest.mark.parametrize(
    ("value", "message"),
    [
        (50.5, "must be an integer, got a number 50.5"),
        (True, "must be an integer, got a boolean true"),
        ("50", 'must be an integer, got a string "50"'),
        (None, "must be an integer, got null"),
        ([50], "must be an integer, got an array [50]"),
    ],
    ids=["float", "bool", "numeric-string", "null", "array"],
)
def test_an_integer_field_takes_only_a_json_integer(value, message):
    with pytest.raises(ConfigError) as raised:
        fake(aicoreLimit=value)
    assert raised.value.problems == (("parameters.aicoreLimit", message),)


@pytest.mark.parametrize(
    ("value", "message"),
    [
        ("loud", "'loud' is not one of debug, info, warning, error"),
        (None, "must be one of debug, info, warning, error, got null"),
        (1.5, "must be one of debug, info, warning, error, got a number 1.5"),
    ],
    ids=["unknown-name", "null", "number"],
)
def test_an_enum_field_takes_one_of_its_values(value, message):
    with pytest.raises(ConfigError) as raised:
        fake(logLevel=value)
    assert raised.value.problems == (("parameters.logLevel", message),)


def test_valid_values_still_decode_to_their_types():
    assert fake(aicoreLimit=50, logLevel="debug") == FakeConfig(aicore_limit=50, log_level=LogLevel.DEBUG)


def test_gpu_partition_count_as_a_string_is_refused():
    profile = GpuProfile()
    with pytest.raises(ConfigError) as raised:
        decode_config({"apiVersion": f"{DRIVER}/v1alpha1", "kind": "GpuConfig", "sharing": {
            "strategy": "SpacePartitioning", "spacePartitioningConfig": {"partitionCount": "2"}}},
            profile.config_types, DRIVER, profile)
    assert raised.value.problems == (
        ("parameters.sharing.spacePartitioningConfig.partitionCount", 'must be an integer, got a string "2"'),)


def test_a_range_problem_is_reported_beside_a_type_problem():
    # A README trial: with one field of the wrong type and another out of range, only the type
    # problem was named; fixing it then revealed the second. Both are named at once now.
    with pytest.raises(ConfigError) as raised:
        fake(aicoreLimit=500, logLevel="loud")
    assert [path for path, _ in raised.value.problems] == ["parameters.logLevel", "parameters.aicoreLimit"]
    assert raised.value.problems[1] == ("parameters.aicoreLimit", "500 is outside the allowed range 1..100 (percent)")


def test_a_field_with_a_type_problem_is_not_range_checked_again():
    with pytest.raises(ConfigError) as raised:
        fake(aicoreLimit="500")
    assert raised.value.problems == (("parameters.aicoreLimit", 'must be an integer, got a string "500"'),)
