"""The vm-api.io generic VirtualMachine controller.

It is platform-neutral on purpose: it reads provider objects only as plain dicts through the
provider status contract and never imports libvirt or any provider's code, so any provider process
can embed it.

Layout: a pure core (`api`, `contract`, `linking`, `conditions`, `status`, `reconciler`,
`workqueue`, `provider_index`) decides; the shells in `generic.adapters` talk to Kubernetes and
kopf. `generic.adapters.operator.register` embeds the controller in a kopf process;
`python -m generic` runs it alone; `python -m generic.crd` regenerates its CRD.
"""
