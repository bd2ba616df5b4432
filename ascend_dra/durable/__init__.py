"""What survives a crash: the checkpoint's on-disk format and how it is written (docs/durable-state.md).

- :mod:`.checkpoint` the records and their JSON snapshot (the on-disk format);
- :mod:`.journal`    the append-only changes between snapshots;
- :mod:`.records`    the table of records, its writes (group commit) and the shared mode;
- :mod:`.sharedlock` file locks the instances of a node share;
- :mod:`.evidence`   what else on the node says claims were prepared (a damaged snapshot).

May import profiles (their context), CDI and the foundations; never the state that uses it or above.
"""
