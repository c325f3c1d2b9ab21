"""The provider's shells: everything that talks to Kubernetes or owns threads and signals.

Only these packages (and the libvirt driver) import `kubernetes` or `kopf`. They are kept in rooms
by what they serve, and import downward only (`pyproject.toml` checks it):

- `process/`: one daemon process: start and stop, signals, health and metrics endpoints, the
  heap, the command line's configuration checks.
- `cluster/`: the work one elected daemon does for the whole cluster: the leader's term, placement.
- `host/`: everything that serves one libvirt host: its LibvirtMachine controller, catalog feed,
  host agent, and in remote mode the claims on remote hosts and their credentials.
- `kube/`: the Kubernetes calls the provider's controllers make.
- `runtime/`: thread plumbing shared by the rooms above: a kopf operator on its own thread and the
  bounded stop sequence.
"""
