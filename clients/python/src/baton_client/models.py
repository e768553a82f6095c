"""What the client returns: plain dataclasses made from the API's messages.

Enum values are the words the CLI shows (docs/cli.md): the value's name after its prefix
in CamelCase, e.g. JOB_STATE_PENDING is "Pending", EVENT_KIND_NODE_LOST "NodeLost". Each
dataclass keeps the message it was made from in `raw`, for fields not copied here.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass, field
from typing import Any, Dict, List, Optional


def word(enum_type: Any, value: int) -> str:
    """The word of a proto enum value: JOB_STATE_PENDING -> "Pending", TOKEN_ROLE_ADMIN ->
    "admin"; "" when unspecified or unknown (a value a newer replica sent). Right for the
    sets this client shows (job states, event kinds, roles, preemption modes, topologies)."""
    try:
        name = enum_type.Name(value)
    except ValueError:
        return ""
    prefix = _prefix(enum_type)
    if name.startswith(prefix):
        name = name[len(prefix) :]
    if name in ("UNSPECIFIED", "UNKNOWN"):
        return ""
    if enum_type.DESCRIPTOR.name in _LOWER_WORDS:
        return name.lower()
    return "".join(part.capitalize() for part in name.split("_"))


# Sets whose words are lower case (docs/cli.md): "checkpoint", "node", "admin", "own", "ok".
_LOWER_WORDS = frozenset({"PreemptionMode", "Topology", "TokenRole", "JobVisibility", "DependencyCondition"})


def _prefix(enum_type: Any) -> str:
    names = list(enum_type.keys())
    first = names[0]
    # Every value shares the prefix up to the last "_" before "UNSPECIFIED"/"UNKNOWN".
    for tail in ("UNSPECIFIED", "UNKNOWN"):
        if first.endswith(tail):
            return first[: -len(tail)]
    return ""


def enum_value(enum_type: Any, text: str) -> int:
    """The value whose word (or full name) is `text`, case-insensitively."""
    for name in enum_type.keys():
        value = enum_type.Value(name)
        if text.lower() in (word(enum_type, value).lower(), name.lower()) and word(enum_type, value):
            return value
    words = [word(enum_type, enum_type.Value(n)) for n in enum_type.keys()]
    raise ValueError("%r is not one of %s" % (text, ", ".join(w for w in words if w)))


class JobState(str, enum.Enum):
    """A job's state, by its word."""

    PENDING = "Pending"
    RUNNING = "Running"
    # A victim checkpointing (or being paused) before it stops.
    PREEMPTING = "Preempting"
    # Stopped in place by a preemptor (mode suspend); holds its resources.
    SUSPENDED = "Suspended"
    # Checkpointed and held until resumed.
    PAUSED = "Paused"
    SUCCEEDED = "Succeeded"
    FAILED = "Failed"
    CANCELLED = "Cancelled"

    @property
    def finished(self) -> bool:
        return self in (JobState.SUCCEEDED, JobState.FAILED, JobState.CANCELLED)

    def __str__(self) -> str:
        return self.value


#: The states a job never leaves.
FINISHED_STATES = frozenset({JobState.SUCCEEDED, JobState.FAILED, JobState.CANCELLED})


@dataclass
class Event:
    """Something that happened to a job or a node."""

    at_ms: int
    #: The word of its kind: "Submitted", "Started", "Succeeded", "NodeLost", "Lagged", ...
    kind: str
    job: str
    node: str
    message: str
    #: Started: the nodes the attempt runs on, and the attempt.
    nodes: List[str] = field(default_factory=list)
    attempt: int = 0
    raw: Any = field(default=None, repr=False, compare=False)

    @classmethod
    def from_proto(cls, e: Any) -> "Event":
        from ._proto import baton_pb2

        return cls(
            at_ms=e.at_ms,
            kind=word(baton_pb2.EventKind, e.kind),
            job=e.job,
            node=e.node,
            message=e.message,
            nodes=list(e.nodes),
            attempt=e.attempt,
            raw=e,
        )


@dataclass
class Placement:
    node: str
    gpus: List[int] = field(default_factory=list)


@dataclass
class Job:
    """A job as the cluster holds it."""

    id: int
    name: str
    queue: str
    state: Optional[JobState]
    priority: int
    preemptible: bool
    attempt: int
    command: List[str]
    #: GPUs the job asks for in all (every task's replicas).
    gpus: int
    placements: List[Placement]
    #: Why it waits, in words a person can act on.
    reason: str
    exit_code: Optional[int]
    has_checkpoint: bool
    submitted_ms: int
    started_ms: int
    finished_ms: int
    owner: str
    run_as: str
    preempted_by: str
    env: Dict[str, str]
    #: True when `env` was left out: only its owner, operators and admins see it.
    env_hidden: bool
    #: The job's recent history; filled by describe(), empty in list().
    events: List[Event] = field(default_factory=list)
    #: What a held job still waits for, as "WHEN:JOB"; filled by describe().
    waiting_for: List[str] = field(default_factory=list)
    #: The array it is an element of ("" when none), and its index there.
    array: str = ""
    array_index: Optional[int] = None
    #: An elastic gang's range: it runs with `replicas` (of its elastic task) between
    #: `min_replicas` and `max_replicas`; None for a rigid job.
    min_replicas: Optional[int] = None
    max_replicas: Optional[int] = None
    replicas: int = 1
    raw: Any = field(default=None, repr=False, compare=False)

    @property
    def finished(self) -> bool:
        return self.state is not None and self.state.finished

    @classmethod
    def from_proto(cls, j: Any) -> "Job":
        from ._proto import baton_pb2

        spec = j.spec
        state_word = word(baton_pb2.JobState, j.state)
        gpus = sum(t.replicas * t.resources.amounts.get("gpu", 0) for t in spec.tasks)
        elastic = next((t for t in spec.tasks if t.HasField("min_replicas")), None)
        return cls(
            id=j.id,
            name=spec.name,
            queue=spec.queue,
            state=JobState(state_word) if state_word else None,
            priority=j.priority,
            preemptible=j.preemptible,
            attempt=j.attempt,
            command=list(spec.command),
            gpus=gpus,
            placements=[Placement(p.node, list(p.gpus)) for p in j.placements],
            reason=j.reason,
            exit_code=j.exit_code if j.HasField("exit_code") else None,
            has_checkpoint=j.has_checkpoint,
            submitted_ms=j.submitted_ms,
            started_ms=j.started_ms,
            finished_ms=j.finished_ms,
            owner=j.owner,
            run_as=j.run_as,
            preempted_by=j.preempted_by,
            env=dict(spec.env),
            env_hidden=j.env_hidden,
            events=[Event.from_proto(e) for e in j.events],
            waiting_for=["%s:%s" % (word(baton_pb2.DependencyCondition, d.when), d.job) for d in j.waiting_for],
            array=j.array,
            array_index=j.array_index if j.HasField("array_index") else None,
            min_replicas=elastic.min_replicas if elastic is not None else None,
            max_replicas=j.elastic_max_replicas if j.HasField("elastic_max_replicas") else None,
            replicas=(elastic or spec.tasks[0]).replicas if spec.tasks else 0,
            raw=j,
        )


@dataclass
class JobArray:
    """An array and where its elements stand; those not created yet are pending."""

    id: int
    name: str
    queue: str
    first: int
    count: int
    #: 0: no bound but the cluster's.
    max_running: int
    running: int
    pending: int
    succeeded: int
    failed: int
    cancelled: int
    created: int
    reason: str
    finished_ms: int

    @classmethod
    def from_proto(cls, a: Any) -> "JobArray":
        return cls(
            id=a.id,
            name=a.name,
            queue=a.queue,
            first=a.array.first,
            count=a.array.count,
            max_running=a.array.max_running,
            running=a.running,
            pending=a.pending,
            succeeded=a.succeeded,
            failed=a.failed,
            cancelled=a.cancelled,
            created=a.created,
            reason=a.reason,
            finished_ms=a.finished_ms,
        )


@dataclass
class Submitted:
    """What submit() made."""

    id: int
    name: str
    #: The request id was seen before: no new job was made, this is the first one.
    duplicate: bool
    #: Reuse it (submit(..., request_id=...)) to retry without making a second job.
    request_id: str


@dataclass
class MaintenanceWindow:
    """Nodes reserved for maintenance from `start_ms` to `end_ms` (Unix milliseconds)."""

    name: str
    nodes: List[str]
    start_ms: int
    end_ms: int
    #: Started: its nodes take no work until its end.
    active: bool

    @classmethod
    def from_proto(cls, w: Any) -> "MaintenanceWindow":
        return cls(name=w.name, nodes=list(w.nodes), start_ms=w.start_ms, end_ms=w.end_ms, active=w.active)


@dataclass
class GpuFault:
    """A GPU out of service (decisions.md section 14): it takes no new work until cleared."""

    node: str
    gpu: int
    error: str
    #: When it was found, in Unix milliseconds.
    since_ms: int
    #: Found by the node's health check (a passing check may clear it); otherwise only a
    #: person clears it.
    by_check: bool

    @classmethod
    def from_proto(cls, node: str, f: Any) -> "GpuFault":
        return cls(node=node, gpu=f.gpu, error=f.error, since_ms=f.since_ms, by_check=f.by_check)


@dataclass
class WhoAmI:
    """Who the client's token names."""

    user: str
    roles: List[str]
    queues: List[str]
    token_id: str
    #: False: the replica runs with `--auth none` and takes every call as an admin's.
    auth: bool
    admin_of: List[str]
    raw: Any = field(default=None, repr=False, compare=False)

    @classmethod
    def from_proto(cls, m: Any) -> "WhoAmI":
        from ._proto import baton_pb2

        return cls(
            user=m.user,
            roles=[word(baton_pb2.TokenRole, r) for r in m.roles],
            queues=list(m.queues),
            token_id=m.token_id,
            auth=m.auth,
            admin_of=list(m.admin_of),
            raw=m,
        )
