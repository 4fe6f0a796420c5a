"""GETs to one registry (the distribution API v2), with the standard library only.

* Names are resolved by the caller's ``resolve`` (sandlock's own settings: ``--resolve``,
  ``--dns-server``, else the system's), and the connection goes to that address with
  the registry's name as TLS server name and Host.
* HTTPS, verified against the system's trust store (OpenSSL's default paths:
  ``SSL_CERT_FILE``/``SSL_CERT_DIR`` name another); plain HTTP only for a registry
  named as this machine (``localhost``, 127.0.0.0/8, ``::1``) that does not speak TLS,
  as Docker's default, and only to its own origin (and a token service on this
  machine): a redirect elsewhere must be HTTPS.
* A 401 with a Bearer challenge: a token from its realm (HTTPS only, with the user's
  credentials for this registry when ``~/.docker/config.json`` has them), the request
  repeated with it; a Basic challenge answered with those credentials.
* Redirects (blob stores send one to a CDN) followed over HTTPS only, at most
  ``_MAX_REDIRECTS``; the Authorization header goes to the registry's own origin only,
  never to another host.
* Every connect and read waits at most ``timeout`` seconds; whatever fails is an
  ImageError naming the registry and what was asked.
"""

from __future__ import annotations

import base64
import http.client
import os
import socket
import ssl
from urllib.parse import urlencode, urljoin, urlsplit

from ._reference import ImageError
from ._remote import Remote, is_loopback_name
from ._source import json_object

TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Callable, Sequence

_MAX_REDIRECTS = 5
_MAX_SMALL = 1 << 20  # a token answer or a credentials file larger than this is not one
_REDIRECTS = (301, 302, 303, 307, 308)
_MEANING = {**dict.fromkeys(_REDIRECTS, " (too many redirects)"),
            401: " (it refused the credentials)", 403: " (not allowed)",
            404: " (no such repository, tag or blob)", 429: " (too many requests: try later)"}


class Client:
    """GETs under ``https://REGISTRY/v2/`` for one repository's pulls."""

    def __init__(self, remote: Remote, resolve: Callable[[str], Sequence[str]],
                 timeout: float) -> None:
        self._remote = remote
        self._resolve = resolve
        self._timeout = timeout
        self._context = ssl.create_default_context()
        self._scheme = "https"
        self._authorization: str | None = None  # for the registry's origin only

    def get(self, path: str, accept: str | None = None) -> http.client.HTTPResponse:
        """The 200 answer to GET ``path`` (from /v2/), its body unread; ImageError for
        any other outcome."""
        headers = {"Accept": accept} if accept else {}
        response = self._origin_get(path, headers)
        if response.status == 401:
            challenge = response.getheader("WWW-Authenticate") or ""
            response.close()
            self._authorization = self._authorize(challenge)
            response = self._origin_get(path, headers)
        url = f"{self._scheme}://{self._remote.api_host}{path}"
        for _ in range(_MAX_REDIRECTS):
            if response.status not in _REDIRECTS:
                break
            location = response.getheader("Location") or ""
            response.close()
            url = urljoin(url, location)
            own = self._same_origin(url)
            response = self._fetch(url, headers, own, plain=own)
        if response.status != 200:
            response.close()
            raise ImageError(f"{self._remote.registry}: GET {path}: HTTP {response.status}"
                             f"{_MEANING.get(response.status, '')}")
        return response

    def _origin_get(self, path: str, headers: dict[str, str]) -> http.client.HTTPResponse:
        url = f"{self._scheme}://{self._remote.api_host}{path}"
        try:
            return self._fetch(url, headers, True, plain=True)
        except ImageError:
            if self._scheme != "https" or not self._remote.loopback:
                raise
        self._scheme = "http"  # a registry on this machine without TLS (Docker's default)
        return self._fetch(f"http://{self._remote.api_host}{path}", headers, True, plain=True)

    def _same_origin(self, url: str) -> bool:
        parts = urlsplit(url)
        return parts.scheme == self._scheme and parts.netloc == self._remote.api_host

    def _fetch(self, url: str, headers: dict[str, str], own: bool, *,
               plain: bool) -> http.client.HTTPResponse:
        """One GET of ``url``; the registry's Authorization only where ``own``; plain
        HTTP only where ``plain`` and the registry is this machine's without TLS."""
        sent = dict(headers)
        if own and self._authorization:
            sent["Authorization"] = self._authorization
        return request(url, sent, self._resolve, self._context, self._timeout,
                       self._remote.registry, plain and self._scheme == "http")

    # --- authentication ---------------------------------------------------------

    def _authorize(self, header: str) -> str:
        scheme, params = parse_challenge(header)
        credentials = docker_credentials(self._remote.registry)
        if scheme == "basic":
            if credentials is None:
                raise ImageError(f"{self._remote.registry}: it asks for a user name and password, "
                                 "and ~/.docker/config.json has none for it (`docker login`)")
            return "Basic " + credentials
        if scheme != "bearer" or "realm" not in params:
            raise ImageError(f"{self._remote.registry}: it refused the request (HTTP 401) "
                             "without a Bearer or Basic challenge")
        return "Bearer " + self._token(params, credentials)

    def _token(self, params: dict[str, str], credentials: str | None) -> str:
        realm = params["realm"]
        parts = urlsplit(realm)
        plain = self._scheme == "http" and is_loopback_name(parts.hostname or "")
        if parts.scheme != "https" and not (parts.scheme == "http" and plain):
            raise ImageError(f"{self._remote.registry}: its token service {realm!r} is not "
                             "HTTPS (a token must not cross the network in clear)")
        query = {"scope": params.get("scope") or f"repository:{self._remote.repository}:pull"}
        if "service" in params:
            query["service"] = params["service"]
        url = realm + ("&" if parts.query else "?") + urlencode(query)
        headers = {"Authorization": "Basic " + credentials} if credentials else {}
        response = request(url, headers, self._resolve, self._context, self._timeout,
                           self._remote.registry, plain)
        with response:
            if response.status != 200:
                raise ImageError(f"{self._remote.registry}: its token service {realm} "
                                 f"answered HTTP {response.status}")
            answer = _small_json(read(response, _MAX_SMALL + 1, realm), f"{realm}'s answer")
        token = answer.get("token") or answer.get("access_token")
        if not isinstance(token, str) or not token or not token.isascii() \
                or not token.isprintable() or " " in token:
            raise ImageError(f"{self._remote.registry}: its token service {realm} gave no "
                             "usable token")
        return token


def request(url: str, headers: dict[str, str], resolve: Callable[[str], Sequence[str]],
            context: ssl.SSLContext, timeout: float, registry: str,
            plain: bool = False) -> http.client.HTTPResponse:
    """GET ``url`` (https; http too where ``plain``), connected to the address
    ``resolve`` gives its host; ImageError for anything but an HTTP answer."""
    parts = urlsplit(url)
    host = parts.hostname or ""
    if parts.scheme != "https" and not (parts.scheme == "http" and plain):
        raise ImageError(f"{registry}: refused to follow it to {url!r}: not HTTPS")
    path = (parts.path or "/") + (f"?{parts.query}" if parts.query else "")
    try:
        port = parts.port or (443 if parts.scheme == "https" else 80)  # (ValueError: not a port)
        addresses = [host] if _is_address(host) else list(resolve(host))
        if not addresses:
            raise ImageError(f"{registry}: cannot resolve {host}")
        connection = _connect(parts.scheme, host, port, addresses, context, timeout)
        connection.request("GET", path, headers={**headers, "User-Agent": "sandlock"})
        return connection.getresponse()
    except ImageError:
        raise
    except (OSError, http.client.HTTPException, ValueError, LookupError) as exc:
        raise ImageError(f"{registry}: GET {parts.scheme}://{parts.netloc}{parts.path}: "
                         f"{_reason(exc)}") from None


def read(response: http.client.HTTPResponse, size: int, what: str) -> bytes:
    """Up to ``size`` bytes of an answer's body; ImageError if the connection fails,
    stalls past the timeout or ends early."""
    try:
        return response.read(size)
    except (OSError, http.client.HTTPException) as exc:
        raise ImageError(f"reading {what}: {_reason(exc)}") from None


def _connect(scheme: str, host: str, port: int, addresses: list[str], context: ssl.SSLContext,
             timeout: float) -> http.client.HTTPConnection:
    """A connection to the first of ``addresses`` that answers, named ``host``."""
    if scheme == "https":
        connection: http.client.HTTPConnection = http.client.HTTPSConnection(
            host, port, timeout=timeout, context=context)
    else:
        connection = http.client.HTTPConnection(host, port, timeout=timeout)

    def connected(_: object, timeout: float, source: object = None) -> socket.socket:
        error: OSError | None = None
        for address in addresses:
            try:
                return socket.create_connection((str(address), port), timeout)
            except OSError as exc:
                error = exc
        raise error or OSError("no address")

    connection._create_connection = connected  # type: ignore[attr-defined]
    connection.connect()
    return connection


def _is_address(host: str) -> bool:
    import ipaddress

    try:
        ipaddress.ip_address(host)
    except ValueError:
        return False
    return True


def _reason(exc: BaseException) -> str:
    if isinstance(exc, TimeoutError | socket.timeout):
        return "timed out (no answer)"
    if isinstance(exc, ssl.SSLCertVerificationError):
        return f"its certificate is not trusted ({exc.verify_message})"
    if isinstance(exc, OSError) and exc.strerror:
        return exc.strerror
    if isinstance(exc, LookupError):
        return str(exc)
    return f"{type(exc).__name__}: {exc}" if str(exc) else type(exc).__name__


def _small_json(data: bytes, what: str) -> dict:
    if len(data) > _MAX_SMALL:
        raise ImageError(f"{what} is too large")
    return json_object(data, what)


def parse_challenge(header: str) -> tuple[str, dict[str, str]]:
    """``Bearer realm="...",service="...",scope="..."`` -> ("bearer", {...})."""
    import re

    scheme, _, rest = header.strip().partition(" ")
    params = {key.lower(): quoted if quoted or not bare else bare
              for key, quoted, bare in re.findall(r'(\w+)=(?:"([^"]*)"|([^,\s]*))', rest)}
    return scheme.lower(), params


def docker_credentials(registry: str) -> str | None:
    """The base64 ``user:password`` that ``docker login`` stored for ``registry`` in
    ``$DOCKER_CONFIG/config.json`` (default ``~/.docker``), if any (credential helpers
    are not run)."""
    directory = os.environ.get("DOCKER_CONFIG") or os.path.join(os.path.expanduser("~"), ".docker")
    path = os.path.join(directory, "config.json")
    try:
        with open(path, "rb") as f:
            data = f.read(_MAX_SMALL + 1)
    except OSError:
        return None
    auths = _small_json(data, path).get("auths")
    wanted = {registry} | ({"index.docker.io", "registry-1.docker.io"} if registry == "docker.io" else set())
    for key, entry in (auths.items() if isinstance(auths, dict) else ()):
        name = key.split("://", 1)[-1].split("/", 1)[0]
        encoded = entry.get("auth") if isinstance(entry, dict) else None
        if name in wanted and isinstance(encoded, str) and encoded:
            try:
                if b":" in base64.b64decode(encoded, validate=True):
                    return encoded
            except ValueError:
                pass
            raise ImageError(f"{path}: the credentials for {key} are not base64 user:password")
    return None
