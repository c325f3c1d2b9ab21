"""The libvirt provider for the vm-api.io VirtualMachine API.

One daemon per KVM host: it runs the embedded generic controller and the LibvirtMachine controller,
which turns a linked VirtualMachine/LibvirtMachine pair into a libvirt domain on this host.
"""
