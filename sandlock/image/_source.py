"""Reading an image: an OCI image layout (a directory, or the one a `docker save`
tarball holds) or a legacy `docker save` tarball (``manifest.json``).

Everything is checked against what names it before it is used: the manifest and the
config against their digests, each layer against its digest (when the manifest gives
one) and against the config's ``rootfs.diff_ids`` (the digest of the uncompressed
tar), as it is unpacked (``Layer.verified``). A digest is the only way a name is made
from the image's own content, so it must be exactly ``sha256:`` and 64 hex digits:
``sha256:../../x`` never becomes a path.
"""

from __future__ import annotations

import io
import json
import os

TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Callable
    from typing import BinaryIO

from .._record import record
from ._reference import ImageError, Located

_HEX = frozenset("0123456789abcdef")
INDEXES = ("application/vnd.oci.image.index.v1+json",
            "application/vnd.docker.distribution.manifest.list.v2+json")
_REF_NAME = "org.opencontainers.image.ref.name"
_ARCHES = {"x86_64": "amd64", "aarch64": "arm64"}
MAX_JSON = 4 << 20  # an index, manifest or config larger than this is not one


@record
class Layer:
    name: str  # for messages
    open: Callable[[], BinaryIO]
    digest: str | None  # of the blob as stored (None: a legacy tarball's)
    diff_id: str  # of the uncompressed tar


@record
class Image:
    config_digest: str
    config: dict
    layers: tuple[Layer, ...]

    @property
    def working_dir(self) -> str:
        cwd = (self.config.get("config") or {}).get("WorkingDir") or "/"
        return cwd if isinstance(cwd, str) and cwd.startswith("/") else "/"


class Source:
    """The files of a layout directory or of a tarball, by name."""

    def __init__(self, located: Located) -> None:
        self._located = located
        self._tar = None
        if located.tarball:  # (tarfile and gzip: loaded only to read or unpack layers)
            import tarfile

            try:
                self._tar = tarfile.open(located.path, "r:")
            except tarfile.TarError:
                raise ImageError(f"{located.reference}: neither an OCI image layout nor a "
                                 "`docker save` tarball (not a tar archive)") from None

    def close(self) -> None:
        if self._tar is not None:
            self._tar.close()

    def has(self, name: str) -> bool:
        if self._tar is None:
            return os.path.isfile(os.path.join(self._located.path, name))
        try:
            self._tar.getmember(name)
        except KeyError:
            return False
        return True

    def open(self, name: str) -> BinaryIO:
        if self._tar is None:
            return open(os.path.join(self._located.path, name), "rb")  # noqa: SIM115
        try:
            member = self._tar.extractfile(name)
        except KeyError:
            member = None
        if member is None:
            raise ImageError(f"{self._located.reference}: {name} is missing")
        return member  # type: ignore[return-value]

    def json(self, name: str, digest: str | None = None) -> dict:
        with self.open(name) as f:
            data = f.read(MAX_JSON + 1)
        if len(data) > MAX_JSON:
            raise ImageError(f"{self._located.reference}: {name} is too large")
        if digest is not None and "sha256:" + hexdigest(data) != digest:
            raise ImageError(f"{self._located.reference}: {name} does not match its digest")
        return json_object(data, f"{self._located.reference}: {name}")


def json_object(data: bytes, what: str) -> dict:
    """``data`` as a JSON object; ImageError saying ``what`` is not one."""
    try:
        value = json.loads(data)
    except ValueError:
        raise ImageError(f"{what} is not JSON") from None
    if not isinstance(value, dict):
        raise ImageError(f"{what} is not a JSON object")
    return value


def blob_name(digest: object) -> str:
    """``blobs/sha256/HEX`` for ``sha256:HEX``, 64 lowercase hex digits exactly (no
    regular expression: ``re`` costs an image run ~4 ms to import)."""
    hex_digits = digest[7:] if isinstance(digest, str) and digest.startswith("sha256:") else ""
    if len(hex_digits) != 64 or not _HEX.issuperset(hex_digits):
        raise ImageError(f"{digest!r}: not a sha256 digest")
    return f"blobs/sha256/{hex_digits}"


def sha256() -> object:
    """A SHA-256 hash: the interpreter's own (hashlib's OpenSSL binding costs ~3 ms to
    import), else hashlib's."""
    try:
        from _sha256 import sha256 as made  # Python 3.11
    except ImportError:
        try:
            from _sha2 import sha256 as made  # Python 3.12 and later
        except ImportError:
            from hashlib import sha256 as made
    return made()


def hexdigest(data: bytes) -> str:
    """The sha256 of ``data``, in hex."""
    digest = sha256()
    digest.update(data)  # type: ignore[attr-defined]
    return digest.hexdigest()  # type: ignore[attr-defined]


def read_image(source: Source, located: Located) -> Image:
    if source.has("index.json"):
        return _oci_image(source, located)
    if located.tarball and source.has("manifest.json"):
        return _legacy_image(source, located)
    raise ImageError(f"{located.reference}: neither an OCI image layout nor a `docker save` tarball")


def _oci_image(source: Source, located: Located) -> Image:
    index = source.json("index.json")
    descriptor = _chosen(located, index.get("manifests"), lambda d: _names(d))
    for _ in range(4):  # an index of indexes, at most this deep
        if descriptor.get("mediaType") not in INDEXES:
            break
        nested = source.json(blob_name(descriptor.get("digest")), descriptor.get("digest"))
        descriptor = for_this_machine(located, nested.get("manifests"))
    manifest = source.json(blob_name(descriptor.get("digest")), descriptor.get("digest"))
    config_descriptor = manifest.get("config") or {}
    config_digest = config_descriptor.get("digest")
    config = source.json(blob_name(config_digest), config_digest)
    blobs = manifest.get("layers")
    if not isinstance(blobs, list):
        raise ImageError(f"{located.reference}: its manifest lists no layers")
    diff_ids = _diff_ids(located, config, len(blobs))
    layers = []
    for blob, diff_id in zip(blobs, diff_ids):
        name = blob_name(blob.get("digest") if isinstance(blob, dict) else None)
        layers.append(Layer(name, lambda name=name: source.open(name), blob["digest"], diff_id))
    return Image(config_digest, config, tuple(layers))


def _legacy_image(source: Source, located: Located) -> Image:
    with source.open("manifest.json") as f:
        entries = json.loads(f.read(MAX_JSON))
    if not isinstance(entries, list):
        raise ImageError(f"{located.reference}: manifest.json is not a list")
    entry = _chosen(located, entries, lambda e: tuple(e.get("RepoTags") or ()))
    config_name = entry.get("Config")
    if not isinstance(config_name, str):
        raise ImageError(f"{located.reference}: manifest.json names no config")
    with source.open(config_name) as f:
        data = f.read(MAX_JSON)
    config_digest = "sha256:" + hexdigest(data)
    config = json.loads(data)
    names = entry.get("Layers")
    if not isinstance(names, list) or not all(isinstance(n, str) for n in names):
        raise ImageError(f"{located.reference}: manifest.json lists no layers")
    diff_ids = _diff_ids(located, config, len(names))
    layers = tuple(Layer(name, lambda name=name: source.open(name), None, diff_id)
                   for name, diff_id in zip(names, diff_ids))
    return Image(config_digest, config, layers)


def _diff_ids(located: Located, config: dict, count: int) -> list[str]:
    diff_ids = (config.get("rootfs") or {}).get("diff_ids")
    if not isinstance(diff_ids, list) or len(diff_ids) != count:
        raise ImageError(f"{located.reference}: its config's diff_ids do not match its layers")
    for diff_id in diff_ids:
        blob_name(diff_id)  # (checked: sha256 and 64 hex digits)
    return diff_ids


def _names(descriptor: dict) -> tuple[str, ...]:
    name = (descriptor.get("annotations") or {}).get(_REF_NAME)
    return (name,) if isinstance(name, str) else ()


def _chosen(located: Located, entries: object, names: Callable[[dict], tuple[str, ...]]) -> dict:
    """The entry ``located.tag`` names (a tag, or a full name ending in ":TAG"), or the
    only one."""
    if not isinstance(entries, list) or not all(isinstance(e, dict) for e in entries) or not entries:
        raise ImageError(f"{located.reference}: it holds no image")
    if located.tag is None:
        if len(entries) == 1:
            return entries[0]
        known = sorted({n for e in entries for n in names(e)})
        raise ImageError(f"{located.reference}: it holds {len(entries)} images: add :TAG "
                         f"({', '.join(known) or 'none is named'})")
    found = [e for e in entries if any(n == located.tag or n.endswith(":" + located.tag)
                                       for n in names(e))]
    if len(found) != 1:
        raise ImageError(f"{located.reference}: {'no' if not found else 'more than one'} "
                         f"image is named {located.tag}")
    return found[0]


def for_this_machine(located: Located, entries: object) -> dict:
    import platform

    arch = _ARCHES.get(platform.machine(), platform.machine())
    if isinstance(entries, list):
        for entry in entries:
            wanted = entry.get("platform") if isinstance(entry, dict) else None
            if isinstance(wanted, dict) and wanted.get("os") == "linux" \
                    and wanted.get("architecture") == arch:
                return entry
    raise ImageError(f"{located.reference}: no image for linux/{arch} in it")


class _Hashing(io.RawIOBase):
    """Reads ``raw``, hashing what goes through."""

    def __init__(self, raw: BinaryIO) -> None:
        self._raw = raw
        self.hash = sha256()

    def readable(self) -> bool:
        return True

    def readinto(self, buffer: memoryview) -> int:  # type: ignore[override]
        data = self._raw.read(len(buffer))
        buffer[: len(data)] = data
        self.hash.update(data)
        return len(data)

    def drain(self) -> str:
        while self._raw.read(1 << 20):
            pass
        return "sha256:" + self.hash.hexdigest()


class LayerStream:
    """A layer's uncompressed tar, with its digests checked once it is read to the end
    (``verified``)."""

    def __init__(self, layer: Layer) -> None:
        self._layer = layer
        self._file = layer.open()
        self._stored = _Hashing(self._file)
        buffered = io.BufferedReader(self._stored, 1 << 16)
        magic = buffered.peek(4)[:4]
        if magic[:4] == b"\x28\xb5\x2f\xfd":
            self.close()
            raise ImageError(f"layer {layer.name}: zstd-compressed, which sandlock does not "
                             "read (gzip and plain tar it does)")
        if magic[:2] == b"\x1f\x8b":
            import gzip

            plain = gzip.GzipFile(fileobj=buffered, mode="rb")
        else:
            plain = buffered
        self._tar = _Hashing(plain)  # type: ignore[arg-type]
        self.stream = io.BufferedReader(self._tar, 1 << 16)

    def verified(self) -> None:
        """Read to the end: ImageError unless both digests match."""
        if self._tar.drain() != self._layer.diff_id:
            raise ImageError(f"layer {self._layer.name}: does not match its diff_id in the config")
        if self._layer.digest is not None and self._stored.drain() != self._layer.digest:
            raise ImageError(f"layer {self._layer.name}: does not match its digest")

    def close(self) -> None:
        self._file.close()
