"""Everything that serves one libvirt host: a `HostUnit` wires the host's LibvirtMachine
controller, image cache and host agent to its libvirt connection. A local daemon runs one unit
for its own host; remote mode (`remote.py`) runs one per remote host it has claimed, with that
host's credentials (`credentials.py`). The catalog feed is shared by every unit of a process."""
