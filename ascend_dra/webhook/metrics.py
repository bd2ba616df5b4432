"""Prometheus metrics of the webhook process, served on ``--metrics-port`` (prometheus-client).

Names follow ``ascend_dra_webhook_<noun>_total`` / ``_seconds`` (docs/architecture.md#conventions), zero-initialised:

- ``ascend_dra_webhook_reviews_total{endpoint, outcome}``: AdmissionReviews answered; ``outcome``
  ``allowed`` (unchanged), ``converted`` (patched), ``denied``, ``malformed`` (HTTP 400) or
  ``error`` (a bug: answered with a denial, logged with its traceback);
- ``ascend_dra_webhook_review_seconds{endpoint, outcome}``: time from the body read to the answer;
- ``ascend_dra_webhook_tls_reloads_total{result}``: certificate reloads (``ok`` / ``error``);
- ``ascend_dra_webhook_owner_updates_total{result}``: claims given their pod as owner;
- ``ascend_dra_webhook_orphans_deleted_total``: claims deleted because no pod came for them;
- ``ascend_dra_webhook_hami_dra_claims_total{action}``: claims HAMi-DRA made before the switch, taken
  over (:mod:`ascend_dra.hami.hamidra`): ``adopted`` (their pod made their owner) or ``replaced``
  (deleted for a new pod of their name, which gets a claim of ours);
- ``ascend_dra_webhook_api_requests_total{verb, resource, code}``: calls to the API server
  (``verb``: ``list``, ``watch``, ``get``, ``create``, ``update``, ``patch``, ``delete``;
  ``resource``: the plural, as ``resourceclaimtemplates``; ``code``: the HTTP status, ``0`` for
  no answer);
- ``ascend_dra_webhook_templates_known``: the ResourceClaimTemplates of this webhook that exist,
  as its watch reports them (:mod:`ascend_dra.webhook.templatecache`).
"""

from __future__ import annotations

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram

__all__ = ("ENDPOINTS", "OUTCOMES", "WebhookMetrics")

ENDPOINTS = ("validate-resource-claim-parameters", "mutate-pods")
OUTCOMES = ("allowed", "converted", "denied", "malformed", "error")


class WebhookMetrics:
    """One registry per webhook (tests create several in one process)."""

    def __init__(self) -> None:
        self.registry = r = CollectorRegistry()
        self.reviews = Counter("ascend_dra_webhook_reviews", "AdmissionReviews answered, by endpoint and outcome",
                               ["endpoint", "outcome"], registry=r)
        self.seconds = Histogram("ascend_dra_webhook_review_seconds", "time to answer one AdmissionReview, in seconds",
                                 ["endpoint", "outcome"], registry=r,
                                 buckets=(0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 10))
        self.tls_reloads = Counter("ascend_dra_webhook_tls_reloads", "serving certificate reloads, by result",
                                   ["result"], registry=r)
        self.owner_updates = Counter("ascend_dra_webhook_owner_updates", "direct claims given their pod as owner",
                                     ["result"], registry=r)
        self.orphans_deleted = Counter("ascend_dra_webhook_orphans_deleted",
                                       "direct claims deleted because no pod references them", registry=r)
        self.hami_dra_claims = Counter("ascend_dra_webhook_hami_dra_claims",
                                       "claims HAMi-DRA made, adopted by their pod or replaced for a new one",
                                       ["action"], registry=r)
        self.api_requests = Counter("ascend_dra_webhook_api_requests", "calls to the API server, by verb, resource "
                                    "and HTTP status (0: no answer)", ["verb", "resource", "code"], registry=r)
        self.templates_known = Gauge("ascend_dra_webhook_templates_known", "ResourceClaimTemplates this webhook "
                                     "made that exist, as its watch reports them", registry=r)
        for action in ("adopted", "replaced"):
            self.hami_dra_claims.labels(action)
        for endpoint in ENDPOINTS:
            for outcome in OUTCOMES:
                self.reviews.labels(endpoint, outcome)
        for result in ("ok", "error"):
            self.tls_reloads.labels(result)
            self.owner_updates.labels(result)

    def observe(self, endpoint: str, outcome: str, seconds: float) -> None:
        """Record one answered review."""
        self.reviews.labels(endpoint, outcome).inc()
        self.seconds.labels(endpoint, outcome).observe(seconds)

    def api_request(self, verb: str, resource: str, code: int) -> None:
        """Count one call to the API server (:class:`~ascend_dra.webhook.kubeapi.KubeApi` ``on_request``)."""
        self.api_requests.labels(verb, resource, str(code)).inc()
