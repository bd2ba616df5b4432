"""The node daemon (``ascend-dra run``): the wiring of everything below it into one process.

- :mod:`.daemon`       one anyio task group: start-up order, the servers, the loops;
- :mod:`.upkeep`       what it does once it serves (missing CDI specs put back, claim statuses
  written again, a dropped gate's fallback ended), an object the daemon holds;
- :mod:`.inventories`  every profile discovered, a failing one isolated;
- :mod:`.settings`     the daemon's validated configuration;
- :mod:`.instancelock` one instance per node, or two during a rolling update;
- :mod:`.hotplug`      device nodes appearing or vanishing wake a rediscovery;
- :mod:`.metrics`, :mod:`.usage` ``/metrics`` and the usage samples it serves.

May import the kubelet and cluster sides, the state and every layer below them
(docs/architecture.md#modules-and-layering); never the command line or the webhook.
"""
