"""Generating CA certificates: the per-run ephemeral CA and the persistent one."""

from __future__ import annotations

import getpass
import socket
from collections.abc import Iterable
from datetime import UTC, datetime, timedelta

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID

from ._authority import CertificateAuthority, Origin
from ._names import name_constraints

# The ephemeral CA only has to outlive its run; a week covers long agent sessions
# while a copy of it (--http-ca-out) stops being useful soon after.
EPHEMERAL_LIFETIME = timedelta(days=7)
# The persistent CA is trusted once (installed) and serves every run for years.
PERSISTENT_LIFETIME = timedelta(days=3650)
# Clocks of the machine and of whatever checks the certificate may disagree a little.
CLOCK_SKEW = timedelta(hours=1)


def ephemeral_ca(hosts: Iterable[str], lifetime: timedelta = EPHEMERAL_LIFETIME) -> CertificateAuthority:
    """A fresh EC P-256 CA, in memory, name-constrained to ``hosts`` (rule hosts:
    ``example.com``, ``*.example.com``, ``10.0.0.1``, ``[::1]``). A host ``*`` makes
    it unconstrained: no name constraint can say "any host". CAError for a bad host."""
    constraints = name_constraints(hosts)
    scope = "any host" if constraints is None else "name-constrained"
    return _new_ca("ephemeral", f"sandlock ephemeral CA ({scope})", lifetime, constraints)


def persistent_ca(lifetime: timedelta = PERSISTENT_LIFETIME) -> CertificateAuthority:
    """A fresh, unconstrained EC P-256 CA meant for ``sandlock ca init``."""
    return _new_ca("persistent", f"sandlock CA {_owner()}", lifetime, None)


def server_certificate(authority: CertificateAuthority, name: str,
                       lifetime: timedelta = timedelta(days=1)) -> tuple[bytes, bytes]:
    """(certificate PEM, key PEM) of a TLS server certificate for ``name`` signed by
    ``authority``: for servers sandlock itself stands up (selftest, benchmarks)."""
    key = ec.generate_private_key(ec.SECP256R1())
    now = datetime.now(UTC)
    certificate = (
        x509.CertificateBuilder()
        .subject_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, name)]))
        .issuer_name(authority.certificate.subject)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - CLOCK_SKEW)
        .not_valid_after(now + lifetime)
        .add_extension(x509.SubjectAlternativeName([x509.DNSName(name)]), critical=False)
        .add_extension(x509.ExtendedKeyUsage([x509.oid.ExtendedKeyUsageOID.SERVER_AUTH]), critical=False)
        .add_extension(x509.AuthorityKeyIdentifier.from_issuer_public_key(
            authority.certificate.public_key()), critical=False)
        .sign(authority.private_key, hashes.SHA256())
    )
    return (certificate.public_bytes(serialization.Encoding.PEM),
            key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                              serialization.NoEncryption()))


def _new_ca(origin: Origin, common_name: str, lifetime: timedelta,
            constraints: x509.NameConstraints | None) -> CertificateAuthority:
    key = ec.generate_private_key(ec.SECP256R1())
    now = datetime.now(UTC)
    name = x509.Name([
        x509.NameAttribute(NameOID.ORGANIZATION_NAME, "sandlock"),
        x509.NameAttribute(NameOID.COMMON_NAME, common_name),
    ])
    builder = (
        x509.CertificateBuilder()
        .subject_name(name)
        .issuer_name(name)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - CLOCK_SKEW)
        .not_valid_after(now + lifetime)
        # pathlen 0: it signs leaves only, never another CA.
        .add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True)
        .add_extension(x509.KeyUsage(
            digital_signature=False, content_commitment=False, key_encipherment=False,
            data_encipherment=False, key_agreement=False, key_cert_sign=True, crl_sign=True,
            encipher_only=False, decipher_only=False), critical=True)
        # mitmproxy's leaves name their issuer by this (AuthorityKeyIdentifier).
        .add_extension(x509.SubjectKeyIdentifier.from_public_key(key.public_key()), critical=False)
    )
    if constraints is not None:
        builder = builder.add_extension(constraints, critical=True)  # RFC 5280: MUST be critical
    certificate = builder.sign(key, hashes.SHA256())
    return CertificateAuthority(
        cert_pem=certificate.public_bytes(serialization.Encoding.PEM),
        key_pem=key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                                  serialization.NoEncryption()),
        origin=origin,
    )


def _owner() -> str:
    """user@host, so that an installed CA says whose it is in trust store listings."""
    try:
        user = getpass.getuser()
    except (KeyError, OSError):  # no name for this uid
        user = "unknown"
    return f"{user}@{socket.gethostname()}"
