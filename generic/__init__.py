"""The vm-api.io generic VirtualMachine controller.

It is platform-neutral on purpose: it reads provider objects only as plain dicts through the
provider status contract and never imports libvirt or any provider's code, so any provider process
can embed it.
"""
