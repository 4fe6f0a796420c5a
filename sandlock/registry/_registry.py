"""The user's registry of running named sandboxes: what `sandlock ps`, `inspect` and
`kill` read (docs/usage.md, "Named sandboxes").

Where: ``sandboxes/`` in sandlock's runtime directory (``confinement.sandlock_runtime_dir``:
$XDG_RUNTIME_DIR/sandlock, else /run/user/UID/sandlock when it is the user's, else
~/.local/share/sandlock/runtime), which every policy denies: no sandboxed command can
list, forge, rename or remove an entry, nor learn another sandbox's policy. The
directory must be the user's and mode 0700 (else it is refused, never used), so other
users can put nothing in anyone's view; each entry is read and written without
following links (O_NOFOLLOW, a new file renamed over the name) and must be a regular
file of the user's.

One entry per name, ``NAME.json``; registering and pruning hold ``.lock`` (flock), so
two runs cannot both take a name. An entry names its processes by pid *and* start time
(/proc/PID/stat's field 22): a pid reused by another process never passes for the
sandbox. It is stale once sandlock's process or the sandbox's keeper is gone (sandlock
killed: its keeper then kills the sandbox), and is removed by whoever sees it so.
Only named sandboxes are registered: an unnamed run imports none of this.
"""

from __future__ import annotations

import errno
import os
import time

from .._errors import PolicyError, SetupError

TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Iterator, Sequence

    from ..policy import Policy
    from ..process import SandboxedProcess

MAX_NAME_BYTES = 64  # a hostname's limit (HOST_NAME_MAX), and upstream Sandlock's
DIRECTORY = "sandboxes"
_SUFFIX = ".json"
_LOCK = ".lock"
_READ = os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC
_MAX_ENTRY = 1 << 20


def check_name(name: object) -> str:
    """``name`` if it can name a sandbox (a file name in the registry, a hostname),
    else PolicyError naming what is wrong."""
    if not isinstance(name, str):
        raise TypeError(f"name: expected a str, got {type(name).__name__}")
    if not name:
        raise PolicyError("name", "a sandbox's name must not be empty")
    if "\0" in name:
        raise PolicyError("name", "a sandbox's name must not contain a NUL byte")
    try:
        size = len(name.encode())
    except UnicodeEncodeError:
        raise PolicyError("name", "a sandbox's name must be UTF-8 text") from None
    if size > MAX_NAME_BYTES:
        raise PolicyError("name", f"a sandbox's name is at most {MAX_NAME_BYTES} bytes "
                          f"(this one: {size})")
    if "/" in name:
        raise PolicyError("name", "a sandbox's name must not contain '/'")
    if name in (".", ".."):
        raise PolicyError("name", "a sandbox's name must not be '.' or '..'")
    return name


def registry_path() -> str:
    from ..confinement import sandlock_runtime_dir

    home = os.environ.get("HOME") or os.path.expanduser("~")
    return os.path.join(sandlock_runtime_dir(os.environ, home), DIRECTORY)


def start_time(pid: int) -> int | None:
    """The process's start time (clock ticks after boot), None if it is gone (or a zombie)."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as file:
            fields = file.read().rsplit(b")", 1)[1].split()
    except (OSError, IndexError):
        return None
    return None if fields[0] in (b"Z", b"X") else int(fields[19])


def _alive(identity: object) -> bool:
    """``identity`` ([pid, start time]) is a process that still runs."""
    return isinstance(identity, list) and len(identity) == 2 and \
        all(type(part) is int and part > 0 for part in identity) and \
        start_time(identity[0]) == identity[1]


def _identity(pid: int) -> list[int] | None:
    start = start_time(pid) if pid > 0 else None
    return None if start is None else [pid, start]


class Entry(dict):
    """One running sandbox as registered: ``name``, ``argv``, ``started`` (wall time),
    ``policy`` (a policy file's text), ``summary``, and ``[pid, start]`` of ``sandlock``
    (the process that registered it), ``keeper`` and ``command``."""

    @property
    def pid(self) -> int:
        """The command's pid (0 while it starts)."""
        return self["command"][0] if self.get("command") else 0

    @property
    def live(self) -> bool:
        return _alive(self.get("sandlock")) and (self.get("keeper") is None or _alive(self["keeper"]))


class Directory:
    """The registry directory, held open (checked: a directory of the user's, 0700)."""

    def __init__(self, create: bool) -> None:
        self.path = registry_path()
        if create:
            os.makedirs(os.path.dirname(self.path), 0o700, exist_ok=True)
        from .._hostfile import open_directory  # (no symlink a user could plant on the way)

        parent = open_directory(os.path.dirname(self.path))
        try:
            if create:
                try:
                    os.mkdir(DIRECTORY, 0o700, dir_fd=parent)
                except FileExistsError:
                    pass
            self.fd = os.open(DIRECTORY, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC,
                              dir_fd=parent)
        finally:
            os.close(parent)
        info = os.fstat(self.fd)
        if info.st_uid != os.getuid() or info.st_mode & 0o077:
            os.close(self.fd)
            raise OSError(errno.EPERM, f"{self.path} must be a directory of yours that no one "
                          "else can enter (mode 0700); remove it and run again")

    def close(self) -> None:
        os.close(self.fd)

    def __enter__(self) -> Directory:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def locked(self) -> _Lock:
        return _Lock(self.fd)

    def names(self) -> list[str]:
        return [name[:-len(_SUFFIX)] for name in os.listdir(self.fd)
                if name.endswith(_SUFFIX)]

    def raw(self, name: str) -> bytes | None:
        """The bytes of ``name``'s entry; None if there is none or it is not one of the
        user's regular files."""
        try:
            fd = os.open(name + _SUFFIX, _READ, dir_fd=self.fd)
        except OSError:
            return None
        try:
            return os.read(fd, _MAX_ENTRY) if _plain_file(os.fstat(fd)) else None
        finally:
            os.close(fd)

    def read(self, name: str) -> Entry | None:
        """The entry of ``name``; None if there is none or it is not an entry."""
        data = self.raw(name)
        if data is None:
            return None
        import json

        try:
            entry = json.loads(data)
        except ValueError:
            return None
        return Entry(entry) if _well_formed(entry, name) else None

    def write(self, entry: Entry) -> bytes:
        """``entry`` as its name's file, whole (a new file renamed over the name); the
        bytes written."""
        data = _json(entry).encode()
        temporary = f".new-{os.urandom(6).hex()}"
        fd = os.open(temporary, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC,
                     0o600, dir_fd=self.fd)
        try:
            os.write(fd, data)
        finally:
            os.close(fd)
        os.rename(temporary, entry["name"] + _SUFFIX, src_dir_fd=self.fd, dst_dir_fd=self.fd)
        return data

    def remove(self, name: str) -> None:
        try:
            os.unlink(name + _SUFFIX, dir_fd=self.fd)
        except FileNotFoundError:
            pass

    def prune(self, name: str) -> None:
        """Remove ``name``'s entry if it is (still, under the lock) stale."""
        with self.locked():
            entry = self.read(name)
            if entry is None or not entry.live:
                self.remove(name)


def _well_formed(entry: object, name: str) -> bool:
    """An entry as ``Registration`` writes them (anything else is not shown: ``ps`` never
    fails on a file it did not write)."""
    return isinstance(entry, dict) and entry.get("name") == name and \
        isinstance(entry.get("argv"), list) and all(isinstance(arg, str) for arg in entry["argv"]) and \
        type(entry.get("started")) in (int, float) and isinstance(entry.get("policy"), str) and \
        isinstance(entry.get("summary"), str) and isinstance(entry.get("token"), str) and \
        all(entry.get(key) is None or (isinstance(entry[key], list) and len(entry[key]) == 2)
            for key in ("sandlock", "keeper", "command"))


def _json(value: object) -> str:
    """``value`` (an entry's: dicts, lists, strings, numbers, None) as JSON text, ASCII
    only (what json.loads reads back into the same value): a named run's start does not
    import json (and re with it)."""
    if isinstance(value, str):
        return '"' + "".join(_escaped(char) for char in value) + '"'
    if value is None:
        return "null"
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        return repr(value)
    if isinstance(value, list):
        return "[" + ", ".join(map(_json, value)) + "]"
    if isinstance(value, dict):
        return "{" + ", ".join(f"{_json(key)}: {_json(item)}" for key, item in value.items()) + "}"
    raise TypeError(f"not an entry's value: {type(value).__name__}")


def _escaped(char: str) -> str:
    code = ord(char)
    if 0x20 <= code < 0x7F:
        return "\\" + char if char in '"\\' else char
    if code > 0xFFFF:  # a surrogate pair, as JSON spells characters beyond the BMP
        code -= 0x10000
        return "\\u%04x\\u%04x" % (0xD800 + (code >> 10), 0xDC00 + (code & 0x3FF))
    return "\\u%04x" % code


def _plain_file(info: os.stat_result) -> bool:
    import stat

    return stat.S_ISREG(info.st_mode) and info.st_uid == os.getuid() and info.st_nlink == 1


class _Lock:
    def __init__(self, directory_fd: int) -> None:
        self.fd = os.open(_LOCK, os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600,
                          dir_fd=directory_fd)

    def __enter__(self) -> _Lock:
        import fcntl

        fcntl.flock(self.fd, fcntl.LOCK_EX)
        return self

    def __exit__(self, *exc: object) -> None:
        os.close(self.fd)  # (releases the lock)


class Registration:
    """A named sandbox's entry, from before its launch (the name taken) to its end."""

    def __init__(self, name: str, policy: Policy, argv: Sequence[str]) -> None:
        self.policy = policy  # (written once the command runs: not on its way to start)
        self.entry = Entry(name=name, uid=os.getuid(), sandlock=_identity(os.getpid()),
                           keeper=None, command=None, argv=list(argv), started=time.time(),
                           policy="", summary="(starting)", token=os.urandom(8).hex())
        self.written = b""
        try:
            self.directory = Directory(create=True)
        except OSError as exc:
            raise SetupError(f"--name: cannot keep the registry of named sandboxes in "
                             f"{registry_path()}: {exc.strerror}") from None
        try:
            with self.directory.locked():
                running = self.directory.read(name)
                if running is not None and running.live:
                    raise PolicyError("name", f"a sandbox named {name!r} is already running "
                                      f"(pid {running.pid}): names are unique per user")
                self.written = self.directory.write(self.entry)
        except BaseException:
            self.directory.close()
            raise

    def started(self, process: SandboxedProcess) -> None:
        """The launch is done: the entry names its keeper and command (or goes, if the
        command could not start); it goes when the sandbox ends."""
        if process.returncode is not None:
            self.release()
            return
        from ..policyfiles import dumps

        text = dumps(self.policy)
        self.entry.update(keeper=_identity(process.keeper_pid), command=_identity(process.pid),
                          policy=text, summary=summary(text))
        with self.directory.locked():
            if self._ours():
                self.written = self.directory.write(self.entry)
        process.on_exit(self.release)

    def release(self) -> None:
        """The entry removed (if it is still this run's)."""
        if self.directory.fd < 0:
            return
        with self.directory.locked():
            if self._ours():
                self.directory.remove(self.entry["name"])
        self.directory.close()
        self.directory.fd = -1

    close = release  # (a launch that fails closes what it opened)

    def _ours(self) -> bool:
        """The entry is (still) the one this run wrote last."""
        return self.directory.raw(self.entry["name"]) == self.written


def summary(policy_text: str) -> str:
    """A policy in a few words: the keys its file sets ("filesystem.read, net.allow")."""
    section, keys = "", []
    for line in policy_text.splitlines():
        if line.startswith("["):
            section = line.strip("[] ")
        elif " = " in line and not line.startswith(("#", " ")):
            key = line.split(" = ", 1)[0].strip()
            keys.append(f"{section}.{key}" if section else key)
    return ", ".join(keys) or "default"


def running() -> list[Entry]:
    """The user's running named sandboxes, oldest first; stale entries removed."""
    try:
        directory = Directory(create=False)
    except FileNotFoundError:
        return []
    found = []
    with directory:
        for name in directory.names():
            entry = directory.read(name)
            if entry is not None and entry.live:
                found.append(entry)
            elif entry is not None:
                directory.prune(name)
    return sorted(found, key=lambda entry: entry.get("started", 0))


def find(name: str) -> Entry | None:
    return next((entry for entry in running() if entry["name"] == name), None)


def signal_sandbox(entry: Entry, sig: int, wait: float) -> bool:
    """Send ``sig`` to the sandbox's command (through a pidfd taken on the process the
    entry names, its start time checked after). With SIGKILL the command's end ends the
    sandbox: wait up to ``wait`` s for its keeper to exit (the whole tree gone). False
    if the command was already gone."""
    import signal as _signals

    pidfd = _pidfd(entry.get("command"))
    if pidfd is None:
        return False
    try:
        _signals.pidfd_send_signal(pidfd, sig)
    except ProcessLookupError:
        return False
    finally:
        os.close(pidfd)
    keeper = _pidfd(entry.get("keeper"))
    if keeper is not None and sig == _signals.SIGKILL:
        import select

        select.select([keeper], [], [], wait)
        os.close(keeper)
    return True


def _pidfd(identity: object) -> int | None:
    if not _alive(identity):
        return None
    try:
        pidfd = os.pidfd_open(identity[0])  # type: ignore[index]
    except OSError:
        return None
    if _alive(identity):  # the pidfd is the process the entry names
        return pidfd
    os.close(pidfd)
    return None


def each(entries: list[Entry]) -> Iterator[tuple[Entry, float]]:
    """Each entry with its uptime in seconds."""
    now = time.time()
    for entry in entries:
        yield entry, max(0.0, now - float(entry.get("started", now)))
