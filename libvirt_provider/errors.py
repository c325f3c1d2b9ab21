"""The provider's error classes: what went wrong, said in the controller's terms.

Adapters translate platform errors into these in one place each (libvirt errors in
`libvirt_provider.driver.libvirt_errors`), so the controller decides on retry or report by class,
never by inspecting libvirt error codes::

    ProviderError (Exception)
    ├── NotFoundError             the object is not there (often: already done)
    ├── StateConflictError        something else holds the name or state we need
    │   └── ForeignDomainError    a domain we do not own has this machine's name
    ├── RetryableError            transient: connection lost, busy, timed out; try again later
    │   ├── HostUnreachableError  a remote host's libvirtd cannot be reached (with the reason)
    │   ├── AgentUnresponsiveError  a guest agent did not answer within its timeout
    │   └── AgentBusyError        the host's guest-agent budget (or the machine's one call) is taken
    └── PermanentError            retrying the same request cannot help; report it
        ├── AccessDeniedError     the daemon's credentials may not do it (RBAC, a 403)
        └── UnsupportedError      the platform cannot do what was asked
"""

from __future__ import annotations

__all__ = [
    "AccessDeniedError",
    "AgentBusyError",
    "AgentUnresponsiveError",
    "ForeignDomainError",
    "GuestAgentUnavailableError",
    "HostUnreachableError",
    "NotFoundError",
    "PermanentError",
    "ProviderError",
    "RetryableError",
    "StateConflictError",
    "UnsupportedError",
]


class ProviderError(Exception):
    """Base of every error the provider's adapters raise."""


class NotFoundError(ProviderError):
    """The domain, volume, pool or network does not exist."""


class StateConflictError(ProviderError):
    """The requested name or state is held by something else."""


class ForeignDomainError(StateConflictError):
    """A domain with this machine's name exists but is not this machine's (different UUID)."""

    def __init__(self, name: str, foreign_uuid: str) -> None:
        super().__init__(
            f"a domain named {name!r} already exists with UUID {foreign_uuid}, which is not this "
            "machine's; it is left untouched"
        )
        self.name = name
        self.foreign_uuid = foreign_uuid


class RetryableError(ProviderError):
    """A transient failure: the same call may succeed later."""


class HostUnreachableError(RetryableError):
    """A remote host's libvirtd cannot be reached; `reason` is the host's `Connected` reason
    (AuthenticationFailed, HostKeyMismatch, Unreachable, SecretNotFound, ...)."""

    def __init__(self, host: str, reason: str, message: str) -> None:
        super().__init__(f"host {host} is not connected ({reason}): {message}")
        self.host = host
        self.reason = reason
        self.detail = message


class AgentUnresponsiveError(RetryableError):
    """A guest agent took its channel and then did not answer within the agent timeout: the guest
    is the only one who can fix it, so the caller backs off asking it."""


class GuestAgentUnavailableError(RetryableError):
    """A call that needs the guest agent (a file-system freeze) found none: no agent channel, no
    agent connected to it, or one that did not answer in time. Nothing was done."""


class AgentBusyError(RetryableError):
    """A guest-agent call was not started: the host's few agent slots are all taken, or this
    machine already has one in flight. Nothing was asked; the next pass may try."""


class PermanentError(ProviderError):
    """The request itself is wrong for this platform; retrying it unchanged cannot succeed."""


class AccessDeniedError(PermanentError):
    """The daemon's credentials may not do this (an HTTP 403 from the API server)."""


class UnsupportedError(PermanentError):
    """The platform does not support what was asked (a flag, a device, a domain type)."""
