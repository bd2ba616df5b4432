"""The API server side of the node daemon: claims read, ResourceSlices published, claim statuses written.

- :mod:`.apiclient`  the API client (requests on kubernetes-asyncio's session and configuration);
- :mod:`.apiserver`  the claim source and the slice publisher of cluster mode;
- :mod:`.publish`    the standalone publisher (slices as YAML files);
- :mod:`.slices`, :mod:`.poolview` what the slices hold, and what they show of unhealthy devices
  and of dropped feature gates; :mod:`.slicewatch` the watch that wakes the publisher;
  :mod:`.gateprobe` whether the API server keeps a gate's fields again;
- :mod:`.claimstatus` (when and how), :mod:`.statusentries` (what), :mod:`.statusmerge` (the
  merge-patch fallback), :mod:`.statushook` (what each Prepare and Unprepare queues).

May import the state's claim vocabulary (:mod:`ascend_dra.state.claims`) and the layers below it;
never the kubelet side, the node daemon, the webhook or the command line.
"""
