"""The one place that turns libvirt errors into the provider's error classes.

libvirt reports everything as `libvirtError` with a numeric code; callers above the driver must
not depend on those codes, so every adapter call goes through `translated()`.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

import libvirt

from libvirt_provider.errors import (
    AgentUnresponsiveError,
    NotFoundError,
    PermanentError,
    ProviderError,
    RetryableError,
    StateConflictError,
    UnsupportedError,
)

_NOT_FOUND = {
    libvirt.VIR_ERR_NO_DOMAIN,
    libvirt.VIR_ERR_NO_STORAGE_VOL,
    libvirt.VIR_ERR_NO_STORAGE_POOL,
    libvirt.VIR_ERR_NO_NETWORK,
    libvirt.VIR_ERR_NO_DOMAIN_METADATA,
}
_CONFLICT = {
    libvirt.VIR_ERR_DOM_EXIST,
    libvirt.VIR_ERR_STORAGE_VOL_EXIST,
}
# Transient by nature: the connection, the daemon or the guest agent is busy or gone for now.
_RETRYABLE = {
    libvirt.VIR_ERR_NO_CONNECT,
    libvirt.VIR_ERR_INVALID_CONN,
    libvirt.VIR_ERR_RPC,
    libvirt.VIR_ERR_SYSTEM_ERROR,
    libvirt.VIR_ERR_OPERATION_TIMEOUT,
    libvirt.VIR_ERR_AGENT_UNRESPONSIVE,
    libvirt.VIR_ERR_AGENT_UNSYNCED,
    libvirt.VIR_ERR_RESOURCE_BUSY,
    libvirt.VIR_ERR_OPERATION_ABORTED,
}
_UNSUPPORTED = {
    libvirt.VIR_ERR_NO_SUPPORT,
    libvirt.VIR_ERR_CONFIG_UNSUPPORTED,
}


def classify(err: libvirt.libvirtError) -> ProviderError:
    code = err.get_error_code()
    message = err.get_error_message() or str(err)
    if code in _NOT_FOUND:
        return NotFoundError(message)
    if code in _CONFLICT:
        return StateConflictError(message)
    if code == libvirt.VIR_ERR_AGENT_UNRESPONSIVE and not _agent_absent(message):
        return AgentUnresponsiveError(message)
    if code in _RETRYABLE:
        return RetryableError(message)
    if code in _UNSUPPORTED or (
        # libvirt reports a flag the daemon does not know as an invalid argument.
        code == libvirt.VIR_ERR_INVALID_ARG and "unsupported flags" in message
    ):
        return UnsupportedError(message)
    if code == libvirt.VIR_ERR_OPERATION_INVALID:
        # e.g. "domain is not running": the state moved under us; the next pass sees it.
        return StateConflictError(message)
    return PermanentError(message)


def _agent_absent(message: str) -> bool:
    """libvirt reports an agent that is not there (its channel closed in the guest: "QEMU guest
    agent is not connected"; or dropped after it sent garbage: "... not available due to an
    error") with the same code as one that timed out; those answer at once, and are no reason
    to back off."""
    return "not connected" in message or "due to an error" in message


def is_agent_unavailable(err: libvirt.libvirtError) -> bool:
    """A call that needs the guest agent found none (no channel configured, nothing connected to
    it, or no answer in time): what a file-system freeze reports before it did anything."""
    code = err.get_error_code()
    if code in (libvirt.VIR_ERR_AGENT_UNRESPONSIVE, libvirt.VIR_ERR_AGENT_UNSYNCED):
        return True
    message = (err.get_error_message() or "").lower()
    return code == libvirt.VIR_ERR_ARGUMENT_UNSUPPORTED and "agent" in message


def is_missing(err: libvirt.libvirtError) -> bool:
    """The domain, volume, pool or network asked for does not exist."""
    return err.get_error_code() in _NOT_FOUND


def is_unsupported_call(err: libvirt.libvirtError) -> bool:
    """The connection's driver does not implement the call at all (e.g. keepalive on libvirt's
    in-process test driver): a capability this connection lacks, not a failure."""
    return bool(err.get_error_code() == libvirt.VIR_ERR_NO_SUPPORT)


def is_refused_flag(err: libvirt.libvirtError) -> bool:
    """The call's flags are unknown to this libvirt (older daemons report an invalid argument):
    the caller may try again with fewer flags."""
    code = err.get_error_code()
    return code in (
        libvirt.VIR_ERR_NO_SUPPORT,
        libvirt.VIR_ERR_INVALID_ARG,
    ) or "unsupported flags" in (err.get_error_message() or "")


@contextmanager
def translated() -> Iterator[None]:
    try:
        yield
    except libvirt.libvirtError as err:
        raise classify(err) from err
