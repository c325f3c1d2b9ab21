"""The provider's shells toward Kubernetes and the process: the only provider modules (beside
the libvirt driver) that import `kubernetes` or `kopf`, or that own threads and signals.

`kube` is every API call of the machine controller, `operator` maps kopf's watch events to work
queue keys, `daemon` runs both controllers in one process, `health` serves probes and metrics,
`startup` checks the command line's paths and URIs.
"""
