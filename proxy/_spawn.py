"""Starting a run's proxy process: forked by the user's proxy fork server when one is
up (mitmproxy already imported, so it serves within milliseconds), else a fresh
interpreter, and a fork server is started in the background for the runs after this
one. ``SANDLOCK_PROXY_FORKSERVER=0`` keeps to fresh interpreters. See ``_forkserver``.
"""

from __future__ import annotations

# Before the command starts: _signal, _socket and _thread rather than the modules over
# them (their enums, selectors and threading cost ~4 ms), marshal rather than json.
import _signal as signal
import _socket
import _thread
import fcntl
import marshal
import os
import struct
import sys

TYPE_CHECKING = False
if TYPE_CHECKING:
    import subprocess
    from socket import socket

# The fork server's files, in its directory (see _forkserver).
SOCKET_NAME, TOKEN_NAME, LOCK_NAME = "proxy.sock", "proxy.token", "proxy.lock"
MAX_REQUEST = 1 << 18  # the environment a proxy inherits; bigger ones get a fresh proxy

FORKSERVER_VARIABLE = "SANDLOCK_PROXY_FORKSERVER"
_REPLY_TIMEOUT = 2.0  # a fork of the server; a stuck one is passed over
_SUN_PATH_MAX = 107


class ForkedProxy:
    """A proxy forked by the fork server, driven like a ``subprocess.Popen`` of it:
    killed through a pidfd, its exit status reported by the server. Its pid comes a
    moment after the request was accepted (the fork is not waited for)."""

    def __init__(self, channel: socket) -> None:
        self._channel = channel
        self._lock = _thread.allocate_lock()  # the run's end (kill) may meet the reader thread (wait)
        self._pidfd: int | None = None
        self._started: bool | None = None  # unknown until the server's second reply
        self.pid = 0
        self.returncode: int | None = None

    def _learn_pid(self) -> bool:
        """Whether the server forked it (reads the ``ok PID`` reply once)."""
        with self._lock:
            return self._read_pid()

    def _read_pid(self) -> bool:
        if self._started is None:
            self._channel.settimeout(_REPLY_TIMEOUT)
            try:
                reply, fds = _receive_fds(self._channel, 64)
            except OSError:
                reply, fds = b"", []
            self._started = reply.startswith(b"ok ") and len(fds) == 1
            if self._started:
                self.pid, self._pidfd = int(reply[3:]), fds[0]
            else:
                for fd in fds:
                    os.close(fd)
        return self._started

    def kill(self) -> None:
        if not self._learn_pid():
            return
        with self._lock:
            if self._pidfd is not None:
                try:
                    signal.pidfd_send_signal(self._pidfd, signal.SIGKILL)
                except ProcessLookupError:
                    pass
                self._close_pidfd()

    def wait(self) -> int | None:
        """Popen's convention (-N for signal N); None if it never started or the fork
        server went away before it could say."""
        if self.returncode is None and self._learn_pid():
            self._channel.settimeout(None)
            try:
                report = self._channel.recv(64)
            except OSError:
                report = b""
            with self._lock:
                self._close_pidfd()
            if report.startswith(b"exit "):
                self.returncode = os.waitstatus_to_exitcode(int(report[5:]))
        self._channel.close()
        return self.returncode

    def __del__(self) -> None:  # dropped without a wait (a run's end): nothing to hear
        self._channel.close()
        self._close_pidfd()

    def _close_pidfd(self) -> None:
        if self._pidfd is not None:
            os.close(self._pidfd)
            self._pidfd = None


if TYPE_CHECKING:
    Proxy = ForkedProxy | subprocess.Popen


def spawn_proxy(fds: list[int], forkserver: str | None, hidden: tuple[str, ...] = ()) -> Proxy:
    """The proxy process serving ``fds`` (control channel, then listeners).
    ``forkserver``: the fork server's directory (None: none for this run); ``hidden``:
    variables of sandlock's environment no process started here may inherit (the
    sources of credentials: the proxy gets their values in its configuration, and a
    fork server, which outlives the run, must never hold one)."""
    env = {name: value for name, value in os.environ.items() if name not in hidden}
    if forkserver is not None and env.get(FORKSERVER_VARIABLE) != "0":
        forked = _ask_forkserver(forkserver, fds, env)
        if forked is not None:
            return forked
    return _start_interpreter("sandlock.proxy._server", list(map(str, fds)), fds, env)


def _ask_forkserver(directory: str, fds: list[int], env: dict[str, str]) -> ForkedProxy | None:
    path = os.path.join(directory, SOCKET_NAME)
    token = read_token(directory)
    if token is None or len(os.fsencode(path)) > _SUN_PATH_MAX:
        return _start_forkserver(directory, env)
    request = marshal.dumps({"token": token, "env": env})
    if len(request) > MAX_REQUEST:
        return None
    channel = _socket.socket(_socket.AF_UNIX, _socket.SOCK_SEQPACKET | _socket.SOCK_CLOEXEC)
    try:
        channel.settimeout(_REPLY_TIMEOUT)
        channel.connect(path)
        if _peer_uid(channel) != os.getuid():
            raise ConnectionRefusedError  # not this user's server: it gets nothing
        _send_fds(channel, request, [2, *fds])
        reply = channel.recv(64)
    except OSError:
        channel.close()
        return _start_forkserver(directory, env)
    if reply == b"accepted":
        return ForkedProxy(channel)
    channel.close()
    return _start_forkserver(directory, env)  # "stale": that one is exiting


def _peer_uid(channel: socket) -> int:
    size = struct.calcsize("3i")
    return struct.unpack("3i", channel.getsockopt(_socket.SOL_SOCKET, _socket.SO_PEERCRED, size))[1]


def _send_fds(channel: socket, data: bytes, fds: list[int]) -> None:
    rights = struct.pack(f"{len(fds)}i", *fds)
    channel.sendmsg([data], [(_socket.SOL_SOCKET, _socket.SCM_RIGHTS, rights)])


def _receive_fds(channel: socket, size: int) -> tuple[bytes, list[int]]:
    """A message and the descriptors passed with it (at most one is expected)."""
    data, ancillary, _, _ = channel.recvmsg(size, _socket.CMSG_SPACE(4 * 4))
    fds: list[int] = []
    for level, kind, payload in ancillary:
        if level == _socket.SOL_SOCKET and kind == _socket.SCM_RIGHTS:
            fds += struct.unpack(f"{len(payload) // 4}i", payload[: len(payload) // 4 * 4])
    return data, fds


def _start_forkserver(directory: str, env: dict[str, str]) -> None:
    """In the background, unless one is running or starting (it holds the lock)."""
    lock = open_lock(directory)
    if lock is None:
        return None
    try:
        fcntl.flock(lock, fcntl.LOCK_SH | fcntl.LOCK_NB)
    except OSError:
        return None  # held: a server is up or loading
    finally:
        os.close(lock)
    try:
        # No stderr: it outlives this run, whose stderr may be a pipe someone reads to EOF.
        _start_interpreter("sandlock.proxy._forkserver", [directory], [], env, detached=True)
    except OSError:
        pass
    return None


def open_lock(directory: str) -> int | None:
    """The fork server's lock file in ``directory`` (made private first); None where
    there can be none. The server holds it exclusively for as long as it lives."""
    from sandlock.ca import CAError, private_directory

    try:
        private_directory(directory)
        return os.open(os.path.join(directory, LOCK_NAME),
                       os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600)
    except (OSError, CAError):
        return None


def read_token(directory: str) -> str | None:
    """The fork server's token (None: no server, or not one of this user's files)."""
    try:
        with open(os.path.join(directory, TOKEN_NAME), opener=_no_follow) as file:
            return file.read()
    except OSError:
        return None


def _no_follow(path: str, flags: int) -> int:
    return os.open(path, flags | os.O_NOFOLLOW | os.O_CLOEXEC)


def _start_interpreter(module: str, args: list[str], fds: list[int], env: dict[str, str],
                       detached: bool = False) -> subprocess.Popen:
    """``detached``: no stderr either (it outlives the run)."""
    import subprocess  # only here: a run served by the fork server never loads it

    # The package this process runs from, wherever that is (installed or a checkout).
    root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    env = {**env, "PYTHONPATH": os.pathsep.join(filter(None, (root, env.get("PYTHONPATH"))))}
    return subprocess.Popen(
        [sys.executable, "-m", module, *args],
        pass_fds=fds, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL if detached else None,
        start_new_session=True,  # the terminal's Ctrl-C is for the command, not the proxy
        env=env,
    )
