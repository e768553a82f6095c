"""baton_client: a Python client for the baton GPU-cluster scheduler.

    from baton_client import Client

    with Client() as c:          # BATON_SERVER, BATON_TLS_DIR, BATON_TOKEN_FILE, as the CLI
        job = c.submit("hello", "team-a", ["sh", "-c", "echo hi"])
        print(c.wait(job.id).state, c.logs(job.id))

The gRPC modules generated from baton's proto/ at build time are in `baton_client._proto`
(`baton_pb2`, `baton_pb2_grpc`, ...), for calls this layer does not cover.
"""

from .client import Client, JobRef, connect
from .errors import (
    AlreadyExists,
    BatonError,
    ConfigError,
    DeadlineExceeded,
    FailedPrecondition,
    InvalidArgument,
    NoLeader,
    NoLogs,
    NotFound,
    PermissionDenied,
    Unauthenticated,
    Unavailable,
)
from .models import (
    FINISHED_STATES,
    Event,
    GpuFault,
    Job,
    JobArray,
    JobState,
    MaintenanceWindow,
    Placement,
    Submitted,
    WhoAmI,
)

__version__ = "0.1.0"

__all__ = [
    "AlreadyExists",
    "BatonError",
    "Client",
    "ConfigError",
    "DeadlineExceeded",
    "Event",
    "FINISHED_STATES",
    "FailedPrecondition",
    "GpuFault",
    "InvalidArgument",
    "Job",
    "JobArray",
    "JobRef",
    "JobState",
    "MaintenanceWindow",
    "NoLeader",
    "NoLogs",
    "NotFound",
    "PermissionDenied",
    "Placement",
    "Submitted",
    "Unauthenticated",
    "Unavailable",
    "WhoAmI",
    "__version__",
    "connect",
]
