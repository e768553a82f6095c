"""The jobs API against a real `baton dev` cluster (conftest.py)."""

from __future__ import annotations

import threading
import time
from typing import Any, List

import pytest

from baton_client import AlreadyExists, Client, ConfigError, Event, InvalidArgument, JobState

WAIT_S = 60


def long_job(admin: Client, queue: str, name: str) -> int:
    """A job that runs until stopped, once its process has started; its id.

    Running means placed: the agent starts the process only once it holds a lease, so
    the job's own first line is what says its process is there."""
    s = admin.submit(name, queue, ["sh", "-c", "echo started; exec sleep 600"], grace=2)
    admin.wait(s.id, states=[JobState.RUNNING], timeout=WAIT_S)
    deadline = time.monotonic() + WAIT_S
    while "started" not in admin.logs(s.id):
        assert time.monotonic() < deadline, f"job {s.id} placed but its process never wrote"
        time.sleep(0.05)
    return s.id


def test_whoami_names_the_admin_token(admin: Client) -> None:
    me = admin.whoami()
    assert me.auth
    assert "admin" in me.roles


def test_a_second_create_of_a_queue_is_refused(admin: Client, queue: str) -> None:
    assert queue in admin.queues()
    with pytest.raises(AlreadyExists) as e:
        admin.create_queue(queue, gpus=1)
    assert queue in e.value.details


def test_a_job_runs_and_its_output_is_read_back(admin: Client, queue: str, name: str) -> None:
    s = admin.submit(name, queue, ["sh", "-c", "echo hi; echo oops >&2"])
    assert s.name == name and s.id > 0 and not s.duplicate
    job = admin.wait(s.id, timeout=WAIT_S)
    assert job.state == JobState.SUCCEEDED, job
    assert job.exit_code == 0
    assert job.attempt == 1
    assert job.command == ["sh", "-c", "echo hi; echo oops >&2"]
    assert admin.logs(name) == "hi\n"
    assert admin.logs(s.id, stderr=True) == "oops\n"
    assert b"".join(admin.iter_logs(name)) == b"hi\n"


def test_a_failing_job_ends_failed_with_its_exit_code(admin: Client, queue: str, name: str) -> None:
    s = admin.submit(name, queue, ["sh", "-c", "exit 3"])
    job = admin.wait(s.id, timeout=WAIT_S)
    assert job.state == JobState.FAILED
    assert job.exit_code == 3


def test_a_retried_submit_returns_the_first_job(admin: Client, queue: str, name: str) -> None:
    first = admin.submit(name, queue, ["true"], request_id="req-" + name)
    again = admin.submit(name, queue, ["true"], request_id="req-" + name)
    assert again.duplicate
    assert again.id == first.id


def test_a_job_waits_for_its_dependency_then_runs(admin: Client, queue: str, name: str) -> None:
    first = admin.submit(name + "-prep", queue, ["sh", "-c", "sleep 1"])
    held = admin.submit(name, queue, ["true"], after=["ok:%s-prep" % name])
    job = admin.describe(held.id)
    assert job.state == JobState.PENDING, job
    assert job.waiting_for == ["ok:%s-prep" % name], job
    assert "waiting for %s-prep to succeed" % name in job.reason
    assert admin.wait(first.id, timeout=WAIT_S).state == JobState.SUCCEEDED
    job = admin.wait(held.id, timeout=WAIT_S)
    assert job.state == JobState.SUCCEEDED, job
    with pytest.raises(ConfigError):
        admin.submit(name + "-bad", queue, ["true"], after=["soon:" + name])
    with pytest.raises(InvalidArgument) as e:
        admin.submit(name + "-bad", queue, ["true"], after=["ok:no-such-job"])
    assert "after[0].job" in e.value.details


def test_list_and_describe(admin: Client, queue: str, name: str) -> None:
    s = admin.submit(name, queue, ["sh", "-c", "echo listed"], env={"GREETING": "hello"}, gpus=2)
    admin.wait(s.id, timeout=WAIT_S)

    listed = {j.id: j for j in admin.list(queue=queue)}
    assert s.id in listed
    j = listed[s.id]
    assert (j.name, j.queue, j.state, j.gpus) == (name, queue, JobState.SUCCEEDED, 2)
    assert j.events == [], "a list carries no histories"

    assert s.id in [j.id for j in admin.list(states=["Succeeded"])]
    assert s.id not in [j.id for j in admin.list(states=[JobState.RUNNING, JobState.PENDING])]
    assert len(admin.list(limit=1)) == 1

    by_name = admin.describe(name)
    by_id = admin.describe(s.id)
    assert by_name.id == by_id.id == s.id
    assert by_name.env == {"GREETING": "hello"}
    assert by_name.owner == admin.whoami().user
    kinds = [e.kind for e in by_name.events]
    assert kinds[0] == "Submitted" and "Started" in kinds and kinds[-1] == "Succeeded", kinds
    started = [e for e in by_name.events if e.kind == "Started"][0]
    assert started.attempt == 1 and started.nodes


def test_cancel_stops_a_running_job(admin: Client, queue: str, name: str) -> None:
    job_id = long_job(admin, queue, name)
    events = admin.cancel(name)
    assert [e.kind for e in events] == ["Cancelled"]
    job = admin.wait(job_id, timeout=WAIT_S)
    assert job.state == JobState.CANCELLED
    assert "started" in admin.logs(job_id)


def test_pause_holds_a_job_until_resumed(admin: Client, queue: str, name: str) -> None:
    job_id = long_job(admin, queue, name)
    admin.pause(job_id)
    paused = admin.wait(job_id, states=["paused"], timeout=WAIT_S)  # words, any case
    assert paused.placements == []
    events = admin.resume(job_id)
    assert "Unpaused" in [e.kind for e in events]
    running = admin.wait(job_id, states=[JobState.RUNNING], timeout=WAIT_S)
    assert running.attempt == 2
    kinds = [e.kind for e in admin.describe(job_id).events]
    assert kinds.count("Started") == 2 and "Paused" in kinds, kinds
    admin.cancel(job_id)
    assert admin.wait(job_id, timeout=WAIT_S).state == JobState.CANCELLED


def test_watch_replays_a_finished_jobs_history(admin: Client, queue: str, name: str) -> None:
    s = admin.submit(name, queue, ["true"])
    admin.wait(s.id, timeout=WAIT_S)
    seen: List[Event] = []
    events = admin.watch(name, replay=True)
    for e in events:
        seen.append(e)
        if e.kind == "Succeeded":
            break
    events.close()
    assert [e.kind for e in seen] == ["Submitted", "Started", "Succeeded"]
    assert all(e.job == name for e in seen)


def test_watch_sees_events_as_they_commit(admin: Client, queue: str, name: str) -> None:
    events = admin.watch()  # every job's: open before the job exists
    seen: List[str] = []
    done = threading.Event()

    def read() -> None:
        for e in events:
            if e.job == name:
                seen.append(e.kind)
                if e.kind == "Succeeded":
                    break
        done.set()

    reader = threading.Thread(target=read, daemon=True)
    reader.start()
    admin.submit(name, queue, ["true"])
    assert done.wait(WAIT_S), "saw only %s" % seen
    events.close()
    assert seen == ["Submitted", "Started", "Succeeded"]


def test_the_client_reads_the_settings_from_the_environment(
    cluster: Any, queue: str, name: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    for k, v in cluster.env.items():
        monkeypatch.setenv(k, v)
    monkeypatch.delenv("BATON_TOKEN", raising=False)
    monkeypatch.delenv("BATON_INSECURE", raising=False)
    with Client() as c:
        assert c.settings.servers == cluster.servers.split(",")
        s = c.submit(name, queue, ["true"])
        assert c.wait(s.id, timeout=WAIT_S).state == JobState.SUCCEEDED


def test_a_dead_replica_first_in_the_list_is_passed_over(cluster: Any, closed_port: int) -> None:
    servers = "127.0.0.1:%d,%s" % (closed_port, cluster.servers)
    with cluster.client(servers=servers, timeout=20) as c:
        assert c.whoami().user


def test_a_maintenance_window_is_created_listed_refused_when_bad_and_deleted(admin: Client) -> None:
    start = time.time() + 3600
    admin.create_maintenance("py-fw", ["node-2"], start, start + 600)
    (w,) = [w for w in admin.maintenance() if w.name == "py-fw"]
    assert (w.nodes, w.active, w.end_ms - w.start_ms) == (["node-2"], False, 600_000)
    with pytest.raises(AlreadyExists):
        admin.create_maintenance("py-fw", ["node-2"], start + 7200, start + 7800)
    with pytest.raises(InvalidArgument) as e:
        admin.create_maintenance("py-other", ["no-such-node"], start, start + 600)
    assert "nodes[0]" in e.value.details
    with pytest.raises(ConfigError):
        admin.create_maintenance("py-other", "node-2", start, start + 600)
    admin.delete_maintenance("py-fw")
    assert not [w for w in admin.maintenance() if w.name == "py-fw"]


def test_a_gpu_is_marked_unhealthy_listed_refused_when_bad_and_cleared(admin: Client) -> None:
    admin.mark_gpu_unhealthy("node-2", 1, "XID 79")
    (f,) = [f for f in admin.unhealthy_gpus() if f.node == "node-2"]
    assert (f.gpu, f.error, f.by_check) == (1, "XID 79", False)
    assert f.since_ms > 0
    with pytest.raises(InvalidArgument) as e:
        admin.mark_gpu_unhealthy("node-2", 99, "XID 79")
    assert "gpu" in e.value.details
    with pytest.raises(ConfigError):
        admin.mark_gpu_unhealthy("node-2", 1, " ")
    admin.mark_gpu_healthy("node-2", 1)
    assert not [f for f in admin.unhealthy_gpus() if f.node == "node-2"]


def test_an_array_runs_each_element_with_its_index_and_is_cancelled_whole(
    admin: Client, queue: str, name: str
) -> None:
    done = admin.submit(name, queue, ["sh", "-c", "echo index=$BATON_ARRAY_INDEX"], array="3-5%2")
    for i in (3, 4, 5):
        job = admin.wait("%s-%d" % (name, i), timeout=WAIT_S)
        assert job.state == JobState.SUCCEEDED, job
        assert (job.array, job.array_index) == (name, i)
        assert "index=%d" % i in admin.logs(job.id)
    [a] = [a for a in admin.arrays() if a.id == done.id]
    assert (a.first, a.count, a.max_running, a.succeeded, a.pending) == (3, 3, 2, 3, 0), a
    long = admin.submit(name + "-long", queue, ["sleep", "600"], array="0-999%1")
    admin.wait("%s-long-0" % name, states=["Running"], timeout=WAIT_S)
    admin.cancel_array(name + "-long")
    [a] = [a for a in admin.arrays() if a.id == long.id]
    assert a.cancelled == 1000 and a.finished_ms > 0, a
    with pytest.raises(ConfigError):
        admin.submit(name + "-bad", queue, ["true"], array="9-5")
    with pytest.raises(InvalidArgument) as e:
        admin.submit(name + "-bad", queue, ["true"], array="0-2000000")
    assert "array.count" in e.value.details


def test_an_elastic_gang_runs_with_its_world_size_and_shows_its_range(admin: Client, queue: str, name: str) -> None:
    admin.submit(name, queue, ["sh", "-c", "echo world=$BATON_WORLD_SIZE"], gpus=0, cpu=0.1, replicas=2, min_replicas=1)
    job = admin.wait(name, timeout=WAIT_S)
    assert job.state == JobState.SUCCEEDED, job
    assert (job.min_replicas, job.max_replicas, job.replicas) == (1, 2, 2), job
    assert "world=2" in admin.logs(job.id)
    with pytest.raises(ConfigError):
        admin.submit(name + "-bad", queue, ["true"], replicas=2, min_replicas=3)
