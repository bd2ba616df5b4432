"""The admission webhook (``ascend-dra webhook``): opaque-config validation and HAMi syntax conversion.

Modules, one concept each (imports point down, docs/architecture.md#modules-and-layering; nothing here imports the
kubelet or state
layers):

- :mod:`.review`   AdmissionReview v1 in and out (pure);
- :mod:`.validate` opaque configs of ResourceClaims / ResourceClaimTemplates (pure, uses profiles);
- :mod:`.hami`     HAMi resource syntax -> claim specs and the pod patch (pure), reading each
  container's request with :mod:`.hamirequest`, the ``hami.io/use-*`` annotations with
  :mod:`.hamiannotations` and the chip table of :mod:`.hamichips`;
- :mod:`.kubeapi`  a small JSON client of the API server on aiohttp;
- :mod:`.mutate`   the pod conversion with its API calls (create, roll back, adopt);
- :mod:`.owners`   the loop that makes each pod the owner of its direct claims;
- :mod:`.tls`      the serving certificate, reloaded when its files change;
- :mod:`.metrics`, :mod:`.server` the HTTP server and what it exposes.
"""
