"""The proxy fork server: ``python -m sandlock.proxy._forkserver DIRECTORY [IDLE_SECONDS]``.

A run's proxy spends ~200 ms importing mitmproxy before it serves its first request.
This process, one per user (and per sandlock installation), imports it once and forks
a proxy for each run that asks: the child is ready in milliseconds and starts exactly
as a freshly started proxy does (``_server.main``: its own configuration, CA, Landlock
domain and seccomp filter), in a session of its own. Runs never share a proxy.

Who may ask: a process of the same user that can read ``token`` (0600, in sandlock's
runtime directory, which every policy denies: no sandboxed command and no confined
proxy can read it). A request is the token and the environment the proxy gets,
with the proxy's descriptors passed along (stderr, control channel, listeners). The
replies, on the same connection: ``accepted`` (or ``stale``) at once, so that sandlock
goes on while the fork happens; then ``ok PID`` with a pidfd of the child (or
``failed``); then ``exit STATUS`` when the child ends.

It goes away by itself: after IDLE_SECONDS without a proxy to serve, when its token
file is removed or replaced, or when the code it loaded changed on disk (it answers
``stale`` and exits; sandlock starts a fresh one). See docs/architecture.md.
"""

from __future__ import annotations

import fcntl
import gc
import marshal
import os
import select
import signal
import socket
import struct
import sys
import time

from ..kernel import exited_children
from ._spawn import MAX_REQUEST, SOCKET_NAME, TOKEN_NAME, open_lock, read_token

IDLE_SECONDS = 600.0
_PROXY_FDS = 4  # stderr, control channel, up to two listeners
_CHECK_SECONDS = 2.0  # how often an idle server looks at its token file
_REQUEST_TIMEOUT = 2.0


def main(argv: list[str]) -> int:
    directory = argv[0]
    idle = float(argv[1]) if len(argv) > 1 else IDLE_SECONDS
    if os.fork():
        os._exit(0)  # not a child of the sandlock that started it, which may wait for its children
    os.setsid()
    from sandlock.kernel import PR_SET_DUMPABLE, prctl

    prctl(PR_SET_DUMPABLE, 0)  # it holds the token; its children will hold CA keys
    os.umask(0o077)
    os.chdir("/")
    lock = _take_lock(directory)
    if lock is None:
        return 0  # another one is running (or starting)
    _preload()
    loaded = _loaded_files()
    gc.freeze()  # what was imported stays shared with every child, never copied by a collection
    token = os.urandom(32).hex()
    listener = _listen(os.path.join(directory, SOCKET_NAME))
    _write_token(directory, token)
    try:
        Server(directory, token, loaded, listener, lock, idle).serve()
    finally:
        _remove_if_ours(directory, token)
    return 0


def _take_lock(directory: str) -> int | None:
    lock = open_lock(directory)
    if lock is None:
        return None
    try:
        fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError:
        os.close(lock)
        return None
    return lock  # held until this process exits


def _preload() -> None:
    """Everything a proxy imports before and while it serves."""
    import asyncio  # noqa: F401

    from sandlock.ca import system_bundle  # noqa: F401

    from . import _addon, _authority, _confine, _mitm, _server  # noqa: F401



def _loaded_files() -> dict[str, int]:
    """The files that change when sandlock, a package it imported or Python itself is
    upgraded, with their modification times: every module of sandlock, and the top
    module of each other distribution (an upgrade rewrites its files) and of the
    standard library (``os``). ~100 stats per request, not one per module loaded."""
    files = {}
    for name, module in list(sys.modules.items()):
        top = "." not in name and (name == "os" or name not in sys.stdlib_module_names)
        path = getattr(module, "__file__", None)
        if path and (top or name.startswith("sandlock.")):
            try:
                files[path] = os.stat(path).st_mtime_ns
            except OSError:
                pass
    return files


def _unchanged(files: dict[str, int]) -> bool:
    try:
        return all(os.stat(path).st_mtime_ns == mtime for path, mtime in files.items())
    except OSError:
        return False


def _listen(path: str) -> socket.socket:
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_SEQPACKET | socket.SOCK_CLOEXEC)
    try:
        os.unlink(path)  # a dead server's (the lock says none is alive)
    except FileNotFoundError:
        pass
    listener.bind(path)
    listener.listen(64)
    return listener


def _write_token(directory: str, token: str) -> None:
    from .._hostfile import write_file

    write_file(os.path.join(directory, TOKEN_NAME), token.encode(), 0o600, exact=True)


def _remove_if_ours(directory: str, token: str) -> None:
    if read_token(directory) == token:
        for name in (TOKEN_NAME, SOCKET_NAME):
            try:
                os.unlink(os.path.join(directory, name))
            except OSError:
                pass


class Server:
    """The accept loop: one request at a time (a fork takes a few ms), children reaped
    on SIGCHLD and their status sent to whoever asked for them."""

    def __init__(self, directory: str, token: str, loaded: dict[str, int],
                 listener: socket.socket, lock: int, idle: float) -> None:
        self.directory, self.token, self.loaded = directory, token, loaded
        self.listener, self.lock, self.idle = listener, lock, idle
        self.children: dict[int, socket.socket] = {}
        self.last_activity = time.monotonic()
        self.stale = False

    def serve(self) -> None:
        wake_r, wake_w = os.pipe2(os.O_NONBLOCK | os.O_CLOEXEC)
        signal.set_wakeup_fd(wake_w)
        signal.signal(signal.SIGCHLD, lambda signum, frame: None)
        self._wake = (wake_r, wake_w)
        poller = select.poll()
        poller.register(self.listener, select.POLLIN)
        poller.register(wake_r, select.POLLIN)
        while not self.stale:
            for fd, _ in poller.poll(_CHECK_SECONDS * 1000):
                if fd == wake_r:
                    while _drain(wake_r):
                        pass
                    self._reap()
                else:
                    self._accept()
            if self._should_exit():
                return

    def _should_exit(self) -> bool:
        if read_token(self.directory) != self.token:
            return True  # removed or replaced: someone wants this one gone
        idle = time.monotonic() - self.last_activity
        return not self.children and idle > self.idle

    def _accept(self) -> None:
        try:
            conn, _ = self.listener.accept()
        except OSError:
            return
        self.last_activity = time.monotonic()
        fds: list[int] = []
        try:
            conn.settimeout(_REQUEST_TIMEOUT)
            message, fds, _, _ = socket.recv_fds(conn, MAX_REQUEST, _PROXY_FDS)
            env = self._check(conn, message, len(fds))
            if env is None:
                conn.close()
                return
            if not _unchanged(self.loaded):
                self.stale = True
                conn.send(b"stale")
                conn.close()
                return
            conn.send(b"accepted")
            self._fork(conn, env, fds)
        except OSError:
            conn.close()
        finally:
            for fd in fds:
                os.close(fd)

    def _check(self, conn: socket.socket, message: bytes, nfds: int) -> dict[str, str] | None:
        """The request's environment, if it comes from this user with the token."""
        _, uid, _ = struct.unpack("3i", conn.getsockopt(socket.SOL_SOCKET, socket.SO_PEERCRED,
                                                        struct.calcsize("3i")))
        if uid != os.getuid() or nfds < 3:
            return None
        try:
            request = marshal.loads(message)  # from this user's sandlock (token checked below)
            token, env = request["token"], request["env"]
        except (ValueError, KeyError, TypeError, EOFError):
            return None
        import hmac

        if not isinstance(token, str) or not hmac.compare_digest(token, self.token):
            return None
        if not isinstance(env, dict) or not all(isinstance(k, str) and isinstance(v, str)
                                                for k, v in env.items()):
            return None
        return env

    def _fork(self, conn: socket.socket, env: dict[str, str], fds: list[int]) -> None:
        try:
            pid = os.fork()
        except OSError:
            conn.send(b"failed")  # the proxy's descriptors close: sandlock starts another
            raise
        if pid == 0:
            self._become_proxy(conn, env, fds)
        pidfd = os.pidfd_open(pid)  # before it can be reaped: names this child, never a reused pid
        try:
            socket.send_fds(conn, [b"ok %d" % pid], [pidfd])
        finally:
            os.close(pidfd)
        self.children[pid] = conn

    def _become_proxy(self, conn: socket.socket, env: dict[str, str], fds: list[int]) -> None:
        code = 1
        try:
            signal.set_wakeup_fd(-1)
            signal.signal(signal.SIGCHLD, signal.SIG_DFL)
            for sock in (self.listener, conn, *self.children.values()):
                sock.close()
            for fd in (*self._wake, self.lock):  # the lock: a new server must not wait for proxies
                os.close(fd)
            os.setsid()  # the terminal's Ctrl-C is for the command, not the proxy
            os.environ.clear()
            os.environ.update(env)
            stderr, *proxy_fds = fds
            os.dup2(stderr, 2)
            from . import _server

            code = _server.main([str(fd) for fd in proxy_fds])
        finally:
            os._exit(code)

    def _reap(self) -> None:
        for pid, status in exited_children():
            conn = self.children.pop(pid, None)
            if conn is not None:
                try:
                    conn.send(b"exit %d" % status)
                except OSError:
                    pass
                conn.close()
            self.last_activity = time.monotonic()


def _drain(fd: int) -> bytes:
    try:
        return os.read(fd, 512)
    except BlockingIOError:
        return b""


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
