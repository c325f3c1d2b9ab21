"""The NoCloud seed: read back with pycdlib, it holds exactly what cloud-init will look for."""

from __future__ import annotations

import io
import time

import pycdlib
import pytest
import yaml
from pydantic import SecretBytes

from libvirt_provider.resolve.cloudinit import (
    EMPTY_USER_DATA,
    NetworkInterfaceConfig,
    build_cidata_iso,
    cloud_init_digest,
    legacy_cloud_init_digest,
    network_config,
)
from libvirt_provider.resolved import CloudInitData

USER_DATA = b"#cloud-config\n# vmapi-marker: hello-from-user-data\nruncmd: [[echo, hi]]\n"


def seed(**overrides: object) -> CloudInitData:
    fields: dict[str, object] = {
        "instance_id": "6f1d3c2a-8b4e-4d7a-9c1b-2e3f4a5b6c7d",
        "hostname": "web-1",
        "ssh_public_keys": ("ssh-ed25519 AAAAC3Nza test@example",),
        "user_data": SecretBytes(USER_DATA),
        "network_config": SecretBytes(b"network:\n  version: 2\n"),
        "pool": "vmapi-lab",
        "volume": "x--cidata.iso",
    }
    fields.update(overrides)
    return CloudInitData.model_validate(fields)


def read_back(image: bytes) -> tuple[str, dict[str, bytes]]:
    iso = pycdlib.PyCdlib()
    iso.open_fp(io.BytesIO(image))
    try:
        label = iso.pvd.volume_identifier.decode().strip()
        files = {}
        for name in ("meta-data", "user-data", "network-config"):
            out = io.BytesIO()
            try:
                iso.get_file_from_iso_fp(out, rr_path=f"/{name}")
            except pycdlib.pycdlibexception.PyCdlibInvalidInput:
                continue
            files[name] = out.getvalue()
            joliet = io.BytesIO()
            iso.get_file_from_iso_fp(joliet, joliet_path=f"/{name}")
            assert joliet.getvalue() == files[name]
        return label, files
    finally:
        iso.close()


def test_the_iso_is_labelled_cidata_and_holds_the_three_files() -> None:
    label, files = read_back(build_cidata_iso(seed()))
    assert label == "cidata"
    assert files["user-data"] == USER_DATA
    assert files["network-config"] == b"network:\n  version: 2\n"
    assert yaml.safe_load(files["meta-data"]) == {
        "instance-id": "6f1d3c2a-8b4e-4d7a-9c1b-2e3f4a5b6c7d",
        "local-hostname": "web-1",
        "public-keys": ["ssh-ed25519 AAAAC3Nza test@example"],
    }


def test_without_user_data_the_seed_carries_an_empty_cloud_config_and_no_network_config() -> None:
    _, files = read_back(
        build_cidata_iso(seed(user_data=None, network_config=None, ssh_public_keys=()))
    )
    assert files["user-data"] == EMPTY_USER_DATA
    assert "network-config" not in files
    assert "public-keys" not in yaml.safe_load(files["meta-data"])


def test_the_digest_follows_the_content_and_its_key_and_nothing_else() -> None:
    def digest(data: CloudInitData, key: str = "vm-uid") -> str:
        return cloud_init_digest(data, key=key)

    assert digest(seed()) == digest(seed())
    assert digest(seed()) != digest(seed(hostname="web-2"))
    assert digest(seed()) != digest(seed(user_data=SecretBytes(b"x")))
    assert digest(seed()) != digest(seed(), key="another-vm-uid")


def test_the_digest_cannot_confirm_a_guess_of_the_user_data_without_its_key() -> None:
    # Whoever reads the domain's metadata (libvirt's read-only socket) sees the digest and can
    # rebuild every other input of the seed; without the VM's uid a guess is not confirmed.
    shown = cloud_init_digest(seed(), key="0b5ec0de-vm-uid")
    guesses = [cloud_init_digest(seed(), key=key) for key in ("", "web", "default/web")]
    assert shown not in guesses
    assert shown != legacy_cloud_init_digest(seed())


def test_secret_contents_stay_out_of_reprs() -> None:
    text = repr(seed()) + str(seed())
    assert "hello-from-user-data" not in text
    assert "**********" in text


@pytest.mark.parametrize("size", [0, 1, 2048, 3 * 2048 + 1, 1 << 20])
def test_any_size_of_user_data_survives(size: int) -> None:
    data = bytes(range(256)) * (size // 256) + b"x" * (size % 256)
    _, files = read_back(build_cidata_iso(seed(user_data=SecretBytes(data))))
    assert files["user-data"] == data


def test_generated_network_config_matches_nics_by_mac() -> None:
    document = yaml.safe_load(
        network_config(
            [
                NetworkInterfaceConfig(name="eth0", mac="52:54:00:aa:bb:cc"),
                NetworkInterfaceConfig(
                    name="eth1",
                    mac="52:54:00:aa:bb:cd",
                    addresses=("fd00::5/64",),
                    dhcp4=False,
                    gateway6="fd00::1",
                ),
            ],
            search_domains=["lab.example"],
        )
    )
    ethernets = document["network"]["ethernets"]
    assert document["network"]["version"] == 2
    assert ethernets["eth0"]["match"] == {"macaddress": "52:54:00:aa:bb:cc"}
    assert ethernets["eth0"]["dhcp4"] is True
    assert ethernets["eth1"]["routes"] == [{"to": "default", "via": "fd00::1"}]
    assert ethernets["eth1"]["nameservers"] == {"addresses": [], "search": ["lab.example"]}


def test_the_same_inputs_give_the_same_bytes_whenever_and_wherever_they_are_rendered(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A migration's target renders the seed again for the running guest (libvirt does not copy a
    read-only disk): the CD-ROM must not change under it. Found by the Debian guest's migration,
    whose device read back different bytes on the target: pycdlib dated the ISO with the time and
    time zone of the build."""
    first = build_cidata_iso(seed())
    later = time.time() + 86_400 * 400 + 3_723.5
    monkeypatch.setattr(time, "time", lambda: later)
    monkeypatch.setenv("TZ", "Pacific/Chatham")
    time.tzset()
    try:
        again = build_cidata_iso(seed())
    finally:
        monkeypatch.undo()
        time.tzset()
    assert again == first
    assert build_cidata_iso(seed(hostname="web-2")) != first
