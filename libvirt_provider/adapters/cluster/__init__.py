"""Cluster-wide work, done by the one daemon that holds the generic controller's Lease: the
generic VirtualMachine controller's term and the placer. The decisions themselves are pure
(`libvirt_provider.hosts`); these modules read, ask, bind and report."""
