"""The command line (``ascend-dra``, ``python -m ascend_dra.cli``): parsing and what each command does
before it hands over.

- :mod:`.main`      the parser and the commands' dispatch (parsing only; everything else is imported
  lazily, so ``--help`` loads no gRPC or Kubernetes code);
- :mod:`.flags`     flags with their environment twins;
- :mod:`.preflight` the configuration checked before anything starts (one line and exit);
- :mod:`.discover`, :mod:`.profiles`, :mod:`.call` the ``discover``, ``profiles`` and ``call`` commands.

The top layer: it may import every package below it (docs/architecture.md#modules-and-layering); nothing
imports it.
"""
