"""The admission webhook (``ascend-dra webhook``): opaque-config validation and HAMi syntax conversion,
served over HTTPS. The conversion itself is pure and lives in :mod:`ascend_dra.hami`; this package is
the plumbing around it.

- :mod:`.review`   AdmissionReview v1 in and out (pure);
- :mod:`.validate` opaque configs of ResourceClaims / ResourceClaimTemplates (pure, uses profiles);
- :mod:`.kubeapi`  a small JSON client of the API server on aiohttp;
- :mod:`.mutate`   the pod conversion with its API calls (create, roll back, adopt),
  :mod:`.templatecache` the claim templates it made, as its watch reports them, and
  :mod:`.podupdate` the pod updates it answers;
- :mod:`.owners`   the loop that makes each pod the owner of its direct claims;
- :mod:`.settings` its validated configuration; :mod:`.tls` the serving certificate, reloaded when
  its files change;
- :mod:`.metrics`, :mod:`.server` the HTTP server and what it exposes.

Its own program: may import :mod:`ascend_dra.hami`, the profiles (to validate their configs), the
foundations and the data model; never the node daemon's layers (kubelet, cluster, state, durable;
docs/architecture.md#modules-and-layering).
"""
