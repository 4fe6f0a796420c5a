"""What ``--image REF`` names: ``PATH`` or ``PATH:TAG``, PATH a local OCI image layout
(a directory with ``oci-layout`` and ``index.json``) or a `docker save` tarball; or,
when no such path exists, a registry reference (``alpine``, ``registry.test/team/
tool:1``, ``...@sha256:HEX``: ``_remote``), pulled into the store (``_pull``) and then
read as the layout it is there.
"""

from __future__ import annotations

import os

from .._record import record

TYPE_CHECKING = False
if TYPE_CHECKING:
    from ._remote import Remote


class ImageError(Exception):
    """An image that cannot be used: the message names what and why."""


@record
class Located:
    reference: str  # as normalised: an absolute path, ":TAG" if one was given
    path: str
    tag: str | None
    tarball: bool  # a `docker save` tarball (else an OCI layout directory)
    remote: Remote | None = None  # a registry's image (path: "", until it is pulled)


def locate(reference: str) -> Located:
    """The local image ``reference`` names; ImageError if none."""
    path, tag = reference, None
    if not os.path.exists(path) and ":" in reference:
        path, tag = reference.rsplit(":", 1)
        if not tag or "/" in tag:
            path, tag = reference, None
    if not os.path.exists(path):
        return _remote(reference)
    path = os.path.realpath(path)
    if os.path.isdir(path):
        if not os.path.isfile(os.path.join(path, "index.json")):
            raise ImageError(f"{reference}: a directory without index.json, not an OCI "
                             "image layout")
        tarball = False
    elif os.path.isfile(path):
        tarball = True
    else:
        raise ImageError(f"{reference}: neither a directory nor a file")
    return Located(path + (f":{tag}" if tag else ""), path, tag, tarball)


def _remote(reference: str) -> Located:
    """A registry's image, when ``reference`` is no local path (it wins: today's layouts
    keep working) but a well-formed registry reference."""
    from ._remote import (
        parse_remote,  # (``re``: only for references that are not paths)
    )

    if reference.startswith(("/", "./", "../", "~")):
        raise ImageError(f"{reference}: no such OCI image layout or `docker save` tarball")
    try:
        remote = parse_remote(reference)
    except ImageError as exc:
        raise ImageError(f"no such local image, and not a registry reference: {exc}") from None
    return Located(remote.canonical, "", None, False, remote)
