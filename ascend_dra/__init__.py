"""ascend-dra: a Kubernetes DRA driver for Huawei Ascend NPUs (docs/architecture.md).

One package per layer; each imports only the ones below it (docs/architecture.md#modules-and-layering,
checked by the import-linter contracts in pyproject.toml):

- :mod:`.cli`                       the command line;
- :mod:`.node` | :mod:`.webhook`    the node daemon; the admission webhook (its own program);
- :mod:`.kubelet` | :mod:`.cluster` the kubelet's gRPC side; the API server side;
- :mod:`.state`                     Prepare and Unprepare of the node's claims;
- :mod:`.durable`                   the checkpoint and its journal;
- :mod:`.profiles`                  device discovery and container edits, per kind of device;
- :mod:`.cdi` | :mod:`.hami`        CDI specs; HAMi's resource syntax;
- :mod:`.system`, :mod:`.observe`   atomic files, listeners, signals; logs, loop stalls, injected faults;
- :mod:`.model`, :mod:`.version`    the data model; the release.
"""
