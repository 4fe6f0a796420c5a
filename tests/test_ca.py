"""sandlock.ca and `sandlock ca`: generation and name constraints (checked by openssl),
the persistent and user CAs, trust injection with real clients, install/uninstall, and
the key kept out of every sandbox.

Leaves are minted by mitmproxy's own CertStore, as the proxy will mint them.
"""

from __future__ import annotations

import contextlib
import http.server
import ipaddress
import json
import os
import re
import shutil
import ssl
import stat
import subprocess
import sys
import threading
import uuid
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import ClassVar

import pytest
from conftest import PYTHON, SANDLOCK, sandlock
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec, ed25519, rsa
from cryptography.x509.oid import NameOID
from mitmproxy.certs import Cert, CertStore

from sandlock import ca
from sandlock.ca import CAError, CertificateAuthority

REPO = Path(__file__).resolve().parent.parent
OPENSSL = shutil.which("openssl")
UPDATE_CA_CERTIFICATES = shutil.which("update-ca-certificates", path="/usr/sbin:/usr/bin:/sbin:/bin")
needs_openssl = pytest.mark.skipif(OPENSSL is None, reason="openssl is not installed")
TRUST_ROOT = "SANDLOCK_CA_TRUST_ROOT"  # moves the system trust stores into a scratch root


# --- helpers --------------------------------------------------------------------------


def mint(authority: CertificateAuthority, name: str, *extra: str) -> bytes:
    """A leaf for ``name`` (and ``extra`` names), minted the way mitmproxy does it:
    CN = the first name, SANs = all of them, the CA's own key pair."""
    store = CertStore(authority.private_key, Cert(authority.certificate), None, None)  # type: ignore[arg-type]
    return store.get_cert(name, [_general_name(n) for n in (name, *extra)]).cert.to_pem()


def _general_name(name: str) -> x509.GeneralName:
    try:
        return x509.IPAddress(ipaddress.ip_address(name))
    except ValueError:
        return x509.DNSName(name)


def openssl_verify(ca_file: Path | None, leaf: bytes, tmp_path: Path,
                   env: dict[str, str] | None = None) -> subprocess.CompletedProcess:
    leaf_file = tmp_path / f"leaf-{uuid.uuid4().hex}.pem"
    leaf_file.write_bytes(leaf)
    ca_args = ["-CAfile", str(ca_file)] if ca_file else []
    return subprocess.run([OPENSSL, "verify", *ca_args, str(leaf_file)], capture_output=True,
                          text=True, env=env)


def write_ca_file(authority: CertificateAuthority, tmp_path: Path) -> Path:
    path = tmp_path / f"ca-{uuid.uuid4().hex}.pem"
    path.write_bytes(authority.cert_pem)
    return path


def make_ca(
    *,
    key: object | None = None,
    is_ca: bool = True,
    key_cert_sign: bool = True,
    not_before: datetime | None = None,
    not_after: datetime | None = None,
) -> tuple[bytes, bytes]:
    """(cert PEM, key PEM) of a self-signed certificate built with cryptography, for the
    cases sandlock must refuse. Defaults: a valid RSA-2048 CA."""
    key = key or rsa.generate_private_key(public_exponent=65537, key_size=2048)
    now = datetime.now(UTC)
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "test CA")])
    builder = (
        x509.CertificateBuilder().subject_name(name).issuer_name(name)
        .public_key(key.public_key()).serial_number(x509.random_serial_number())
        .not_valid_before(not_before or now - timedelta(days=1))
        .not_valid_after(not_after or now + timedelta(days=30))
        .add_extension(x509.BasicConstraints(ca=is_ca, path_length=None), critical=True)
        .add_extension(x509.KeyUsage(
            digital_signature=True, content_commitment=False, key_encipherment=False,
            data_encipherment=False, key_agreement=False, key_cert_sign=key_cert_sign,
            crl_sign=key_cert_sign, encipher_only=False, decipher_only=False), critical=True)
    )
    algorithm = None if isinstance(key, ed25519.Ed25519PrivateKey) else hashes.SHA256()
    cert = builder.sign(key, algorithm)
    key_pem = key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                                serialization.NoEncryption())
    return cert.public_bytes(serialization.Encoding.PEM), key_pem


def data_env(tmp_path: Path, **extra: str) -> dict[str, str]:
    """An environment whose CA directory is inside tmp_path."""
    home = tmp_path / "home"
    home.mkdir(exist_ok=True)
    env = {k: v for k, v in os.environ.items() if k != TRUST_ROOT}
    env.update({"HOME": str(home), "XDG_DATA_HOME": str(tmp_path / "data"), **extra})
    return env


# --- the ephemeral CA -----------------------------------------------------------------


def test_ephemeral_ca_is_a_short_lived_name_constrained_ec_ca():
    before = datetime.now(UTC)
    authority = ca.ephemeral_ca(["example.com"])
    cert = authority.certificate
    assert authority.origin == "ephemeral"
    assert isinstance(authority.private_key, ec.EllipticCurvePrivateKey)
    assert authority.private_key.curve.name == "secp256r1"
    basic = cert.extensions.get_extension_for_class(x509.BasicConstraints)
    assert basic.critical and basic.value.ca and basic.value.path_length == 0
    usage = cert.extensions.get_extension_for_class(x509.KeyUsage)
    assert usage.critical and usage.value.key_cert_sign and usage.value.crl_sign
    assert not usage.value.digital_signature
    ski = cert.extensions.get_extension_for_class(x509.SubjectKeyIdentifier).value
    assert ski == x509.SubjectKeyIdentifier.from_public_key(authority.private_key.public_key())
    assert cert.extensions.get_extension_for_class(x509.NameConstraints).critical
    # valid from an hour ago (clock skew) for EPHEMERAL_LIFETIME (7 days)
    assert timedelta(minutes=59) < before - authority.not_before < timedelta(minutes=61)
    assert authority.not_after - authority.not_before == ca.EPHEMERAL_LIFETIME + timedelta(hours=1)
    assert ca.EPHEMERAL_LIFETIME == timedelta(days=7)
    short = ca.ephemeral_ca(["example.com"], lifetime=timedelta(hours=2))
    assert short.not_after - short.not_before == timedelta(hours=3)


def test_ca_value_holds_pkcs8_key_and_never_shows_it():
    authority = ca.ephemeral_ca(["example.com"])
    assert authority.key_pem.startswith(b"-----BEGIN PRIVATE KEY-----")
    assert authority.mitmproxy_pem() == authority.key_pem + authority.cert_pem
    assert "PRIVATE" not in repr(authority) and authority.fingerprint in repr(authority)
    with pytest.raises(AttributeError):
        authority.origin = "user"  # type: ignore[misc]
    assert authority.cert_der() == authority.certificate.public_bytes(serialization.Encoding.DER)


@needs_openssl
def test_fingerprint_is_openssls(tmp_path):
    authority = ca.ephemeral_ca(["example.com"])
    out = subprocess.run([OPENSSL, "x509", "-noout", "-fingerprint", "-sha256"],
                         input=authority.cert_pem, capture_output=True, check=True).stdout
    assert out.decode().strip().split("=", 1)[1] == authority.fingerprint


def test_any_host_gives_an_unconstrained_ca():
    authority = ca.ephemeral_ca(["api.example.com", "*"])
    assert authority.name_constraints is None
    assert authority.permits("anything.test") and authority.permits("10.1.2.3")
    assert "any host" in authority.subject


@pytest.mark.parametrize("hosts", [
    [], [""], ["exa mple.com"], ["a*.example.com"], ["*.*.example.com"], ["-a.example.com"],
    ["10.0.0.0/8"], ["bücher.example"], ["1.2.3"], ["example.com:443"], ["a..b"],
])
def test_bad_hosts_are_refused(hosts):
    with pytest.raises(CAError) as info:
        ca.ephemeral_ca(hosts)
    assert "\n" not in str(info.value)


HOSTS = ["example.com", "*.pypi.org", "127.0.0.7", "[::1]", "Sub.Example.COM."]
# (name, allowed under HOSTS)
NAMES = [
    ("example.com", True),
    ("www.example.com", True),
    ("pypi.org", True),  # the apex of *.pypi.org: a DNS constraint cannot leave it out
    ("files.pypi.org", True),
    ("127.0.0.7", True),
    ("::1", True),
    ("evil.com", False),
    ("example.com.evil.com", False),
    ("notexample.com", False),
    ("pypi.org.evil.com", False),
    ("127.0.0.8", False),
    ("10.0.0.1", False),
    ("::2", False),
]


@needs_openssl
@pytest.mark.parametrize(("name", "allowed"), NAMES, ids=[n for n, _ in NAMES])
def test_name_constraints_as_openssl_verifies_them(tmp_path, name, allowed):
    authority = ca.ephemeral_ca(HOSTS)
    result = openssl_verify(write_ca_file(authority, tmp_path), mint(authority, name), tmp_path)
    assert (result.returncode == 0) is allowed, result.stdout + result.stderr
    if not allowed:
        assert "subtree violation" in result.stdout + result.stderr
    assert authority.permits(name) is allowed


@needs_openssl
@pytest.mark.parametrize(("hosts", "name", "allowed"), [
    (["example.com"], "127.0.0.1", False),  # no IP host: every IP excluded
    (["example.com"], "::1", False),
    (["example.com"], "a.example.com", True),
    (["127.0.0.7"], "evil.com", False),  # no DNS host: DNS only the address's own text
    (["127.0.0.7"], "127.0.0.7", True),
    (["::1"], "evil.com", False),  # IPv6 only: every DNS name excluded
    (["::1"], "127.0.0.1", False),
    (["::1"], "::1", True),
    (["*.example.com"], "deep.sub.example.com", True),
])
def test_names_of_a_kind_no_host_has_are_excluded(tmp_path, hosts, name, allowed):
    authority = ca.ephemeral_ca(hosts)
    result = openssl_verify(write_ca_file(authority, tmp_path), mint(authority, name), tmp_path)
    assert (result.returncode == 0) is allowed, result.stdout + result.stderr
    assert authority.permits(name) is allowed


@needs_openssl
def test_one_name_outside_the_constraint_spoils_the_whole_leaf(tmp_path):
    # Why the proxy must mint leaves only for names ca.permits(): mitmproxy copies an
    # upstream certificate's names into its leaf by default (upstream_cert).
    authority = ca.ephemeral_ca(["example.com"])
    leaf = mint(authority, "example.com", "cdn.other.net")
    assert openssl_verify(write_ca_file(authority, tmp_path), leaf, tmp_path).returncode != 0


@needs_openssl
def test_mitmproxy_reads_the_ca_from_its_pem_file(tmp_path):
    authority = ca.ephemeral_ca(["example.com"])
    confdir = tmp_path / "mitmproxy"
    confdir.mkdir()
    (confdir / "mitmproxy-ca.pem").write_bytes(authority.mitmproxy_pem())
    store = CertStore.from_store(confdir, "mitmproxy", 2048)
    assert store.default_ca.fingerprint().hex(":").upper() == authority.fingerprint
    leaf = store.get_cert("www.example.com", [x509.DNSName("www.example.com")]).cert.to_pem()
    assert openssl_verify(write_ca_file(authority, tmp_path), leaf, tmp_path).returncode == 0


# --- the persistent CA ----------------------------------------------------------------


def test_ca_directory_is_the_one_every_sandbox_is_denied(tmp_path):
    from sandlock.confinement._fspolicy import protected_paths

    env = {"HOME": "/h", "XDG_DATA_HOME": str(tmp_path)}
    assert ca.ca_directory(env) == tmp_path / "sandlock" / "ca"
    assert str(ca.ca_directory(env)) in protected_paths("/h", env)
    assert ca.ca_directory({"HOME": "/h", "XDG_DATA_HOME": "relative"}) == Path("/h/.local/share/sandlock/ca")


def test_init_creates_a_private_directory_and_key(tmp_path):
    env = data_env(tmp_path)
    old_umask = os.umask(0)  # the modes must not depend on the caller's umask
    try:
        authority = ca.init_persistent(env=env)
    finally:
        os.umask(old_umask)
    directory = ca.ca_directory(env)
    for path in (tmp_path / "data", tmp_path / "data" / "sandlock", directory):
        assert stat.S_IMODE(path.stat().st_mode) == 0o700, path
    assert stat.S_IMODE((directory / "ca-key.pem").stat().st_mode) == 0o600
    assert stat.S_IMODE((directory / "ca-cert.pem").stat().st_mode) == 0o644
    assert sorted(os.listdir(directory)) == ["ca-cert.pem", "ca-key.pem"]
    assert authority.origin == "persistent" and authority.name_constraints is None
    assert authority.not_after - authority.not_before == ca.PERSISTENT_LIFETIME + timedelta(hours=1)
    assert ca.load_persistent(env) == authority


def test_the_key_file_is_created_0600_exclusively(tmp_path, monkeypatch):
    """Never readable by others, not even between creation and a chmod."""
    env = data_env(tmp_path)
    opened: list[tuple[str, int, int]] = []
    real_open = os.open

    def spy(path, flags, mode=0o777, *args, **kwargs):
        opened.append((os.fspath(path), flags, mode))
        return real_open(path, flags, mode, *args, **kwargs)

    monkeypatch.setattr(os, "open", spy)
    ca.init_persistent(env=env)
    monkeypatch.undo()
    created = [(path, flags, mode) for path, flags, mode in opened if flags & os.O_CREAT]
    key_files = [entry for entry in created if "ca-key" in entry[0]]
    assert key_files, created
    for path, flags, mode in key_files:
        assert flags & os.O_EXCL and flags & os.O_NOFOLLOW and mode == 0o600, path


def test_init_refuses_to_replace_without_force(tmp_path):
    env = data_env(tmp_path)
    first = ca.init_persistent(env=env)
    with pytest.raises(CAError, match="already exists.*--force"):
        ca.init_persistent(env=env)
    second = ca.init_persistent(force=True, env=env)
    assert second.fingerprint != first.fingerprint
    assert ca.load_persistent(env) == second


def test_init_refuses_to_replace_an_installed_ca(tmp_path):
    env = data_env(tmp_path)
    ca.init_persistent(env=env)
    (ca.ca_directory(env) / "installed.json").write_text(
        json.dumps({"installed": [{"target": "nss", "location": "sql:/x", "alias": "sandlock-ca"}]}))
    with pytest.raises(CAError, match="uninstall"):
        ca.init_persistent(force=True, env=env)


def test_no_persistent_ca_is_none(tmp_path):
    assert ca.load_persistent(data_env(tmp_path)) is None


@pytest.mark.parametrize(("damage", "message"), [
    (lambda d: os.chmod(d / "ca-key.pem", 0o640), "accessible to others (mode 0640)"),
    (lambda d: os.chmod(d / "ca-key.pem", 0o604), "accessible to others (mode 0604)"),
    (lambda d: os.chmod(d, 0o770), "writable by others"),
    (lambda d: (d / "ca-key.pem").unlink(), "ca-key.pem is missing"),
    (lambda d: (d / "ca-cert.pem").unlink(), "ca-cert.pem is missing"),
    (lambda d: (d / "ca-key.pem").write_bytes(b"garbage"), "not a PEM private key"),
    (lambda d: (d / "ca-cert.pem").write_bytes(b"garbage"), "not a PEM certificate"),
    (lambda d: (d / "ca-cert.pem").write_bytes(make_ca()[0]), "do not match"),
], ids=["key-group-readable", "key-world-readable", "dir-group-writable", "no-key", "no-cert",
        "corrupt-key", "corrupt-cert", "mismatch"])
def test_an_unsafe_or_broken_persistent_ca_is_refused(tmp_path, damage, message):
    env = data_env(tmp_path)
    ca.init_persistent(env=env)
    damage(ca.ca_directory(env))
    with pytest.raises(CAError, match=re.escape(message)) as info:
        ca.load_persistent(env)
    assert "\n" not in str(info.value)


def test_a_symlinked_key_is_refused(tmp_path):
    env = data_env(tmp_path)
    ca.init_persistent(env=env)
    key = ca.ca_directory(env) / "ca-key.pem"
    elsewhere = tmp_path / "key.pem"
    key.rename(elsewhere)
    key.symlink_to(elsewhere)
    with pytest.raises(CAError, match="ca-key.pem"):
        ca.load_persistent(env)


@pytest.mark.skipif(os.geteuid() != 0, reason="needs root to give the directory away")
def test_a_directory_of_another_user_is_refused(tmp_path):
    env = data_env(tmp_path)
    ca.init_persistent(env=env)
    os.chown(ca.ca_directory(env), 65534, 65534)
    with pytest.raises(CAError, match="belongs to uid 65534"):
        ca.load_persistent(env)
    with pytest.raises(CAError, match="belongs to uid 65534"):
        ca.init_persistent(force=True, env=env)


def test_an_expired_persistent_ca_is_refused(tmp_path):
    env = data_env(tmp_path)
    ca.init_persistent(env=env)
    now = datetime.now(UTC)
    cert, key = make_ca(not_before=now - timedelta(days=400), not_after=now - timedelta(days=35))
    directory = ca.ca_directory(env)
    (directory / "ca-cert.pem").write_bytes(cert)
    (directory / "ca-key.pem").write_bytes(key)
    with pytest.raises(CAError, match=r"expired on \d{4}-\d\d-\d\d"):
        ca.load_persistent(env)


def test_init_in_an_impossible_place_says_where(tmp_path):
    (tmp_path / "file").write_text("")
    env = data_env(tmp_path, XDG_DATA_HOME=str(tmp_path / "file" / "data"))
    with pytest.raises(CAError, match="cannot create .*file/data: Not a directory"):
        ca.init_persistent(env=env)


# --- a CA the user brings -------------------------------------------------------------


def test_load_user_ca(tmp_path):
    cert, key = make_ca()
    (tmp_path / "ca.pem").write_bytes(cert + make_ca()[0])  # a chain: the first one counts
    rsa_key = serialization.load_pem_private_key(key, None)
    (tmp_path / "ca.key").write_bytes(rsa_key.private_bytes(  # type: ignore[union-attr]
        serialization.Encoding.PEM, serialization.PrivateFormat.TraditionalOpenSSL,
        serialization.NoEncryption()))
    authority = ca.load_user_ca(tmp_path / "ca.pem", str(tmp_path / "ca.key"))
    assert authority.origin == "user"
    assert authority.cert_pem == cert
    assert authority.key_pem.startswith(b"-----BEGIN PRIVATE KEY-----")  # normalised


def _expired() -> tuple[bytes, bytes]:
    now = datetime.now(UTC)
    return make_ca(not_before=now - timedelta(days=10), not_after=now - timedelta(days=1))


def _not_yet() -> tuple[bytes, bytes]:
    now = datetime.now(UTC)
    return make_ca(not_before=now + timedelta(days=1), not_after=now + timedelta(days=10))


def _encrypted() -> tuple[bytes, bytes]:
    key = ec.generate_private_key(ec.SECP256R1())
    cert, _ = make_ca(key=key)
    return cert, key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                                   serialization.BestAvailableEncryption(b"secret"))


def _mismatch() -> tuple[bytes, bytes]:
    return make_ca()[0], make_ca()[1]


@pytest.mark.parametrize(("build", "blame", "message"), [
    (lambda: (b"junk", make_ca()[1]), "ca.pem", "not a PEM certificate"),
    (lambda: (make_ca()[0], b"junk"), "ca.key", "not a PEM private key"),
    (lambda: make_ca(is_ca=False), "ca.pem", r"not a CA certificate \(basicConstraints"),
    (lambda: make_ca(key_cert_sign=False), "ca.pem", "keyUsage does not allow signing"),
    (_mismatch, "ca.key", "is not the private key of"),
    (_expired, "ca.pem", "expired on"),
    (_not_yet, "ca.pem", "not valid until"),
    (_encrypted, "ca.key", "encrypted; sandlock needs it unencrypted"),
    (lambda: make_ca(key=ed25519.Ed25519PrivateKey.generate()), "ca.key", "unsupported private key"),
    (lambda: make_ca(key=rsa.generate_private_key(65537, 1024)), "ca.key", "at least 2048 bits"),
], ids=["corrupt-cert", "corrupt-key", "not-ca", "no-keycertsign", "mismatch", "expired",
        "not-yet-valid", "encrypted-key", "ed25519", "rsa-1024"])
def test_user_ca_errors_name_the_file(tmp_path, build, blame, message):
    cert, key = build()
    (tmp_path / "ca.pem").write_bytes(cert)
    (tmp_path / "ca.key").write_bytes(key)
    with pytest.raises(CAError, match=message) as info:
        ca.load_user_ca(tmp_path / "ca.pem", tmp_path / "ca.key")
    text = str(info.value)
    assert text.startswith(str(tmp_path / blame)) and "\n" not in text


def test_user_ca_unreadable_files(tmp_path):
    cert, key = make_ca()
    (tmp_path / "ca.key").write_bytes(key)
    with pytest.raises(CAError, match=r"ca.pem: cannot read: No such file"):
        ca.load_user_ca(tmp_path / "ca.pem", tmp_path / "ca.key")
    (tmp_path / "ca.pem").write_bytes(cert)
    with pytest.raises(CAError, match=r": cannot read: Is a directory"):
        ca.load_user_ca(tmp_path / "ca.pem", tmp_path)


def test_errors_carry_the_usage_exit_status():
    from sandlock._errors import EXIT_USAGE, SandlockError

    assert issubclass(CAError, SandlockError) and issubclass(CAError, ValueError)
    assert CAError("x").exit_code == EXIT_USAGE


# --- trust injection ------------------------------------------------------------------


def test_prepare_trust_writes_bundle_ca_and_wgetrc(tmp_path):
    authority = ca.ephemeral_ca(["example.com"])
    base = tmp_path / "base.pem"
    base.write_bytes(make_ca()[0].rstrip(b"\n"))  # no final newline: still two certificates
    run = tmp_path / "run"
    run.mkdir()
    trust = ca.prepare_trust(authority, run, base_bundle=base)
    assert trust.base_bundle == base
    bundle = x509.load_pem_x509_certificates(trust.bundle.read_bytes())
    assert [c.subject for c in bundle] == [x509.load_pem_x509_certificate(base.read_bytes()).subject,
                                            authority.certificate.subject]
    assert trust.ca_file.read_bytes() == authority.cert_pem
    assert f"ca_certificate = {trust.bundle}\n" in trust.wgetrc.read_text()
    for path in (trust.bundle, trust.ca_file, trust.wgetrc):
        assert path.parent == run and stat.S_IMODE(path.stat().st_mode) == 0o644
    assert list(trust.env) == [v.name for v in ca.TRUST_VARIABLES]
    assert trust.env["NODE_EXTRA_CA_CERTS"] == str(trust.ca_file)  # node adds, never replaces
    assert trust.env["SSL_CERT_FILE"] == trust.env["GIT_SSL_CAINFO"] == str(trust.bundle)
    assert trust.env["SYSTEM_WGETRC"] == str(trust.wgetrc)
    assert "SSL_CERT_DIR" not in trust.env
    with pytest.raises(CAError, match="cannot write"):  # never over existing files
        ca.prepare_trust(authority, run, base_bundle=base)


def test_the_bundle_starts_from_the_users_store(tmp_path):
    from sandlock.ca._trust import SYSTEM_BUNDLES

    custom = tmp_path / "corporate.pem"
    custom.write_bytes(make_ca()[0])
    assert ca.system_bundle({"SSL_CERT_FILE": str(custom)}) == custom
    assert ca.system_bundle({"SSL_CERT_FILE": str(tmp_path / "missing")}) in (
        *(Path(p) for p in SYSTEM_BUNDLES), None,
        Path(ssl.get_default_verify_paths().openssl_cafile))
    run = tmp_path / "run"
    run.mkdir()
    trust = ca.prepare_trust(ca.ephemeral_ca(["a.test"]), run, env={"SSL_CERT_FILE": str(custom)})
    assert trust.bundle.read_bytes().startswith(custom.read_bytes())


def test_wgetrc_keeps_the_system_settings(tmp_path):
    system = tmp_path / "wgetrc"
    system.write_text("passive_ftp = on")
    run = tmp_path / "run"
    run.mkdir()
    trust = ca.prepare_trust(ca.ephemeral_ca(["a.test"]), run, env={"SYSTEM_WGETRC": str(system)})
    assert trust.wgetrc.read_text().startswith("passive_ftp = on\n")


def test_docs_list_every_trust_variable():
    text = (REPO / "docs" / "ca.md").read_text()
    for variable in ca.TRUST_VARIABLES:
        assert f"`{variable.name}`" in text, variable.name


class _Recorder(http.server.BaseHTTPRequestHandler):
    """Answers every GET with 200 and remembers the path: a client that sent its
    request got past certificate verification."""

    protocol_version = "HTTP/1.0"
    seen: ClassVar[set[str]] = set()

    def do_GET(self) -> None:
        self.seen.add(self.path)
        body = b"<html>hello</html>\n"
        self.send_response(200)
        self.send_header("Content-Type", "text/html")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args: object) -> None:
        pass


@contextlib.contextmanager
def tls_server(authority: CertificateAuthority, name: str, bind: str, tmp: Path) -> Iterator[int]:
    """An HTTPS server on ``bind`` with a leaf for ``name`` minted from ``authority``
    and sent with the CA, as mitmproxy sends its chain."""
    chain, key = tmp / f"chain-{name}.pem", tmp / f"key-{name}.pem"
    chain.write_bytes(mint(authority, name) + authority.cert_pem)
    key.write_bytes(authority.key_pem)
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.load_cert_chain(chain, key)
    server = http.server.ThreadingHTTPServer((bind, 0), _Recorder)
    server.socket = context.wrap_socket(server.socket, server_side=True)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield server.server_address[1]
    finally:
        server.shutdown()
        server.server_close()


@pytest.fixture(scope="module")
def servers(tmp_path_factory):
    """One ephemeral CA for a DNS name and an IPv4 address, a server for each, and
    the run's trust files."""
    tmp = tmp_path_factory.mktemp("trust")
    authority = ca.ephemeral_ca(["localhost", "127.0.0.7"])
    run = tmp / "run"
    run.mkdir()
    trust = ca.prepare_trust(authority, run)
    home = tmp / "home"
    home.mkdir()
    with tls_server(authority, "localhost", "127.0.0.1", tmp) as dns_port, \
            tls_server(authority, "127.0.0.7", "127.0.0.7", tmp) as ip_port:
        yield {"localhost": dns_port, "127.0.0.7": ip_port, "trust": trust, "home": home, "tmp": tmp}


def _node_fetch(url: str) -> list[str]:
    script = f"fetch({url!r}).then(r => r.text(), e => {{ console.error(e.cause || e); process.exit(1) }})"
    return ["node", "-e", script]


def _node_https(url: str) -> list[str]:
    script = (f"require('https').get({url!r}, r => r.resume())"
              ".on('error', e => { console.error(e.message); process.exit(1) })")
    return ["node", "-e", script]


def _s_client(url: str) -> list[str]:
    """openssl s_client sending one request; -verify_return_error makes a failed
    verification end the handshake (by default s_client only reports it)."""
    host, port = url.split("/")[2].rsplit(":", 1)
    path = "/" + url.split("/", 3)[3]
    address = "127.0.0.1" if host == "localhost" else host
    request = f"GET {path} HTTP/1.0\\r\\nHost: {host}\\r\\n\\r\\n"
    command = (f"printf '{request}' | openssl s_client -quiet -verify_return_error "
               f"-connect {address}:{port} -servername {host} -verify_hostname {host}")
    return ["sh", "-c", command]


# client -> (argv for a URL, the words its verification failure contains)
CLIENTS = {
    "curl": (lambda url: ["curl", "-sS", "-o", "/dev/null", url], "SSL certificate problem"),
    "wget": (lambda url: ["wget", "-O", "/dev/null", url], "certificate"),
    "python-urllib": (lambda url: [sys.executable, "-c",
                                   f"import urllib.request; urllib.request.urlopen({url!r})"],
                      "CERTIFICATE_VERIFY_FAILED"),
    "requests": (lambda url: [sys.executable, "-c",
                              f"from pip._vendor import requests; requests.get({url!r})"],
                 "CERTIFICATE_VERIFY_FAILED"),
    "pip": (lambda url: [sys.executable, "-m", "pip", "download", "--no-deps", "--retries", "0",
                         "--no-cache-dir", "-d", "/nonexistent-dl", "--index-url", url, "nothing"],
            "CERTIFICATE_VERIFY_FAILED"),
    "node-fetch": (_node_fetch, "SELF_SIGNED_CERT_IN_CHAIN"),
    "node-https": (_node_https, "self-signed certificate"),
    "git": (lambda url: ["git", "ls-remote", url], "server certificate verification failed"),
    "openssl-s_client": (_s_client, "verify error"),
}
_TOOL = {"requests": sys.executable, "pip": sys.executable, "python-urllib": sys.executable,
         "node-fetch": "node", "node-https": "node", "openssl-s_client": "openssl"}


@pytest.mark.parametrize("host", ["localhost", "127.0.0.7"])
@pytest.mark.parametrize("client", sorted(CLIENTS))
def test_clients_trust_the_ca_through_the_variables_alone(servers, client, host):
    tool = _TOOL.get(client, client)
    if shutil.which(tool) is None:
        pytest.skip(f"{tool} is not installed")
    argv_for, failure = CLIENTS[client]
    trust: ca.TrustInjection = servers["trust"]
    base = {"PATH": "/usr/bin:/bin", "HOME": str(servers["home"]), "LANG": "C.UTF-8"}

    def attempt(env: dict[str, str]) -> tuple[bool, str]:
        probe = f"/probe-{uuid.uuid4().hex}/"
        url = f"https://{host}:{servers[host]}{probe}"
        result = subprocess.run(argv_for(url), env=env, capture_output=True, text=True, timeout=60,
                                stdin=subprocess.DEVNULL, cwd=servers["tmp"])
        reached = any(path.startswith(probe) for path in _Recorder.seen)
        return reached, result.stdout + result.stderr

    reached, output = attempt({**base, **trust.env})
    assert reached, output
    reached, output = attempt(base)
    assert not reached and failure in output, output


# --- install and uninstall ------------------------------------------------------------


def _debian_root(tmp_path: Path) -> Path:
    """A scratch Debian trust store: the real CA list, an empty local directory."""
    root = tmp_path / "root"
    (root / "usr" / "local" / "share" / "ca-certificates").mkdir(parents=True)
    (root / "etc" / "ssl" / "certs").mkdir(parents=True)
    (root / "usr" / "share").mkdir(parents=True, exist_ok=True)
    (root / "usr" / "share" / "ca-certificates").symlink_to("/usr/share/ca-certificates")
    if os.path.exists("/etc/ca-certificates.conf"):
        shutil.copy("/etc/ca-certificates.conf", root / "etc")
    for path in (root, *root.rglob("*")):
        if path.is_dir() and not path.is_symlink():
            os.chmod(path, 0o755)
    return root


needs_debian_store = pytest.mark.skipif(UPDATE_CA_CERTIFICATES is None, reason="not a Debian-like system")


@needs_openssl
@needs_debian_store
def test_cli_round_trip_in_a_scratch_trust_root(tmp_path):
    root = _debian_root(tmp_path)
    env = data_env(tmp_path, **{TRUST_ROOT: str(root)})
    bundle = root / "etc" / "ssl" / "certs" / "ca-certificates.crt"

    shown = sandlock("ca", "show", env=env)
    assert shown.returncode == 1 and shown.stderr.startswith("sandlock: error: ca show: no CA in ")
    created = sandlock("ca", "init", env=env)
    assert created.returncode == 0, created.stderr
    authority = ca.load_persistent(env)
    assert authority is not None and authority.fingerprint in created.stdout
    shown = sandlock("ca", "show", env=env)
    assert shown.returncode == 0
    for text in (authority.fingerprint, authority.subject, "ca-key.pem", "installed    nowhere"):
        assert text in shown.stdout

    exported = subprocess.run([*SANDLOCK, "ca", "export"], env=env, capture_output=True)
    assert exported.returncode == 0 and exported.stdout == authority.cert_pem
    der = tmp_path / "ca.der"
    assert sandlock("ca", "export", "--der", str(der), env=env).returncode == 0
    assert der.read_bytes() == authority.cert_der()

    leaf = mint(authority, "anything.example")
    installed = sandlock("ca", "install", env=env)
    assert installed.returncode == 0, installed.stderr
    anchor = root / "usr" / "local" / "share" / "ca-certificates" / "sandlock-ca.crt"
    assert f"installed in system: {anchor}" in installed.stdout
    assert anchor.read_bytes() == authority.cert_pem
    assert openssl_verify(bundle, leaf, tmp_path).returncode == 0
    assert f"system: {anchor}" in sandlock("ca", "show", env=env).stdout
    refused = sandlock("ca", "init", "--force", env=env)
    assert refused.returncode == 1 and "uninstall" in refused.stderr

    removed = sandlock("ca", "uninstall", env=env)
    assert removed.returncode == 0 and f"removed from system: {anchor}" in removed.stdout
    assert not anchor.exists()
    assert not [p for p in (root / "etc" / "ssl" / "certs").iterdir() if p.is_symlink() and not p.exists()]
    assert openssl_verify(bundle, leaf, tmp_path).returncode != 0
    assert "installed    nowhere" in sandlock("ca", "show", env=env).stdout
    assert not (ca.ca_directory(env) / "installed.json").exists()
    again = sandlock("ca", "uninstall", env=env)
    assert again.returncode == 0 and "not installed anywhere" in again.stdout


@needs_debian_store
def test_a_system_file_removed_by_hand_is_no_longer_installed(tmp_path):
    # As after running the `sudo rm ... && sudo update-ca-certificates` uninstall printed.
    root = _debian_root(tmp_path)
    env = data_env(tmp_path, **{TRUST_ROOT: str(root)})
    ca.init_persistent(env=env)
    [done] = ca.install(ca.ca_directory(env) / "ca-cert.pem", ["system"], env=env)
    assert ca.installed(env) == [done]
    os.unlink(done.location)
    assert ca.installed(env) == []
    assert ca.uninstall(env) == []
    assert not (ca.ca_directory(env) / "installed.json").exists()


@pytest.mark.skipif(shutil.which("keytool") is None, reason="keytool (a JDK) is not installed")
def test_java_install_into_a_scratch_copy_of_cacerts(tmp_path):
    from sandlock.ca._truststores import java_cacerts

    keytool = shutil.which("keytool")
    real = java_cacerts(keytool, {})
    root = tmp_path / "root"
    copy = root / str(real).lstrip("/")
    copy.parent.mkdir(parents=True)
    shutil.copy(real, copy)
    env = data_env(tmp_path, **{TRUST_ROOT: str(root)})
    authority = ca.init_persistent(env=env)
    cert = ca.ca_directory(env) / "ca-cert.pem"
    done = ca.install(cert, ["java"], env=env)
    assert [(d.target, d.location, d.alias) for d in done] == [("java", str(copy), "sandlock-ca")]
    listed = subprocess.run([keytool, "-list", "-keystore", str(copy), "-storepass", "changeit",
                             "-alias", "sandlock-ca"], capture_output=True, text=True)
    assert listed.returncode == 0 and authority.fingerprint in listed.stdout
    assert ca.install(cert, ["java"], env=env) == done  # again: replaced, not duplicated
    assert ca.installed(env) == done
    assert ca.uninstall(env) == done
    listed = subprocess.run([keytool, "-list", "-keystore", str(copy), "-storepass", "changeit",
                             "-alias", "sandlock-ca"], capture_output=True, text=True)
    assert listed.returncode != 0


@pytest.mark.skipif(shutil.which("certutil") is None, reason="certutil (libnss3-tools) is not installed")
def test_nss_install_into_the_browsers_databases(tmp_path):
    env = data_env(tmp_path)
    home = Path(env["HOME"])
    databases = [home / ".pki" / "nssdb", home / ".mozilla" / "firefox" / "abcd.default-release"]
    for database in databases:
        database.mkdir(parents=True)
        subprocess.run(["certutil", "-N", "--empty-password", "-d", f"sql:{database}"], check=True)
    ca.init_persistent(env=env)
    done = ca.install(ca.ca_directory(env) / "ca-cert.pem", ["nss"], env=env)
    assert [d.location for d in done] == [f"sql:{d}" for d in databases]
    for database in databases:
        listed = subprocess.run(["certutil", "-L", "-d", f"sql:{database}"], capture_output=True, text=True)
        assert "sandlock-ca" in listed.stdout and "C,," in listed.stdout
    assert ca.uninstall(env) == list(reversed(done))
    for database in databases:
        listed = subprocess.run(["certutil", "-L", "-d", f"sql:{database}"], capture_output=True, text=True)
        assert "sandlock-ca" not in listed.stdout


def test_install_refuses_what_it_cannot_do(tmp_path):
    from sandlock.ca._truststores import TRUST_ROOT_VARIABLE

    assert TRUST_ROOT_VARIABLE == TRUST_ROOT
    env = data_env(tmp_path, PATH="/nonexistent")
    ca.init_persistent(env=env)
    cert = ca.ca_directory(env) / "ca-cert.pem"
    with pytest.raises(CAError, match="unknown trust store 'bogus'"):
        ca.install(cert, ["bogus"], env=env)
    with pytest.raises(CAError, match="no NSS database found|certutil not found"):
        ca.install(cert, ["nss"], env=env)
    empty_root = tmp_path / "empty"
    empty_root.mkdir()
    with pytest.raises(CAError, match="no system trust store found"):
        ca.install(cert, ["system"], env={**env, TRUST_ROOT: str(empty_root)})
    assert ca.installed(env) == []


@needs_debian_store
def test_without_root_the_exact_sudo_commands_are_given(tmp_path, as_nobody, world_tmp):
    """As a user: install prints the commands; running them (as root here) installs
    exactly what sandlock would have; show sees it and uninstall gives the reverse."""
    root = _debian_root(world_tmp)
    data = world_tmp / "data"
    env = {"PATH": "/usr/bin:/bin", "HOME": str(world_tmp), "XDG_DATA_HOME": str(data),
           TRUST_ROOT: str(root)}
    cwd = "/"

    def as_user(*args: str) -> subprocess.CompletedProcess:
        return subprocess.run(as_nobody([*SANDLOCK, *args]), env={**env, "PYTHONPATH": str(REPO)},
                              capture_output=True, text=True, cwd=cwd)

    assert as_user("ca", "init").returncode == 0
    refused = as_user("ca", "install", "--system")
    assert refused.returncode == 1
    line = refused.stderr.strip()
    assert "\n" not in line and line.startswith(
        "sandlock: error: ca install: installing into the system trust store needs root: run sudo install -m 644 ")
    commands = line.split(": run ", 1)[1]
    assert "&& sudo " in commands and "update-ca-certificates" in commands
    subprocess.run(commands.replace("sudo ", ""), shell=True, check=True, capture_output=True)
    anchor = root / "usr" / "local" / "share" / "ca-certificates" / "sandlock-ca.crt"
    assert anchor.exists()
    assert f"system: {anchor}" in as_user("ca", "show").stdout

    refused = as_user("ca", "uninstall")
    assert refused.returncode == 1 and "removing from the system trust store needs root" in refused.stderr
    commands = refused.stderr.strip().split(": run ", 1)[1]
    assert commands.startswith(f"sudo rm -f {anchor} && sudo ") and "--fresh" in commands
    subprocess.run(commands.replace("sudo ", ""), shell=True, check=True, capture_output=True)
    assert not anchor.exists()
    assert "installed    nowhere" in as_user("ca", "show").stdout


def test_unwritable_ca_directory_is_a_clear_error(tmp_path, as_nobody, world_tmp):
    locked = world_tmp / "locked"
    locked.mkdir(mode=0o755)  # root's: nobody cannot create anything in it
    env = {"PATH": "/usr/bin:/bin", "HOME": str(world_tmp), "XDG_DATA_HOME": str(locked / "data"),
           "PYTHONPATH": str(REPO)}
    result = subprocess.run(as_nobody([*SANDLOCK, "ca", "init"]), env=env, capture_output=True,
                            text=True, cwd="/")
    assert result.returncode == 1
    assert result.stderr == f"sandlock: error: ca init: cannot create {locked}/data: Permission denied\n"


# --- the real system store (root on a Debian machine: CI) ---------------------------------

_SYSTEM_PLACES = ("/etc/ssl/certs", "/usr/local/share/ca-certificates", "/var/lib/ca-certificates-java")
_Entry = tuple[str, "bytes | str | None", int]  # kind, content or link target, mode


class _SystemState:
    """Everything under some directories, read once, to be put back exactly: entries,
    contents, modes and times (update-ca-certificates --fresh recreates every link)."""

    def __init__(self, places: tuple[str, ...]) -> None:
        self.places = places
        self.entries = self.read()
        self.times = {path: (info.st_atime_ns, info.st_mtime_ns)
                      for path in (*self.entries, *places) for info in (os.lstat(path),)}

    def read(self) -> dict[str, _Entry]:
        state: dict[str, _Entry] = {}
        for place in self.places:
            for directory, dirnames, filenames in os.walk(place):
                for name in dirnames + filenames:
                    path = os.path.join(directory, name)
                    mode = os.lstat(path).st_mode
                    if stat.S_ISLNK(mode):
                        state[path] = ("link", os.readlink(path), 0)
                    elif stat.S_ISDIR(mode):
                        state[path] = ("dir", None, stat.S_IMODE(mode))
                    else:
                        state[path] = ("file", Path(path).read_bytes(), stat.S_IMODE(mode))
        return state

    def restore(self) -> None:
        now = self.read()
        changed = sorted(p for p in self.entries.keys() | now.keys() if self.entries.get(p) != now.get(p))
        for path in reversed(changed):  # children before their directories
            if path in now and now[path][0] != "dir":
                os.unlink(path)
            elif path in now and path not in self.entries:
                shutil.rmtree(path)
        for path in changed:
            if path not in self.entries:
                continue
            kind, content, mode = self.entries[path]
            if kind == "dir":
                os.makedirs(path, exist_ok=True)
                os.chmod(path, mode)
            elif kind == "link":
                os.symlink(content, path)  # type: ignore[arg-type]
            else:
                Path(path).write_bytes(content)  # type: ignore[arg-type]
                os.chmod(path, mode)
        # deepest first: setting a child's times leaves its directory's alone
        for path in sorted(self.times, key=lambda p: p.count("/"), reverse=True):
            if os.path.lexists(path):
                os.utime(path, ns=self.times[path], follow_symlinks=False)

    def changed(self) -> list[str]:
        """Paths whose entry or modification time differs from the first reading."""
        now = self.read()
        paths = self.entries.keys() | now.keys() | set(self.places)
        return sorted(p for p in paths if self.entries.get(p) != now.get(p)
                      or self.times.get(p, (0, 0))[1] != _mtime(p))


def _mtime(path: str) -> int | None:
    return os.lstat(path).st_mtime_ns if os.path.lexists(path) else None


@needs_openssl
@needs_debian_store
@pytest.mark.skipif(os.geteuid() != 0, reason="installing into the real system store needs root")
@pytest.mark.skipif(not os.path.isdir("/usr/local/share/ca-certificates"), reason="not a Debian store")
def test_install_into_the_real_debian_store_and_back(tmp_path):
    env = data_env(tmp_path)
    clean = {"PATH": "/usr/bin:/bin"}  # openssl's compiled-in default store only
    before = _SystemState(_SYSTEM_PLACES)
    try:
        assert sandlock("ca", "init", env=env).returncode == 0
        authority = ca.load_persistent(env)
        assert authority is not None
        leaf = mint(authority, "anything.example")
        assert openssl_verify(None, leaf, tmp_path, env=clean).returncode != 0
        installed = sandlock("ca", "install", "--system", env=env, timeout=300)
        assert installed.returncode == 0, installed.stderr
        assert "installed in system: /usr/local/share/ca-certificates/sandlock-ca.crt" in installed.stdout
        assert openssl_verify(None, leaf, tmp_path, env=clean).returncode == 0
        removed = sandlock("ca", "uninstall", env=env, timeout=300)
        assert removed.returncode == 0, removed.stderr
        # everything install reported, its Java copy included, is reported removed
        for line in installed.stdout.splitlines():
            assert line.replace("installed in", "removed from") in removed.stdout
        assert openssl_verify(None, leaf, tmp_path, env=clean).returncode != 0
        assert not [p for p in os.listdir("/etc/ssl/certs") if "sandlock" in p]
        assert authority.cert_pem not in Path("/etc/ssl/certs/ca-certificates.crt").read_bytes()
        if shutil.which("keytool") and os.path.exists("/etc/ssl/certs/java/cacerts"):
            listed = subprocess.run(["keytool", "-list", "-keystore", "/etc/ssl/certs/java/cacerts",
                                     "-storepass", "changeit"], capture_output=True, text=True)
            assert authority.fingerprint not in listed.stdout
    finally:
        before.restore()
    assert before.changed() == []


# --- the key stays out of every sandbox -----------------------------------------------


@needs_openssl
@pytest.mark.parametrize("policy", ["default", "read-home", "read-ca-dir", "read-root"])
def test_confined_programs_cannot_read_the_persistent_key(tmp_path, policy):
    env = data_env(tmp_path)
    env.pop("XDG_DATA_HOME")  # the default place: ~/.local/share/sandlock/ca
    home = Path(env["HOME"])
    assert sandlock("ca", "init", env=env).returncode == 0
    directory = ca.ca_directory(env)
    key = directory / "ca-key.pem"
    assert key.exists()
    (home / "notes.txt").write_text("readable")
    system = ["-r", "/usr", "-r", "/lib", "-r", "/lib64", "-r", "/etc",
              *(option for path in PYTHON for option in ("-r", path))]
    options = {
        "default": [],
        "read-home": [*system, "-r", str(home)],
        "read-ca-dir": [*system, "-r", str(home), "-r", str(directory), "-r", str(key)],
        "read-root": ["-r", "/"],
    }[policy]
    secret = key.read_text().splitlines()[1]
    readers = {
        "cat": ["cat", str(key)],
        "python": [sys.executable, "-c", f"print(open({str(key)!r}).read())"],
        "openssl": ["openssl", "pkey", "-in", str(key)],
        "ls": ["ls", str(directory)],
    }
    for name, argv in readers.items():
        result = sandlock("run", *options, "--", *argv, env=env)
        output = result.stdout + result.stderr
        assert secret not in output and "PRIVATE KEY" not in output, (name, output)
        if name != "ls":  # the names inside a denied directory stay listable
            assert result.returncode != 0, (name, output)
            assert "ermission denied" in output, (name, output)
    readable = sandlock("run", *options, "--", "cat", str(home / "notes.txt"), env=env)
    assert readable.stdout == "readable"


# --- import hygiene -------------------------------------------------------------------


def test_importing_sandlock_ca_loads_nothing_heavy():
    code = "import sys, sandlock.ca; print('cryptography' in sys.modules, 'sandlock.ca._authority' in sys.modules)"
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=REPO)
    assert result.stdout.split() == ["False", "False"], result.stderr


def test_a_run_without_http_rules_never_imports_the_ca():
    result = subprocess.run([sys.executable, "-X", "importtime", "-m", "sandlock", "run", "--", "true"],
                            capture_output=True, text=True, cwd=REPO)
    assert result.returncode == 0, result.stderr
    assert "sandlock.ca" not in result.stderr and "cryptography" not in result.stderr


def test_a_closed_pipe_is_not_a_traceback(tmp_path):
    env = data_env(tmp_path)
    assert sandlock("ca", "init", env=env).returncode == 0
    command = f"{' '.join(SANDLOCK)} ca show | head -c 1 >/dev/null"
    result = subprocess.run(["sh", "-c", command], env=env, capture_output=True, text=True, cwd=REPO)
    assert result.stderr == ""


def test_sandlock_help_lists_ca_and_bad_actions_are_usage_errors():
    assert " ca " in sandlock("--help").stdout
    bad = sandlock("ca", "frobnicate")
    assert bad.returncode == 2 and bad.stderr.startswith("sandlock: error: ")
    assert len(bad.stderr.strip().splitlines()) == 1
    assert sandlock("ca", "export", "a", "b").returncode == 2
