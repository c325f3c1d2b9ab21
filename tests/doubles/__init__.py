"""Test doubles, in one place: an in-memory hypervisor, cluster gateway and machine store.

For unit tests of the pure core and of the sequencing around it; e2e tests use the real adapters.
"""
