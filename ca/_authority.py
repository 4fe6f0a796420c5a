"""CertificateAuthority: a CA certificate and its private key, checked once, immutable."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Literal

from cryptography import x509
from cryptography.exceptions import UnsupportedAlgorithm
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec, rsa

from .._record import record
from . import _names
from ._errors import CAError

Origin = Literal["ephemeral", "persistent", "user"]
ORIGINS = ("ephemeral", "persistent", "user")
PrivateKey = rsa.RSAPrivateKey | ec.EllipticCurvePrivateKey
_MIN_RSA_BITS = 2048


@record
class CertificateAuthority:
    """A CA sandlock can mint leaves with (mitmproxy's CertStore signs leaves with
    ``private_key``, and reuses its public key for them).

    ``cert_pem`` holds the one CA certificate, ``key_pem`` its unencrypted PKCS8 key:
    in memory only, never in ``repr``. ``origin``: ``"ephemeral"`` (generated for one
    run, name-constrained), ``"persistent"`` (``sandlock ca init``) or ``"user"``
    (``--http-ca``/``--http-key``). Construction checks everything: a CA certificate
    (basicConstraints CA:TRUE, keyCertSign if keyUsage is present), a matching RSA or EC
    key, valid now. CAError otherwise.
    """

    cert_pem: bytes
    key_pem: bytes
    origin: Origin
    # Derived in __post_init__, not fields: ``certificate`` (x509.Certificate) and
    # ``private_key`` (PrivateKey).

    def __post_init__(self) -> None:
        if self.origin not in ORIGINS:
            raise ValueError(f"origin must be one of {ORIGINS}, not {self.origin!r}")
        certificate = parse_certificate(self.cert_pem)
        key = parse_private_key(self.key_pem)
        check_ca(certificate, key)
        # Stored normalised: the first certificate alone, the key as PKCS8.
        object.__setattr__(self, "certificate", certificate)
        object.__setattr__(self, "private_key", key)
        object.__setattr__(self, "cert_pem", certificate.public_bytes(serialization.Encoding.PEM))
        object.__setattr__(self, "key_pem", key.private_bytes(
            serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
            serialization.NoEncryption()))

    def __repr__(self) -> str:  # never the key
        return (f"CertificateAuthority(origin={self.origin!r}, subject={self.subject!r}, "
                f"fingerprint={self.fingerprint!r})")

    @property
    def fingerprint(self) -> str:
        """SHA-256 of the DER certificate, upper-case hex pairs joined by colons."""
        return self.certificate.fingerprint(hashes.SHA256()).hex(":").upper()

    @property
    def subject(self) -> str:
        return self.certificate.subject.rfc4514_string()

    @property
    def not_before(self) -> datetime:
        return self.certificate.not_valid_before_utc

    @property
    def not_after(self) -> datetime:
        return self.certificate.not_valid_after_utc

    @property
    def name_constraints(self) -> x509.NameConstraints | None:
        try:
            return self.certificate.extensions.get_extension_for_class(x509.NameConstraints).value
        except x509.ExtensionNotFound:
            return None

    def permits(self, name: str) -> bool:
        """True when a leaf for ``name`` (DNS name or IP literal) would be valid under
        this CA's name constraints. A proxy must mint leaves only for such names:
        a leaf carrying any other name (copied from an upstream certificate, say)
        fails verification as a whole."""
        return _names.permits(self.name_constraints, name)

    def cert_der(self) -> bytes:
        return self.certificate.public_bytes(serialization.Encoding.DER)

    def mitmproxy_pem(self) -> bytes:
        """Key then certificate: the ``mitmproxy-ca.pem`` format CertStore reads."""
        return self.key_pem + self.cert_pem


def parse_certificate(data: bytes) -> x509.Certificate:
    """The first certificate of a PEM text; CAError when there is none."""
    try:
        return x509.load_pem_x509_certificates(data)[0]
    except ValueError:
        raise CAError("not a PEM certificate (expected -----BEGIN CERTIFICATE-----)") from None


def parse_private_key(data: bytes) -> PrivateKey:
    """An unencrypted RSA or EC private key from PEM; CAError otherwise."""
    try:
        key = serialization.load_pem_private_key(data, password=None)
    except TypeError:  # cryptography's way of saying "encrypted, and no password"
        raise CAError("the private key is encrypted; sandlock needs it unencrypted "
                      "(decrypt it with: openssl pkey -in KEY -out PLAIN_KEY)") from None
    except ValueError:
        raise CAError("not a PEM private key (expected -----BEGIN PRIVATE KEY-----)") from None
    except UnsupportedAlgorithm as exc:
        raise CAError(f"unsupported private key ({exc})") from None
    if isinstance(key, rsa.RSAPrivateKey) and key.key_size >= _MIN_RSA_BITS:
        return key
    if isinstance(key, ec.EllipticCurvePrivateKey):
        return key
    raise CAError(f"unsupported private key {type(key).__name__.removeprefix('_')} "
                  f"(an EC key or an RSA key of at least {_MIN_RSA_BITS} bits is needed)")


def check_ca(certificate: x509.Certificate, key: PrivateKey) -> None:
    """CAError unless ``certificate`` is a CA valid now whose key is ``key``."""
    if not same_key(certificate, key):
        raise CAError("the certificate and the private key do not match")
    extensions = certificate.extensions
    try:
        constraints = extensions.get_extension_for_class(x509.BasicConstraints).value
    except x509.ExtensionNotFound:
        constraints = None
    if constraints is None or not constraints.ca:
        raise CAError("not a CA certificate (basicConstraints CA:TRUE is missing)")
    try:
        usage = extensions.get_extension_for_class(x509.KeyUsage).value
    except x509.ExtensionNotFound:
        usage = None
    if usage is not None and not usage.key_cert_sign:
        raise CAError("a CA certificate whose keyUsage does not allow signing certificates")
    now = datetime.now(UTC)
    if now > certificate.not_valid_after_utc:
        raise CAError(f"the CA certificate expired on {when(certificate.not_valid_after_utc)}")
    if now < certificate.not_valid_before_utc:
        raise CAError(f"the CA certificate is not valid until {when(certificate.not_valid_before_utc)}")


def same_key(certificate: x509.Certificate, key: PrivateKey) -> bool:
    spki = serialization.Encoding.DER, serialization.PublicFormat.SubjectPublicKeyInfo
    return certificate.public_key().public_bytes(*spki) == key.public_key().public_bytes(*spki)


def when(moment: datetime) -> str:
    return moment.strftime("%Y-%m-%d %H:%M UTC")
