"""Making the clients of one run trust a CA, through files and environment variables.

Nothing is installed: ``prepare_trust`` writes a bundle (the system's trusted CAs plus
the sandbox CA), the CA alone and a wgetrc into a directory the caller owns for the
run, and returns the variables that point each kind of client at them. A client whose
own configuration names a CA (``_clientcas``) gets a bundle of its own that holds that
CA too, and curl, whose .curlrc beats every variable, a .curlrc of the run's.
"""

from __future__ import annotations

import os

from .._record import record
from ._errors import CAError

TYPE_CHECKING = False  # typing costs ~5 ms: an inspecting run's parent writes trust files

if TYPE_CHECKING:  # cryptography (~40 ms): not for trust_environment, used before a fork
    from collections.abc import Mapping  # (collections ~1 ms)
    from pathlib import Path  # (pathlib ~2 ms: only the public results are Paths)

    from ._authority import CertificateAuthority

BUNDLE_FILE = "ca-bundle.pem"
CA_FILE = "sandlock-ca.pem"
WGETRC_FILE = "wgetrc"
CURLRC_FILE = ".curlrc"  # CURL_HOME is the run's directory
CLIENT_BUNDLE_FILE = "ca-bundle-{}.pem"  # a client's bundle: its own CAs too
# Clients whose own configuration may name a CA (``_clientcas`` finds it).
CLIENTS = ("npm", "pip", "git", "curl", "cargo")

# Where distributions keep the bundle of trusted CAs, most common first.
SYSTEM_BUNDLES = (
    "/etc/ssl/certs/ca-certificates.crt",  # Debian, Ubuntu, Arch, Alpine, Gentoo
    "/etc/pki/tls/certs/ca-bundle.crt",  # Fedora, RHEL, CentOS
    "/etc/ssl/ca-bundle.pem",  # openSUSE
    "/etc/ssl/cert.pem",  # Alpine, the BSDs
)
_SYSTEM_WGETRC = "/etc/wgetrc"

FileKind = str  # "bundle", "ca" or "wgetrc"


@record
class TrustVariable:
    """One environment variable: the file it gets and the clients that read it;
    ``client``: the client (``CLIENTS``) whose own CAs its bundle holds."""

    name: str
    file: FileKind
    clients: str
    client: str = ""


# "bundle" replaces the client's whole store, so it must hold the system CAs too;
# "ca" is added to a store the client keeps (node's built-in one).
TRUST_VARIABLES: tuple[TrustVariable, ...] = (
    TrustVariable("SSL_CERT_FILE", "bundle", "OpenSSL's default store: Python ssl, urllib, "
                  "httpx, aiohttp, `openssl s_client`, Ruby, PHP; Go; uv; rustls-native-certs; "
                  "also curl (the command)"),
    TrustVariable("CURL_CA_BUNDLE", "bundle", "curl (the command); requests"),
    # requests lets it beat a session's own CA (psf/requests#3829): pip's `cert` too
    TrustVariable("REQUESTS_CA_BUNDLE", "bundle", "requests (poetry, pipenv, ...), pip: beats "
                  "PIP_CERT and pip.conf's `cert`", "pip"),
    TrustVariable("PIP_CERT", "bundle", "pip", "pip"),
    TrustVariable("GIT_SSL_CAINFO", "bundle", "git over https (GnuTLS on Debian): beats "
                  "`http.sslCAInfo`", "git"),
    TrustVariable("NODE_EXTRA_CA_CERTS", "ca", "node (https, fetch), yarn: added to "
                  "node's built-in store, read once at start"),
    TrustVariable("npm_config_cafile", "bundle", "npm, pnpm: beats every npmrc's `cafile` "
                  "and `ca` (which beat NODE_EXTRA_CA_CERTS)", "npm"),
    TrustVariable("AWS_CA_BUNDLE", "bundle", "AWS CLI, boto3"),
    TrustVariable("CARGO_HTTP_CAINFO", "bundle", "cargo: beats `http.cainfo`", "cargo"),
    TrustVariable("DENO_CERT", "bundle", "deno"),
    TrustVariable("NIX_SSL_CERT_FILE", "bundle", "nix"),
    TrustVariable("HTTPLIB2_CA_CERTS", "bundle", "httplib2 (google-api-python-client)"),
    TrustVariable("GRPC_DEFAULT_SSL_ROOTS_FILE_PATH", "bundle", "gRPC's C core (grpcio, ...)"),
    TrustVariable("CLOUDSDK_CORE_CUSTOM_CA_CERTS_FILE", "bundle", "gcloud"),
    TrustVariable("SYSTEM_WGETRC", "wgetrc", "wget, whose GnuTLS build reads no CA variable: "
                  "a wgetrc with `ca_certificate`, read before ~/.wgetrc"),
)


@record
class TrustInjection:
    """The files written for one run and the variables naming them.

    ``env`` is to be merged into the command's environment. The command must be able
    to read ``directory`` (with explicit ``-r`` paths, grant it). ``base_bundle`` is
    the store the bundle was built from (None: none found, the bundle holds the
    sandbox CA only).
    """

    directory: Path
    bundle: Path
    ca_file: Path
    wgetrc: Path
    base_bundle: Path | None
    env: dict[str, str]


def prepare_trust(
    ca: CertificateAuthority,
    directory: str | os.PathLike[str],
    *,
    base_bundle: str | os.PathLike[str] | None = None,
    env: Mapping[str, str] = os.environ,
    cwd: str | os.PathLike[str] | None = None,
) -> TrustInjection:
    """Write the trust files for ``ca`` into ``directory`` (which exists, is private to
    the run, and is the caller's to remove) and return where they are.

    The bundle starts from ``base_bundle``, else ``$SSL_CERT_FILE`` of ``env`` (the
    store the user chose), else the distribution's bundle. With ``cwd`` (where the
    command will run, with ``env``), clients whose own configuration names a CA (npm,
    pip, git, curl, cargo) get a bundle holding that CA too (docs/ca.md).
    """
    from pathlib import Path

    directory = os.fspath(directory)
    clients = {}
    if cwd is not None:
        from ._clientcas import client_certificates

        chosen = os.fspath(base_bundle) if base_bundle is not None else _system_bundle(env)
        clients = client_certificates(env, os.fspath(cwd), chosen)
    base = write_trust_files(ca.cert_pem, directory, base_bundle=base_bundle, env=env,
                             clients=clients)
    paths = _paths(directory)
    return TrustInjection(
        directory=Path(directory),
        bundle=Path(paths["bundle"]),
        ca_file=Path(paths["ca"]),
        wgetrc=Path(paths["wgetrc"]),
        base_bundle=Path(base) if base is not None else None,
        env=trust_environment(directory, clients, env),
    )


def write_trust_files(cert_pem: bytes, directory: str, *,
                      base_bundle: str | os.PathLike[str] | None = None,
                      env: Mapping[str, str] = os.environ,
                      certificate_out: str | None = None,
                      clients: Mapping[str, bytes] | None = None) -> str | None:
    """``prepare_trust``'s files for the CA certificate ``cert_pem`` (no key, no
    cryptography: what a run does before its fork, or its proxy); the base bundle
    used. ``certificate_out`` (--http-ca-out): the certificate alone written there too,
    for runtimes with stores of their own. ``clients``: client -> the PEM certificates
    its own configuration names (``client_certificates``), each client's bundle."""
    base = os.fspath(base_bundle) if base_bundle is not None else _system_bundle(env)
    system = _read(base) if base is not None else b""
    if system and not system.endswith(b"\n"):
        system += b"\n"
    paths = _paths(directory)
    _write(paths["ca"], cert_pem)
    _write(paths["bundle"], system + cert_pem)
    _write(paths["wgetrc"], _wgetrc(paths["bundle"], env))
    clients = _checked(clients)
    for client, own in clients.items():
        if own:
            _write(_client_bundle(directory, client), system + own + cert_pem)
    if "curl" in clients:
        _write(paths["curlrc"], _curlrc(_client_bundle(directory, "curl") if clients["curl"]
                                        else paths["bundle"]))
    if certificate_out:
        from .._hostfile import write_file

        try:  # (a file of the user's: a command may have left a link at its name)
            write_file(certificate_out, cert_pem)
        except OSError as exc:
            raise CAError(f"cannot write {certificate_out}: {exc.strerror}") from None
    return base


def trust_environment(directory: str | os.PathLike[str], clients: Mapping[str, bytes] | None = None,
                      env: Mapping[str, str] | None = None) -> dict[str, str]:
    """The variables ``prepare_trust`` will return for ``directory``, known before the
    files exist (the command's environment is fixed before the CA is made). ``clients``
    as ``write_trust_files`` takes them; ``env``: the command's (npm reads its variables
    whatever their case, so a ``NPM_CONFIG_CAFILE`` there is replaced too)."""
    directory = os.fspath(directory)
    paths = _paths(directory)
    clients = _checked(clients)
    variables = {variable.name: _client_bundle(directory, variable.client)
                 if variable.client and clients.get(variable.client) else paths[variable.file]
                 for variable in TRUST_VARIABLES}
    if "curl" in clients:  # its .curlrc beats every variable: the run's replaces it
        variables["CURL_HOME"] = directory
    for name in env or ():
        if name.lower() == "npm_config_cafile":
            variables[name] = variables["npm_config_cafile"]
    return variables


def _checked(clients: Mapping[str, bytes] | None) -> dict[str, bytes]:
    """Known clients only (each names a file; the proxy gets them over its channel)."""
    return {client: bytes(own) for client, own in (clients or {}).items() if client in CLIENTS}


def _client_bundle(directory: str, client: str) -> str:
    return os.path.join(directory, CLIENT_BUNDLE_FILE.format(client))


def _curlrc(bundle: str) -> bytes:
    quoted = bundle.replace("\\", "\\\\").replace('"', '\\"')
    return (b"# sandlock: this run's .curlrc (CURL_HOME), in place of yours, which names a CA "
            b"that would replace the sandbox's (docs/ca.md)\n"
            b'cacert = "' + os.fsencode(quoted) + b'"\n')


def _paths(directory: str) -> dict[FileKind, str]:
    return {kind: os.path.join(directory, name) for kind, name in
            (("bundle", BUNDLE_FILE), ("ca", CA_FILE), ("wgetrc", WGETRC_FILE),
             ("curlrc", CURLRC_FILE))}


def system_bundle(env: Mapping[str, str] = os.environ) -> Path | None:
    """The bundle of CAs this machine (or this user, through SSL_CERT_FILE) trusts."""
    from pathlib import Path

    found = _system_bundle(env)
    return Path(found) if found is not None else None


def _system_bundle(env: Mapping[str, str]) -> str | None:
    for candidate in (env.get("SSL_CERT_FILE", ""), *SYSTEM_BUNDLES):
        if _readable_file(candidate):
            return candidate
    import ssl  # only now: ~5 ms, for a distribution none of the above knows

    compiled_in = ssl.get_default_verify_paths().openssl_cafile
    return compiled_in if _readable_file(compiled_in) else None


def _readable_file(path: str) -> bool:
    return bool(path) and os.path.isfile(path) and os.access(path, os.R_OK)


def _wgetrc(bundle: str, env: Mapping[str, str]) -> bytes:
    """The system wgetrc wget would have read, plus our CA bundle. (SYSTEM_WGETRC
    replaces the system file; the user's ~/.wgetrc is still read after it.)"""
    try:
        with open(env.get("SYSTEM_WGETRC") or _SYSTEM_WGETRC, "rb") as system:
            text = system.read()
    except OSError:
        text = b""
    if text and not text.endswith(b"\n"):
        text += b"\n"
    return text + b"# sandlock: trust the sandbox CA\nca_certificate = " + os.fsencode(bundle) + b"\n"


def _read(path: str) -> bytes:
    try:
        with open(path, "rb") as file:
            return file.read()
    except OSError as exc:
        raise CAError(f"{path}: cannot read the CA bundle: {exc.strerror}") from None


def _write(path: str, data: bytes) -> None:
    """A new world-readable file (the command may run as the same user or not)."""
    try:
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, 0o644)
    except OSError as exc:
        raise CAError(f"cannot write {path}: {exc.strerror}") from None
    with os.fdopen(fd, "wb") as file:
        os.fchmod(file.fileno(), 0o644)
        file.write(data)
