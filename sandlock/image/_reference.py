"""What ``--image REF`` names: ``PATH`` or ``PATH:TAG``, PATH a local OCI image layout
(a directory with ``oci-layout`` and ``index.json``) or a `docker save` tarball.

There is no registry client: no network is reachable from here to test one against,
and a pull would be an unverified download on the run's start-up path. A reference
that is not a local path (``alpine``, ``docker.io/library/alpine:3``) is refused with
the commands that make a local copy.
"""

from __future__ import annotations

import os

from .._record import record


class ImageError(Exception):
    """An image that cannot be used: the message names what and why."""


@record
class Located:
    reference: str  # as normalised: an absolute path, ":TAG" if one was given
    path: str
    tag: str | None
    tarball: bool  # a `docker save` tarball (else an OCI layout directory)


def locate(reference: str) -> Located:
    """The local image ``reference`` names; ImageError if none."""
    path, tag = reference, None
    if not os.path.exists(path) and ":" in reference:
        path, tag = reference.rsplit(":", 1)
        if not tag or "/" in tag:
            path, tag = reference, None
    if not os.path.exists(path):
        raise ImageError(
            f"{reference}: no such OCI image layout or `docker save` tarball here, and "
            "sandlock does not pull from registries: save the image first (`docker save "
            "IMAGE -o image.tar`, or `skopeo copy docker://IMAGE oci:DIR:TAG`) and give "
            "its path")
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
