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
from conftest import SANDLOCK, sandlock
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


def test_errors_carry_the_usage_exit_status():
    from sandlock._errors import EXIT_USAGE, SandlockError

    assert issubclass(CAError, SandlockError) and issubclass(CAError, ValueError)
    assert CAError("x").exit_code == EXIT_USAGE


# --- import hygiene -------------------------------------------------------------------


def test_importing_sandlock_ca_loads_nothing_heavy():
    code = "import sys, sandlock.ca; print('cryptography' in sys.modules, 'sandlock.ca._authority' in sys.modules)"
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=REPO)
    assert result.stdout.split() == ["False", "False"], result.stderr
