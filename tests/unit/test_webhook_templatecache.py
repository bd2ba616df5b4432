"""The webhook's template cache (ascend_dra/webhook/templatecache.py): one creation at a time per
template, only what the watch reports held, nothing trusted while the watch is down; and the verbs
and resources its API calls are counted under (kubeapi.verb_and_resource)."""

from __future__ import annotations

from typing import Any

import anyio
import pytest

from ascend_dra.webhook.kubeapi import verb_and_resource
from ascend_dra.webhook.mutate import _same_spec
from ascend_dra.webhook.templatecache import TemplateCache

pytestmark = pytest.mark.anyio

SPEC = {"devices": {"requests": [{"name": "npu", "exactly": {"deviceClassName": "ascend"}}]}}
OTHER = {"devices": {"requests": [{"name": "gpu", "exactly": {"deviceClassName": "gpu"}}]}}


def template(namespace: str, name: str, spec: dict[str, Any], **metadata: Any) -> dict[str, Any]:
    return {"metadata": {"namespace": namespace, "name": name, **metadata}, "spec": {"spec": spec}}


@pytest.mark.parametrize(("method", "path", "expected"), [
    ("GET", "/api/v1/pods", ("list", "pods")),
    ("GET", "/api/v1/namespaces/ns/pods", ("list", "pods")),
    ("GET", "/api/v1/namespaces/ns/pods/p", ("get", "pods")),
    ("GET", "/apis/resource.k8s.io/v1/namespaces/ns/resourceclaimtemplates/t", ("get", "resourceclaimtemplates")),
    ("GET", "/apis/resource.k8s.io/v1/resourceclaimtemplates", ("list", "resourceclaimtemplates")),
    ("POST", "/apis/resource.k8s.io/v1/namespaces/ns/resourceclaims", ("create", "resourceclaims")),
    ("PATCH", "/apis/resource.k8s.io/v1/namespaces/ns/resourceclaims/c", ("patch", "resourceclaims")),
    ("DELETE", "/apis/resource.k8s.io/v1/namespaces/ns/resourceclaims/c", ("delete", "resourceclaims")),
    ("PUT", "/api/v1/namespaces/ns", ("update", "namespaces")),
    ("GET", "/api/v1/namespaces", ("list", "namespaces")),
])
def test_a_call_is_counted_under_the_verb_and_resource_the_audit_log_names(method, path, expected):
    assert verb_and_resource(method, path) == expected


async def test_admissions_that_need_one_new_template_at_once_create_it_once():
    cache = TemplateCache(api=None, same_spec=_same_spec)  # type: ignore[arg-type]
    calls = []

    async def create() -> None:
        calls.append(1)
        await anyio.sleep(0.05)  # the POST in flight while the others arrive

    async with anyio.create_task_group() as tg:
        for _ in range(20):
            tg.start_soon(cache.ensure, "ns", "t", SPEC, False, create)
    assert len(calls) == 1


async def test_a_failed_creation_is_tried_again_by_the_next_admission_and_its_error_stays_its_own():
    cache = TemplateCache(api=None, same_spec=_same_spec)  # type: ignore[arg-type]
    calls, failures = [], []

    async def create() -> None:
        calls.append(1)
        await anyio.sleep(0.02)
        if len(calls) == 1:
            raise RuntimeError("API server timed out")

    async def admit() -> None:
        try:
            await cache.ensure("ns", "t", SPEC, False, create)
        except RuntimeError as exc:
            failures.append(str(exc))

    async with anyio.create_task_group() as tg:
        for _ in range(10):
            tg.start_soon(admit)
    assert failures == ["API server timed out"]
    assert len(calls) == 2  # the first waiter created it; the other eight took that success


async def test_a_dry_run_creation_or_another_spec_is_never_taken_as_the_template_existing():
    cache = TemplateCache(api=None, same_spec=_same_spec)  # type: ignore[arg-type]
    calls = []

    def creator(label: str):
        async def create() -> None:
            calls.append(label)
            await anyio.sleep(0.05)
        return create

    async with anyio.create_task_group() as tg:
        tg.start_soon(cache.ensure, "ns", "t", SPEC, True, creator("dry run"))
        await anyio.sleep(0.01)
        tg.start_soon(cache.ensure, "ns", "t", SPEC, False, creator("real"))
        tg.start_soon(cache.ensure, "ns", "u", OTHER, False, creator("other name"))
    assert sorted(calls) == ["dry run", "other name", "real"]


def test_only_what_the_watch_reports_is_held_and_nothing_while_it_is_down():
    cache = TemplateCache(api=None, same_spec=_same_spec)  # type: ignore[arg-type]
    cache._apply("ADDED", template("ns", "t", SPEC))
    assert not cache.holds("ns", "t", SPEC)  # never listed: not synced
    cache._synced = True
    assert cache.holds("ns", "t", SPEC)
    assert not cache.holds("ns", "t", OTHER)  # same name, another spec: the admission checks the API server
    assert not cache.holds("other", "t", SPEC)
    cache._apply("MODIFIED", template("ns", "t", SPEC, deletionTimestamp="2026-12-07T00:00:00Z"))
    assert not cache.holds("ns", "t", SPEC)
    cache._apply("ADDED", template("ns", "t", SPEC))
    cache._apply("DELETED", template("ns", "t", SPEC))
    assert not cache.holds("ns", "t", SPEC)
