"""The `LibvirtSnapshot` kind's pure core: its model, its volume names, and the decisions of one
pass (which disks, whether they fit, what the status says). The sequence that acts on a host is
`taker.py` (over the driver's protocol); the Kubernetes shell is `adapters/host/snapshots.py`.
docs/snapshots.md says why a snapshot is taken the way it is."""
