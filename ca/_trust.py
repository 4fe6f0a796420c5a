"""Making the clients of one run trust a CA, through files and environment variables.

Nothing is installed: ``prepare_trust`` writes a bundle (the system's trusted CAs plus
the sandbox CA), the CA alone and a wgetrc into a directory the caller owns for the
run, and returns the variables that point each kind of client at them.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path

from .._record import record
from ._errors import CAError

TYPE_CHECKING = False  # typing costs ~5 ms: an inspecting run's parent writes trust files

if TYPE_CHECKING:  # cryptography (~40 ms): not for trust_environment, used before a fork
    from ._authority import CertificateAuthority

BUNDLE_FILE = "ca-bundle.pem"
CA_FILE = "sandlock-ca.pem"
WGETRC_FILE = "wgetrc"

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
    """One environment variable: the file it gets and the clients that read it."""

    name: str
    file: FileKind
    clients: str


# "bundle" replaces the client's whole store, so it must hold the system CAs too;
# "ca" is added to a store the client keeps (node's built-in one).
TRUST_VARIABLES: tuple[TrustVariable, ...] = (
    TrustVariable("SSL_CERT_FILE", "bundle", "OpenSSL's default store: Python ssl, urllib, "
                  "httpx, aiohttp, `openssl s_client`, Ruby, PHP; Go; uv; rustls-native-certs; "
                  "also curl (the command)"),
    TrustVariable("CURL_CA_BUNDLE", "bundle", "curl (the command); requests"),
    TrustVariable("REQUESTS_CA_BUNDLE", "bundle", "requests (poetry, pipenv, ...), pip"),
    TrustVariable("PIP_CERT", "bundle", "pip"),
    TrustVariable("GIT_SSL_CAINFO", "bundle", "git over https (GnuTLS on Debian)"),
    TrustVariable("NODE_EXTRA_CA_CERTS", "ca", "node (https, fetch), npm, yarn: added to "
                  "node's built-in store, read once at start"),
    TrustVariable("AWS_CA_BUNDLE", "bundle", "AWS CLI, boto3"),
    TrustVariable("CARGO_HTTP_CAINFO", "bundle", "cargo"),
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
) -> TrustInjection:
    """Write the trust files for ``ca`` into ``directory`` (which exists, is private to
    the run, and is the caller's to remove) and return where they are.

    The bundle starts from ``base_bundle``, else ``$SSL_CERT_FILE`` of ``env`` (the
    store the user chose), else the distribution's bundle.
    """
    directory = Path(directory)
    base = Path(base_bundle) if base_bundle is not None else system_bundle(env)
    system = _read(base) if base is not None else b""
    if system and not system.endswith(b"\n"):
        system += b"\n"
    paths = _paths(directory)
    _write(paths["ca"], ca.cert_pem)
    _write(paths["bundle"], system + ca.cert_pem)
    _write(paths["wgetrc"], _wgetrc(paths["bundle"], env))
    return TrustInjection(
        directory=directory,
        bundle=paths["bundle"],
        ca_file=paths["ca"],
        wgetrc=paths["wgetrc"],
        base_bundle=base,
        env=trust_environment(directory),
    )


def trust_environment(directory: str | os.PathLike[str]) -> dict[str, str]:
    """The variables ``prepare_trust`` will return for ``directory``, known before the
    files exist (the command's environment is fixed before the CA is made)."""
    paths = _paths(Path(directory))
    return {variable.name: str(paths[variable.file]) for variable in TRUST_VARIABLES}


def _paths(directory: Path) -> dict[FileKind, Path]:
    return {"bundle": directory / BUNDLE_FILE, "ca": directory / CA_FILE, "wgetrc": directory / WGETRC_FILE}


def system_bundle(env: Mapping[str, str] = os.environ) -> Path | None:
    """The bundle of CAs this machine (or this user, through SSL_CERT_FILE) trusts."""
    for candidate in (env.get("SSL_CERT_FILE", ""), *SYSTEM_BUNDLES):
        if _readable_file(candidate):
            return Path(candidate)
    import ssl  # only now: ~5 ms, for a distribution none of the above knows

    compiled_in = ssl.get_default_verify_paths().openssl_cafile
    return Path(compiled_in) if _readable_file(compiled_in) else None


def _readable_file(path: str) -> bool:
    return bool(path) and os.path.isfile(path) and os.access(path, os.R_OK)


def _wgetrc(bundle: Path, env: Mapping[str, str]) -> bytes:
    """The system wgetrc wget would have read, plus our CA bundle. (SYSTEM_WGETRC
    replaces the system file; the user's ~/.wgetrc is still read after it.)"""
    system = Path(env.get("SYSTEM_WGETRC") or _SYSTEM_WGETRC)
    try:
        text = system.read_bytes()
    except OSError:
        text = b""
    if text and not text.endswith(b"\n"):
        text += b"\n"
    return text + b"# sandlock: trust the sandbox CA\nca_certificate = " + os.fsencode(bundle) + b"\n"


def _read(path: Path) -> bytes:
    try:
        return path.read_bytes()
    except OSError as exc:
        raise CAError(f"{path}: cannot read the CA bundle: {exc.strerror}") from None


def _write(path: Path, data: bytes) -> None:
    """A new world-readable file (the command may run as the same user or not)."""
    try:
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, 0o644)
    except OSError as exc:
        raise CAError(f"cannot write {path}: {exc.strerror}") from None
    with os.fdopen(fd, "wb") as file:
        os.fchmod(file.fileno(), 0o644)
        file.write(data)
