"""A connection to the Kubernetes API server, and requests that fail with one clear line.

The client is chosen as kube-proxy chooses it: ``--kubeconfig`` and/or ``--master`` (the master
URL overrides the kubeconfig's server); with neither, the in-cluster service account, then the
default kubeconfig (``$KUBECONFIG`` or ``~/.kube/config``) so the command also works from a
workstation. Every failure, from a missing file to a refused connection or a 401, becomes an
ApiError whose message is one line.

The kubernetes client reads the credentials and makes the connection pool; the requests, a
handful of paths, are made here, with their raw JSON answers: the generated API classes would
cost a running daemon more memory than its whole cluster at 1,000 services (see
``kubernetes_client.py``).
"""

from __future__ import annotations

import json
import os
import re
import time
from collections.abc import Iterable, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from types import TracebackType
from typing import Any, cast
from urllib.parse import urlencode

import urllib3

from ipvsproxy import __version__
from ipvsproxy.cluster.kubernetes_client import (
    ConfigException,
    Configuration,
    RESTClientObject,
    load_incluster_config,
    load_kube_config,
)
from ipvsproxy.gcpause import decode_json

DEFAULT_KUBECONFIG = "~/.kube/config"
# 429 and the 5xx a restarting or overloaded API server sends; client-go retries these.
RETRYABLE_STATUSES = frozenset({429, 500, 502, 503, 504})
JSON = "application/json"
USER_AGENT = f"ipvsproxy/{__version__}"
_OPENSSL_NOISE = re.compile(r"\[SSL: [A-Z0-9_]+\]|\(_ssl\.c:\d+\)")


class ApiError(Exception):
    """The API server could not be reached or refused a request; the message is one line.

    ``status`` is the HTTP status when the server answered, None when it never did;
    ``retry_after`` is the server's Retry-After header, if it sent one.
    """

    def __init__(
        self, message: str, status: int | None = None, retry_after: str | None = None
    ) -> None:
        super().__init__(message)
        self.status = status
        self.retry_after = retry_after


@dataclass(frozen=True, slots=True)
class Timeouts:
    """Seconds; bounded so that ``sync --once`` fails fast when the server is away."""

    connect: float = 5.0
    read: float = 30.0


@dataclass(frozen=True, slots=True)
class RetryPolicy:
    """Bounded retries for 429/5xx answers, doubling the delay (or obeying Retry-After)."""

    attempts: int = 3
    first_delay: float = 0.5
    max_delay: float = 5.0

    def delay(self, attempt: int, retry_after: str | None) -> float:
        if retry_after is not None and retry_after.isdigit():
            return min(float(retry_after), self.max_delay)
        return min(self.first_delay * float(2**attempt), self.max_delay)


@dataclass(frozen=True, slots=True)
class Request:
    """One request: ``path`` under the server's URL, its query, and a body sent as JSON."""

    method: str
    path: str
    query: Mapping[str, str] = field(default_factory=dict)
    body: object = None
    content_type: str = JSON


@dataclass(slots=True)
class ApiConnection:
    """The server and its credentials (a client Configuration), a pool of connections to it
    made as the client makes them, and how patient to be with it."""

    configuration: Configuration
    timeouts: Timeouts = field(default_factory=Timeouts)
    retry: RetryPolicy = field(default_factory=RetryPolicy)
    pool: urllib3.PoolManager = field(init=False)

    def __post_init__(self) -> None:
        self.pool = RESTClientObject(self.configuration).pool_manager

    @property
    def host(self) -> str:
        return str(self.configuration.host)

    def send(self, action: str, request: Request, read_timeout: float) -> Any:
        """The answer to ``request`` (a urllib3 response, its body unread); any failure is
        an ApiError whose message begins with ``action`` or says the server was not reached.
        """
        url = self.host + request.path
        if request.query:
            url += "?" + urlencode(request.query)
        with _one_line_errors(self, action):
            response = self.pool.request(
                request.method,
                url,
                body=None if request.body is None else json.dumps(request.body),
                headers=self._headers(request),
                preload_content=False,
                timeout=urllib3.Timeout(connect=self.timeouts.connect, read=read_timeout),
            )
            if 200 <= response.status < 300:
                return response
            try:
                body = response.data
            finally:
                response.release_conn()
        raise ApiError(
            f"{action} from the API server at {self.host}: "
            + _status_message(response.status, response.reason, body),
            response.status,
            response.headers.get("Retry-After"),
        )

    def _headers(self, request: Request) -> dict[str, str]:
        headers = {"Accept": JSON, "User-Agent": USER_AGENT}
        if request.body is not None:
            headers["Content-Type"] = request.content_type
        # The bearer token, after the kubeconfig's refresh hook: releases keep it under
        # different keys, and each one's auth_settings() says which header carries it.
        settings = cast("Mapping[str, Mapping[str, Any]]", self.configuration.auth_settings())
        for setting in settings.values():
            if setting.get("in") == "header" and setting.get("value"):
                headers[str(setting["key"])] = str(setting["value"])
        return headers

    def close(self) -> None:
        self.pool.clear()

    def __enter__(self) -> ApiConnection:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        self.close()


def _first_line(text: str) -> str:
    lines = [line.strip() for line in text.splitlines() if line.strip()]
    return lines[0] if lines else ""


def _load_kubeconfig(path: str, configuration: Configuration) -> None:
    for part in path.split(os.pathsep):
        if part and not Path(part).expanduser().exists():
            raise ApiError(f"kubeconfig {part}: no such file")
    try:
        load_kube_config(path, configuration)
    # The loader raises whatever its YAML, base64, exec-plugin and file code raise.
    except Exception as error:
        reason = _first_line(str(error)) or type(error).__name__
        raise ApiError(f"kubeconfig {path}: {reason}") from error


def _load_default(configuration: Configuration) -> None:
    try:
        load_incluster_config(configuration)
        return
    except ConfigException as in_cluster_error:
        reason = _first_line(str(in_cluster_error))
    path = os.environ.get("KUBECONFIG") or DEFAULT_KUBECONFIG
    if not any(Path(p).expanduser().exists() for p in path.split(os.pathsep) if p):
        raise ApiError(
            f"no API server configured: not in a cluster ({reason}) and no kubeconfig at "
            f"{path}; pass --kubeconfig or --master"
        )
    _load_kubeconfig(path, configuration)


def _override_server(configuration: Configuration, master: str) -> None:
    configuration.host = master
    refresh = configuration.refresh_api_key_hook
    if refresh is None:
        return

    # The kubeconfig loader's token-refresh hook runs before every request and rewrites the
    # host, and the hook itself, from the kubeconfig; put both back each time.
    def refresh_keeping_master(refreshed: Configuration) -> None:
        refresh(refreshed)
        refreshed.host = master
        refreshed.refresh_api_key_hook = refresh_keeping_master

    configuration.refresh_api_key_hook = refresh_keeping_master


def connect(
    kubeconfig: Path | None = None,
    master: str | None = None,
    *,
    timeouts: Timeouts | None = None,
    retry: RetryPolicy | None = None,
) -> ApiConnection:
    """An ApiConnection built as kube-proxy builds its client; nothing is sent yet."""
    configuration = Configuration()
    if master is not None and "://" not in master:
        raise ApiError(f"--master {master!r} is not a URL (expected https://HOST:PORT)")
    if kubeconfig is not None:
        _load_kubeconfig(str(kubeconfig), configuration)
    elif master is None:
        _load_default(configuration)
    if master is not None:
        _override_server(configuration, master.rstrip("/"))
    # Our own loop retries what is worth retrying; urllib3's silent retries would hide
    # an unreachable server behind several connect timeouts.
    configuration.retries = False
    return ApiConnection(
        configuration,
        timeouts=timeouts or Timeouts(),
        retry=retry or RetryPolicy(),
    )


def _unreachable_reason(error: BaseException) -> str:
    """The innermost OS-level reason (``Connection refused``), else the error's first line."""
    seen: set[int] = set()
    current: BaseException | None = error
    while current is not None and id(current) not in seen:
        seen.add(id(current))
        if isinstance(current, TimeoutError | urllib3.exceptions.TimeoutError) and not isinstance(
            current, urllib3.exceptions.NewConnectionError
        ):
            return "timed out"
        if isinstance(current, OSError) and current.strerror:
            return current.strerror
        reason = getattr(current, "reason", None)
        current = (
            reason
            if isinstance(reason, BaseException)
            else (current.__cause__ or current.__context__)
        )
    return _first_line(str(error)) or type(error).__name__


def _status_message(status: int, reason: str | None, body: bytes) -> str:
    """``401 Unauthorized: <the Status message>`` from the API's Status JSON, if it sent one."""
    line = f"{status} {reason or ''}".strip()
    try:
        status_body = json.loads(body)
    except ValueError:
        status_body = None
    message = status_body.get("message") if isinstance(status_body, dict) else None
    if isinstance(message, str) and message and message != reason:
        return f"{line}: {_first_line(message)}"
    return line


def _tls_reason(error: urllib3.exceptions.SSLError) -> str:
    """OpenSSL's text, "[SSL: CODE] what (_ssl.c:N)", as a line that keeps what happened."""
    return "TLS " + _OPENSSL_NOISE.sub("", _first_line(str(error))).strip()


@contextmanager
def _one_line_errors(api: ApiConnection, action: str) -> Iterator[None]:
    try:
        yield
    except (urllib3.exceptions.HTTPError, OSError) as error:
        reason = (
            _tls_reason(error)
            if isinstance(error, urllib3.exceptions.SSLError)
            else _unreachable_reason(error)
        )
        raise ApiError(f"cannot reach the API server at {api.host}: {reason}") from error


def request_json(api: ApiConnection, action: str, request: Request) -> Any:
    """The decoded JSON that ``request`` is answered with.

    ``action`` reads as a phrase ("listing Services") in the error message. 429 and 5xx
    answers are retried as ``api.retry`` allows; anything else fails at once.
    """
    attempt = 0
    while True:
        try:
            response = api.send(action, request, api.timeouts.read)
            with _one_line_errors(api, action):
                try:
                    data = response.data
                finally:
                    response.release_conn()
            break
        except ApiError as error:
            if error.status not in RETRYABLE_STATUSES or attempt + 1 >= api.retry.attempts:
                raise
            time.sleep(api.retry.delay(attempt, error.retry_after))
            attempt += 1
    try:
        return decode_json(data)
    except ValueError as error:
        raise ApiError(f"{action}: the API server at {api.host} sent invalid JSON") from error
    except RecursionError:
        raise ApiError(
            f"{action}: the API server at {api.host} sent JSON nested too deep to decode"
        ) from None


@dataclass(frozen=True, slots=True)
class OversizedLine:
    """A line longer than the stream's bound, dropped as it arrived; at least ``size`` bytes."""

    size: int


def split_lines(chunks: Iterable[bytes], max_line: int) -> Iterator[bytes | OversizedLine]:
    """The non-empty lines of a newline-delimited stream, however it is cut into chunks.

    Each byte is copied a bounded number of times: joining the line so far to every chunk was
    quadratic (a 30 MB object in 4 KiB chunks took 195 s of CPU). A line longer than
    ``max_line`` is not held: its bytes are dropped as they come, and its size reported.
    """
    parts: list[bytes] = []
    size = 0
    for chunk in chunks:
        start = 0
        while (end := chunk.find(b"\n", start)) >= 0:
            size += end - start
            if size > max_line:
                yield OversizedLine(size)
            else:
                parts.append(chunk[start:end])
                line = b"".join(parts)
                if line.strip():
                    yield line
            parts.clear()
            size = 0
            start = end + 1
        size += len(chunk) - start
        if size > max_line:
            parts.clear()
        elif start < len(chunk):
            parts.append(chunk[start:])
    if size > max_line:
        yield OversizedLine(size)
    elif (line := b"".join(parts)).strip():
        yield line


class LineStream:
    """An open streaming response (a watch): iterate for its non-empty lines as they arrive,
    each at most ``max_line`` bytes (a longer one comes as an OversizedLine).

    A stream that breaks, or stays silent for its read timeout, raises ApiError; ``close``
    may be called from another thread to end the iteration.
    """

    def __init__(self, api: ApiConnection, action: str, response: Any, max_line: int) -> None:
        self._api = api
        self._action = action
        self._response = response
        self._max_line = max_line

    def __iter__(self) -> Iterator[bytes | OversizedLine]:
        try:
            with _one_line_errors(self._api, self._action):
                chunks = self._response.stream(amt=None, decode_content=False)
                yield from split_lines(chunks, self._max_line)
        finally:
            self._response.release_conn()

    def close(self) -> None:
        # shutdown() unblocks a read in another thread; close() alone would not.
        self._response.shutdown()
        self._response.release_conn()


def open_stream(
    api: ApiConnection, action: str, request: Request, *, read_timeout: float, max_line: int
) -> LineStream:
    """Open a streaming request; no retries: the caller's loop decides how to back off."""
    return LineStream(api, action, api.send(action, request, read_timeout), max_line)
