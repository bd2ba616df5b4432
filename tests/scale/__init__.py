"""The scale bed (issue 37): a hundred simulated nodes on one machine, each served by its own real
driver process and a kubelet stand-in, under ClusterLoader2's DRA workloads (tests/scale/README.md)."""
