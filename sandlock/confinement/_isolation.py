"""The sandbox's own view of the machine, made in user, mount and PID namespaces.

* its own /proc: a procfs of its PID namespace, where processes outside the sandbox
  do not exist, with the kernel's secrets (kallsyms, keys...) masked;
* private scratch directories: /tmp, /var/tmp and /dev/shm of the default workspace
  are empty tmpfs mounts of the run, with the grants beneath them (a workspace under
  /tmp, sandlock's trust bundle) bound back in at their paths; they vanish with the
  namespace, so there is nothing on the host to create or remove;
* autorun files (``_autorun``) bound read-only, repositories pinned;
* the denied paths a grant encloses covered by an empty mask of mode 0 (a directory
  or a file, as they are): Landlock alone would let their names be listed, watched
  or stat'ed through the grant above them;
* the copy-on-write workspace (``--workdir``, ``sandlock.cow``): an overlayfs over
  the directory, its writes landing in the workspace's layer (with --max-disk, a
  tmpfs of that size over the layer: past it, writes fail with ENOSPC).

Planned in sandlock's process (``plan``: every decision, nothing created); the keeper
enters the user and PID namespaces; their first process (init) makes the mount
namespace and every mount (``mount``), its procfs included, which only a process
inside the PID namespace can mount. Landlock rules name inodes, so the rules beneath
a tree that was mounted over are added again, by path, once the new tree is there.
"""

from __future__ import annotations

import os
import stat

from ..autorun import autorun as _autorun
from ..kernel import mounts
from . import _execcaches
from ._fspolicy import within
from ._owncode import SANDLOCK_PACKAGE, own_code, own_environment

TYPE_CHECKING = False  # typing costs ~5 ms to import: not on the start-up path
if TYPE_CHECKING:
    from collections.abc import Callable, Iterable

    from ._newroot import NewRoot

SCRATCH = ("/tmp", "/var/tmp", "/dev/shm")
# Files of /proc that tell the sandbox about the kernel, not about itself: symbol
# addresses, every key the user holds, memory maps of the kernel; masked by an
# unreadable empty file. (/sys/kernel and /sys/firmware are denied by Landlock.)
PROC_MASKED = (
    "kallsyms", "keys", "key-users", "kcore", "modules", "timer_list", "sched_debug",
    "sysrq-trigger", "latency_stats", "kpagecount", "kpageflags", "kpagecgroup",
    "vmallocinfo",
)
RANDOM_DEVICES = ("/dev/urandom", "/dev/random")  # a seeded stream under --random-seed
_SCRATCH_OPTIONS = b"mode=1777"  # as the directories they stand for (size: half the RAM)
_O_DIRECTORY_PATH = os.O_PATH | os.O_DIRECTORY | os.O_CLOEXEC


HOSTNAME_FILE = "/etc/hostname"


class Overlay:
    """The copy-on-write workspace to mount: ``directory`` (absolute, real) seen
    through an overlay whose upper and work directories are in ``layer``; with
    ``max_disk``, ``layer`` is first covered by a tmpfs of that many bytes."""

    def __init__(self, directory: str, layer: str, max_disk: int | None) -> None:
        self.directory, self.layer, self.max_disk = directory, layer, max_disk

    def mount(self) -> int:
        """Before any other mount (the paths are still the host's). Returns a
        descriptor on the tmpfs layer (for sandlock, which takes the captured writes
        from it once the namespace is gone), or -1 when the layer is on disk."""
        layer = -1
        if self.max_disk is not None:
            mounts.mount_tmpfs(self.layer, b"size=%d,mode=0700" % self.max_disk)
            layer = os.open(self.layer, _O_DIRECTORY_PATH)
            for name, mode in (("upper", 0o755), ("work", 0o700)):
                os.mkdir(f"/proc/self/fd/{layer}/{name}", mode)
        held = [os.open(path, _O_DIRECTORY_PATH) for path in
                (self.directory, os.path.join(self.layer, "upper"), os.path.join(self.layer, "work"))]
        try:
            mounts.mount_overlay(self.directory, *(f"/proc/self/fd/{fd}" for fd in held))
        except OSError as exc:  # (not the generic "cannot make the mounts": that says --best-effort)
            raise RuntimeError(
                f"cannot mount the copy-on-write workspace over {self.directory} ({exc.strerror}): "
                f"its layer {self.layer} must be on a file system overlayfs can write to "
                "(ext4, xfs, btrfs, tmpfs); XDG_STATE_HOME moves the store, --max-disk puts the "
                "layer in memory") from None
        finally:
            for fd in held:
                os.close(fd)
        return layer


class Isolation:
    """What to mount for one run, decided in sandlock's process."""

    def __init__(self, private: tuple[str, ...], restored: tuple[str, ...],
                 protection: _autorun.Protection, reanchored: tuple[tuple[str, int], ...],
                 temporary: tuple[str, ...] = (), overlay: Overlay | None = None,
                 read_only: tuple[str, ...] = (), rewritable: tuple[str, ...] = (),
                 scratch_size: int | None = None, masked: tuple[str, ...] = ()) -> None:
        self.private = private  # scratch directories replaced by a tmpfs
        # Under a memory limit their files are memory, which the memory watch counts:
        # then each is a tmpfs of ``scratch_size`` bytes (past it, ENOSPC), a bound.
        self.scratch_size = scratch_size
        self.restored = restored  # granted paths beneath them, bound back in
        # Of those, the ones no write grant covers, mounted read-only (else the write
        # grant of the scratch directory above them would reach the host's files), and
        # the write grants inside those, made writable again.
        self.read_only, self.rewritable = read_only, rewritable
        self.temporary = temporary  # $TMPDIR & co. beneath them, made again, empty
        self.protection = protection
        self.reanchored = reanchored  # (path, Landlock access) to add again
        self.overlay = overlay
        self.masked = masked  # denied paths a grant encloses, covered by a mask
        self.layer_fd = -1  # (in init, after mount: the tmpfs layer of --max-disk)
        # A named sandbox's name (set by the launch): its UTS namespace's hostname and
        # its /etc/hostname. None: the host's, and no UTS namespace (nothing to pay).
        self.hostname: bytes | None = None
        self.rules: tuple[tuple[str, int], ...] = ()
        self.inside_ids: tuple[int, int] | None = None  # --user/--privileged (None: its own)
        # (path, content): files shown over the kernel's (``_virtual``), read-only.
        self.virtual: tuple[tuple[str, bytes], ...] = ()
        # --time-start: a time namespace whose monotonic clocks start at 0.
        self.clocks_from_zero = False
        # --random-seed: /dev/urandom and /dev/random are a pipe init feeds (its fd), with it.
        self.device_seed: int | None = None
        self.random_fifo = -1
        self.private_network = False  # --net-private-loopback: a network namespace too
        self.root: NewRoot | None = None  # --chroot, --image: another root (``_newroot``)
        self.cache_views: tuple[str, ...] = ()  # caches the user's tools run from: private views

    @classmethod
    def plan(cls, *, private: Iterable[str], granted: Iterable[str],
             rules: Iterable[tuple[str, int]], writable: Iterable[str], homes: Iterable[str],
             protect_autorun: bool, unscanned: Iterable[str] = (),
             temporary: Iterable[str] = (), overlay: Overlay | None = None,
             scratch_size: int | None = None, masked: tuple[str, ...] = (),
             policy_files: Iterable[str] = (), executable_caches: Iterable[str] = ()) -> Isolation:
        """``private``: scratch paths to replace; ``granted``: what the command may
        reach (those beneath a private path are bound back: a workspace in /tmp,
        --unix-allow sockets...); ``rules``: the compiled Landlock rules; ``writable``:
        the write grants (for autorun files), ``unscanned`` those not searched;
        ``temporary``: the command's temporary directories ($TMPDIR...); ``overlay``:
        the copy-on-write workspace; ``scratch_size``: their size under a memory limit;
        ``masked``: denied paths to cover; ``policy_files``: those the policy was read
        from (read-only under a write grant, as autorun files are); ``executable_caches``:
        caches the user's tools run from (``_execcaches``: a private view of each)."""
        private = tuple(private)
        rules = tuple(rules)
        # Only paths written beneath a scratch directory are resolved (a link from
        # elsewhere into /tmp is not followed: that grant then shows nothing there).
        granted = [os.path.realpath(path) for path in granted
                   if any(within(path, scratch) for scratch in private) and os.path.exists(path)]
        views, missing = _execcaches.under_grants(executable_caches, writable, private) \
            if protect_autorun else ((), ())
        moved = ("/proc", *private, *((overlay.directory,) if overlay else ()), *views)
        protection = _autorun.protect(writable, homes, (*SCRATCH, *unscanned), private,
                                      policy_files, autorun=protect_autorun,
                                      own_code=own_code(), environment=own_environment(),
                                      made_later=missing)
        restored = _restorations(private, granted)
        protection = _in_view(protection, private, restored)
        temporary = tuple(path for path in dict.fromkeys(temporary) if os.path.isabs(path)
                          and any(path != scratch and within(path, scratch) for scratch in private)
                          and not any(within(path, grant) for grant in restored))
        read_only, rewritable = _read_only(restored, writable, private) if restored else ((), ())
        isolation = cls(private, restored, protection,
                        tuple(rule for rule in rules if any(within(rule[0], top) for top in moved)),
                        temporary, overlay, read_only, rewritable, scratch_size, masked)
        isolation.rules = rules  # (for a named sandbox's /etc/hostname: ``mount``)
        isolation.cache_views = views
        return isolation

    def enter_user_namespace(self) -> None:
        """In the keeper, single-threaded (as the kernel requires): a user namespace,
        which the PID namespace (``enter_pid_namespace``) and the mounts need; the
        command's ids in it are ``inside_ids`` (its own by default)."""
        mounts.enter_namespaces(mounts.CLONE_NEWUSER, self.inside_ids)

    def enter_pid_namespace(self) -> None:
        """The caller's next child is the first process of a new PID namespace, and the
        caller shares with it the new mount namespace that child fills (``mount``).
        Held by the caller (the keeper), the mount namespace is torn down when the
        keeper exits, after it has reported the command's end: that teardown waits for
        an RCU grace period (~3.5 ms), which init's exit would otherwise put between
        the command's end and sandlock's. A named sandbox also gets a UTS namespace
        whose hostname is its name (the keeper holds the capability to set it); with
        --time-start, a time namespace too, its monotonic clocks starting at 0; with
        --net-private-loopback, a network namespace whose `lo` is up."""
        named = mounts.CLONE_NEWUTS if self.hostname is not None else 0
        if self.private_network:
            from ..kernel import netns

            # The keeper enters it too (it never uses the network); init and the command
            # find `lo` up. The user namespace owns it: the host's interfaces stay out.
            mounts.enter_namespaces(mounts.CLONE_NEWPID | mounts.CLONE_NEWNS | named | netns.CLONE_NEWNET)
            netns.bring_loopback_up()
        else:
            mounts.enter_namespaces(mounts.CLONE_NEWPID | mounts.CLONE_NEWNS | named)
        if self.hostname is not None:
            mounts.set_hostname(self.hostname)
        if self.clocks_from_zero:
            try:
                mounts.enter_namespaces(mounts.CLONE_NEWTIME)
                mounts.clocks_from_zero()
            except OSError as exc:  # (not the namespaces' message: --best-effort is no way out)
                raise RuntimeError(f"cannot make the time namespace --time-start needs "
                                   f"({exc.strerror}; Linux 5.6 with CONFIG_TIME_NS)") from None

    def hides(self, path: str) -> bool:
        """Whether the sandbox's mounts hide ``path`` (beneath its own /tmp, not bound
        back): what lies there cannot be read after them, not even by init."""
        return (any(within(path, scratch) for scratch in self.private)
                and not any(within(path, grant) for grant in self.restored))

    def mount(self, add_rule: Callable[[str, int], None], pids_below: int = 0) -> int:
        """In the first process of the PID namespace, in the mount namespace the keeper
        made for it: every mount; ``add_rule(path, access)`` adds the Landlock rules of
        the trees mounted over; ``pids_below``: the namespace's pid_max, if not 0.
        Returns an O_PATH descriptor on the host's /proc (close-on-exec), where "self"
        is a process's pid as seen from outside."""
        host_proc = os.open("/proc", _O_DIRECTORY_PATH)
        if self.root is not None:  # first: before a mask could cover its path
            self.root.take()
        if self.overlay is not None:  # first: a workspace under /tmp is bound back below
            self.layer_fd = self.overlay.mount()
        # Detached copies of what goes back in, taken while it is still in view.
        kept = [(path, mounts.detached_copy(path)) for path in self.restored]
        self._mount_scratch()
        for path, copy in kept:
            _make_mount_point(path, os.path.isdir(f"/proc/self/fd/{copy}"))
            mounts.attach(copy, path)
        for path in self.read_only:
            mounts.make_read_only(path)
        for path in self.rewritable:  # (a bind copies the read-only flag of its source)
            mounts.bind(path, path)
            mounts.make_writable(path)
        for path in self.cache_views:  # (before the pins: a pinned directory keeps them)
            _execcaches.mount_private_view(path, self._scratch_options())
        for path in self.temporary:  # where the command's TMPDIR points, empty, its own
            os.makedirs(path, 0o700, exist_ok=True)
        for directory in self.protection.pinned:  # (with what is mounted beneath: a workdir)
            mounts.bind(directory, directory, recursive=True)
        for path in self.protection.read_only:
            mounts.bind(path, path)
            mounts.make_read_only(path)
        # A named sandbox's /etc/hostname: its name, shown as the virtual files are
        # (the host's is never written; where the host has none, there is none).
        named = self.hostname is not None and os.path.isfile(HOSTNAME_FILE)
        virtual = (*self.virtual, (HOSTNAME_FILE, self.hostname + b"\n")) if named else self.virtual
        self.random_fifo = _mount_proc(pids_below, self.masked, self.private, virtual,
                                       self.device_seed is not None)
        if named:
            # Landlock skips the covered file when it walks up from the one bound over it:
            # the rules that reached the host's /etc/hostname are given to the new one.
            access = 0
            for path, rights in self.rules:
                access |= rights if within(HOSTNAME_FILE, path) else 0
            if access:
                add_rule(HOSTNAME_FILE, access)
        for path, access in self.reanchored:
            try:
                add_rule(path, access)
            except FileNotFoundError:
                pass  # not in the new tree: nothing to grant
        if self.root is not None:  # last: it needs the namespace's /proc and /dev
            self.root.enter(add_rule)
        return host_proc

    def _mount_scratch(self) -> None:
        for scratch in self.private:
            mounts.mount_tmpfs(scratch, self._scratch_options())

    def _scratch_options(self) -> bytes:
        if self.scratch_size is None:
            return _SCRATCH_OPTIONS
        return _SCRATCH_OPTIONS + b",size=%d" % self.scratch_size


def _mount_proc(pids_below: int, masked: tuple[str, ...], private: tuple[str, ...],
                virtual: tuple[tuple[str, bytes], ...] = (), seeded: bool = False) -> int:
    """The namespace's procfs, its kernel files masked by an empty file of mode 0, made
    in a tmpfs that the procfs then covers: nothing but the masks leads to it (a bind's
    source must be mounted in the namespace, so it is covered, not detached). The
    ``masked`` paths get the same file, or an empty directory of mode 0. Its pid_max
    is ``pids_below`` (if not 0), its sysctls read-only: nothing in a sandbox has to
    write one. A mask beneath a ``private`` scratch directory is mounted read-only: the
    write grant of that directory reaches it (Landlock looks up across mounts), and
    nothing may change the mode or content all masks share. The ``virtual`` files are
    written in that tmpfs too and mounted over their paths, read-only; with ``seeded``,
    so is a pipe over the random devices, whose descriptor (init feeds it) is returned."""
    size = 4096 + sum(4096 + len(content) for _, content in virtual)
    mounts.mount_tmpfs("/proc", b"mode=0700,size=%d" % size)
    mask = os.open("/proc/mask", os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC, 0)
    os.mkdir("/proc/masks", 0)
    directory_mask = os.open("/proc/masks", _O_DIRECTORY_PATH)
    shown = [(_written(f"/proc/virtual{index}", content), path)
             for index, (path, content) in enumerate(virtual)]
    fifo = -1
    if seeded:  # (mode 0444: nothing in the sandbox may write into the stream)
        os.mkfifo("/proc/random", 0o444)
        fifo = os.open("/proc/random", os.O_RDWR | os.O_CLOEXEC)  # (never an EOF for readers)
        shown += [(os.open("/proc/random", os.O_PATH | os.O_CLOEXEC), device)
                  for device in RANDOM_DEVICES]
    mounts.mount_proc("/proc", pids_below)
    for fd, path in shown:
        mounts.bind(f"/proc/self/fd/{fd}", path)
        mounts.make_read_only(path)
        os.close(fd)
    source = f"/proc/self/fd/{mask}"
    for name in PROC_MASKED:
        path = os.path.join("/proc", name)
        if os.path.exists(path):
            mounts.bind(source, path)
    for path in masked:
        try:
            directory = stat.S_ISDIR(os.lstat(path).st_mode)
        except OSError:
            continue  # not in the sandbox's tree (beneath a scratch directory)
        mounts.bind(f"/proc/self/fd/{directory_mask}" if directory else source, path)
        if any(within(path, scratch) for scratch in private):
            mounts.make_read_only(path)
    os.close(mask)
    os.close(directory_mask)
    return fifo


def _written(path: str, content: bytes) -> int:
    """A new file of ``content``, mode 0444; an O_PATH descriptor on it."""
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC, 0o444)
    try:
        os.write(fd, content)  # (tmpfs: one write takes it all)
    finally:
        os.close(fd)
    return os.open(path, os.O_PATH | os.O_CLOEXEC)


def _make_mount_point(path: str, directory: bool) -> None:
    os.makedirs(os.path.dirname(path), exist_ok=True)
    if directory:
        os.mkdir(path)
    else:
        os.close(os.open(path, os.O_WRONLY | os.O_CREAT | os.O_CLOEXEC, 0o600))


def _read_only(restored: tuple[str, ...], writable: Iterable[str], private: tuple[str, ...],
               ) -> tuple[tuple[str, ...], tuple[str, ...]]:
    """(the restored paths no write grant covers, the write grants inside those)."""
    written = list(dict.fromkeys(os.path.realpath(path) for path in writable
                                 if path not in private and os.path.exists(path)))
    read_only = tuple(path for path in restored if not any(within(path, w) for w in written))
    rewritable = tuple(w for w in written if any(w != path and within(w, path) for path in read_only))
    return read_only, rewritable


def _in_view(protection: _autorun.Protection, private: tuple[str, ...],
             restored: tuple[str, ...]) -> _autorun.Protection:
    """The autorun paths the sandbox will see: one beneath a private scratch directory
    exists there only inside a restored grant (bound back before they are protected).
    The others (a ~/.bashrc when $HOME is under /tmp and not granted) are the host's,
    out of view behind the empty tmpfs: nothing to protect, and nothing to bind."""
    def shown(path: str) -> bool:
        return not any(within(path, scratch) for scratch in private) or \
            any(within(path, grant) for grant in restored)

    return _autorun.Protection(tuple(filter(shown, protection.pinned)),
                               tuple(filter(shown, protection.read_only)),
                               tuple(filter(shown, protection.policy_files)), protection.record)


def _restorations(private: tuple[str, ...], granted: Iterable[str]) -> tuple[str, ...]:
    """The granted paths beneath a private scratch directory, outermost only (the rest
    comes with them)."""
    found: list[str] = []
    for path in sorted(set(granted)):
        if any(path != scratch and within(path, scratch) for scratch in private) and \
                not any(within(path, outer) for outer in found):
            found.append(path)
    return tuple(found)
