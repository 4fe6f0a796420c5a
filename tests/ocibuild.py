"""Small OCI images built by tests: layers as lists of tar entries, written as an OCI
image layout directory or a `docker save` tarball (legacy manifest.json), with correct
digests and diff_ids unless a test breaks them on purpose."""

from __future__ import annotations

import gzip
import hashlib
import io
import json
import os
import tarfile
from dataclasses import dataclass


@dataclass
class Entry:
    name: str
    kind: str = "file"  # file, dir, symlink, hardlink, whiteout, opaque, fifo, chardev
    data: bytes = b""
    target: str = ""  # symlink or hard link target
    mode: int = 0o644


def layer_tar(entries: list[Entry]) -> bytes:
    out = io.BytesIO()
    with tarfile.open(fileobj=out, mode="w", format=tarfile.PAX_FORMAT) as tar:
        for entry in entries:
            info = tarfile.TarInfo(entry.name)
            info.mode = entry.mode
            data = None
            if entry.kind in ("file", "whiteout", "opaque"):
                info.type = tarfile.REGTYPE
                info.size = len(entry.data)
                data = io.BytesIO(entry.data)
            elif entry.kind == "dir":
                info.type = tarfile.DIRTYPE
            elif entry.kind == "symlink":
                info.type, info.linkname = tarfile.SYMTYPE, entry.target
            elif entry.kind == "hardlink":
                info.type, info.linkname = tarfile.LNKTYPE, entry.target
            elif entry.kind == "fifo":
                info.type = tarfile.FIFOTYPE
            elif entry.kind == "chardev":
                info.type, info.devmajor, info.devminor = tarfile.CHRTYPE, 1, 3
            tar.addfile(info, data)
    return out.getvalue()


def _digest(data: bytes) -> str:
    return "sha256:" + hashlib.sha256(data).hexdigest()


def _config(tars: list[bytes], workdir: str = "") -> bytes:
    config = {"architecture": "amd64", "os": "linux",
              "config": {"WorkingDir": workdir} if workdir else {},
              "rootfs": {"type": "layers", "diff_ids": [_digest(t) for t in tars]}}
    return json.dumps(config).encode()


def oci_layout(path: str, layers: list[list[Entry]], *, tag: str = "latest",
               compress: bool = True, workdir: str = "", blobs: dict | None = None) -> str:
    """An OCI image layout at ``path``; ``blobs`` (digest -> bytes) replaces a blob's
    content after the digests are computed (a tampered layout)."""
    os.makedirs(os.path.join(path, "blobs", "sha256"), exist_ok=True)

    def put(data: bytes) -> str:
        digest = _digest(data)
        with open(os.path.join(path, "blobs", "sha256", digest[7:]), "wb") as f:
            f.write(data)
        return digest

    tars = [layer_tar(entries) for entries in layers]
    stored = [gzip.compress(t) if compress else t for t in tars]
    config = _config(tars, workdir)
    manifest = {
        "schemaVersion": 2, "mediaType": "application/vnd.oci.image.manifest.v1+json",
        "config": {"mediaType": "application/vnd.oci.image.config.v1+json",
                   "digest": put(config), "size": len(config)},
        "layers": [{"mediaType": "application/vnd.oci.image.layer.v1.tar"
                    + ("+gzip" if compress else ""), "digest": put(blob), "size": len(blob)}
                   for blob in stored],
    }
    raw = json.dumps(manifest).encode()
    index = {"schemaVersion": 2, "manifests": [{
        "mediaType": "application/vnd.oci.image.manifest.v1+json", "digest": put(raw),
        "size": len(raw), "annotations": {"org.opencontainers.image.ref.name": tag}}]}
    with open(os.path.join(path, "index.json"), "w") as f:
        json.dump(index, f)
    with open(os.path.join(path, "oci-layout"), "w") as f:
        json.dump({"imageLayoutVersion": "1.0.0"}, f)
    for digest, data in (blobs or {}).items():
        with open(os.path.join(path, "blobs", "sha256", digest[7:]), "wb") as f:
            f.write(data)
    return path


def docker_save(path: str, layers: list[list[Entry]], *, repo_tag: str = "test/image:latest") -> str:
    """A legacy `docker save` tarball at ``path`` (manifest.json, <id>/layer.tar)."""
    tars = [layer_tar(entries) for entries in layers]
    config = _config(tars)
    config_name = _digest(config)[7:] + ".json"
    names = [f"{hashlib.sha256(str(i).encode()).hexdigest()}/layer.tar" for i in range(len(tars))]
    manifest = json.dumps([{"Config": config_name, "RepoTags": [repo_tag], "Layers": names}]).encode()
    with tarfile.open(path, "w") as out:
        for name, data in ((config_name, config), *zip(names, tars), ("manifest.json", manifest)):
            info = tarfile.TarInfo(name)
            info.size = len(data)
            out.addfile(info, io.BytesIO(data))
    return path
