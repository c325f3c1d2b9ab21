"""The hypervisor boundary: an interface (`base`), its libvirt adapter and an in-memory double.

Only `libvirt_driver` and `libvirt_errors` import libvirt (an import-linter contract checks it).
"""
