"""OCI images as the command's root (``--image REF``): a local OCI image layout, a
`docker save` tarball or a registry's image (pulled into the store as a layout), read
and checked (every blob against its digest, every layer
against the config's diff_ids), its layers unpacked once into sandlock's per-user
store, whiteouts honoured and nothing written outside the root. Only a run with an
image imports this.

* ``_reference``: what REF names (a layout directory, a tarball, a tag in it, or a
  registry's image);
* ``_remote``: a registry reference parsed by Docker's conventions, checked;
* ``_http``: GETs to a registry: TLS, its name resolved by the caller, tokens, redirects;
* ``_pull``: a registry's image pulled into the store as an OCI layout, every blob
  checked against its digest before it is kept;
* ``_source``: reading an image: index, manifest, config, layers;
* ``_unpack``: a layer applied to a root through descriptors only;
* ``_store``: the per-user store of unpacked roots, made atomically.

Internal to sandlock (not public API).
"""

from __future__ import annotations

from .._lazy import lazy_exports

TYPE_CHECKING = False
if TYPE_CHECKING:
    from ._pull import ensure_pulled, pull_again, pulled_images
    from ._reference import ImageError, Located, locate
    from ._store import Unpacked, unpacked_image

_EXPORTS = {
    "ensure_pulled": "_pull",
    "pull_again": "_pull",
    "pulled_images": "_pull",
    "ImageError": "_reference",
    "Located": "_reference",
    "locate": "_reference",
    "Unpacked": "_store",
    "unpacked_image": "_store",
}

__all__ = sorted(_EXPORTS)

__getattr__, __dir__ = lazy_exports(__name__, _EXPORTS, globals(), __all__)
