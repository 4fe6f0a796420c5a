"""Pathname binds, performed as the command would, by a thread that is the command's
equal: restricted by its Landlock ruleset, without capabilities, in its mount
namespace, from its working directory, with its umask.

A unix socket bound to a path creates a file under the name the command gave, which
getsockname() then shows: the bind must look the path up where the command would (its
own /tmp, in the sandbox's mount namespace) and be decided by Landlock as the
command's (MAKE_SOCK). Letting the kernel proceed with the command's own call would
make it read the descriptor and the sockaddr again, after the supervisor looked:
another thread could have turned the call into a UDP bind by then. So the supervisor
hands the binder its own copy of the sockaddr and its own duplicates (the socket,
the caller's working directory), and nothing is read from the command again.

The binder: in the sandbox's namespaces, a thread of its init (pid 1, outside the
command's Landlock domain: nothing in the sandbox can reach it), started when the
command is, which becomes the command's equal at the first request (``serve``);
without namespaces, sandlock's confined worker (the mount namespace is the host's).

    supervisor ══ request: umask, sockaddr + SCM_RIGHTS [socket, cwd?, rulesets...] ══> binder
               <══ reply: errno (0: bound) ══

Rulesets after the socket and the directory: those of nested sandboxes the caller is
in (``_nests``), applied on top by a thread of its own for that one bind, so that every
layer of Landlock the caller is under decides.
"""

from __future__ import annotations

import _thread
import ctypes
import errno
import os
import struct

from .._record import record
from ..kernel import (
    PR_SET_NO_NEW_PRIVS,
    drop_capabilities,
    nr,
    prctl,
    restrict_self,
    syscall,
    tasks,
)

_REQUEST = struct.Struct("=IHH")  # umask, has a directory, nested rulesets
_REPLY = struct.Struct("=i")
MAX_REQUEST = _REQUEST.size + 128  # a sockaddr is 128 bytes at most
MAX_FDS = 2 + 64  # the socket, a directory, a ruleset per nested sandbox (_nests.MAX_NESTS)
_CLONE_FS = 0x200
_libc = ctypes.CDLL(None, use_errno=True)


@record
class PathBind:
    """A pathname bind as materialized: ``raw``, the sockaddr as the command gave it
    (sun_path and length to the byte); ``directory``, sandlock's O_PATH descriptor of
    where a relative path starts (the caller's working directory; -1 for an absolute
    path); ``umask``, the caller's (the file's mode)."""

    raw: bytes
    directory: int
    umask: int


def path_bind(tid: int, raw: bytes, path: bytes) -> PathBind:
    """What the binder needs of thread ``tid``'s bind of ``raw`` (sun_path ``path``),
    taken now, before the supervisor confirms the call is still ``tid``'s: its umask,
    and for a relative path its working directory.

    A path through ``/proc/self`` (or ``thread-self``) names the caller's own entries,
    which the binder's ``/proc/self`` (init's) does not: its directory is looked up as
    the caller would (``files.open_as_caller``), and the socket bound to its last name
    from there (sun_path is then that name: such a path means nothing to a peer)."""
    umask = _umask(tid)
    names = [name for name in path.split(b"/") if name not in (b"", b".")]
    if (path.startswith(b"/") and len(names) > 2 and names[0] == b"proc"
            and names[1] in (b"self", b"thread-self") and names[-1] != b".."
            and not path.endswith(b"/") and len(raw) <= _SOCKADDR_UN):  # (else EINVAL)
        from ..files import open_as_caller
        from ..kernel import EffectiveDropped

        with EffectiveDropped():  # (root's: no directory the command could not search)
            directory = open_as_caller(tid, b"/" + b"/".join(names[:-1]))
        return PathBind(raw[:2] + names[-1] + b"\0", directory, umask)
    if path.startswith(b"/"):
        return PathBind(raw, -1, umask)
    return PathBind(raw, os.open(f"/proc/{tid}/cwd", _O_DIRECTORY_PATH), umask)


_O_DIRECTORY_PATH = os.O_PATH | os.O_DIRECTORY | os.O_CLOEXEC
_SOCKADDR_UN = 110  # sizeof(struct sockaddr_un): the kernel refuses a longer one


def _umask(tid: int) -> int:
    return int(tasks.status_field(tid, b"Umask"), 8)


def become_the_command(ruleset: int) -> None:
    """The calling thread (of sandlock, or of the sandbox's init) gets a working
    directory and umask of its own (CLONE_FS), no_new_privs, no capability, and the
    command's Landlock ruleset (-1: none): all per thread."""
    syscall(nr("unshare"), _CLONE_FS)
    prctl(PR_SET_NO_NEW_PRIVS, 1)
    drop_capabilities()
    if ruleset >= 0:
        restrict_self(ruleset)


def perform(sock: int, bind: PathBind, rulesets: tuple[int, ...] = ()) -> int:
    """Bind ``sock`` as ``bind`` says, on a thread that is the command's equal
    (``become_the_command``), under ``rulesets`` too; the errno (0: bound)."""
    if not rulesets:
        return _bind(sock, bind)
    # Landlock layers are never shed: the nested ones go on a thread of their own, which
    # inherits this one's domain, capabilities, no_new_privs and working directory.
    answer: list[int] = []
    done = _thread.allocate_lock()
    done.acquire()

    def nested() -> None:
        try:
            for ruleset in rulesets:
                restrict_self(ruleset)
            answer.append(_bind(sock, bind))
        except OSError as exc:
            answer.append(exc.errno or errno.EACCES)
        finally:
            done.release()

    _thread.start_new_thread(nested, ())
    done.acquire()
    return answer[0]


def _bind(sock: int, bind: PathBind) -> int:
    os.umask(bind.umask)
    if bind.directory >= 0:
        try:
            os.fchdir(bind.directory)
        except OSError as exc:
            return exc.errno or errno.ENOENT
    if _libc.bind(sock, bind.raw, len(bind.raw)) == 0:
        return 0
    return ctypes.get_errno() or errno.EACCES


# --- the binder in the sandbox (a thread of its init) -------------------------------

def serve(channel: int, ruleset: int) -> None:
    """Answer sandlock's requests on ``channel`` (owned) until it closes; ``ruleset``:
    the command's (closed once applied). Becomes the command's equal first: if it
    cannot, every request is answered EACCES (nothing is bound by a thread that is
    not). Whatever happens, the channel is closed when this returns: a request is
    answered, or fails at once on sandlock's side, never left waiting."""
    try:
        import _socket  # (the first request: a run that binds no path never loads it)

        requests = _socket.socket(fileno=channel)
    except BaseException:
        os.close(channel)
        raise
    try:
        try:
            become_the_command(ruleset)
            refusal = 0
        except OSError:
            refusal = errno.EACCES
        finally:
            if ruleset >= 0:
                os.close(ruleset)
        _serve(requests, refusal, _socket.CMSG_SPACE(MAX_FDS * 4), _socket.MSG_CTRUNC)
    finally:
        requests.close()


def _serve(requests: object, refusal: int, room: int, truncated: int) -> None:
    while True:
        try:
            data, ancillary, flags, _ = requests.recvmsg(MAX_REQUEST, room)
        except InterruptedError:
            continue
        except OSError:
            return
        if not data:
            return  # sandlock is gone
        fds = _descriptors(ancillary)
        try:
            error = refusal or _answer(data, fds, flags & truncated)
        finally:
            for fd in fds:
                os.close(fd)
        try:
            requests.send(_REPLY.pack(error))
        except OSError:
            return


def _descriptors(ancillary: list[tuple[int, int, bytes]]) -> list[int]:
    fds: list[int] = []
    for level, kind, data in ancillary:
        if level == 1 and kind == 1:  # SOL_SOCKET, SCM_RIGHTS
            fds.extend(struct.unpack(f"={len(data) // 4}i", data[:len(data) // 4 * 4]))
    return fds


def _answer(data: bytes, fds: list[int], truncated: int) -> int:
    umask, has_directory, nested = _REQUEST.unpack_from(data)
    if truncated or len(fds) != 1 + has_directory + nested:
        return errno.EINVAL  # (only a bug of sandlock's could send that)
    bind = PathBind(data[_REQUEST.size:], fds[1] if has_directory else -1, umask)
    return perform(fds[0], bind, tuple(fds[1 + has_directory:]))


# --- sandlock's side ------------------------------------------------------------------

class Binder:
    """sandlock's end of the channel to the binder in the sandbox (owned)."""

    def __init__(self, channel: int) -> None:
        import socket
        import threading

        self._channel = socket.socket(fileno=channel)
        self._lock = threading.Lock()  # one request at a time: its answer is the next reply

    def bind(self, sock: int, bind: PathBind, rulesets: tuple[int, ...] = ()) -> int:
        """The errno of the bind the binder performed (0: bound)."""
        import socket

        fds = [sock, *([bind.directory] if bind.directory >= 0 else []), *rulesets]
        request = _REQUEST.pack(bind.umask, bind.directory >= 0, len(rulesets)) + bind.raw
        with self._lock:
            try:
                socket.send_fds(self._channel, [request], fds)
                reply = self._channel.recv(_REPLY.size)
            except OSError:
                reply = b""
        if len(reply) != _REPLY.size:
            return errno.EACCES  # init is gone: the sandbox is ending, the caller with it
        return _REPLY.unpack(reply)[0]

    def close(self) -> None:
        self._channel.close()
