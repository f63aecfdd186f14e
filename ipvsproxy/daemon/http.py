"""A small HTTP server for the daemon's endpoints: each path answers from a function."""

from __future__ import annotations

import logging
import socket
import threading
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

log = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class Response:
    status: int
    content_type: str
    body: bytes


Handler = Callable[[], Response]
# A route for every path no other route names (kube-proxy's health-check ports answer any path).
ANY_PATH = "*"


# Go's net.Listen("tcp", ...) on an unspecified address, as kube-proxy serves: both families.
UNSPECIFIED_HOSTS = frozenset({"", "0.0.0.0", "::"})


class _Server(ThreadingHTTPServer):
    daemon_threads = True

    def __init__(self, address: tuple[str, int], routes: Mapping[str, Handler]) -> None:
        host, port = address
        self.dual_stack = host in UNSPECIFIED_HOSTS and socket.has_dualstack_ipv6()
        if self.dual_stack:
            address = ("::", port)
        if ":" in address[0]:
            self.address_family = socket.AF_INET6
        self.routes = routes
        super().__init__(address, _RequestHandler)

    def server_bind(self) -> None:
        if self.dual_stack:
            self.socket.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_V6ONLY, 0)
        super().server_bind()


class _RequestHandler(BaseHTTPRequestHandler):
    server: _Server

    def do_GET(self) -> None:
        routes = self.server.routes
        handler = routes.get(self.path.split("?", 1)[0]) or routes.get(ANY_PATH)
        response = (
            Response(404, "text/plain; charset=utf-8", b"404 page not found\n")
            if handler is None
            else handler()
        )
        self.send_response(response.status)
        self.send_header("Content-Type", response.content_type)
        self.send_header("X-Content-Type-Options", "nosniff")
        self.send_header("Content-Length", str(len(response.body)))
        self.end_headers()
        self.wfile.write(response.body)

    def log_message(self, format: str, *args: Any) -> None:
        log.debug("http %s: " + format, self.server.server_address, *args)


class HttpServer:
    """Serves ``routes`` on a thread of its own from ``start`` until ``stop``."""

    def __init__(self, host: str, port: int, routes: Mapping[str, Handler]) -> None:
        self._server = _Server((host, port), routes)
        self._thread = threading.Thread(
            target=self._server.serve_forever, name=f"http-{port}", daemon=True
        )

    @property
    def port(self) -> int:
        return int(self._server.server_address[1])

    def start(self) -> HttpServer:
        self._thread.start()
        return self

    def stop(self) -> None:
        if self._thread.is_alive():
            self._server.shutdown()
            self._thread.join()
        self._server.server_close()
