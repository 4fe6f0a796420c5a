"""Starting a run's proxy process: forked by the user's proxy fork server when one is
up (mitmproxy already imported, so it serves within milliseconds), else a fresh
interpreter, and a fork server is started in the background for the runs after this
one. ``SANDLOCK_PROXY_FORKSERVER=0`` keeps to fresh interpreters. See ``_forkserver``.
"""

from __future__ import annotations

import fcntl
import json
import os
import signal
import socket
import struct
import subprocess
import sys

from ._forkserver import LOCK_NAME, MAX_REQUEST, SOCKET_NAME, _read_token

FORKSERVER_VARIABLE = "SANDLOCK_PROXY_FORKSERVER"
_REPLY_TIMEOUT = 2.0  # a fork of the server; a stuck one is passed over
_SUN_PATH_MAX = 107


class ForkedProxy:
    """A proxy forked by the fork server, driven like a ``subprocess.Popen`` of it:
    killed through a pidfd, its exit status reported by the server."""

    def __init__(self, pid: int, pidfd: int, channel: socket.socket) -> None:
        self.pid = pid
        self._pidfd: int | None = pidfd
        self._channel = channel
        self.returncode: int | None = None

    def kill(self) -> None:
        if self._pidfd is None:
            return
        try:
            signal.pidfd_send_signal(self._pidfd, signal.SIGKILL)
        except ProcessLookupError:
            pass
        self._close_pidfd()

    def wait(self) -> int | None:
        """Popen's convention (-N for signal N); None if the fork server went away
        before it could say."""
        if self.returncode is None:
            self._channel.settimeout(None)
            try:
                report = self._channel.recv(64)
            except OSError:
                report = b""
            self._channel.close()
            self._close_pidfd()
            if report.startswith(b"exit "):
                self.returncode = os.waitstatus_to_exitcode(int(report[5:]))
        return self.returncode

    def __del__(self) -> None:  # dropped without a wait (a run's end): nothing to hear
        self._channel.close()
        self._close_pidfd()

    def _close_pidfd(self) -> None:
        if self._pidfd is not None:
            os.close(self._pidfd)
            self._pidfd = None


Proxy = ForkedProxy | subprocess.Popen


def spawn_proxy(fds: list[int], forkserver: str | None) -> Proxy:
    """The proxy process serving ``fds`` (control channel, then listeners).
    ``forkserver``: the fork server's directory (None: none for this run)."""
    if forkserver is not None and os.environ.get(FORKSERVER_VARIABLE) != "0":
        forked = _ask_forkserver(forkserver, fds)
        if forked is not None:
            return forked
    return _start_interpreter("sandlock.proxy._server", list(map(str, fds)), fds,
                              stderr=None)


def _ask_forkserver(directory: str, fds: list[int]) -> ForkedProxy | None:
    path = os.path.join(directory, SOCKET_NAME)
    token = _read_token(directory)
    if token is None or len(os.fsencode(path)) > _SUN_PATH_MAX:
        return _start_forkserver(directory)
    request = json.dumps({"token": token, "env": dict(os.environ)}).encode()
    if len(request) > MAX_REQUEST:
        return None
    channel = socket.socket(socket.AF_UNIX, socket.SOCK_SEQPACKET | socket.SOCK_CLOEXEC)
    try:
        channel.settimeout(_REPLY_TIMEOUT)
        channel.connect(path)
        if _peer_uid(channel) != os.getuid():
            raise ConnectionRefusedError  # not this user's server: it gets nothing
        socket.send_fds(channel, [request], [2, *fds])
        reply, pidfds, _, _ = socket.recv_fds(channel, 64, 1)
    except OSError:
        channel.close()
        return _start_forkserver(directory)
    if reply.startswith(b"ok ") and pidfds:
        return ForkedProxy(int(reply[3:]), pidfds[0], channel)
    for fd in pidfds:
        os.close(fd)
    channel.close()
    return _start_forkserver(directory)  # "stale": that one is exiting


def _peer_uid(channel: socket.socket) -> int:
    size = struct.calcsize("3i")
    return struct.unpack("3i", channel.getsockopt(socket.SOL_SOCKET, socket.SO_PEERCRED, size))[1]


def _start_forkserver(directory: str) -> None:
    """In the background, unless one is running or starting (it holds the lock)."""
    from sandlock.ca import CAError, private_directory

    try:
        private_directory(directory)
        lock = os.open(os.path.join(directory, LOCK_NAME),
                       os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600)
    except (OSError, CAError):
        return None
    try:
        fcntl.flock(lock, fcntl.LOCK_SH | fcntl.LOCK_NB)
    except OSError:
        return None  # held: a server is up or loading
    finally:
        os.close(lock)
    try:
        # No stderr: it outlives this run, whose stderr may be a pipe someone reads to EOF.
        _start_interpreter("sandlock.proxy._forkserver", [directory], [],
                           stderr=subprocess.DEVNULL)
    except OSError:
        pass
    return None


def _start_interpreter(module: str, args: list[str], fds: list[int],
                       stderr: int | None) -> subprocess.Popen:
    # The package this process runs from, wherever that is (installed or a checkout).
    root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(filter(None, (root, env.get("PYTHONPATH"))))
    return subprocess.Popen(
        [sys.executable, "-m", module, *args],
        pass_fds=fds, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=stderr,
        start_new_session=True,  # the terminal's Ctrl-C is for the command, not the proxy
        env=env,
    )
