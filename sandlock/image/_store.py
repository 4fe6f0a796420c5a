"""The per-user store of unpacked images (``$XDG_STATE_HOME/sandlock/images``, default
``~/.local/state/...``: ``confinement._fspolicy.image_store``), one directory per image, named by its config's
digest, holding ``rootfs``. Denied in every policy (``confinement._fspolicy``): no
sandbox can change a root another run will trust. An image is unpacked in a
directory of its own beside them and renamed into place once complete, so a root in
the store is always whole; two runs unpacking the same image at once both finish, and
the second's copy is removed.
"""

from __future__ import annotations

import os

from .._errors import PolicyError
from .._hostfile import open_directory
from .._record import record

TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Callable
from ._reference import ImageError, Located, locate
from ._source import Image, Source, read_image

ROOTFS = "rootfs"
_FURNISHED = (("proc", 0o555), ("dev", 0o755), ("tmp", 0o1777))  # mount points the run needs


@record
class Unpacked:
    root: str  # the image's root directory on the host
    cwd: str  # where its command starts (the config's WorkingDir, else /)


def unpacked_image(reference: str, store: str) -> Unpacked:
    """The root of the image ``reference`` names, unpacked now into ``store`` if it is
    not there yet; PolicyError (--image) for an image that cannot be used."""
    try:
        located = locate(reference)
        if located.remote is not None:  # (pulled before the sandbox: ``_pull``)
            from ._pull import pulled_layout

            located = pulled_layout(store, located.remote) or _not_pulled(reference)
        source = Source(located)
        try:
            image = read_image(source, located)
            return Unpacked(_unpacked(image, store), image.working_dir)
        finally:
            source.close()
    except (ImageError, EOFError) as exc:
        raise PolicyError("image", f"{reference}: {exc}" if reference not in str(exc)
                          else str(exc)) from None
    except (ValueError, LookupError, TypeError, AttributeError) as exc:  # malformed JSON
        raise PolicyError("image", f"{reference}: not a usable image (its index, manifest "
                          f"or config is malformed: {type(exc).__name__}: {exc})") from None
    except OSError as exc:
        where = f"{reference}: {exc.filename}" if exc.filename else reference
        raise PolicyError("image", f"{where}: {exc.strerror or exc}") from None


def _not_pulled(reference: str) -> Located:
    raise ImageError(f"{reference}: not pulled into the image store (a run pulls it "
                     "before the sandbox is made)")


def _unpacked(image: Image, store: str) -> str:
    os.makedirs(store, 0o700, exist_ok=True)
    store_fd = open_directory(store)  # (through no link a command could have left)
    name = image.config_digest.replace(":", "-")
    try:
        if os.path.isdir(os.path.join(f"/proc/self/fd/{store_fd}", name, ROOTFS)):
            return os.path.join(store, name, ROOTFS)
        made_in_place(store_fd, f".unpacking-{name}-{os.getpid()}", name,
                      lambda partial: _unpack_into(store_fd, partial, image))
    finally:
        os.close(store_fd)
    return os.path.join(store, name, ROOTFS)


def made_in_place(directory: int, partial: str, name: str, fill: Callable[[str], None]) -> None:
    """``name`` in ``directory`` made whole or not at all: ``fill`` fills ``partial``
    (made 0700 there), which is then renamed to ``name``; a failure removes it, and
    when another run put ``name`` there first, theirs is kept (as good as this one)."""
    os.mkdir(partial, 0o700, dir_fd=directory)
    try:
        fill(partial)
        try:
            os.rename(partial, name, src_dir_fd=directory, dst_dir_fd=directory)
        except OSError:  # another run put it there first
            remove_entry(directory, partial)
    except BaseException:
        remove_entry(directory, partial)
        raise


def remove_entry(directory: int, name: str) -> None:
    from ..cow import remove_tree  # (only when making: never on a reused root's way)

    remove_tree(directory, name)


def _unpack_into(store_fd: int, partial: str, image: Image) -> None:
    import tarfile  # (here: a run whose image is unpacked already never loads it)

    os.mkdir(os.path.join(partial, ROOTFS), 0o755, dir_fd=store_fd)
    root = os.open(os.path.join(partial, ROOTFS), os.O_PATH | os.O_DIRECTORY | os.O_NOFOLLOW
                   | os.O_CLOEXEC, dir_fd=store_fd)
    try:
        _apply_layers(root, image)
    except tarfile.TarError as exc:
        raise ImageError(f"a layer is not a tar archive ({exc})") from None
    finally:
        os.close(root)


def _apply_layers(root: int, image: Image) -> None:
    import tarfile

    from ._source import LayerStream
    from ._unpack import Unpacker

    unpacker = Unpacker(root)
    for layer in image.layers:
        for apply in (unpacker.whiteouts, unpacker.entries):
            stream = LayerStream(layer)
            try:
                with tarfile.open(fileobj=stream.stream, mode="r|") as tar:
                    apply(tar)
                if apply == unpacker.entries:  # (what was written is what was checked)
                    stream.verified()
            finally:
                stream.close()
    for directory, mode in _FURNISHED:
        try:
            os.mkdir(directory, mode, dir_fd=root)
        except FileExistsError:
            pass
    unpacker.finish()
