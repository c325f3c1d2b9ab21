"""The remote-connection rules: accepted URIs, Secret shapes, the URI libvirt gets, and how a
failed connection is named."""

from __future__ import annotations

from pathlib import PurePath
from urllib.parse import parse_qs, urlsplit

import pytest

from libvirt_provider import constants as c
from libvirt_provider.driver.endpoint import (
    ConnectionProblemError,
    Transport,
    classify_failure,
    connect_uri,
    credential_files,
    parse_endpoint,
    ssh_wrapper,
    summarize_failure,
)

KEY = (
    b"-----BEGIN OPENSSH PRIVATE KEY-----\nAAAAsecretmaterialZZZZ\n"
    b"-----END OPENSSH PRIVATE KEY-----\n"
)
KNOWN = b"10.0.0.2 ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIB\n"
CERT = b"-----BEGIN CERTIFICATE-----\nMIIBsecret\n-----END CERTIFICATE-----\n"
TLS_KEY = b"-----BEGIN PRIVATE KEY-----\nMIIEsecretkey\n-----END PRIVATE KEY-----\n"


@pytest.mark.parametrize(
    ("uri", "transport", "host", "port", "user"),
    [
        ("qemu+ssh://root@kvm1.example/system", Transport.SSH, "kvm1.example", None, "root"),
        ("qemu+libssh://ops@10.0.0.2:2222/system", Transport.LIBSSH, "10.0.0.2", 2222, "ops"),
        ("qemu+tls://kvm2/system", Transport.TLS, "kvm2", None, None),
        ("QEMU+TLS://kvm2:16514/system", Transport.TLS, "kvm2", 16514, None),
    ],
)
def test_accepted_uris(
    uri: str, transport: Transport, host: str, port: int | None, user: str | None
) -> None:
    endpoint = parse_endpoint(uri)
    assert (endpoint.transport, endpoint.host, endpoint.port, endpoint.user) == (
        transport,
        host,
        port,
        user,
    )


@pytest.mark.parametrize(
    ("uri", "says"),
    [
        ("qemu+tcp://kvm1/system", "neither encrypted nor authenticated"),
        ("qemu+unix:///system", "local socket"),
        ("qemu+ext://kvm1/system?command=/bin/x", "external command"),
        ("qemu:///system", "this machine's own"),
        ("xen+ssh://root@kvm1/system", "unsupported scheme"),
        ("kvm1", "unsupported scheme"),
        ("qemu+ssh://root@kvm1/system?no_verify=1", "query parameters are not accepted"),
        ("qemu+libssh://root@kvm1/system?known_hosts_verify=ignore", "query parameters"),
        ("qemu+tls://kvm1/system?pkipath=/etc", "query parameters"),
        ("qemu+ssh://root:hunter2@kvm1/system", "password in the URI"),
        ("qemu+ssh://kvm1/system", "names the user"),
        ("qemu+ssh://root@kvm1/session", "only /system"),
        ("qemu+tls:///system", "no host name"),
        ("qemu+tls://kvm1:99999/system", "connection URI"),
    ],
)
def test_refused_uris_say_why(uri: str, says: str) -> None:
    with pytest.raises(ConnectionProblemError) as err:
        parse_endpoint(uri)
    assert err.value.reason == c.REASON_INVALID_CONNECTION
    assert says in err.value.message


def test_a_password_never_appears_in_the_message() -> None:
    with pytest.raises(ConnectionProblemError) as err:
        parse_endpoint("qemu+ssh://root:hunter2@kvm1/system")
    assert "hunter2" not in err.value.message
    assert "root:***@kvm1" in err.value.message


def test_ssh_secret_becomes_files() -> None:
    files = credential_files(Transport.SSH, {"ssh-privatekey": KEY, "known_hosts": KNOWN})
    assert files == {"ssh-privatekey": KEY, "known_hosts": KNOWN}


def test_tls_secret_becomes_libvirt_pki_names() -> None:
    files = credential_files(
        Transport.TLS, {"ca.crt": CERT, "tls.crt": CERT, "tls.key": TLS_KEY.rstrip(b"\n")}
    )
    assert set(files) == {"cacert.pem", "clientcert.pem", "clientkey.pem"}
    assert files["clientkey.pem"].endswith(b"\n")


@pytest.mark.parametrize(
    ("transport", "data", "says"),
    [
        (Transport.SSH, {"ssh-privatekey": KEY}, "lacks known_hosts"),
        (Transport.LIBSSH, {}, "lacks ssh-privatekey, known_hosts"),
        (Transport.SSH, {"ssh-privatekey": KEY, "known_hosts": b""}, "lacks known_hosts"),
        (Transport.SSH, {"ssh-privatekey": CERT, "known_hosts": KNOWN}, "not a PEM or OpenSSH"),
        (Transport.SSH, {"ssh-privatekey": KEY, "known_hosts": b"justonefield\n"}, "known_hosts"),
        (Transport.TLS, {"tls.crt": CERT, "tls.key": TLS_KEY}, "lacks ca.crt"),
        (Transport.TLS, {"ca.crt": KEY, "tls.crt": CERT, "tls.key": TLS_KEY}, "PEM certificate"),
        (Transport.TLS, {"ca.crt": CERT, "tls.crt": CERT, "tls.key": CERT}, "PEM private key"),
    ],
)
def test_wrong_secret_shapes_name_keys_never_content(
    transport: Transport, data: dict[str, bytes], says: str
) -> None:
    with pytest.raises(ConnectionProblemError) as err:
        credential_files(transport, data)
    assert err.value.reason == c.REASON_INVALID_SECRET
    assert says in err.value.message
    assert b"secret" not in err.value.message.encode()
    assert "AAAA" not in err.value.message


def test_ssh_uri_keeps_host_key_checking_on() -> None:
    endpoint = parse_endpoint("qemu+ssh://root@10.0.0.2/system")
    uri = connect_uri(endpoint, PurePath("/dev/shm/creds/h1"))
    parts = urlsplit(uri)
    query = parse_qs(parts.query)
    assert parts.scheme == "qemu+ssh"
    assert parts.hostname == "10.0.0.2"
    assert query["keyfile"] == ["/dev/shm/creds/h1/ssh-privatekey"]
    assert query["command"] == ["/dev/shm/creds/h1/ssh"]
    assert "no_verify" not in query
    wrapper = ssh_wrapper(PurePath("/dev/shm/creds/h1"), connect_timeout=15)
    assert "StrictHostKeyChecking=yes" in wrapper
    assert "UserKnownHostsFile=/dev/shm/creds/h1/known_hosts" in wrapper
    assert "BatchMode=yes" in wrapper
    assert "ConnectTimeout=15" in wrapper


def test_libssh_uri_verifies_against_the_secret_known_hosts() -> None:
    uri = connect_uri(parse_endpoint("qemu+libssh://ops@h:2222/system"), PurePath("/d"))
    parts = urlsplit(uri)
    query = parse_qs(parts.query)
    assert parts.port == 2222
    assert parts.username == "ops"
    assert query["known_hosts"] == ["/d/known_hosts"]
    assert query["known_hosts_verify"] == ["normal"]
    assert query["keyfile"] == ["/d/ssh-privatekey"]


def test_tls_uri_points_at_the_pki_directory() -> None:
    uri = connect_uri(parse_endpoint("qemu+tls://kvm2/system"), PurePath("/d/kvm2"))
    assert parse_qs(urlsplit(uri).query) == {"pkipath": ["/d/kvm2"]}


@pytest.mark.parametrize(
    ("message", "reason"),
    [
        (
            "Cannot recv data: Host key verification failed.: Connection reset by peer",
            c.REASON_HOST_KEY_MISMATCH,
        ),
        (
            "Cannot recv data: @@@@@ WARNING: REMOTE HOST IDENTIFICATION HAS CHANGED! @@@@@",
            c.REASON_HOST_KEY_MISMATCH,
        ),
        (
            "Cannot recv data: root@10.0.0.2: Permission denied (publickey).: "
            "Connection reset by peer",
            c.REASON_AUTHENTICATION_FAILED,
        ),
        ("authentication failed: Failed to auth with public key", c.REASON_AUTHENTICATION_FAILED),
        (
            "Cannot recv data: ssh: connect to host 10.0.0.2 port 22: Connection refused: "
            "Connection reset by peer",
            c.REASON_UNREACHABLE,
        ),
        (
            "unable to connect to server at '10.0.0.2:16514': Connection refused",
            c.REASON_UNREACHABLE,
        ),
        ("no answer within 15 s (connection timed out)", c.REASON_UNREACHABLE),
        ("internal error: unexpected reply from server", c.REASON_PROTOCOL_ERROR),
        # Seen in the lab (libssh, OpenSSH without the host in known_hosts, TLS).
        (
            "libssh transport error: failed to authenticate: Access denied for 'publickey'. "
            "Authentication that can continue: publickey",
            c.REASON_AUTHENTICATION_FAILED,
        ),
        (
            "authentication failed: !!! SSH HOST KEY VERIFICATION FAILED !!!: Identity of host "
            "'10.213.33.2:22' differs from stored identity.",
            c.REASON_HOST_KEY_MISMATCH,
        ),
        (
            "libssh transport error: No user interaction callback provided: Can't verify the "
            "session host key",
            c.REASON_HOST_KEY_MISMATCH,
        ),
        (
            "Cannot recv data: No ED25519 host key is known for 10.213.33.2 and you have "
            "requested strict checking.\nHost key verification failed.: Connection reset by peer",
            c.REASON_HOST_KEY_MISMATCH,
        ),
        (
            "unable to connect to server at '10.213.33.2:22': Connection refused",
            c.REASON_UNREACHABLE,
        ),
        (
            "Our own certificate /d/clientcert.pem failed validation against /d/cacert.pem: The "
            "certificate hasn't got a known issuer.",
            c.REASON_AUTHENTICATION_FAILED,
        ),
        ("Unable to read TLS confirmation: Input/output error", c.REASON_AUTHENTICATION_FAILED),
        (
            "authentication failed: Failed to verify peer's certificate",
            c.REASON_AUTHENTICATION_FAILED,
        ),
    ],
)
def test_failures_are_named(message: str, reason: str) -> None:
    assert classify_failure(message) == reason


BANNER = """Cannot recv data: @@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@
@    WARNING: REMOTE HOST IDENTIFICATION HAS CHANGED!     @
@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@
IT IS POSSIBLE THAT SOMEONE IS DOING SOMETHING NASTY!
Someone could be eavesdropping on you right now (man-in-the-middle attack)!
It is also possible that a host key has just been changed.
The fingerprint for the ED25519 key sent by the remote host is
SHA256:0Yf2mWkq0nB1xw2b1m1p0Vd5oXy3Qv3p3z4a5b6c7d8.
Please contact your system administrator.
Add correct host key in /dev/shm/x/h/known_hosts to get rid of this message.
Offending ED25519 key in /dev/shm/x/h/known_hosts:1
  remove with:
  ssh-keygen -f "/dev/shm/x/h/known_hosts" -R "10.213.33.2"
Host key for 10.213.33.2 has changed and you have requested strict checking.
Host key verification failed.: Connection reset by peer"""


def test_the_ssh_banner_becomes_one_line_that_still_says_why() -> None:
    summary = summarize_failure(BANNER)
    assert "\n" not in summary
    assert "@@@" not in summary
    assert "ssh-keygen" not in summary
    assert "Host key for 10.213.33.2 has changed" in summary
    assert classify_failure(BANNER) == c.REASON_HOST_KEY_MISMATCH
    assert classify_failure(summary) == c.REASON_HOST_KEY_MISMATCH
