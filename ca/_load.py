"""A CA the user brings (``--http-ca CERT --http-key KEY``): read and checked once."""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path
from typing import TypeVar

from ._authority import (
    CertificateAuthority,
    parse_certificate,
    parse_private_key,
    same_key,
)
from ._errors import CAError

T = TypeVar("T")


def load_user_ca(cert_path: str | os.PathLike[str], key_path: str | os.PathLike[str]) -> CertificateAuthority:
    """The CA in ``cert_path`` (PEM; its first certificate) with the unencrypted PEM
    key in ``key_path``. CAError, naming the file, when either cannot be read or
    parsed, the key is encrypted or does not match, or the certificate is not a CA
    valid now."""
    cert_pem, key_pem = _read(cert_path), _read(key_path)
    certificate = _labelled(cert_path, parse_certificate, cert_pem)
    key = _labelled(key_path, parse_private_key, key_pem)
    if not same_key(certificate, key):
        raise CAError(f"{key_path} is not the private key of {cert_path}")
    return _labelled(cert_path, lambda pem: CertificateAuthority(pem, key_pem, "user"), cert_pem)


def _read(path: str | os.PathLike[str]) -> bytes:
    try:
        return Path(path).read_bytes()
    except OSError as exc:
        raise CAError(f"{path}: cannot read: {exc.strerror}") from None


def _labelled(path: str | os.PathLike[str], parse: Callable[[bytes], T], data: bytes) -> T:
    """``parse(data)``, with CAError messages prefixed by the file they are about."""
    try:
        return parse(data)
    except CAError as exc:
        raise CAError(f"{path}: {exc}") from None
