"""The persistent CA: its directory, creating it and loading it with checks.

The key is the one secret here. It is written 0600 from the first byte (O_EXCL with
mode 0600, then renamed into place), lives in a 0700 directory, and every sandbox is
denied that directory (``sandlock.confinement``: ``protected_paths``). Loading refuses a key
others could read and a directory another user owns or others could write.
"""

from __future__ import annotations

import os
import stat
from collections.abc import Mapping
from pathlib import Path

from ..confinement import sandlock_ca_dir
from ._authority import CertificateAuthority, parse_certificate
from ._errors import CAError
from ._generate import persistent_ca

KEY_FILE = "ca-key.pem"
CERT_FILE = "ca-cert.pem"
MANIFEST_FILE = "installed.json"  # written by _install


def ca_directory(env: Mapping[str, str] = os.environ) -> Path:
    """``$XDG_DATA_HOME/sandlock/ca`` (default ``~/.local/share/sandlock/ca``): the
    very path every sandbox is denied."""
    return Path(sandlock_ca_dir(env, _home(env)))


def _home(env: Mapping[str, str]) -> str:
    home = env.get("HOME", "")
    if os.path.isabs(home):
        return home
    import pwd

    return pwd.getpwuid(os.getuid()).pw_dir


def init_persistent(force: bool = False, env: Mapping[str, str] = os.environ) -> CertificateAuthority:
    """Create the persistent CA (10 years, not name-constrained) in ``ca_directory``.

    Refuses to replace an existing one unless ``force``, and refuses even then while
    the old one is installed somewhere (``uninstall`` first). CAError on failure.
    """
    directory = ca_directory(env)
    _make_private_directory(directory)
    key_path, cert_path = directory / KEY_FILE, directory / CERT_FILE
    if not force and (key_path.exists() or cert_path.exists()):
        raise CAError(f"a CA already exists in {directory} (`sandlock ca init --force` replaces it)")
    if (directory / MANIFEST_FILE).exists():
        raise CAError("the current CA is installed in trust stores (see `sandlock ca show`); "
                      "run `sandlock ca uninstall` before replacing it")
    ca = persistent_ca()
    _write_pair(directory, ca)
    return ca


def load_persistent(env: Mapping[str, str] = os.environ) -> CertificateAuthority | None:
    """The persistent CA, or None when there is none. CAError when it exists but cannot
    be trusted or used: incomplete, unsafe permissions, corrupt, mismatched, expired."""
    directory = ca_directory(env)
    key_path, cert_path = directory / KEY_FILE, directory / CERT_FILE
    present = [p.exists() or p.is_symlink() for p in (key_path, cert_path)]
    if not any(present):
        return None
    if not all(present):
        missing = key_path if not present[0] else cert_path
        raise CAError(f"{missing} is missing: the CA in {directory} is incomplete "
                      "(`sandlock ca init --force` makes a new one)")
    check_directory(directory)
    key_pem = _read_private(key_path)
    cert_pem = _read(cert_path)
    try:
        return CertificateAuthority(cert_pem=cert_pem, key_pem=key_pem, origin="persistent")
    except CAError as exc:
        raise CAError(f"{directory}: {exc}") from None


def load_certificate(env: Mapping[str, str] = os.environ) -> bytes | None:
    """Only the persistent CA's certificate PEM (no key needed: show, export, install);
    None when there is none."""
    path = ca_directory(env) / CERT_FILE
    if not path.exists():
        return None
    data = _read(path)
    parse_certificate(data)  # CAError if corrupt
    return data


def check_directory(directory: Path) -> None:
    """CAError unless ``directory`` is ours and nobody else can write to it."""
    try:
        info = os.stat(directory)
    except OSError as exc:
        raise CAError(f"{directory}: {exc.strerror}") from None
    if info.st_uid != os.geteuid():
        raise CAError(f"{directory} belongs to uid {info.st_uid}, not to you: refusing to use a CA "
                      "someone else controls")
    if info.st_mode & (stat.S_IWGRP | stat.S_IWOTH):
        raise CAError(f"{directory} is writable by others (mode {stat.S_IMODE(info.st_mode):04o}): "
                      f"refusing to use it (chmod 700 {directory})")


def _read_private(path: Path) -> bytes:
    """The key file's content, if it is a regular file of ours that only we can read."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC)
    except OSError as exc:
        raise CAError(f"{path}: {exc.strerror}") from None
    with os.fdopen(fd, "rb") as file:
        info = os.fstat(file.fileno())
        if not stat.S_ISREG(info.st_mode) or info.st_uid != os.geteuid():
            raise CAError(f"{path} is not a regular file of yours: refusing to use it")
        if info.st_mode & 0o077:
            raise CAError(f"{path} is accessible to others (mode {stat.S_IMODE(info.st_mode):04o}): "
                          f"refusing to use it (chmod 600 {path}, and consider the key exposed)")
        return file.read()


def _read(path: Path) -> bytes:
    try:
        return path.read_bytes()
    except OSError as exc:
        raise CAError(f"{path}: {exc.strerror}") from None


def _make_private_directory(directory: Path) -> None:
    """Create ``directory`` and missing parents 0700 (as the XDG spec asks for data
    directories); an existing one of ours is tightened to 0700."""
    missing = []
    parent = directory
    while not parent.exists():
        missing.append(parent)
        parent = parent.parent
    try:
        for path in reversed(missing):
            os.mkdir(path, 0o700)
        if os.stat(directory).st_uid == os.geteuid():
            os.chmod(directory, 0o700)
    except OSError as exc:
        raise CAError(f"cannot create {exc.filename or directory}: {exc.strerror}") from None
    check_directory(directory)


def _write_pair(directory: Path, ca: CertificateAuthority) -> None:
    """Key then certificate, both written to new files (with their exact modes), then
    renamed into place."""
    from contextlib import ExitStack

    from .._hostfile import Output

    staged: list[tuple[Output, str]] = []
    with ExitStack() as held:
        try:
            for name, data, mode in ((KEY_FILE, ca.key_pem, 0o600), (CERT_FILE, ca.cert_pem, 0o644)):
                output = held.enter_context(Output(directory / name))
                staged.append((output, output.stage(data, mode, exact=True, durable=True)))
            for output, temporary in staged:
                output.commit(temporary)
        except OSError as exc:
            for output, temporary in staged:
                output.discard(temporary)
            raise CAError(f"cannot write in {directory}: {exc.strerror}") from None
