"""A real control plane for the tests: etcd and kube-apiserver (and, on request, the
kube-controller-manager), run from the binaries ``build.py`` makes.

etcd keeps its data in the folder it is given (a tmpfs one: ``--unsafe-no-fsync`` as well), the
API server serves TLS with a self-signed certificate on ``address`` and authenticates the tests
with a static ``system:masters`` token; service accounts get real signed tokens. Every wait is
bounded, and a process that dies early fails with the tail of its log.
"""

from __future__ import annotations

import base64
import http.client
import ipaddress
import json
import os
import signal
import socket
import ssl
import subprocess
import threading
import time
import urllib.request
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

JsonObject = dict[str, Any]

ADMIN_TOKEN = "ipvsproxy-test-admin-token"
SERVICE_CIDR = "10.96.0.0/16"
# A bound for a hung process, never a timer: inside the lab every page the API server touches
# is slow, and it starts in tens of seconds.
START_TIMEOUT = 240.0
STOP_TIMEOUT = 30.0
REQUEST_TIMEOUT = 30.0
LOG_TAIL_BYTES = 4000


def free_port(host: str = "127.0.0.1") -> int:
    with socket.socket(socket.AF_INET6 if ":" in host else socket.AF_INET) as sock:
        sock.bind((host, 0))
        port: int = sock.getsockname()[1]
        return port


def _url_host(address: str) -> str:
    return f"[{address}]" if ":" in address else address


class ApiError(Exception):
    def __init__(self, status: int, body: str) -> None:
        super().__init__(f"HTTP {status}: {body[:500]}")
        self.status = status
        self.body = body


@dataclass
class _Process:
    name: str
    command: list[str]
    log_path: Path
    popen: subprocess.Popen[bytes] | None = None

    def start(self, env: Mapping[str, str] | None = None) -> None:
        with self.log_path.open("ab") as log:
            log.write(f"=== {' '.join(self.command)}\n".encode())
            self.popen = subprocess.Popen(
                self.command,
                stdout=log,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
                env={**os.environ, **(env or {})},
                start_new_session=True,
            )

    @property
    def alive(self) -> bool:
        return self.popen is not None and self.popen.poll() is None

    def log_tail(self) -> str:
        try:
            data = self.log_path.read_bytes()
        except OSError:
            return ""
        return data[-LOG_TAIL_BYTES:].decode(errors="replace")

    def check_alive(self) -> None:
        if self.popen is not None and self.popen.poll() is not None:
            raise RuntimeError(
                f"{self.name} exited with status {self.popen.returncode}:\n{self.log_tail()}"
            )

    def stop(self, sig: int = signal.SIGTERM) -> None:
        if not self.alive:
            return
        assert self.popen is not None
        self.popen.send_signal(sig)
        try:
            self.popen.wait(STOP_TIMEOUT)
        except subprocess.TimeoutExpired:
            self.popen.kill()
            self.popen.wait()


def _wait(condition: Callable[[], bool], timeout: float, what: str, process: _Process) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        process.check_alive()
        if condition():
            return
        time.sleep(0.2)
    raise TimeoutError(f"not within {timeout:.0f} s: {what}\n{process.log_tail()}")


def _send(
    connection: http.client.HTTPSConnection,
    method: str,
    path: str,
    data: bytes | None,
    headers: Mapping[str, str],
) -> tuple[int, bytes]:
    """One request on ``connection``: the status and body; a failed connection is closed
    (the next request on it connects again)."""
    try:
        connection.request(method, path, body=data, headers=dict(headers))
        reply = connection.getresponse()
        return reply.status, reply.read()
    except BaseException:
        connection.close()
        raise


class ControlPlane:
    """etcd and kube-apiserver in ``folder``; the API on ``https://address:port``."""

    def __init__(
        self,
        binaries: Path,
        folder: Path,
        *,
        address: str = "127.0.0.1",
        apiserver_args: tuple[str, ...] = (),
        env: Mapping[str, str] | None = None,
    ) -> None:
        self.binaries = binaries
        self.folder = folder
        self.address = address
        self.env = dict(env or {})
        self.etcd_port = free_port()
        self.etcd_peer_port = free_port()
        self.port = free_port(address)
        self.server = f"https://{_url_host(address)}:{self.port}"
        self.cert_dir = folder / "certs"
        self.ca_file = self.cert_dir / "apiserver.crt"
        self.kubeconfig = folder / "admin.kubeconfig"
        self._extra_args = apiserver_args
        self._etcd = _Process("etcd", self._etcd_command(), folder / "etcd.log")
        self._apiserver = _Process(
            "kube-apiserver", self._apiserver_command(), folder / "kube-apiserver.log"
        )
        self._controller_manager: _Process | None = None
        self._ssl: ssl.SSLContext | None = None
        # Each thread keeps a connection; a new generation (the API server restarted, with a
        # new certificate perhaps) makes them connect afresh.
        self._local = threading.local()
        self._generation = 0

    # -- commands -------------------------------------------------------------------------------

    @property
    def etcd_url(self) -> str:
        return f"http://127.0.0.1:{self.etcd_port}"

    def _etcd_command(self) -> list[str]:
        peer = f"http://127.0.0.1:{self.etcd_peer_port}"
        return [
            str(self.binaries / "etcd"),
            "--name=test",
            f"--data-dir={self.folder / 'etcd'}",
            f"--listen-client-urls={self.etcd_url}",
            f"--advertise-client-urls={self.etcd_url}",
            f"--listen-peer-urls={peer}",
            f"--initial-advertise-peer-urls={peer}",
            f"--initial-cluster=test={peer}",
            "--unsafe-no-fsync",
            "--log-level=warn",
        ]

    def _apiserver_command(self) -> list[str]:
        folder = self.folder
        return [
            str(self.binaries / "kube-apiserver"),
            f"--etcd-servers={self.etcd_url}",
            f"--bind-address={self.address}",
            f"--advertise-address={self.address}",
            f"--secure-port={self.port}",
            f"--cert-dir={self.cert_dir}",
            f"--token-auth-file={folder / 'tokens.csv'}",
            f"--service-account-key-file={folder / 'sa.pub'}",
            f"--service-account-signing-key-file={folder / 'sa.key'}",
            "--service-account-issuer=https://kubernetes.default.svc.cluster.local",
            "--authorization-mode=Node,RBAC",
            f"--service-cluster-ip-range={SERVICE_CIDR}",
            "--profiling=false",
            *self._loopback_args(),
            *self._extra_args,
        ]

    def _loopback_args(self) -> list[str]:
        """The API server refuses to advertise a loopback address for the ``kubernetes``
        Service's endpoints; on loopback nothing reaches them anyway, so it keeps none."""
        if not ipaddress.ip_address(self.address).is_loopback:
            return []
        return ["--endpoint-reconciler-type=none"]

    def _write_credentials(self) -> None:
        self.folder.mkdir(parents=True, exist_ok=True)
        (self.folder / "tokens.csv").write_text(f'{ADMIN_TOKEN},admin,admin,"system:masters"\n')
        key = self.folder / "sa.key"
        if not key.exists():
            subprocess.run(
                ["openssl", "genrsa", "-out", str(key), "2048"], check=True, capture_output=True
            )
            subprocess.run(
                ["openssl", "rsa", "-in", str(key), "-pubout", "-out", str(self.folder / "sa.pub")],
                check=True,
                capture_output=True,
            )

    # -- running --------------------------------------------------------------------------------

    def start(self, timeout: float = START_TIMEOUT) -> ControlPlane:
        self._write_credentials()
        self._etcd.start(self.env)
        _wait(self._etcd_ready, timeout, "etcd answers /health", self._etcd)
        self.start_apiserver(timeout)
        self.write_kubeconfig(self.kubeconfig, ADMIN_TOKEN)
        return self

    def start_apiserver(self, timeout: float = START_TIMEOUT) -> None:
        self._ssl = None
        self._generation += 1
        self._apiserver.start(self.env)
        _wait(self._apiserver_ready, timeout, "kube-apiserver answers /readyz", self._apiserver)

    def stop_apiserver(self, sig: int = signal.SIGTERM) -> None:
        """Stop the API server: gracefully (seconds under load), or ``SIGKILL`` for a crash."""
        self._apiserver.stop(sig)

    def start_controller_manager(self, *controllers: str) -> None:
        """The kube-controller-manager, running only ``controllers`` (e.g. endpointslice)."""
        command = [
            str(self.binaries / "kube-controller-manager"),
            f"--kubeconfig={self.kubeconfig}",
            f"--controllers={','.join(controllers)}",
            "--leader-elect=false",
            "--secure-port=0",
            f"--service-account-private-key-file={self.folder / 'sa.key'}",
            f"--root-ca-file={self.ca_file}",
            f"--service-cluster-ip-range={SERVICE_CIDR}",
            "--concurrent-service-endpoint-syncs=5",
        ]
        self._controller_manager = _Process(
            "kube-controller-manager", command, self.folder / "kube-controller-manager.log"
        )
        self._controller_manager.start(self.env)

    def stop(self) -> None:
        if self._controller_manager is not None:
            self._controller_manager.stop()
        self._apiserver.stop()
        self._etcd.stop()

    def __enter__(self) -> ControlPlane:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    @property
    def apiserver_alive(self) -> bool:
        return self._apiserver.alive

    def logs(self) -> str:
        processes = [self._etcd, self._apiserver, self._controller_manager]
        return "\n".join(
            f"--- {process.name}\n{process.log_tail()}" for process in processes if process
        )

    def _etcd_ready(self) -> bool:
        try:
            with urllib.request.urlopen(f"{self.etcd_url}/health", timeout=2) as reply:
                return bool(json.load(reply).get("health") == "true")
        except (OSError, ValueError):
            return False

    def _apiserver_ready(self) -> bool:
        if not self.ca_file.exists():
            return False
        try:
            self.request("GET", "/readyz")
        except (OSError, ApiError, http.client.HTTPException):
            return False
        return True

    # -- etcd -----------------------------------------------------------------------------------

    def _etcd_call(self, path: str, body: JsonObject) -> JsonObject:
        request = urllib.request.Request(
            f"{self.etcd_url}{path}",
            data=json.dumps(body).encode(),
            headers={"Content-Type": "application/json"},
            method="POST",
        )
        with urllib.request.urlopen(request, timeout=10) as reply:
            result: JsonObject = json.load(reply)
            return result

    def etcd_revision(self) -> int:
        status = self._etcd_call("/v3/maintenance/status", {})
        return int(status["header"]["revision"])

    def compact(self) -> int:
        """Compact etcd's history up to now (physically): a watch from before gets 410 Gone
        wherever the API server reads etcd's history rather than its watch cache."""
        revision = self.etcd_revision()
        self._etcd_call("/v3/kv/compaction", {"revision": str(revision), "physical": True})
        return revision

    def etcd_delete(self, key: str) -> int:
        """Delete ``key`` in etcd itself, as another API server of the cluster would while
        this one is stopped (``/registry/services/specs/NAMESPACE/NAME``); how many went."""
        encoded = base64.b64encode(key.encode()).decode()
        reply = self._etcd_call("/v3/kv/deleterange", {"key": encoded})
        return int(reply.get("deleted", 0))

    # -- the API --------------------------------------------------------------------------------

    def _connection(self) -> http.client.HTTPSConnection:
        """This thread's keep-alive connection to the API server (a fresh TLS handshake per
        call cost more than the call: 45 ms a Service against 12 ms)."""
        connection: http.client.HTTPSConnection | None = getattr(self._local, "connection", None)
        if connection is None or getattr(self._local, "generation", -1) != self._generation:
            if connection is not None:
                connection.close()
            if self._ssl is None:
                self._ssl = ssl.create_default_context(cafile=str(self.ca_file))
            connection = http.client.HTTPSConnection(
                self.address, self.port, timeout=REQUEST_TIMEOUT, context=self._ssl
            )
            self._local.connection, self._local.generation = connection, self._generation
        return connection

    def _exchange(
        self, method: str, path: str, data: bytes | None, headers: Mapping[str, str]
    ) -> tuple[int, bytes]:
        connection = self._connection()
        reused = connection.sock is not None
        try:
            return _send(connection, method, path, data, headers)
        except (
            http.client.RemoteDisconnected,
            BrokenPipeError,
            ConnectionResetError,
            ssl.SSLEOFError,
        ):
            if not reused:
                raise
        # The server had closed the idle kept-alive connection (a write on a TLS connection
        # the server closed is an SSLEOFError): once more, on a new one.
        return _send(self._connection(), method, path, data, headers)

    def request(
        self,
        method: str,
        path: str,
        body: JsonObject | None = None,
        *,
        token: str = ADMIN_TOKEN,
        content_type: str = "application/json",
    ) -> JsonObject:
        """One API call as ``token``; the decoded reply (``{}`` when it is not JSON)."""
        headers = {"Authorization": f"Bearer {token}", "Content-Type": content_type}
        data = None if body is None else json.dumps(body).encode()
        status, reply = self._exchange(method, path, data, headers)
        if status >= 400:
            raise ApiError(status, reply.decode(errors="replace"))
        try:
            decoded: JsonObject = json.loads(reply)
        except ValueError:
            return {}
        return decoded

    def write_kubeconfig(self, path: Path, token: str) -> Path:
        ca = base64.b64encode(self.ca_file.read_bytes()).decode()
        config = {
            "apiVersion": "v1",
            "kind": "Config",
            "clusters": [
                {
                    "name": "test",
                    "cluster": {"server": self.server, "certificate-authority-data": ca},
                }
            ],
            "users": [{"name": "test", "user": {"token": token}}],
            "contexts": [{"name": "test", "context": {"cluster": "test", "user": "test"}}],
            "current-context": "test",
        }
        path.write_text(json.dumps(config, indent=2))
        return path

    def service_account_token(self, namespace: str, name: str, seconds: int = 3600) -> str:
        """A real signed token for a ServiceAccount (the TokenRequest API)."""
        reply = self.request(
            "POST",
            f"/api/v1/namespaces/{namespace}/serviceaccounts/{name}/token",
            {
                "apiVersion": "authentication.k8s.io/v1",
                "kind": "TokenRequest",
                "spec": {"expirationSeconds": seconds},
            },
        )
        token: str = reply["status"]["token"]
        return token
