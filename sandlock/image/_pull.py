"""A registry's image pulled into the store as an OCI image layout, then read like any
local one (``_source``: the same digest checks, the same unpacking).

Where: ``STORE/pulled/NAME`` (STORE the per-user image store, denied in every policy;
NAME the canonical reference, ``/`` spelled ``%``): ``oci-layout``, ``index.json``
naming the tag, ``blobs/sha256/...`` (the index the registry gave, if any, the
manifest for this machine, its config and layers). It is written into a directory of
its own beside it and renamed into place once every blob matched its digest, so a
failed or refused pull leaves nothing; every file made there is new (O_EXCL,
O_NOFOLLOW, through directory descriptors), and the store's directories are the
user's own, reached through no symlink.

When: a reference not in the store yet is pulled; once there, a run uses it without
asking the registry again (a tag is not re-resolved: ``sandlock image pull`` does
that, ``pull_again``); a digest-pinned one never needs the network again.

Limits: a manifest, index or config is at most ``MAX_JSON``; the whole pull at most
``MAX_PULL`` bytes (the sizes the manifest declares, and each blob at most its
declared size); each connect and read waits at most ``SANDLOCK_PULL_TIMEOUT`` seconds
(default ``DEFAULT_TIMEOUT``).
"""

from __future__ import annotations

import json
import os
import stat

from .._errors import PolicyError
from .._hostfile import open_directory
from ._reference import ImageError, Located, locate
from ._store import made_in_place, remove_entry
from ._source import (
    INDEXES,
    MAX_JSON,
    blob_name,
    for_this_machine,
    hexdigest,
    json_object,
    sha256,
)

TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Callable, Sequence

    from ._remote import Remote

PULLED = "pulled"
MAX_PULL = 16 << 30  # 16 GiB: larger than any image one would run a command in
DEFAULT_TIMEOUT = 30.0
_ACCEPT = ", ".join((
    "application/vnd.oci.image.index.v1+json", "application/vnd.oci.image.manifest.v1+json",
    "application/vnd.docker.distribution.manifest.list.v2+json",
    "application/vnd.docker.distribution.manifest.v2+json"))
_MANIFESTS = ("application/vnd.oci.image.manifest.v1+json",
              "application/vnd.docker.distribution.manifest.v2+json")
_REF_NAME = "org.opencontainers.image.ref.name"
_CREATE = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC
_DIRECTORY = os.O_PATH | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC
_CHUNK = 1 << 20


def ensure_pulled(reference: str, store: str,
                  resolver: Callable[[], Callable[[str], Sequence[str]]]) -> None:
    """The registry image ``reference`` names pulled into ``store`` unless it is there
    (nothing for a local path); its names resolved by what ``resolver()`` gives (made
    only for a pull); PolicyError (--image) for one that cannot be."""
    try:
        located = locate(reference)
        if located.remote is not None and pulled_layout(store, located.remote) is None:
            pull(located.remote, store, resolver(), pull_timeout())
    except ImageError as exc:
        raise PolicyError("image", str(exc) if reference in str(exc)
                          else f"{reference}: {exc}") from None
    except OSError as exc:
        raise PolicyError("image", f"{reference}: {exc.filename or 'the image store'}: "
                          f"{exc.strerror or exc}") from None


def pull_timeout() -> float:
    text = os.environ.get("SANDLOCK_PULL_TIMEOUT", "")
    try:
        timeout = float(text) if text else DEFAULT_TIMEOUT
    except ValueError:
        timeout = -1.0
    if not 0 < timeout <= 3600:
        raise ImageError(f"SANDLOCK_PULL_TIMEOUT={text!r}: expected seconds, more than 0 "
                         "and at most 3600")
    return timeout


def pulled_layout(store: str, remote: Remote) -> Located | None:
    """The layout of ``remote`` in the store, if it was pulled; ImageError if what is
    at its name is not a directory of the user's (a symlink someone planted)."""
    pulled = _pulled_directory(store)
    try:
        info = os.stat(remote.store_name, dir_fd=pulled, follow_symlinks=False)
    except FileNotFoundError:
        return None
    finally:
        os.close(pulled)
    if not stat.S_ISDIR(info.st_mode) or info.st_uid != os.geteuid():
        raise ImageError(f"{remote.canonical}: {os.path.join(store, PULLED, remote.store_name)} "
                         "is not a directory of yours (a symlink or another's): refused")
    path = os.path.join(store, PULLED, remote.store_name)
    return Located(remote.canonical, path, None, False, remote)


def _pulled_directory(store: str) -> int:
    """``store/pulled``, made 0700 if missing, as an O_PATH descriptor reached through
    no symlink the user could have left, and the user's own."""
    for path in (store, os.path.join(store, PULLED)):
        try:
            os.mkdir(path, 0o700)
        except FileExistsError:
            pass
        except FileNotFoundError:
            os.makedirs(path, 0o700, exist_ok=True)
    fd = open_directory(store)
    try:
        for name in ("", PULLED):
            if name:
                if stat.S_ISLNK(os.stat(name, dir_fd=fd, follow_symlinks=False).st_mode):
                    raise ImageError(f"{os.path.join(store, name)} is a symbolic link: refused "
                                     "(sandlock writes through none)")
                inner = os.open(name, _DIRECTORY, dir_fd=fd)
                os.close(fd)
                fd = inner
            info = os.fstat(fd)
            if info.st_uid != os.geteuid() or info.st_mode & 0o077:
                raise ImageError(f"{os.path.join(store, name)}: the image store must be yours "
                                 "and closed to others (mode 0700)")
    except BaseException:
        os.close(fd)
        raise
    return fd


def pull_again(reference: str, store: str, resolve: Callable[[str], Sequence[str]]) -> str:
    """``sandlock image pull``: the registry image ``reference`` names pulled now, its
    tag resolved anew, replacing the store's copy; the manifest's digest."""
    remote = locate(reference).remote
    if remote is None:
        raise ImageError(f"{reference}: a local image, not a registry's: nothing to pull")
    return pull(remote, store, resolve, pull_timeout(), replace=True)


def pull(remote: Remote, store: str, resolve: Callable[[str], Sequence[str]], timeout: float,
         *, replace: bool = False) -> str:
    """Pull ``remote`` into the store now (a directory of its own, renamed into place;
    ``replace``: over the copy there, else a copy there wins); its manifest's digest."""
    from ._http import Client

    pulled = _pulled_directory(store)
    unique = f"{os.getpid()}-{os.urandom(4).hex()}"
    digest = ""

    def fill(partial: str) -> None:
        nonlocal digest
        try:
            digest = _Pull(remote, Client(remote, resolve, timeout), pulled, partial).run()
        except (ValueError, LookupError, TypeError, AttributeError) as exc:  # malformed JSON
            raise ImageError(f"{remote.canonical}: not a usable image (its manifest is "
                             f"malformed: {type(exc).__name__}: {exc})") from None
        if replace and pulled_layout(store, remote) is not None:  # (image pull: the old out)
            os.rename(remote.store_name, f".replaced-{unique}", src_dir_fd=pulled, dst_dir_fd=pulled)
            remove_entry(pulled, f".replaced-{unique}")

    try:
        made_in_place(pulled, f".pulling-{unique}", remote.store_name, fill)
    finally:
        os.close(pulled)
    return digest


def pulled_images(store: str) -> list[tuple[str, str]]:
    """``sandlock image ls``: (reference, manifest digest) of each image in the store."""
    pulled = _pulled_directory(store)
    found = []
    try:
        for name in sorted(os.listdir(f"/proc/self/fd/{pulled}")):
            if name.startswith("."):
                continue  # (a pull under way)
            try:
                fd = os.open(f"{name}/index.json", os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC, dir_fd=pulled)
                with os.fdopen(fd, "rb") as f:
                    digest = json_object(f.read(MAX_JSON), name)["manifests"][0]["digest"]
            except (OSError, ImageError, LookupError, TypeError):
                digest = "(unreadable)"
            found.append((name.replace("%", "/"), str(digest)))
    finally:
        os.close(pulled)
    return found


class _Pull:
    """One pull's requests and the files it writes in ``partial``."""

    def __init__(self, remote: Remote, client: object, pulled: int, partial: str) -> None:
        self._remote = remote
        self._client = client
        self._root = os.open(partial, _DIRECTORY, dir_fd=pulled)
        self._blobs = -1
        self._left = MAX_PULL
        self._located = Located(remote.canonical, "", None, False, remote)  # (for messages)

    def run(self) -> str:
        try:
            os.mkdir("blobs", 0o700, dir_fd=self._root)
            blobs = os.open("blobs", _DIRECTORY, dir_fd=self._root)
            try:
                os.mkdir("sha256", 0o700, dir_fd=blobs)
                self._blobs = os.open("sha256", _DIRECTORY, dir_fd=blobs)
            finally:
                os.close(blobs)
            return self._pull()
        finally:
            os.close(self._root)
            if self._blobs >= 0:
                os.close(self._blobs)

    def _pull(self) -> str:
        remote = self._remote
        data, media_type = self._manifest(remote.reference, remote.digest)
        top = {"mediaType": media_type, "digest": "sha256:" + hexdigest(data), "size": len(data)}
        value = json_object(data, f"{remote.canonical}: its manifest")
        for _ in range(4):  # an index of indexes, at most this deep (as _source reads)
            if media_type not in INDEXES:
                break
            chosen = for_this_machine(self._located, value.get("manifests"))
            digest = chosen.get("digest")
            blob_name(digest)
            data, media_type = self._manifest(digest, digest)
            value = json_object(data, f"{remote.canonical}: manifest {digest}")
        if media_type not in _MANIFESTS:
            raise ImageError(f"{remote.canonical}: a manifest of type {media_type!r}, which "
                             "sandlock does not read (OCI and Docker v2 schema 2 it does)")
        config = value.get("config")
        layers = value.get("layers")
        if not isinstance(config, dict) or not isinstance(layers, list) \
                or not all(isinstance(layer, dict) for layer in layers):
            raise ImageError(f"{remote.canonical}: its manifest names no config or layers")
        declared = sum(_size(d) or 0 for d in (config, *layers))
        if declared > MAX_PULL:
            raise ImageError(f"{remote.canonical}: {declared} bytes, more than sandlock pulls "
                             f"({MAX_PULL >> 30} GiB)")
        self._blob(config, MAX_JSON)
        for layer in layers:
            self._blob(layer, MAX_PULL)
        tag = {"annotations": {_REF_NAME: remote.tag}} if remote.tag else {}
        index = {"schemaVersion": 2, "manifests": [{**top, **tag}]}
        _write(self._root, "index.json", [json.dumps(index).encode()])
        _write(self._root, "oci-layout", [b'{"imageLayoutVersion": "1.0.0"}'])
        return str(top["digest"])

    def _manifest(self, reference: str, digest: str | None) -> tuple[bytes, str]:
        """The manifest (or index) ``reference`` names, checked against ``digest``
        when one pins it, and kept as a blob."""
        path = f"/v2/{self._remote.repository}/manifests/{reference}"
        with self._client.get(path, _ACCEPT) as response:  # type: ignore[attr-defined]
            data = _read(response, MAX_JSON + 1, f"manifest {reference}")
            header = (response.getheader("Content-Type") or "").split(";")[0].strip()
        if len(data) > MAX_JSON:
            raise ImageError(f"{self._remote.canonical}: manifest {reference} is larger than "
                             f"{MAX_JSON} bytes: refused")
        if digest is not None and "sha256:" + hexdigest(data) != digest:
            raise ImageError(f"{self._remote.canonical}: manifest {reference} does not match "
                             f"its digest (it is sha256:{hexdigest(data)}): refused")
        media_type = json_object(data, f"{self._remote.canonical}: manifest {reference}") \
            .get("mediaType") or header
        self._keep(data)
        return data, str(media_type)

    def _keep(self, data: bytes) -> None:
        name = blob_name("sha256:" + hexdigest(data)).rsplit("/", 1)[1]
        try:
            _write(self._blobs, name, [data])
        except FileExistsError:
            pass  # (the same bytes, already kept)

    def _blob(self, descriptor: dict, most: int) -> None:
        """A config or layer blob, streamed through sha256 into a new file; removed
        and refused unless it matches its digest (and its declared size)."""
        digest = descriptor.get("digest")
        name = blob_name(digest).rsplit("/", 1)[1]
        size = _size(descriptor)
        limit = min(self._left, most, size if size is not None else most)
        path = f"/v2/{self._remote.repository}/blobs/{digest}"
        hashed = sha256()
        received = 0
        try:
            fd = os.open(name, _CREATE, 0o600, dir_fd=self._blobs)
        except FileExistsError:
            return  # (a blob listed twice: checked the first time)
        try:
            with self._client.get(path) as response:  # type: ignore[attr-defined]
                while chunk := _read(response, min(_CHUNK, limit - received + 1), f"blob {digest}"):
                    received += len(chunk)
                    if received > limit:
                        raise ImageError(f"{self._remote.canonical}: blob {digest} is larger "
                                         "than its declared size or what sandlock pulls: refused")
                    hashed.update(chunk)  # type: ignore[attr-defined]
                    os.write(fd, chunk)
        finally:
            os.close(fd)
        if "sha256:" + hashed.hexdigest() != digest:  # type: ignore[attr-defined]
            raise ImageError(f"{self._remote.canonical}: blob {digest} does not match its "
                             "digest: the image is refused")
        self._left -= received


def _read(response: object, size: int, what: str) -> bytes:
    from ._http import read  # (loaded by then: only pulls import the client)

    return read(response, size, what)  # type: ignore[arg-type]


def _size(descriptor: dict) -> int | None:
    size = descriptor.get("size")
    if size is None:
        return None
    if not isinstance(size, int) or isinstance(size, bool) or size < 0:
        raise ImageError(f"a descriptor's size is not a byte count: {size!r}")
    return size


def _write(directory: int, name: str, chunks: list[bytes]) -> None:
    fd = os.open(name, _CREATE, 0o600, dir_fd=directory)
    try:
        for chunk in chunks:
            view = memoryview(chunk)
            while view:
                view = view[os.write(fd, view):]
    finally:
        os.close(fd)
