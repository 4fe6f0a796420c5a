"""The command's file calls that Landlock (ABI 7) does not judge: changes to a file's
mode, owner, times, extended attributes and inode flags, and inotify/fanotify watches.
The supervisor hands them here; each is judged against the sandbox's own grants (a
change needs the file writable in the sandbox, a watch readable) and, if allowed,
done by sandlock on the very file it judged. (And the lookup as the caller, which the
network supervisor uses for a bind through the caller's own /proc/self.)

Internal to sandlock (not public API).
"""

from __future__ import annotations

from .._lazy import lazy_exports

TYPE_CHECKING = False
if TYPE_CHECKING:
    from ._handler import FileCalls
    from ._resolve import open_as_caller

_EXPORTS = {
    "FileCalls": "_handler",
    "open_as_caller": "_resolve",
}

__all__ = sorted(_EXPORTS)

__getattr__, __dir__ = lazy_exports(__name__, _EXPORTS, globals(), __all__)
