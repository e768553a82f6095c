"""Refusals arrive as exceptions carrying the server's status code and message, against a
real `baton dev` cluster (conftest.py)."""

from __future__ import annotations

import os
from typing import Any

import grpc
import pytest

from baton_client import (
    BatonError,
    Client,
    ConfigError,
    FailedPrecondition,
    InvalidArgument,
    JobState,
    NoLogs,
    NotFound,
    PermissionDenied,
    Unauthenticated,
    Unavailable,
)

WAIT_S = 60


def test_describing_an_unknown_job_raises_not_found_with_the_servers_message(admin: Client) -> None:
    with pytest.raises(NotFound) as e:
        admin.describe("no-such-job")
    assert e.value.code == grpc.StatusCode.NOT_FOUND
    assert 'unknown job "no-such-job"' in e.value.details
    assert "NOT_FOUND" in str(e.value)
    with pytest.raises(NotFound):
        admin.cancel("no-such-job")


def test_submitting_to_an_unknown_queue_raises_not_found(admin: Client) -> None:
    with pytest.raises(NotFound) as e:
        admin.submit("j", "no-such-queue", ["true"])
    assert "no-such-queue" in e.value.details


def test_a_bad_field_raises_invalid_argument_naming_it(admin: Client, queue: str) -> None:
    with pytest.raises(InvalidArgument) as e:
        admin.submit("not a name!", queue, ["true"])
    assert e.value.code == grpc.StatusCode.INVALID_ARGUMENT
    assert "spec.name" in e.value.details


def test_an_unknown_token_is_unauthenticated(cluster: Any) -> None:
    with cluster.client(token="0" * 64) as c:
        with pytest.raises(Unauthenticated) as e:
            c.list()
    assert e.value.code == grpc.StatusCode.UNAUTHENTICATED
    assert "unknown token" in e.value.details
    assert isinstance(e.value, PermissionDenied), "except PermissionDenied catches it too"


def test_no_token_is_unauthenticated(cluster: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("BATON_TOKEN_FILE", raising=False)
    monkeypatch.delenv("BATON_TOKEN", raising=False)
    with Client(cluster.servers, tls_dir=cluster.tls_dir) as c:
        with pytest.raises(Unauthenticated):
            c.whoami()


def test_a_user_without_a_grant_is_denied_with_the_grant_named(
    cluster: Any, admin: Client, queue: str, name: str, tmp_path: Any
) -> None:
    other = "team-" + name
    admin.create_queue(other, gpus=1)
    printed = cluster.cli("token", "create", "--user", "bob", "--queue", other)
    token = printed.splitlines()[1].strip()
    token_file = tmp_path / "bob.token"
    token_file.write_text(token + "\n")
    with cluster.client(token_file=str(token_file)) as bob:
        assert bob.whoami().user == "bob"
        with pytest.raises(PermissionDenied) as e:
            bob.submit(name, queue, ["true"])
        assert e.value.code == grpc.StatusCode.PERMISSION_DENIED
        assert queue in e.value.details
        assert not isinstance(e.value, Unauthenticated)

        # The admin's job: bob may not cancel it nor read its logs.
        s = admin.submit(name, queue, ["sh", "-c", "echo secret"])
        admin.wait(s.id, timeout=WAIT_S)
        with pytest.raises(PermissionDenied):
            bob.cancel(s.id)
        with pytest.raises(PermissionDenied):
            bob.logs(s.id)


def test_resuming_a_finished_job_raises_failed_precondition(admin: Client, queue: str, name: str) -> None:
    s = admin.submit(name, queue, ["true"])
    assert admin.wait(s.id, timeout=WAIT_S).state == JobState.SUCCEEDED
    with pytest.raises(FailedPrecondition) as e:
        admin.resume(s.id)
    assert "Succeeded" in e.value.details


def test_logs_of_a_rank_the_job_has_not_are_refused_before_sending(admin: Client, queue: str, name: str) -> None:
    s = admin.submit(name, queue, ["true"])
    admin.wait(s.id, timeout=WAIT_S)
    with pytest.raises(ConfigError, match="ranks 0 to 0"):
        admin.logs(s.id, rank=1)
    with pytest.raises(NoLogs):
        admin.logs(s.id, attempt=7)


def test_no_replica_answering_raises_unavailable(cluster: Any, closed_port: int) -> None:
    with cluster.client(servers="127.0.0.1:%d" % closed_port, timeout=10) as c:
        with pytest.raises(Unavailable) as e:
            c.whoami()
    assert e.value.code == grpc.StatusCode.UNAVAILABLE
    assert "cannot reach any baton replica" in e.value.details
    assert isinstance(e.value, BatonError)


def test_a_wrong_ca_is_refused_in_the_handshake(cluster: Any, tmp_path: Any) -> None:
    # The client's own certificate as the CA: the replica's certificate does not verify.
    for f in ("cert.pem", "key.pem"):
        (tmp_path / f).write_bytes(open(os.path.join(cluster.tls_dir, f), "rb").read())
    (tmp_path / "ca.pem").write_bytes(open(os.path.join(cluster.tls_dir, "cert.pem"), "rb").read())
    with cluster.client(tls_dir=str(tmp_path), timeout=10) as c:
        with pytest.raises(Unavailable):
            c.whoami()
