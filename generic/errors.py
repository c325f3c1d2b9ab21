"""The generic controller's error classes, so callers branch on meaning rather than HTTP codes.

    GenericControllerError (Exception)
    ├── ContractViolationError (ValueError)  provider status has a wrong type at a contract path
    └── ApiError (RuntimeError)              a Kubernetes API call failed; retried with backoff
        ├── ConflictError                    resourceVersion/uid precondition failed; re-read now
        ├── KindNotServedError (LookupError) discovery does not serve the provider group/kind
        └── GoneError                        the object vanished between read and write

Only `generic.adapters.kube` raises the ApiError family (it maps HTTP status codes onto it);
the core never sees a `kubernetes` exception.
"""

from __future__ import annotations

__all__ = [
    "ApiError",
    "ConflictError",
    "ContractViolationError",
    "GenericControllerError",
    "GoneError",
    "KindNotServedError",
]


class GenericControllerError(Exception):
    """Root of the generic controller's errors."""


class ContractViolationError(GenericControllerError, ValueError):
    """A provider object's status has a value of the wrong type at a contract path."""

    def __init__(self, path: str, expected: str, got: object) -> None:
        self.path = path
        self.expected = expected
        self.got_type = type(got).__name__
        got_text = self.got_type
        if isinstance(got, str | list | dict):
            got_text += f" of length {len(got)}"
        super().__init__(f"{path}: expected {expected}, got {got_text}")


class ApiError(GenericControllerError, RuntimeError):
    """A Kubernetes API call failed."""

    def __init__(self, message: str, *, status: int | None = None) -> None:
        self.status = status
        super().__init__(message)


class ConflictError(ApiError):
    """The object changed since it was read (409 or a failed precondition): re-read and retry."""


class KindNotServedError(ApiError, LookupError):
    """The API server does not serve the requested group/kind (its CRD is not installed)."""


class GoneError(ApiError):
    """The object was deleted between being read and being written."""
