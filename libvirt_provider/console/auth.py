"""Who is asking, and may they: the console endpoint's authentication and authorisation decisions.

Pure: the shell (`adapters/process/console_server.py`) reads the API server's front-proxy trust
from `kube-system/extension-apiserver-authentication`, verifies the client certificate's chain
in TLS, asks the API server a SubjectAccessReview, and puts what it learnt to these functions.

The order is the security argument (docs/console.md):

1. A request without a client certificate that verified against the requestheader client CA is
   refused (401) before any header is read. TLS accepts such connections (the APIService's
   availability probe and any scanner reach the port) but no request on them is served.
2. The certificate's common name must be one of the allowed names when the API server lists any.
3. Only then are `X-Remote-User`/`X-Remote-Group` (the header names the API server publishes)
   believed. A console request without a user is refused (401); discovery needs none (the
   aggregator's availability probe sends its certificate and no user).
4. A SubjectAccessReview for `get` on `libvirtmachines/console` in the machine's namespace,
   for that user and those groups, must allow it (else 403).
"""

from __future__ import annotations

import json
import urllib.parse
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from libvirt_provider import constants as c

__all__ = [
    "FrontProxyTrust",
    "Identity",
    "Refusal",
    "authenticate",
    "forbidden",
    "status_body",
    "subject_access_review",
    "trust_from_configmap",
]

# The defaults the API server uses when a list is absent from the ConfigMap.
_DEFAULT_USER_HEADERS = ("X-Remote-User",)
_DEFAULT_GROUP_HEADERS = ("X-Remote-Group",)


@dataclass(frozen=True)
class FrontProxyTrust:
    """What the API server says its front proxy presents (from the ConfigMap)."""

    client_ca: str
    allowed_names: frozenset[str] = frozenset()
    username_headers: tuple[str, ...] = _DEFAULT_USER_HEADERS
    group_headers: tuple[str, ...] = _DEFAULT_GROUP_HEADERS
    extra_prefixes: tuple[str, ...] = ()


@dataclass(frozen=True)
class Identity:
    user: str
    groups: tuple[str, ...] = ()
    extra: Mapping[str, tuple[str, ...]] = field(default_factory=dict)


@dataclass(frozen=True)
class Refusal:
    """An answer other than the stream: an HTTP code, a Status reason and a message."""

    code: int
    reason: str
    message: str


def _json_list(value: str | None) -> tuple[str, ...]:
    if not value:
        return ()
    parsed = json.loads(value)
    if not isinstance(parsed, list) or not all(isinstance(v, str) for v in parsed):
        raise ValueError(f"expected a JSON list of strings, got {value!r}")
    return tuple(parsed)


def trust_from_configmap(data: Mapping[str, str]) -> FrontProxyTrust | None:
    """The front-proxy trust in extension-apiserver-authentication's data; None when the API
    server has no front proxy configured (then no request can be authenticated)."""
    ca = data.get("requestheader-client-ca-file")
    if not ca:
        return None
    return FrontProxyTrust(
        client_ca=ca,
        allowed_names=frozenset(_json_list(data.get("requestheader-allowed-names"))),
        username_headers=_json_list(data.get("requestheader-username-headers"))
        or _DEFAULT_USER_HEADERS,
        group_headers=_json_list(data.get("requestheader-group-headers")) or _DEFAULT_GROUP_HEADERS,
        extra_prefixes=_json_list(data.get("requestheader-extra-headers-prefix")),
    )


def _values(headers: Iterable[tuple[str, str]], names: Iterable[str]) -> list[str]:
    wanted = {n.lower() for n in names}
    return [v.strip() for k, v in headers if k.lower() in wanted and v.strip()]


def authenticate(
    trust: FrontProxyTrust | None,
    peer_common_name: str | None,
    headers: Iterable[tuple[str, str]],
    *,
    need_user: bool,
) -> Identity | Refusal | None:
    """The caller (None: the front proxy itself, with no user, allowed only when `need_user`
    is false), or why not. `peer_common_name` is the CN of a client certificate whose chain TLS
    verified against `trust.client_ca`; None when the client sent none."""
    if trust is None:
        return Refusal(401, "Unauthorized", "the API server's front-proxy trust is not known yet")
    if peer_common_name is None:
        return Refusal(401, "Unauthorized", "no front-proxy client certificate")
    if trust.allowed_names and peer_common_name not in trust.allowed_names:
        return Refusal(
            401, "Unauthorized", f"client certificate {peer_common_name!r} is not an allowed name"
        )
    pairs = list(headers)
    users = _values(pairs, trust.username_headers)
    if not users:
        if need_user:
            return Refusal(401, "Unauthorized", "no user in the front proxy's headers")
        return None
    # One group per header, never split: as the API server's own request-header authenticator
    # reads them (a group may hold a comma, as an LDAP DN does).
    groups = _values(pairs, trust.group_headers)
    extra: dict[str, list[str]] = {}
    for prefix in trust.extra_prefixes:
        low = prefix.lower()
        for key, value in pairs:
            if key.lower().startswith(low) and len(key) > len(prefix):
                # The proxy percent-encodes what a header name cannot carry.
                name = urllib.parse.unquote(key[len(prefix) :].lower())
                extra.setdefault(name, []).append(value.strip())
    return Identity(
        user=users[0],
        groups=tuple(groups),
        extra={k: tuple(v) for k, v in extra.items()},
    )


def subject_access_review(
    identity: Identity, namespace: str, name: str, subresource: str
) -> dict[str, Any]:
    """The SubjectAccessReview asking whether `identity` may `get` the machine's subresource."""
    spec: dict[str, Any] = {
        "user": identity.user,
        "groups": list(identity.groups),
        "resourceAttributes": {
            "namespace": namespace,
            "verb": "get",
            "group": c.SUBRESOURCE_GROUP,
            "version": c.SUBRESOURCE_VERSION,
            "resource": c.CONSOLE_RESOURCE,
            "subresource": subresource,
            "name": name,
        },
    }
    if identity.extra:
        spec["extra"] = {k: list(v) for k, v in identity.extra.items()}
    return {
        "apiVersion": "authorization.k8s.io/v1",
        "kind": "SubjectAccessReview",
        "spec": spec,
    }


def forbidden(identity: Identity, namespace: str, subresource: str, reason: str) -> Refusal:
    """The 403 for a SubjectAccessReview that did not allow the request, worded as the API
    server words its own."""
    message = (
        f'User "{identity.user}" cannot get resource "{c.CONSOLE_RESOURCE}/{subresource}" in '
        f'API group "{c.SUBRESOURCE_GROUP}" in the namespace "{namespace}"'
    )
    if reason:
        message += f": {reason}"
    return Refusal(403, "Forbidden", message)


def status_body(refusal: Refusal) -> bytes:
    """A `Status` object, as the API server answers errors (kubectl prints its message)."""
    body = {
        "kind": "Status",
        "apiVersion": "v1",
        "metadata": {},
        "status": "Failure",
        "message": refusal.message,
        "reason": refusal.reason,
        "code": refusal.code,
    }
    return json.dumps(body).encode("utf-8")
