"""What can go wrong talking to a baton cluster, as exceptions.

Every refusal from a replica is a gRPC status: its code picks the class below, and the
exception carries the code and the server's own message (`details`), which says what to do.
Catch `BatonError` for all of them.
"""

from __future__ import annotations

from typing import Any, Dict, Iterable, Optional, Type

import grpc

# The metadata key of a refusal's typed reason (crates/proto/src/reason.rs); a client acts
# on it, never on the wording of a message.
REASON_METADATA = "baton-reason"
# UNAVAILABLE with this reason: no replica leads right now; the same call succeeds once one does.
REASON_NO_LEADER = "no-leader"
# FAILED_PRECONDITION with this reason: a compare-and-set write named a revision the object
# has moved past.
REASON_CONFLICT = "conflict"


class BatonError(Exception):
    """A call to the cluster failed.

    `code` is the gRPC status code (None for a mistake found before anything was sent),
    `details` the server's message, `reason` the typed reason it carried (`baton-reason`
    metadata, e.g. "no-leader"), if any.
    """

    def __init__(self, details: str, code: Optional[grpc.StatusCode] = None, reason: Optional[str] = None) -> None:
        super().__init__(details)
        self.details = details
        self.code = code
        self.reason = reason

    def __str__(self) -> str:
        if self.code is None:
            return self.details
        return "%s: %s" % (self.code.name, self.details)


class ConfigError(BatonError):
    """The settings (BATON_SERVER, BATON_TLS_DIR, the token, ...) or the arguments of a call
    are wrong; nothing was sent."""


class NotFound(BatonError):
    """NOT_FOUND: no such job, queue, node, ... (the message names it)."""


class NoLogs(NotFound):
    """The job's log cannot be read: it never started, or no agent has it."""


class PermissionDenied(BatonError):
    """PERMISSION_DENIED: the token (or certificate) may not do this; the message names the
    role or queue grant the call needs."""


class Unauthenticated(PermissionDenied):
    """UNAUTHENTICATED: no token, or an unknown or revoked one, or no client certificate.
    A subclass of PermissionDenied, so `except PermissionDenied` catches both."""


class InvalidArgument(BatonError):
    """INVALID_ARGUMENT: the server refused a field; the message names it."""


class AlreadyExists(BatonError):
    """ALREADY_EXISTS: a create of a name that is taken."""


class FailedPrecondition(BatonError):
    """FAILED_PRECONDITION: refused in the job's (or object's) present state, e.g. resuming a
    job that is not paused, or an update that lost a race (reason "conflict")."""


class Unavailable(BatonError):
    """UNAVAILABLE: no replica in BATON_SERVER answered, or none leads yet, or a stream
    (watch, logs) was ended by the replica."""


class NoLeader(Unavailable):
    """Every replica answered "no leader yet" (an election) until the call's deadline."""


class DeadlineExceeded(BatonError):
    """The call (retries included) ran past its timeout."""


_BY_CODE: Dict[grpc.StatusCode, Type[BatonError]] = {
    grpc.StatusCode.NOT_FOUND: NotFound,
    grpc.StatusCode.PERMISSION_DENIED: PermissionDenied,
    grpc.StatusCode.UNAUTHENTICATED: Unauthenticated,
    grpc.StatusCode.INVALID_ARGUMENT: InvalidArgument,
    grpc.StatusCode.ALREADY_EXISTS: AlreadyExists,
    grpc.StatusCode.FAILED_PRECONDITION: FailedPrecondition,
    grpc.StatusCode.UNAVAILABLE: Unavailable,
    grpc.StatusCode.DEADLINE_EXCEEDED: DeadlineExceeded,
}


def reason_of(metadata: Optional[Iterable[Any]]) -> Optional[str]:
    """The `baton-reason` a status's trailing metadata carries, if any."""
    for key, value in metadata or ():
        if key == REASON_METADATA:
            return value.decode() if isinstance(value, bytes) else str(value)
    return None


def from_rpc_error(e: grpc.RpcError) -> BatonError:
    """The exception for a failed call: its class by status code, the server's message kept."""
    code = e.code() if hasattr(e, "code") else grpc.StatusCode.UNKNOWN
    details = (e.details() if hasattr(e, "details") else None) or str(e)
    reason = reason_of(e.trailing_metadata() if hasattr(e, "trailing_metadata") else None)
    if code == grpc.StatusCode.UNAVAILABLE and reason == REASON_NO_LEADER:
        return NoLeader(details, code, reason)
    cls = _BY_CODE.get(code, BatonError)
    return cls(details, code, reason)
