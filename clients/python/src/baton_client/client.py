"""The client: the jobs API of a baton cluster (proto/baton.proto, service Baton) as
Python methods returning dataclasses and raising `BatonError`s."""

from __future__ import annotations

import time
import uuid
from typing import Any, Iterable, Iterator, List, Mapping, Optional, Sequence, Union

import grpc

from ._connect import Conn, Settings
from .errors import BatonError, ConfigError, NoLogs, NotFound, Unavailable, from_rpc_error
from .models import Event, GpuFault, Job, JobArray, JobState, MaintenanceWindow, Submitted, WhoAmI, enum_value

#: A job named by its name, or by its numeric id.
JobRef = Union[str, int]

# The pool a queue's quota applies to unless another is named (crates/model/src/node.rs).
DEFAULT_POOL = "default"
# Longest request id a replica takes (crates/model/src/limits.rs).
MAX_REQUEST_ID_LEN = 128


def _ms(seconds: Optional[float], what: str) -> Optional[int]:
    if seconds is None:
        return None
    if seconds < 0:
        raise ConfigError("%s: a duration is 0 seconds or more" % what)
    return int(round(seconds * 1000))


def _job_state(s: Union[JobState, str]) -> JobState:
    """The state a word names, case-insensitively."""
    for state in JobState:
        if state.value.lower() == str(s).lower():
            return state
    raise ConfigError("%r is not a job state (%s)" % (s, ", ".join(v.value for v in JobState)))


class Client:
    """A connection to a baton cluster.

    With no arguments it connects as the `baton` CLI does, from the environment:
    BATON_SERVER (replicas, comma-separated host:port; default 127.0.0.1:7070),
    BATON_TLS_DIR (ca.pem, cert.pem, key.pem for mutual TLS) or BATON_INSECURE=1,
    and the token from BATON_TOKEN_FILE (else BATON_TOKEN). Arguments override them.
    `timeout` bounds each call, retries included, in seconds.

    Use it as a context manager, or call close() when done.
    """

    def __init__(
        self,
        servers: "str | Sequence[str] | None" = None,
        *,
        tls_dir: Optional[str] = None,
        insecure: Optional[bool] = None,
        token: Optional[str] = None,
        token_file: Optional[str] = None,
        timeout: Optional[float] = None,
    ) -> None:
        from ._proto import agent_pb2, baton_pb2

        self._pb = baton_pb2
        self._agent_pb = agent_pb2
        self.settings = Settings.resolve(
            servers=servers, tls_dir=tls_dir, insecure=insecure, token=token, token_file=token_file, timeout=timeout
        )
        self._conn = Conn(self.settings)

    # -- lifetime --------------------------------------------------------------------

    def close(self) -> None:
        self._conn.close()

    def __enter__(self) -> "Client":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -- jobs ------------------------------------------------------------------------

    def submit(
        self,
        name: str,
        queue: str,
        command: Sequence[str],
        *,
        gpus: int = 1,
        cpu: Optional[float] = None,
        memory: Optional[int] = None,
        replicas: int = 1,
        priority_class: Optional[str] = None,
        priority: Optional[int] = None,
        pools: Sequence[str] = (),
        topology: Optional[str] = None,
        preemption_mode: Optional[str] = None,
        grace: Optional[float] = None,
        min_runtime: Optional[float] = None,
        time_limit: Optional[float] = None,
        env: Optional[Mapping[str, str]] = None,
        checkpoint_signal: Optional[str] = None,
        run_as: Optional[str] = None,
        request_id: Optional[str] = None,
        after: Sequence[str] = (),
        array: Optional[str] = None,
        min_replicas: Optional[int] = None,
    ) -> Submitted:
        """Submits a job of one task (`replicas` replicas of `gpus` GPUs, `cpu` CPUs and
        `memory` bytes each) running `command` (a list of words: ["sh", "-c", "echo hi"]).

        What is left out the server fills in: the class ("train"), the preemption mode
        ("checkpoint"), the grace (30 s), the checkpoint signal (SIGTERM). Durations are in
        seconds. A retried submit with the same `request_id` returns the first job (a fresh
        id is made when none is given; it is in the result). `after` names jobs to wait for
        as "WHEN:JOB" ("ok:prep", "any:17"; WHEN is ok, any, notok or started): the job is
        held until each holds, and cancelled once one no longer can. `array` ("0-999%50":
        FIRST-LAST, at most MAX running at once; or "N" for 0 to N-1) submits an array: jobs
        NAME-FIRST .. NAME-LAST, each finding its index in BATON_ARRAY_INDEX. `min_replicas`
        makes the job an elastic gang: it starts with as many of its `replicas` as fit, down
        to `min_replicas`, is shrunk to that minimum as a victim and grown back when room
        frees, each resize a new attempt from its checkpoint with BATON_WORLD_SIZE set.
        """
        if isinstance(command, (str, bytes)):
            raise ConfigError("command is a list of words, e.g. ['sh', '-c', 'echo hi'], not a string")
        if not command:
            raise ConfigError("no command to run: give it as a list of words, e.g. ['python', 'train.py']")
        if replicas < 1:
            raise ConfigError("replicas: a job needs at least one replica")
        if min_replicas is not None and not 1 <= min_replicas <= replicas:
            raise ConfigError("min_replicas: %d is not between 1 and replicas (%d)" % (min_replicas, replicas))
        if request_id is None:
            request_id = uuid.uuid4().hex
        if not request_id or len(request_id) > MAX_REQUEST_ID_LEN:
            raise ConfigError("request_id must be 1 to %d characters" % MAX_REQUEST_ID_LEN)
        pb = self._pb
        amounts = {"gpu": int(gpus)}
        if cpu is not None:
            # The server holds CPUs in thousandths.
            amounts["cpu"] = int(round(cpu * 1000))
        if memory is not None:
            amounts["memory"] = int(memory)
        spec = pb.JobSpec(
            name=name,
            queue=queue,
            priority_class=priority_class or "",
            tasks=[pb.TaskSpec(name="main", replicas=replicas, resources=pb.Resources(amounts=amounts))],
            pools=list(pools),
            command=list(command),
            env=dict(env or {}),
            checkpoint_signal=checkpoint_signal or "",
        )
        if priority is not None:
            spec.priority_value = priority
        if min_replicas is not None:
            spec.tasks[0].min_replicas = min_replicas
        try:
            if topology:
                spec.topology = enum_value(pb.Topology, topology)
            if preemption_mode:
                spec.preemption_mode = enum_value(pb.PreemptionMode, preemption_mode)
        except ValueError as e:
            raise ConfigError(str(e)) from None
        for field, seconds in (("grace_ms", grace), ("time_limit_ms", time_limit)):
            ms = _ms(seconds, field[: -len("_ms")])
            if ms is not None:
                setattr(spec, field, ms)
        spec.min_runtime_ms = _ms(min_runtime, "min_runtime") or 0
        req = pb.SubmitRequest(
            spec=spec, request_id=request_id, run_as=run_as or "", after=self._dependencies(after)
        )
        if array is not None:
            req.array.CopyFrom(self._array(array))
        reply = self._conn.call("Submit", req)
        return Submitted(id=reply.id, name=reply.name, duplicate=reply.duplicate, request_id=request_id)

    def _array(self, text: str) -> Any:
        """FIRST-LAST[%MAX], or N for 0 to N-1; the server checks the bounds."""
        rng, sep, most = str(text).partition("%")
        first, dash, last = rng.partition("-")
        try:
            lo, hi = (int(first), int(last)) if dash else (0, int(first) - 1)
            max_running = int(most) if sep else 0
        except ValueError:
            raise ConfigError("array: %r is not FIRST-LAST[%%MAX] (e.g. 0-999%%50)" % (text,)) from None
        if hi < lo:
            raise ConfigError("array: %r is empty or reversed" % (text,))
        if sep and max_running < 1:
            raise ConfigError("array: max_running in %r must be at least 1" % (text,))
        return self._pb.ArraySpec(first=lo, count=hi - lo + 1, max_running=max_running)

    def arrays(self, *, queue: Optional[str] = None) -> List[JobArray]:
        """Arrays, one each: how many of its elements run, wait and ended."""
        reply = self._conn.call("ListArrays", self._pb.ListArraysRequest(queue=queue or ""))
        return [JobArray.from_proto(a) for a in reply.arrays]

    def cancel_array(self, name: str) -> List[Event]:
        """Cancels every unfinished element of the array; no other is created."""
        found = [a for a in self.arrays() if a.name == name and not a.finished_ms]
        if not found:
            raise ConfigError("no unfinished array %s; see arrays()" % name)
        ack = self._conn.call("CancelJob", self._pb.JobRef(name=name, id=found[-1].id))
        return [Event.from_proto(e) for e in ack.events]

    def _dependencies(self, after: Sequence[str]) -> List[Any]:
        if isinstance(after, (str, bytes)):
            raise ConfigError("after is a list of WHEN:JOB, e.g. ['ok:prep'], not a string")
        out = []
        for i, text in enumerate(after):
            when, sep, job = text.partition(":")
            if not sep or not job:
                raise ConfigError("after[%d]: %r is not WHEN:JOB (e.g. ok:prep)" % (i, text))
            try:
                cond = enum_value(self._pb.DependencyCondition, when)
            except ValueError as e:
                raise ConfigError("after[%d]: %s" % (i, e)) from None
            out.append(self._pb.Dependency(job=job, when=cond))
        return out

    def describe(self, job: JobRef) -> Job:
        """The job, with its recent events."""
        return Job.from_proto(self._conn.call("GetJob", self._ref(job)))

    get_job = describe

    def list(
        self,
        *,
        queue: Optional[str] = None,
        states: Optional[Iterable[Union[JobState, str]]] = None,
        node: Optional[str] = None,
        limit: Optional[int] = None,
    ) -> List[Job]:
        """Jobs, by id; filters combine. Every match unless `limit` (fetched page by page)."""
        pb = self._pb
        try:
            state_values = [enum_value(pb.JobState, str(s)) for s in (states or ())]
        except ValueError as e:
            raise ConfigError(str(e)) from None
        jobs: List[Job] = []
        token = ""
        while True:
            req = pb.ListJobsRequest(
                queue=queue or "",
                states=state_values,
                node=node or "",
                limit=max(limit - len(jobs), 0) if limit is not None else 0,
                page_token=token,
            )
            page = self._conn.call("ListJobs", req)
            jobs.extend(Job.from_proto(j) for j in page.jobs)
            if not page.next_page_token or not page.jobs or (limit is not None and len(jobs) >= limit):
                return jobs[:limit] if limit is not None else jobs
            token = page.next_page_token

    def cancel(self, job: JobRef) -> List[Event]:
        """Cancels the job (stopping it if it runs); what the write produced."""
        return self._act("CancelJob", job)

    def pause(self, job: JobRef) -> List[Event]:
        """Checkpoints a running job and holds it (Paused) until resume()."""
        return self._act("PauseJob", job)

    def resume(self, job: JobRef) -> List[Event]:
        """Lets a paused job be scheduled again."""
        return self._act("ResumeJob", job)

    def wait(
        self,
        job: JobRef,
        *,
        states: Optional[Iterable[Union[JobState, str]]] = None,
        timeout: Optional[float] = None,
        poll: float = 0.5,
    ) -> Job:
        """Waits until the job is in one of `states` (default: finished) and returns it.
        Raises TimeoutError after `timeout` seconds (None: no bound)."""
        wanted = {_job_state(s) for s in states} if states is not None else None
        deadline = None if timeout is None else time.monotonic() + timeout
        while True:
            j = self.describe(job)
            if (j.state in wanted) if wanted is not None else j.finished:
                return j
            if deadline is not None and time.monotonic() >= deadline:
                raise TimeoutError("job %s still %s after %ss" % (job, j.state, timeout))
            time.sleep(poll)

    def watch(self, job: Optional[str] = None, *, replay: bool = False) -> Iterator[Event]:
        """Events as they commit, for one job or (None) every job and node; with `replay`,
        first those still held in the jobs' histories.

        The stream is open when this returns (so no event committed after the call is
        missed); iterate over the result, and stop with `break` or its close(). If the
        replica ends the stream, Unavailable is raised: watch again with replay=True to see
        what was missed. An event of kind "Lagged" says the stream fell behind and missed
        some."""
        call = self._conn.stream("Watch", self._pb.WatchRequest(job=job or "", replay=replay))
        return self._events(call)

    def logs(
        self,
        job: JobRef,
        *,
        rank: int = 0,
        stderr: bool = False,
        attempt: Optional[int] = None,
        node: Optional[str] = None,
        encoding: str = "utf-8",
    ) -> str:
        """A job replica's stdout (or stderr) so far, as text. See iter_logs()."""
        data = b"".join(self.iter_logs(job, rank=rank, stderr=stderr, attempt=attempt, node=node))
        return data.decode(encoding, errors="replace")

    def iter_logs(
        self,
        job: JobRef,
        *,
        rank: int = 0,
        stderr: bool = False,
        attempt: Optional[int] = None,
        node: Optional[str] = None,
        follow: bool = False,
    ) -> Iterator[bytes]:
        """A job replica's stdout (or stderr) in chunks as they are read from the agent of the
        node it ran on, through a replica; with `follow`, until the attempt ends. `attempt`:
        default the newest; `node`: ask this node's agent (for an attempt whose nodes the job
        no longer records). Raises NoLogs when no agent has the log, PermissionDenied when
        the token may not read it."""
        j = self.describe(job)
        replicas = sum(t.replicas for t in j.raw.spec.tasks)
        if replicas and not 0 <= rank < replicas:
            raise ConfigError(
                "rank %d: job %s has %d replica(s), ranks 0 to %d" % (rank, j.name, replicas, replicas - 1)
            )
        candidates = self._log_nodes(j, attempt, node)
        logs_req = self._agent_pb.LogsRequest(
            job=j.name,
            job_id=j.id,
            attempt=attempt or 0,
            rank=rank,
            stream="stderr" if stderr else "stdout",
            offset=0,
            follow=follow,
        )
        not_here: List[str] = []
        unreachable: List[str] = []
        for n in candidates:
            try:
                call = self._conn.stream("JobLogs", self._pb.JobLogsRequest(node=n, logs=logs_req))
            except NotFound as e:
                not_here.append("%s (%s)" % (n, e.details))
                continue
            except Unavailable as e:
                unreachable.append("%s: %s" % (n, e.details))
                continue
            except BatonError as e:
                if e.code == grpc.StatusCode.FAILED_PRECONDITION:
                    unreachable.append("%s: %s" % (n, e.details))
                    continue
                raise
            return self._chunks(call)
        which = "attempt %d" % attempt if attempt is not None else "the newest attempt"
        msg = "no log of job %s rank %d (%s) could be read" % (j.name, rank, which)
        if unreachable:
            msg += "; agent unreachable: " + "; ".join(unreachable)
        if not_here:
            msg += "; agents without it: " + "; ".join(not_here)
        raise NoLogs(msg, grpc.StatusCode.NOT_FOUND)

    # -- queues and identity ----------------------------------------------------------

    def create_queue(
        self,
        name: str,
        *,
        gpus: Optional[int] = None,
        pool: str = DEFAULT_POOL,
        cohort: Optional[str] = None,
    ) -> None:
        """Creates a queue with `gpus` nominal (guaranteed) GPUs in `pool`; the server fills
        the rest. AlreadyExists if the name is taken."""
        pb = self._pb
        q = pb.Queue(name=name, cohort=cohort or "")
        if gpus is not None:
            q.quotas.append(pb.PoolQuota(pool=pool, nominal=pb.Resources(amounts={"gpu": int(gpus)})))
        self._conn.call("CreateQueue", q)

    def delete_queue(self, name: str) -> None:
        self._conn.call("DeleteQueue", self._pb.NameRef(name=name))

    def queues(self) -> List[str]:
        """The queues' names."""
        return [u.queue.name for u in self._conn.call("ListQueues", self._pb.Empty()).queues]

    def create_maintenance(self, name: str, nodes: Sequence[str], start: float, end: float) -> None:
        """A maintenance window on `nodes` from `start` to `end` (Unix seconds; operators and
        admins): before its start only jobs whose time limit ends them by then go there; at
        its start what runs there is stopped and requeued; until its end they take nothing.
        AlreadyExists if the name is taken; InvalidArgument names a bad field."""
        if isinstance(nodes, (str, bytes)):
            raise ConfigError("nodes is a list of node names, e.g. ['node-1'], not a string")
        w = self._pb.MaintenanceWindow(
            name=name,
            nodes=list(nodes),
            start_ms=_ms(start, "start") or 0,
            end_ms=_ms(end, "end") or 0,
        )
        self._conn.call("CreateMaintenance", w)

    def maintenance(self) -> List[MaintenanceWindow]:
        """The windows ahead and started, by name."""
        reply = self._conn.call("ListMaintenance", self._pb.Empty())
        return [MaintenanceWindow.from_proto(w) for w in reply.windows]

    def delete_maintenance(self, name: str) -> None:
        """Forgets a window; a started one gives its nodes back at once."""
        self._conn.call("DeleteMaintenance", self._pb.NameRef(name=name))

    def unhealthy_gpus(self) -> List[GpuFault]:
        """Every GPU out of service, by node and index."""
        reply = self._conn.call("ListNodes", self._pb.Empty())
        return [GpuFault.from_proto(n.name, f) for n in reply.nodes for f in n.unhealthy_gpus]

    def mark_gpu_unhealthy(self, node: str, gpu: int, error: str) -> None:
        """Takes GPU `gpu` of `node` out of service (operators and admins): the jobs on it are
        stopped and requeued, and it takes no new work until `mark_gpu_healthy`.
        InvalidArgument names a bad field (an unknown node, a GPU it does not have)."""
        if not error or not error.strip():
            raise ConfigError("error: say what is wrong with the GPU (e.g. 'XID 79')")
        self._conn.call("SetGpuHealth", self._pb.SetGpuHealthRequest(node=node, gpu=gpu, healthy=False, error=error))

    def mark_gpu_healthy(self, node: str, gpu: int) -> None:
        """Clears GPU `gpu` of `node` once it is fixed (operators and admins)."""
        self._conn.call("SetGpuHealth", self._pb.SetGpuHealthRequest(node=node, gpu=gpu, healthy=True))

    def whoami(self) -> WhoAmI:
        """Who the client's token names."""
        return WhoAmI.from_proto(self._conn.call("WhoAmI", self._pb.Empty()))

    # -- helpers ---------------------------------------------------------------------

    def _ref(self, job: JobRef) -> Any:
        if isinstance(job, bool):
            raise ConfigError("a job is named by its name or its numeric id")
        if isinstance(job, int):
            return self._pb.JobRef(name=str(job), id=job)
        return self._pb.JobRef(name=job)

    def _act(self, method: str, job: JobRef) -> List[Event]:
        # Resolved once: the write names the job by id, so a retry after a lost answer never
        # reaches a newer job that reused the name.
        j = self._conn.call("GetJob", self._ref(job))
        ack = self._conn.call(method, self._pb.JobRef(name=str(job), id=j.id))
        return [Event.from_proto(e) for e in ack.events]

    def _log_nodes(self, j: Job, attempt: Optional[int], node: Optional[str]) -> List[str]:
        """The nodes that may hold the log, in the order to ask them (as `baton logs`)."""
        if node:
            return [node]
        want = j.attempt if attempt is None else attempt
        if j.placements and want == j.attempt:
            return [p.node for p in j.placements]
        for e in reversed(j.events):
            if e.kind == "Started" and e.attempt == want and e.nodes:
                return list(e.nodes)
        if j.attempt == 0:
            why = ": " + j.reason if j.reason else ""
            raise NoLogs(
                "job %s never started, so it has no logs yet (state %s%s)" % (j.name, j.state, why),
                grpc.StatusCode.NOT_FOUND,
            )
        raise NoLogs(
            "job %s has no record of where attempt %d ran (state %s; its event history keeps only its newest "
            "events); name the node whose agent kept its logs with node=" % (j.name, want, j.state),
            grpc.StatusCode.NOT_FOUND,
        )

    @staticmethod
    def _events(call: Any) -> Iterator[Event]:
        try:
            for e in call:
                yield Event.from_proto(e)
        except grpc.RpcError as e:
            raise from_rpc_error(e) from None
        finally:
            call.cancel()
        raise Unavailable(
            "the replica ended the watch (it may be shutting down); "
            "watch again with replay=True to see what was missed",
            grpc.StatusCode.UNAVAILABLE,
        )

    @staticmethod
    def _chunks(call: Any) -> Iterator[bytes]:
        try:
            for chunk in call:
                yield chunk.data
        except grpc.RpcError as e:
            raise from_rpc_error(e) from None
        finally:
            call.cancel()


def connect(**kwargs: Any) -> Client:
    """A Client from the environment (as the CLI reads it), arguments overriding it."""
    return Client(**kwargs)


__all__ = ["Client", "JobRef", "connect"]
