"""The node's prepared claims: Prepare and Unprepare, durably and in order (docs/durable-state.md).

- :mod:`.devicestate` :class:`~.devicestate.DeviceState`, what the kubelet side calls: Prepare's
  steps, and the collaborators below it holds;
- :mod:`.prepared`    :class:`~.prepared.PreparedClaims`, the records and the steps every operation
  shares (locks, spec writing and checking, rollback of one claim);
- :mod:`.unprepare`, :mod:`.replay`, :mod:`.recovery` the Unpreparer, the Replayer (a claim
  prepared before, answered again) and the Recovery (start-up, retries, spec repair);
- :mod:`.planning`, :mod:`.guard`, :mod:`.guardnotes` a claim's plan and the double-allocation guard;
- :mod:`.claims`      what a claim is to us (references, errors, the claim source protocol, the
  standalone source).

May import the durable records, profiles, CDI and the foundations; never the kubelet or cluster
sides, the node daemon, the webhook or the command line.
"""
