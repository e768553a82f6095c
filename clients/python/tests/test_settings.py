"""What needs no cluster: settings as the CLI reads them, and the words of the API's enums."""

from __future__ import annotations

from typing import Any

import pytest

from baton_client import ConfigError, Event, JobState
from baton_client._connect import Settings, parse_servers
from baton_client._proto import baton_pb2
from baton_client.models import enum_value, word

ENV = ("BATON_SERVER", "BATON_TLS_DIR", "BATON_INSECURE", "BATON_TOKEN", "BATON_TOKEN_FILE")


@pytest.fixture
def clean_env(monkeypatch: pytest.MonkeyPatch) -> pytest.MonkeyPatch:
    for k in ENV:
        monkeypatch.delenv(k, raising=False)
    return monkeypatch


def test_servers_parse_as_the_cli_parses_them() -> None:
    assert parse_servers(" a:1, http://b:2/ ,") == ["a:1", "b:2"]
    assert parse_servers(["a:1", "b:2"]) == ["a:1", "b:2"]
    with pytest.raises(ConfigError, match="BATON_SERVER"):
        parse_servers(" , ")
    with pytest.raises(ConfigError, match="'nohost'"):
        parse_servers("a:1,nohost")


def test_the_environment_gives_servers_transport_and_token(clean_env: pytest.MonkeyPatch, tmp_path: Any) -> None:
    token_file = tmp_path / "t"
    token_file.write_text("  abc123  \n")
    clean_env.setenv("BATON_SERVER", "h1:7070,h2:7070")
    clean_env.setenv("BATON_TLS_DIR", str(tmp_path))
    clean_env.setenv("BATON_TOKEN_FILE", str(token_file))
    clean_env.setenv("BATON_TOKEN", "ignored-when-a-file-is-given")
    s = Settings.resolve()
    assert s.servers == ["h1:7070", "h2:7070"]
    assert s.tls_dir == str(tmp_path) and not s.insecure
    assert s.token == "abc123"
    assert Settings.resolve(token="explicit").token == "explicit"


def test_insecure_and_the_default_server(clean_env: pytest.MonkeyPatch) -> None:
    clean_env.setenv("BATON_INSECURE", "1")
    clean_env.setenv("BATON_TOKEN", "tok")
    s = Settings.resolve()
    assert s.servers == ["127.0.0.1:7070"] and s.insecure and s.tls_dir is None and s.token == "tok"
    clean_env.setenv("BATON_INSECURE", "false")
    with pytest.raises(ConfigError, match="no transport security chosen"):
        Settings.resolve()


def test_conflicting_or_bad_settings_are_refused(clean_env: pytest.MonkeyPatch, tmp_path: Any) -> None:
    clean_env.setenv("BATON_TLS_DIR", str(tmp_path))
    clean_env.setenv("BATON_INSECURE", "yes")
    with pytest.raises(ConfigError, match="both set"):
        Settings.resolve()
    with pytest.raises(ConfigError, match="printable ASCII"):
        Settings.resolve(insecure=True, token="has space")
    with pytest.raises(ConfigError, match="cannot read token file"):
        Settings.resolve(insecure=True, token_file=str(tmp_path / "missing"))
    with pytest.raises(ConfigError, match="timeout"):
        Settings.resolve(insecure=True, timeout=0)


def test_enum_words_are_the_clis() -> None:
    assert word(baton_pb2.JobState, baton_pb2.JOB_STATE_PENDING) == "Pending"
    assert word(baton_pb2.JobState, baton_pb2.JOB_STATE_UNSPECIFIED) == ""
    assert word(baton_pb2.EventKind, baton_pb2.EVENT_KIND_NODE_LOST) == "NodeLost"
    assert word(baton_pb2.TokenRole, baton_pb2.TOKEN_ROLE_ADMIN) == "admin"
    assert word(baton_pb2.JobState, 99) == ""
    assert enum_value(baton_pb2.PreemptionMode, "Suspend") == baton_pb2.PREEMPTION_MODE_SUSPEND
    assert enum_value(baton_pb2.JobState, str(JobState.RUNNING)) == baton_pb2.JOB_STATE_RUNNING
    with pytest.raises(ValueError, match="Pending"):
        enum_value(baton_pb2.JobState, "Sleeping")
    for value in baton_pb2.JobState.values():
        if value:
            JobState(word(baton_pb2.JobState, value))


def test_events_are_made_from_messages() -> None:
    m = baton_pb2.Event(at_ms=5, job="j", kind=baton_pb2.EVENT_KIND_STARTED, nodes=["n1"], attempt=2, message="m")
    e = Event.from_proto(m)
    assert (e.kind, e.job, e.nodes, e.attempt, e.message) == ("Started", "j", ["n1"], 2, "m")
