"""One LibvirtMachine's life on its host: the reconcile loop and the steps it sequences.

`reconciler` reads the inputs, asks the pure core (linkage, power, status, readiness) and acts
through the steps here (creation, update of an existing domain, teardown).
"""
