"""Reaching a replica, as the `baton` CLI does (crates/cli/src/client/connect.rs): the first
address of the replica list that answers, failing over on connection errors and
UNAVAILABLE, retrying "no leader yet" while an election runs, all within one deadline per
call. Any replica answers reads and forwards writes to the leader, so no leader search
happens here. Every call carries `authorization: Bearer TOKEN` metadata when there is a
token, and under TLS the client presents its certificate and checks the replica's.
"""

from __future__ import annotations

import os
import threading
import time
from dataclasses import dataclass
from typing import Any, Callable, Dict, List, Optional, Sequence, Tuple, TypeVar

import grpc

from .errors import (
    REASON_NO_LEADER,
    BatonError,
    ConfigError,
    DeadlineExceeded,
    NoLeader,
    Unavailable,
    from_rpc_error,
    reason_of,
)

# Where a replica listens when neither the caller nor BATON_SERVER says.
DEFAULT_SERVER = "127.0.0.1:7070"
# The bound on one whole call, retries included (the CLI's --timeout default), in seconds.
DEFAULT_TIMEOUT_S = 10.0
# Each address is tried at most this many times per call (connection errors and plain UNAVAILABLE).
MAX_TRIES_PER_ADDR = 2
# "no leader yet" answers retried per call; the deadline bounds them too.
MAX_NO_LEADER_RETRIES = 10
# Bound on one connection: TCP connect and TLS handshake together.
DIAL_TIMEOUT_S = 3.0
# Backoff between retries: doubles from the first value up to the cap.
FIRST_BACKOFF_S = 0.1
MAX_BACKOFF_S = 1.0
MAX_ADDRESSES = 64

# The files the CLI reads from a --tls-dir / BATON_TLS_DIR (crates/proto/src/tls.rs).
CA_CERT_FILE = "ca.pem"
CERT_FILE = "cert.pem"
KEY_FILE = "key.pem"
# The DNS name every replica certificate carries and every caller of a replica verifies,
# whatever address it dials.
REPLICA_HOST = "replica.baton"
# Largest message a replica sends or accepts (crates/proto/src/lib.rs).
MAX_MESSAGE_BYTES = 16 << 20
# A token file longer than this is the wrong file; a token is at most this long.
MAX_TOKEN_FILE_BYTES = 4096
MAX_TOKEN_LEN = 512

T = TypeVar("T")


def parse_servers(servers: "str | Sequence[str]") -> List[str]:
    """A replica list (`host:port,host:port`, an `http://` prefix allowed) as addresses."""
    items = servers.split(",") if isinstance(servers, str) else list(servers)
    addrs = []
    for a in items:
        a = a.strip()
        if a.startswith("http://"):
            a = a[len("http://") :]
        a = a.rstrip("/")
        if a:
            addrs.append(a)
    if not addrs:
        raise ConfigError("BATON_SERVER (or servers=) is empty; give replica addresses like host:7070,host2:7070")
    if len(addrs) > MAX_ADDRESSES:
        raise ConfigError("BATON_SERVER lists %d addresses; at most %d are used" % (len(addrs), MAX_ADDRESSES))
    for a in addrs:
        if ":" not in a or any(c.isspace() for c in a):
            raise ConfigError("BATON_SERVER: %r is not host:port" % a)
    return addrs


def _truthy(text: Optional[str]) -> bool:
    """As the CLI reads BATON_INSECURE: unset, empty, 0, false, no, off, n, f are false."""
    if text is None:
        return False
    return text.strip().lower() not in ("", "0", "false", "no", "off", "n", "f")


def read_token_file(path: str) -> str:
    try:
        with open(path, "rb") as f:
            data = f.read(MAX_TOKEN_FILE_BYTES + 1)
    except OSError as e:
        raise ConfigError("cannot read token file %s: %s" % (path, e.strerror or e)) from None
    if len(data) > MAX_TOKEN_FILE_BYTES:
        raise ConfigError("token file %s is over %d bytes; is it the right file?" % (path, MAX_TOKEN_FILE_BYTES))
    return data.decode("utf-8", errors="replace").strip()


def check_token(token: str, source: str) -> str:
    token = token.strip()
    if not token or len(token) > MAX_TOKEN_LEN or not all(33 <= ord(c) <= 126 for c in token):
        raise ConfigError("%s: a token is 1 to %d printable ASCII characters" % (source, MAX_TOKEN_LEN))
    return token


@dataclass
class Settings:
    """How to reach the cluster."""

    servers: List[str]
    #: Mutual TLS with ca.pem, cert.pem and key.pem from this folder; None with `insecure`.
    tls_dir: Optional[str]
    #: Plain TCP, no certificates.
    insecure: bool
    #: The bearer token sent with every call, if any.
    token: Optional[str]
    #: Bound on each call, retries included, in seconds.
    timeout: float

    @classmethod
    def resolve(
        cls,
        servers: "str | Sequence[str] | None" = None,
        tls_dir: Optional[str] = None,
        insecure: Optional[bool] = None,
        token: Optional[str] = None,
        token_file: Optional[str] = None,
        timeout: Optional[float] = None,
    ) -> "Settings":
        """What the arguments say, and for what they leave out, the environment as the CLI
        reads it: BATON_SERVER, BATON_TLS_DIR or BATON_INSECURE, BATON_TOKEN_FILE then
        BATON_TOKEN."""
        env = os.environ
        if servers is None:
            servers = env.get("BATON_SERVER") or DEFAULT_SERVER
        addrs = parse_servers(servers)

        if tls_dir is not None and insecure:
            raise ConfigError("tls_dir and insecure: give one, not both")
        if tls_dir is None and insecure is None:
            env_dir = env.get("BATON_TLS_DIR") or None
            env_insecure = _truthy(env.get("BATON_INSECURE"))
            if env_dir and env_insecure:
                raise ConfigError("BATON_TLS_DIR and BATON_INSECURE are both set: give one, not both")
            tls_dir, insecure = env_dir, env_insecure
        insecure = bool(insecure) and tls_dir is None
        if tls_dir is None and not insecure:
            raise ConfigError(
                "no transport security chosen: set BATON_TLS_DIR (or tls_dir=) to a folder with ca.pem, "
                "cert.pem and key.pem for mutual TLS, or BATON_INSECURE=1 (or insecure=True) for plain TCP"
            )

        if token is not None:
            token = check_token(token, "token")
        else:
            path = token_file or env.get("BATON_TOKEN_FILE") or None
            if path:
                token = check_token(read_token_file(path), "token file %s" % path)
            elif env.get("BATON_TOKEN"):
                token = check_token(env["BATON_TOKEN"], "BATON_TOKEN")

        if timeout is None:
            timeout = DEFAULT_TIMEOUT_S
        if timeout <= 0:
            raise ConfigError("timeout must be more than 0 seconds")
        return cls(servers=addrs, tls_dir=tls_dir, insecure=insecure, token=token, timeout=float(timeout))


def _credentials(tls_dir: str) -> grpc.ChannelCredentials:
    def read(name: str) -> bytes:
        path = os.path.join(tls_dir, name)
        try:
            with open(path, "rb") as f:
                return f.read()
        except OSError as e:
            raise ConfigError("TLS folder %s: cannot read %s: %s" % (tls_dir, name, e.strerror or e)) from None

    return grpc.ssl_channel_credentials(
        root_certificates=read(CA_CERT_FILE), private_key=read(KEY_FILE), certificate_chain=read(CERT_FILE)
    )


class _Trail:
    """What happened on the way to an answer, for the final error."""

    def __init__(self) -> None:
        self.tried: List[str] = []
        self.last = ""
        self.no_leader = False
        self.no_leader_details = ""

    def failed(self, addr: str, why: str) -> None:
        if addr not in self.tried:
            self.tried.append(addr)
        self.last = "%s: %s" % (addr, why)

    def give_up(self) -> BatonError:
        if self.no_leader:
            return NoLeader(
                self.no_leader_details or "no leader yet (an election may be under way); retry in a moment",
                grpc.StatusCode.UNAVAILABLE,
                REASON_NO_LEADER,
            )
        return Unavailable(
            "cannot reach any baton replica (tried %s): %s; check BATON_SERVER and that `baton server` runs there"
            % (", ".join(self.tried) or "nothing", self.last),
            grpc.StatusCode.UNAVAILABLE,
        )


class Conn:
    """A replica set to talk to. Keeps the replica that last answered, so calls stay on it."""

    def __init__(self, settings: Settings) -> None:
        from ._proto import baton_pb2_grpc

        self.settings = settings
        self._stub_class = baton_pb2_grpc.BatonStub
        self._credentials = None if settings.insecure else _credentials(settings.tls_dir or "")
        self._metadata: Tuple[Tuple[str, str], ...] = (
            (("authorization", "Bearer " + settings.token),) if settings.token else ()
        )
        self._lock = threading.Lock()
        self._channels: Dict[int, Tuple[grpc.Channel, Any]] = {}
        self._current = 0

    @property
    def metadata(self) -> Tuple[Tuple[str, str], ...]:
        return self._metadata

    def close(self) -> None:
        with self._lock:
            channels, self._channels = self._channels, {}
        for ch, _ in channels.values():
            ch.close()

    def _channel(self, i: int) -> Tuple[grpc.Channel, Any]:
        with self._lock:
            if i in self._channels:
                return self._channels[i]
            addr = self.settings.servers[i]
            options: List[Tuple[str, Any]] = [
                ("grpc.max_receive_message_length", MAX_MESSAGE_BYTES),
                ("grpc.max_send_message_length", MAX_MESSAGE_BYTES),
                # As the CLI: straight to the replica, whatever proxy the environment names.
                ("grpc.enable_http_proxy", 0),
                # One connection attempt (TCP and TLS handshake) may take this long; then the
                # call fails UNAVAILABLE and the next replica is tried, so an address that
                # drops packets costs one bounded wait, not the whole call.
                ("grpc.min_reconnect_backoff_ms", int(DIAL_TIMEOUT_S * 1000)),
                ("grpc.initial_reconnect_backoff_ms", int(FIRST_BACKOFF_S * 1000)),
                ("grpc.max_reconnect_backoff_ms", int(DIAL_TIMEOUT_S * 1000)),
            ]
            if self._credentials is None:
                ch = grpc.insecure_channel(addr, options=options)
            else:
                options.append(("grpc.ssl_target_name_override", REPLICA_HOST))
                ch = grpc.secure_channel(addr, self._credentials, options=options)
            entry = (ch, self._stub_class(ch))
            self._channels[i] = entry
            return entry

    def _drop(self, i: int) -> None:
        with self._lock:
            entry = self._channels.pop(i, None)
        if entry is not None:
            entry[0].close()

    def _attempts(self, attempt: Callable[[Any, float], T]) -> T:
        """Runs `attempt(stub, seconds_left)` on one replica after another until one answers,
        as the CLI does; the result or the exception that ends it."""
        timeout = self.settings.timeout
        deadline = time.monotonic() + timeout
        n = len(self.settings.servers)
        tries = [0] * n
        no_leader_retries = 0
        backoff = FIRST_BACKOFF_S
        trail = _Trail()
        i = self._current

        def left() -> float:
            return deadline - time.monotonic()

        def timed_out() -> BatonError:
            if trail.no_leader:
                return trail.give_up()
            return DeadlineExceeded(
                "no answer within %gs (tried %s); the cluster may be overloaded or partitioned, "
                "retry or raise the timeout" % (timeout, ", ".join(trail.tried) or "nothing"),
                grpc.StatusCode.DEADLINE_EXCEEDED,
            )

        while True:
            nxt = next((k for k in ((i + j) % n for j in range(n)) if tries[k] < MAX_TRIES_PER_ADDR), None)
            if nxt is None:
                raise trail.give_up()
            i = nxt
            addr = self.settings.servers[i]
            if tries[i] > 0:
                time.sleep(max(0.0, min(backoff, left())))
                backoff = min(backoff * 2, MAX_BACKOFF_S)
            if left() <= 0:
                raise timed_out()
            _, stub = self._channel(i)
            try:
                result = attempt(stub, left())
            except grpc.RpcError as e:
                code = e.code() if hasattr(e, "code") else None
                details = (e.details() if hasattr(e, "details") else "") or str(code)
                reason = reason_of(e.trailing_metadata() if hasattr(e, "trailing_metadata") else None)
                if code == grpc.StatusCode.UNAVAILABLE and reason == REASON_NO_LEADER:
                    # Up, but nothing can be written (or read linearizably) until an election
                    # ends: wait and ask again, the next replica first.
                    trail.no_leader = True
                    trail.no_leader_details = details
                    trail.failed(addr, details)
                    no_leader_retries += 1
                    if no_leader_retries > MAX_NO_LEADER_RETRIES:
                        raise trail.give_up() from None
                    time.sleep(max(0.0, min(backoff, left())))
                    backoff = min(backoff * 2, MAX_BACKOFF_S)
                    i = (i + 1) % n
                    continue
                if code == grpc.StatusCode.UNAVAILABLE:
                    # A replica shutting down, or the connection broke: the next one may answer.
                    tries[i] += 1
                    trail.failed(addr, "unavailable: %s" % details)
                    self._drop(i)
                    i = (i + 1) % n
                    continue
                if code == grpc.StatusCode.DEADLINE_EXCEEDED and left() <= 0:
                    if addr not in trail.tried:
                        trail.tried.append(addr)
                    raise timed_out() from None
                raise from_rpc_error(e) from None
            self._current = i
            return result

    def call(self, method: str, request: Any) -> Any:
        """One unary call of the Baton service, with failover and retries."""

        def attempt(stub: Any, left: float) -> Any:
            return getattr(stub, method)(request, timeout=left, metadata=self._metadata)

        return self._attempts(attempt)

    def stream(self, method: str, request: Any) -> Any:
        """Opens a server-streaming call (with failover until the replica has accepted it);
        the call, to iterate and to cancel. The stream itself has no deadline."""

        def attempt(stub: Any, left: float) -> Any:
            call = getattr(stub, method)(request, metadata=self._metadata)
            # Waits for the replica's answer to the opening: its headers, or a refusal.
            call.initial_metadata()
            if call.done() and call.code() != grpc.StatusCode.OK:
                raise call
            return call

        return self._attempts(attempt)
