"""Short-lived CAs cached per user and per set of name constraints, so that an
inspecting run starts without making one (cryptography's import and the key cost
~50 ms, which the command used to wait for before exec).

Each CA is valid for a day and is handed out for half of that: a run may last twelve
hours and still end before its CA expires. The cache is a directory only its user
can enter (0700, checked on every use, never through a symlink); each entry is one
0600 file, ``<key>.pem``, holding the key then the certificate (mitmproxy's
``mitmproxy-ca.pem`` format), named by a hash of the constraint set. sandlock denies
the directory in every policy (``confinement.sandlock_ca_cache_dir``), like the
persistent CA's key: no sandboxed command can read a key. See docs/ca.md.
"""

from __future__ import annotations

import os
import stat
import time

from ._errors import CAError

TYPE_CHECKING = False  # typing costs ~5 ms to import: not on an HTTP run's start path
if TYPE_CHECKING:
    from collections.abc import Iterable

LIFETIME_HOURS = 24  # the cached CA's own validity
REUSE_SECONDS = 12 * 3600  # handed out to runs starting within this of its making
_CERTIFICATE = b"-----BEGIN CERTIFICATE-----"
_FORMAT = "v1"  # part of each entry's name: a new format never reads an old file


def cached_ca(hosts: Iterable[str], directory: str) -> tuple[bytes, bytes]:
    """(certificate PEM, key + certificate PEM) of a CA name-constrained to ``hosts``
    (``ephemeral_ca``'s rule), from the cache in ``directory`` or made and cached."""
    hosts = sorted(set(hosts))
    private_directory(directory)
    entry = os.path.join(directory, _entry_name(hosts))
    pem = _read_fresh(entry)
    if pem is None:
        pem = _make(hosts, entry)
        _remove_expired(directory)
    return pem[pem.index(_CERTIFICATE):], pem


def _entry_name(hosts: list[str]) -> str:
    try:  # CPython's own SHA-256: hashlib loads OpenSSL's (~3 ms of an HTTP run's start)
        from _sha256 import sha256
    except ImportError:
        from hashlib import sha256
    digest = sha256("\n".join([_FORMAT, *hosts]).encode()).hexdigest()
    return f"{digest[:32]}.pem"


def private_directory(directory: str) -> None:
    """Make ``directory`` (0700) if needed, and refuse one that others could reach
    (CAError): the cache's, and the proxy fork server's (``proxy._forkserver``)."""
    os.makedirs(os.path.dirname(directory), mode=0o700, exist_ok=True)  # parents too
    os.makedirs(directory, mode=0o700, exist_ok=True)
    info = os.lstat(directory)
    if (not stat.S_ISDIR(info.st_mode) or info.st_uid != os.getuid()
            or info.st_mode & 0o077):
        raise CAError(f"{directory}: sandlock's private directory must be a directory of yours that no one "
                      "else can enter (mode 0700, not a symlink); remove it and run again")


def _read_fresh(entry: str) -> bytes | None:
    try:
        fd = os.open(entry, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC)
    except FileNotFoundError:
        return None
    with os.fdopen(fd, "rb") as file:
        info = os.fstat(fd)
        if info.st_uid != os.getuid() or info.st_mode & 0o077:
            raise CAError(f"{entry}: a cached CA key must be yours alone (mode 0600)")
        if time.time() - info.st_mtime > REUSE_SECONDS:
            return None
        pem = file.read()
    return pem if _CERTIFICATE in pem else None


def _make(hosts: list[str], entry: str) -> bytes:
    from datetime import timedelta

    from .._hostfile import write_file
    from ._generate import ephemeral_ca

    pem = ephemeral_ca(hosts, lifetime=timedelta(hours=LIFETIME_HOURS)).mitmproxy_pem()
    write_file(entry, pem, 0o600, exact=True)  # whole, for a run reading it at the same moment
    return pem


def _remove_expired(directory: str) -> None:
    """Entries past their lifetime (and files a crash left half-written)."""
    oldest = time.time() - LIFETIME_HOURS * 3600
    for name in os.listdir(directory):
        path = os.path.join(directory, name)
        try:
            if os.lstat(path).st_mtime < oldest:
                os.unlink(path)
        except OSError:
            pass
