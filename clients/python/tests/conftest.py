"""A real `baton dev` cluster for the tests: 3 replicas and 2 agents with development GPUs,
mutual TLS and an admin token, started once per test session from the `baton` binary that
BATON_BIN names (default: target/debug/baton in the repository), and stopped (its whole
process group) at the end.

The settings are read from what `baton dev` prints for the user's shell:

    export BATON_SERVER=127.0.0.1:7070,127.0.0.1:7071,127.0.0.1:7072
    export BATON_TLS_DIR=/.../tls/client-dev
    export BATON_TOKEN_FILE=/.../admin.token   # the admin token (docs/security.md)
"""

from __future__ import annotations

import os
import random
import re
import shutil
import signal
import socket
import subprocess
import tempfile
import threading
import time
import uuid
from dataclasses import dataclass
from pathlib import Path
from typing import Dict, Iterator, List, Optional

import pytest

from baton_client import Client

REPO_ROOT = Path(__file__).resolve().parents[3]
# How long the cluster may take to say it is up (a debug build elects and registers slowly
# on a loaded machine; `baton dev` itself gives up after 30 s).
START_TIMEOUT_S = 120
STOP_GRACE_S = 10
# `baton dev --port P` listens on P..P+5 and serves /metrics on P+100..P+104.
PORT_OFFSETS = list(range(6)) + list(range(100, 105))


def baton_bin() -> Path:
    configured = os.environ.get("BATON_BIN")
    path = Path(configured) if configured else REPO_ROOT / "target" / "debug" / "baton"
    if not path.is_absolute():
        path = REPO_ROOT / path
    return path


def free_base_port() -> int:
    """A first port whose whole range `baton dev` uses is free now."""
    for _ in range(200):
        base = random.randrange(20000, 60000, 10)
        socks: List[socket.socket] = []
        try:
            for off in PORT_OFFSETS:
                s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
                socks.append(s)
                s.bind(("127.0.0.1", base + off))
            return base
        except OSError:
            continue
        finally:
            for s in socks:
                s.close()
    raise RuntimeError("no free range of ports for baton dev")


@dataclass
class Cluster:
    servers: str
    tls_dir: str
    token_file: str
    dir: Path
    bin: Path

    @property
    def env(self) -> Dict[str, str]:
        return {"BATON_SERVER": self.servers, "BATON_TLS_DIR": self.tls_dir, "BATON_TOKEN_FILE": self.token_file}

    def client(self, **kwargs: object) -> Client:
        args: Dict[str, object] = dict(servers=self.servers, tls_dir=self.tls_dir, token_file=self.token_file)
        args.update(kwargs)
        return Client(**args)  # type: ignore[arg-type]

    def cli(self, *args: str, token_file: Optional[str] = None) -> str:
        """Runs the `baton` CLI against the cluster; its stdout."""
        env = dict(os.environ, **self.env)
        if token_file is not None:
            env["BATON_TOKEN_FILE"] = token_file
        r = subprocess.run([str(self.bin), *args], env=env, capture_output=True, text=True, timeout=60)
        if r.returncode != 0:
            raise AssertionError("baton %s failed (%d): %s" % (" ".join(args), r.returncode, r.stderr.strip()))
        return r.stdout

    def logs_tail(self, lines: int = 20) -> str:
        out = []
        for log in sorted((self.dir / "logs").glob("*.log")):
            text = log.read_text(errors="replace").splitlines()[-lines:]
            out.append("== %s\n%s" % (log.name, "\n".join(text)))
        return "\n".join(out)


def _read_until_up(proc: subprocess.Popen, printed: List[str], up: threading.Event) -> None:
    assert proc.stdout is not None
    for line in proc.stdout:
        printed.append(line.rstrip("\n"))
        if line.startswith("Press Ctrl-C"):
            up.set()
    up.set()


def _stop(proc: subprocess.Popen) -> None:
    """SIGTERM to the cluster's process group (`baton dev` and its replicas and agents),
    SIGKILL after a grace."""
    if proc.poll() is not None and not _group_alive(proc.pid):
        return
    for sig, wait in ((signal.SIGTERM, STOP_GRACE_S), (signal.SIGKILL, 5)):
        try:
            os.killpg(proc.pid, sig)
        except ProcessLookupError:
            return
        deadline = time.monotonic() + wait
        while time.monotonic() < deadline:
            if proc.poll() is not None and not _group_alive(proc.pid):
                return
            time.sleep(0.1)


def _group_alive(pgid: int) -> bool:
    try:
        os.killpg(pgid, 0)
        return True
    except ProcessLookupError:
        return False
    except PermissionError:
        return True


@pytest.fixture(scope="session")
def cluster() -> Iterator[Cluster]:
    exe = baton_bin()
    if not exe.is_file() or not os.access(exe, os.X_OK):
        pytest.fail(
            "no baton binary at %s: build it (cargo build --bin baton) or set BATON_BIN to one; "
            "these tests run against a real `baton dev` cluster" % exe,
            pytrace=False,
        )
    workdir = Path(tempfile.mkdtemp(prefix="baton-py-tests-"))
    port = free_base_port()
    env = {k: v for k, v in os.environ.items() if not k.startswith("BATON_")}
    stderr = open(workdir / "dev.stderr", "w")
    proc = subprocess.Popen(
        [str(exe), "dev", "--port", str(port), "--dir", str(workdir / "dev")],
        stdout=subprocess.PIPE,
        stderr=stderr,
        stdin=subprocess.DEVNULL,
        text=True,
        env=env,
        # Its own process group, so the cluster (replicas and agents too) is stopped as one.
        start_new_session=True,
    )
    printed: List[str] = []
    up = threading.Event()
    threading.Thread(target=_read_until_up, args=(proc, printed, up), daemon=True).start()
    try:
        up.wait(START_TIMEOUT_S)
        exports = {}
        for line in printed:
            m = re.match(r"\s*export (BATON_\w+)=(\S+)", line)
            if m:
                exports[m.group(1)] = m.group(2)
        if proc.poll() is not None or not up.is_set() or len(exports) < 3:
            stderr.flush()
            why = "exited with %s" % proc.returncode if proc.poll() is not None else "not up"
            pytest.fail(
                "baton dev %s after %d s; it printed:\n%s\nstderr:\n%s"
                % (why, START_TIMEOUT_S, "\n".join(printed), (workdir / "dev.stderr").read_text(errors="replace")),
                pytrace=False,
            )
        c = Cluster(
            servers=exports["BATON_SERVER"],
            tls_dir=exports["BATON_TLS_DIR"],
            token_file=exports["BATON_TOKEN_FILE"],
            dir=workdir / "dev",
            bin=exe,
        )
        with c.client(timeout=30) as admin:
            # Up means a leader and both agents' nodes; this confirms the admin token works.
            assert admin.whoami().user
        yield c
    finally:
        _stop(proc)
        stderr.close()
        shutil.rmtree(workdir, ignore_errors=True)


@pytest.fixture(scope="session")
def admin(cluster: Cluster) -> Iterator[Client]:
    with cluster.client(timeout=30) as c:
        yield c


@pytest.fixture(scope="session")
def queue(admin: Client) -> str:
    """A queue with 8 GPUs of quota for the tests' jobs."""
    name = "py-tests"
    admin.create_queue(name, gpus=8)
    return name


@pytest.fixture
def closed_port() -> int:
    """A local port nothing listens on."""
    s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    return port


@pytest.fixture
def name() -> str:
    """A fresh job name."""
    return "py-" + uuid.uuid4().hex[:10]
