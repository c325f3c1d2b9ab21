"""The lab's migration links: every extra host gets an identity, an address and a configuration
of its own, so that one host's libvirtd can migrate a guest to another's.

Why: libvirt refuses a migration to a host with the source's UUID, and on a machine without SMBIOS
a libvirtd makes up a new UUID at every start; the lab therefore sets one per host, derived from its
name, that must differ between hosts and survive a restart. The listener and qemu's stream must sit
on the host's own migration address, with TLS required.
"""

from __future__ import annotations

from pathlib import Path

from tests.lab.lab import Lab, write_libvirt_config, write_migration_config


def _lab(tmp_path: Path, *, netns: str = "vmapitest", hosts: int = 3) -> Lab:
    return Lab(
        dir=tmp_path / "lab",
        cache=tmp_path / "cache",
        netns=netns,
        api_port=1,
        etcd_port=2,
        host_count=hosts,
        remote_enabled=False,
    )


def test_hosts_have_distinct_stable_uuids_and_addresses(tmp_path: Path) -> None:
    hosts = _lab(tmp_path, hosts=20).hosts
    assert len({h.host_uuid for h in hosts}) == 20
    assert [h.host_uuid for h in hosts] == [h.host_uuid for h in _lab(tmp_path, hosts=20).hosts]
    other_lab = _lab(tmp_path, netns="vmapiother").hosts
    assert not {h.host_uuid for h in other_lab} & {h.host_uuid for h in hosts}
    addresses = [h.migration_address for h in hosts]
    assert len(set(addresses)) == 20
    # On a subnet of its own, not any host's guest network or the remote host's link.
    assert all(a.startswith("10.213.40.") for a in addresses)
    assert not {h.subnet_prefix for h in hosts} & {"10.213.40"}
    assert len({h.migration_switch_veth for h in hosts}) == 20
    assert all(len(h.migration_switch_veth) <= 15 for h in hosts)


def test_a_hosts_configuration_listens_and_migrates_only_on_its_link(tmp_path: Path) -> None:
    host = _lab(tmp_path).hosts[1]
    write_libvirt_config(host.libvirtd)
    write_migration_config(host)
    libvirtd = (host.libvirtd.root / "etc" / "libvirtd.conf").read_text()
    qemu = (host.libvirtd.root / "etc" / "qemu.conf").read_text()
    assert f'host_uuid = "{host.host_uuid}"' in libvirtd
    assert f'listen_addr = "{host.migration_address}"' in libvirtd
    assert "listen_tls = 1" in libvirtd
    assert "listen_tcp = 0" in libvirtd
    assert "tls_no_verify_certificate = 0" in libvirtd
    assert f'migration_address = "{host.migration_address}"' in qemu
    assert f'migration_host = "{host.migration_address}"' in qemu
    assert f'migrate_tls_x509_cert_dir = "{host.migration_qemu_tls}"' in qemu
    assert "migrate_tls_force = 1" in qemu
    assert host.libvirtd.listen
    assert host.migration_uri == f"qemu+tls://{host.migration_address}/system"
