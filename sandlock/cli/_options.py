"""The options of `run` (and the policy options `learn` and `policy test` share), as
one table: argparse's parser is built from it (``_parser``) and so is the quick
parse of an everyday `sandlock run` command line.

Why a quick parse: importing argparse (with gettext) and building its parser cost
~3 ms of a start that should take ~15. ``quick_run_args`` reads exactly what the table
says (exact option names, a separate value, ``--``, the command); anything else
(``--help``, ``--opt=value``, abbreviations, ``-qi``, a missing or bad value) returns
None and argparse parses the line, with its help and its errors. Both give the same
namespace (tests/test_cli_options.py).
"""

from __future__ import annotations

from .._record import record
from ..policy import (
    FS_ISOLATIONS,
    HTTPS_INSPECT_MODES,
    MEMORY_MODES,
    MODES,
    WORKSPACE_ACTIONS,
    flag_of,
)

TYPE_CHECKING = False  # typing costs ~5 ms to import: this module is on every start
if TYPE_CHECKING:
    from collections.abc import Callable


def number(text: str) -> float:
    """An option's number (-t, --max-cpu) in sandlock's one grammar of numbers
    (``_grammar``: ASCII digits, one '.'); float() would take '٣', '1_0', '1e10'."""
    from .._grammar import decimal  # (only for the options given a number)

    return decimal(text)


def whole_number(text: str) -> int:
    """An option's whole number (-P, --max-open-files, --pass-fd, --collapse)."""
    from .._grammar import whole

    return whole(text)


@record
class Option:
    """One option: its --help group, where its value goes (``dest``), its names, and
    how it is read: ``store``, ``append``, ``store_true``/``store_false`` or
    ``source`` (--policy/--profile: ``(const, value)`` appended to ``sources``)."""

    group: str
    dest: str
    flags: tuple[str, ...]
    action: str
    metavar: str | None
    help: str
    choices: tuple[str, ...] | None
    type: Callable[[str], object] | None
    const: str | None

    @property
    def takes_value(self) -> bool:
        return self.action in ("store", "append", "source")


def _option(group: str, dest: str, *flags: str, action: str = "store", metavar: str | None = None,
            help: str, choices: tuple[str, ...] | None = None,
            type: Callable[[str], object] | None = None,
            const: str | None = None) -> Option:
    return Option(group, dest, flags, action, metavar, help, choices, type, const)


def _policy_option(group: str, field: str, *aliases: str, **kwargs: object) -> Option:
    """The option of Policy ``field``: named by the field's own flag (after any short
    alias); absent from the parsed namespace unless given."""
    return _option(group, field, *aliases, flag_of(field), **kwargs)  # type: ignore[arg-type]


# --help groups, in order
GROUPS = {
    "files": "policy files (docs/policy.md; options add to them)",
    "filesystem": "filesystem (with any -r/-w, nothing else is reachable)",
    "network": "network (default: none)",
    "http": "HTTP(S) through sandlock's proxy (see docs/http.md)",
    "confinement": "confinement",
    "process": "process",
    "credentials": "credentials the command never holds, added by the proxy (see "
                   "docs/credentials.md)",
    "limits": "resource limits, for the sandbox as a whole (see docs/usage.md)",
    "workspace": "copy-on-write workspace (see docs/workspace.md)",
    "determinism": "the machine as COMMAND sees it; reproducible runs (see docs/usage.md)",
}

POLICY_OPTIONS = (
    _option("files", "sources", "--policy", action="source", const="file", metavar="FILE",
            help="read the policy from FILE (repeatable: later ones add to or override "
            "earlier ones)"),
    _option("files", "sources", "-p", "--profile", action="source", const="profile",
            metavar="NAME", help="read the profile NAME, "
            "$XDG_CONFIG_HOME/sandlock/profiles/NAME.toml (repeatable)"),
    _policy_option("filesystem", "fs_readable", "-r", action="append", metavar="PATH",
                   help="allow reading PATH (repeatable)"),
    _policy_option("filesystem", "fs_writable", "-w", action="append", metavar="PATH",
                   help="allow reading and writing PATH (repeatable)"),
    _policy_option("filesystem", "fs_denied", action="append", metavar="PATH",
                   help="deny PATH even inside an allowed one (repeatable)"),
    _policy_option("filesystem", "mode", "--sandbox", choices=MODES,
                   help="workspace-write (default): the default workspace; read-only: the "
                   "same reads, no writes; full-access: no confinement (with "
                   "--dangerously-allow-full-access)"),
    _policy_option("filesystem", "allow_autorun_writes", action="store_true",
                   help="let write grants cover git hooks and config, shell start-up files, "
                   "autostart entries and editor tasks (read-only by default)"),
    _policy_option("network", "net_allow", action="append", metavar="SPEC",
                   help="allow [tcp://|udp://|icmp://]TARGET[:PORTS]; TARGET: host, IP, CIDR, "
                   "[IPv6], * or empty; PORTS: 22,443,8000-8100 or * (repeatable)"),
    _policy_option("network", "net_allow_hosts", action="append", metavar="HOST",
                   help="allow HOST on every port, TCP and UDP (pinned like --net-allow; "
                   "repeatable)"),
    _policy_option("network", "net_connect", action="append", metavar="PORTS",
                   help="allow TCP connections to any host on PORTS (repeatable)"),
    _policy_option("network", "net_deny", action="append", metavar="SPEC",
                   help="allow everything but IP/CIDR[:PORTS] (repeatable; not with the "
                   "allows)"),
    _policy_option("network", "net_bind", "--net-allow-bind", action="append", metavar="PORTS",
                   help="ports COMMAND may bind and listen on, or * (repeatable)"),
    _policy_option("network", "net_deny_bind", action="append", metavar="PORTS",
                   help="every TCP port may be bound and listened on but PORTS (repeatable; "
                   "not with --net-bind)"),
    _policy_option("network", "port_remap", action="store_true",
                   help="a virtual TCP port space: the ports COMMAND binds are bound for it "
                   "on free real ones (two sandboxes may both bind 8080)"),
    _policy_option("network", "unix_allow", action="append", metavar="PATH",
                   help="a host's pathname unix socket COMMAND may connect to (repeatable; "
                   "sockets the sandbox binds itself need none)"),
    _policy_option("network", "dns_servers", action="append", metavar="IP[:PORT]",
                   help="resolve policy names with this server (default: /etc/resolv.conf)"),
    _policy_option("network", "resolve", action="append", metavar="HOST=IP[,IP...]",
                   help="pin HOST to these addresses without asking DNS (repeatable)"),
    _policy_option("network", "dns_allow_private", action="store_true",
                   help="let DNS answers pin loopback and private-range addresses"),
    _policy_option("network", "net_private_loopback", action="store_true",
                   help="a network namespace of the sandbox's own with only loopback: its "
                   "servers on 127.0.0.1 are its own, the host's out of sight; what the "
                   "rules allow is still reached (from the host's namespace). The default "
                   "without -r/-w and network options"),
    _option("network", "net_private_loopback", "--no-net-private-loopback", action="store_false",
            help="the host's network namespace even where the private one is the default "
                 "(the host's loopback services then denied by the rules, with a notice)"),
    _policy_option("http", "http_allow", action="append", metavar="RULE",
                   help="allow requests matching 'METHODS HOST[/PATH]', e.g. "
                   "'GET api.github.com/repos/*'; implies reaching HOST on the HTTP ports "
                   "(repeatable)"),
    _policy_option("http", "http_deny", action="append", metavar="RULE",
                   help="deny requests matching 'METHODS HOST[/PATH]'; wins over "
                   "--http-allow (repeatable)"),
    _policy_option("http", "http_ports", action="append", metavar="PORT",
                   help="a port HTTP rules govern (repeatable; default: 80 and 443)"),
    _policy_option("http", "https_inspect", choices=HTTPS_INSPECT_MODES,
                   help="auto (default): decrypt HTTPS only for hosts whose rules need the "
                   "method or path; on: always; off: never (SNI checks only)"),
    _policy_option("http", "upstream_ca", action="append", metavar="FILE",
                   help="also trust these CA certificates for upstream servers "
                   "(repeatable)"),
    _policy_option("http", "http_upstream_timeout", type=float, metavar="SECONDS",
                   help="answer 504 when an upstream sends nothing for SECONDS while a "
                   "request waits on it (default: 120)"),
    _policy_option("http", "http_ca", metavar="CERT", help="sign with this CA (with --http-key)"),
    _policy_option("http", "http_key", metavar="KEY", help="the key of --http-ca"),
    _policy_option("http", "ca_env", action="store_false",
                   help="do not point the command's TLS clients at the sandbox CA"),
    _policy_option("http", "http_ca_out", metavar="PATH",
                   help="write the sandbox CA certificate (never its key) to PATH"),
    _policy_option("credentials", "credentials", action="append", metavar="NAME=SOURCE",
                   help="a secret sandlock reads at start: SOURCE is env:VAR (VAR is then "
                   "removed from COMMAND's environment) or file:PATH (denied to COMMAND) "
                   "(repeatable)"),
    _policy_option("credentials", "http_auth", action="append", metavar="RULE",
                   help="'METHODS HOST[/PATH] SCHEME NAME': on requests the HTTP rules let "
                   "through, set credential NAME's header; SCHEME: bearer, basic (NAME holds "
                   "user:password) or header:Header-Name (repeatable)"),
    _policy_option("credentials", "credential_env", action="append", metavar="VAR=NAME",
                   help="give COMMAND the variable VAR holding a placeholder for credential "
                   "NAME, for clients that will not start without one (repeatable)"),
    _policy_option("credentials", "http_auth_plain", action="store_true",
                   help="also add credentials to plain-HTTP requests (sent in clear: refused "
                   "by default)"),
    _policy_option("confinement", "allow_ipc", action="store_true",
                   help="allow abstract unix sockets and signals to processes outside"),
    _policy_option("confinement", "isolate_ipc", action="store_true",
                   help="isolate abstract unix sockets (the default; --allow-ipc relaxes it)"),
    _policy_option("confinement", "isolate_signals", action="store_true",
                   help="isolate signals (the default; --allow-ipc relaxes it)"),
    _policy_option("confinement", "allow_sysv_ipc", action="store_true",
                   help="allow SysV IPC and POSIX message queues (machine-wide: a channel to "
                   "other processes)"),
    _policy_option("confinement", "allow_syscalls", action="append", metavar="NAME",
                   help="DANGEROUS: lift sandlock's restriction on syscall NAME"),
    _policy_option("confinement", "best_effort", action="store_true",
                   help="run without Landlock or IPC scoping if the kernel lacks them, "
                   "with a warning (seccomp stays required)"),
    _policy_option("confinement", "allow_degraded", action="append", metavar="PROTECTION",
                   help="run without PROTECTION (e.g. SIGNAL_SCOPE) where the kernel lacks it, "
                   "with a notice (repeatable; see docs/usage.md)"),
    _policy_option("confinement", "disable", action="append", metavar="PROTECTION",
                   help="DANGEROUS: turn PROTECTION off, with a notice (repeatable)"),
    _policy_option("confinement", "deny_syscalls", action="append", metavar="NAME",
                   help="deny syscall NAME instead of the default list (SysV IPC); the denials "
                   "sandlock never lifts stay (repeatable)"),
    _policy_option("confinement", "extra_deny_syscalls", action="append", metavar="NAME",
                   help="deny syscall NAME (EPERM) on top of the default denials (repeatable)"),
    _policy_option("process", "user", metavar="UID:GID",
                   help="the user and group ids COMMAND has in the sandbox (e.g. 0:0); "
                   "outside, it is still you"),
    _policy_option("process", "privileged", action="store_true",
                   help="uid and gid 0 in the sandbox (--user 0:0), without any capability"),
    _policy_option("process", "no_coredump", action="store_true",
                   help="no core dumps (RLIMIT_CORE 0)"),
    _policy_option("process", "no_randomize_memory", action="store_true",
                   help="no address-space randomisation (ASLR) for COMMAND"),
    _policy_option("process", "no_huge_pages", action="store_true",
                   help="no transparent huge pages for COMMAND"),
    _policy_option("process", "env", action="append", metavar="K=V|NAME",
                   help="set an environment variable, or pass NAME from sandlock's "
                   "environment (for secrets: not in sandlock's command line) (repeatable)"),
    _policy_option("process", "clean_env", action="store_true",
                   help="keep only PATH HOME TERM LANG USER SHELL from the environment"),
    _policy_option("process", "cwd", metavar="DIR",
                   help="run COMMAND in DIR (the default workspace's writable directory)"),
    _policy_option("process", "timeout", "-t", type=number, metavar="SECONDS",
                   help="kill COMMAND and everything it started after SECONDS (exit 124)"),
    _policy_option("process", "announce", action="store_true",
                   help="say what runs, where and with which network before, and how long "
                   "it took after, on stderr even when it is not a terminal (there, it is "
                   "said unless -q)"),
    _policy_option("limits", "max_memory", "-m", metavar="SIZE",
                   help="memory all its processes may use together, e.g. 512M (K, M, G; a "
                   "bare number is bytes, at least 1M of them); past it the sandbox is "
                   "killed (exit 137)"),
    _policy_option("limits", "max_processes", "-P", type=whole_number, metavar="N",
                   help="processes alive at once (threads not counted); a fork past it "
                   "fails with EAGAIN. Without it (or 0), the default cap: 1024 tasks, "
                   "threads included"),
    _policy_option("limits", "max_cpu", type=number, metavar="PCT",
                   help="percent of one CPU the sandbox may use (up to 100 per CPU)"),
    _policy_option("limits", "cpu_cores", metavar="LIST",
                   help="run only on these CPUs, e.g. 0,2-3"),
    _policy_option("limits", "max_open_files", type=whole_number, metavar="N",
                   help="open file descriptors per process (RLIMIT_NOFILE)"),
    _policy_option("limits", "max_file_size", metavar="SIZE",
                   help="largest file a process may write (RLIMIT_FSIZE: EFBIG, SIGXFSZ)"),
    _policy_option("limits", "max_output", metavar="SIZE",
                   help="keep at most SIZE of COMMAND's stdout and of its stderr; the rest "
                   "is dropped, and said"),
    _policy_option("filesystem", "chroot", metavar="DIR",
                   help="run COMMAND with DIR as its root (read-only; its own /tmp, the "
                   "sandbox's /proc and /dev), confined as usual"),
    _policy_option("filesystem", "image", metavar="REF",
                   help="run COMMAND in an OCI image: REF is a local OCI layout directory or "
                   "`docker save` tarball, PATH[:TAG], or a registry reference (alpine, "
                   "HOST/REPO:TAG, ...@sha256:HEX) pulled once; unpacked once per user, then "
                   "used as with --chroot"),
    _policy_option("workspace", "workdir", metavar="DIR",
                   help="run COMMAND in DIR, its writes to DIR captured copy-on-write: "
                   "the real DIR changes only when they are committed"),
    _policy_option("workspace", "on_exit", choices=WORKSPACE_ACTIONS,
                   help="after a success: commit (default), abort (discard) or keep the "
                   "changes (`sandlock workspace`)"),
    _policy_option("workspace", "on_error", choices=WORKSPACE_ACTIONS,
                   help="after a failure (non-zero exit, signal, timeout, limit): abort "
                   "(default), commit or keep"),
    _policy_option("workspace", "max_disk", metavar="SIZE",
                   help="the captured writes may take at most SIZE; past it, writes fail "
                   "with ENOSPC"),
    _policy_option("workspace", "fs_storage", metavar="DIR",
                   help="keep the captured writes in DIR instead of "
                   "$XDG_STATE_HOME/sandlock/workspaces (`sandlock workspace --fs-storage DIR`)"),
    # Upstream Sandlock's fields (docs/usage.md): how -m is held, the workdir's backend,
    # NotifPolicy's denied paths.
    _policy_option("limits", "max_memory_mode", choices=MEMORY_MODES,
                   help="at -m: kill (default) the sandbox, or refuse: a process's "
                   "allocation past SIZE fails with ENOMEM and it runs on"),
    _policy_option("workspace", "fs_isolation", choices=FS_ISOLATIONS,
                   help="the --workdir backend: overlayfs (what none means with a workdir), "
                   "or branchfs (refused unless DIR is on a BranchFS mount)"),
    _policy_option("confinement", "notif_policy", action="append", metavar="PATH",
                   help="deny PATH as upstream's NotifPolicy DENY rule does (as --fs-deny)"),
    _policy_option("determinism", "num_cpus", type=whole_number, metavar="N",
                   help="run on N CPUs (the first of --cpu-cores, if given), the number "
                   "/proc/cpuinfo, nproc and os.cpu_count() show"),
    _policy_option("determinism", "time_start", metavar="DATE",
                   help="the wall clock starts at DATE (2000-01-01T00:00:00Z, or Unix "
                   "seconds) and runs; monotonic clocks start near 0"),
    _policy_option("determinism", "random_seed", type=whole_number, metavar="N",
                   help="getrandom(), /dev/urandom and /dev/random give a stream seeded "
                   "by N: the same bytes in every run with N"),
    _policy_option("determinism", "deterministic_dirs", action="store_true",
                   help="directories list their entries sorted by name (getdents)"),
)

# `run`'s own options, each with its value when not given.
RUN_OPTIONS = (
    (_option("files", "print_policy", "--print-policy", action="store_true",
             help="print the effective policy as a policy file (TOML) and exit without "
             "running anything"), False),
    (_option("network", "audit", "--audit", metavar="FILE",
             help="append one JSON line per network decision to FILE, and per limit hit, "
             "workspace outcome, full-access run and policy_fn verdict (a regular file)"),
     None),
    (_option("process", "name", "--name", metavar="NAME",
             help="name the sandbox: its hostname, and its entry in `sandlock ps` while it "
             "runs (unique per user; at most 64 bytes, no '/')"), None),
    (_option("process", "quiet", "-q", "--quiet", action="store_true",
             help="no notices on stderr"), False),
    (_option("process", "interactive", "-i", "--interactive", action="store_true",
             help="keep the terminal and stdin (always the case: COMMAND gets both, and "
             "job control works)"), False),
    (_option("filesystem", "dangerously_allow_full_access", "--dangerously-allow-full-access",
             action="store_true", help="consent to --mode full-access (announced on stderr "
             "and in the audit log)"), False),
    (_option("workspace", "dry_run", "--dry-run", action="store_true",
             help="run, print what COMMAND changed in the workspace (--workdir, default "
             "the current directory) and discard it; nothing else is written either"), False),
    (_option("process", "no_supervisor", "--no-supervisor", action="store_true",
             help="apply the static layers (Landlock, seccomp, limits) to sandlock itself, "
             "then exec COMMAND: nothing stays around it; what needs sandlock around the "
             "command is refused"), False),
    (_option("process", "status_fd", "--status-fd", type=whole_number, metavar="FD",
             help="when the run ends, write how (exit code, reason, limits hit) as one JSON "
             "line to descriptor FD"), None),
    (_option("process", "pass_fds", "--pass-fd", action="append", type=whole_number, metavar="N",
             help="let COMMAND inherit descriptor N (repeatable; every other one above 2 "
             "is closed)"), []),
)


class Arguments:
    """Parsed options as attributes, like argparse's Namespace (without importing it)."""

    def __init__(self, values: dict[str, object]) -> None:
        self.__dict__.update(values)


def quick_run_args(argv: list[str]) -> Arguments | None:
    """``sandlock run ...`` parsed as argparse would, or None for anything but the
    plain forms (see the module's docstring)."""
    if argv[:1] != ["run"]:
        return None
    by_flag = {flag: option for option in (*POLICY_OPTIONS, *(o for o, _ in RUN_OPTIONS))
               for flag in option.flags}
    values: dict[str, object] = {"version": None, "subcommand": "run", "sources": [],
                                 **{o.dest: list(d) if isinstance(d, list) else d
                                    for o, d in RUN_OPTIONS}}
    position = 1
    while position < len(argv) and argv[position].startswith("-") and argv[position] != "--":
        option = by_flag.get(argv[position])
        if option is None:
            return None
        if not option.takes_value:
            values[option.dest] = option.action == "store_true"
            position += 1
            continue
        value = _value(option, argv[position + 1:position + 2])
        if value is None:
            return None
        if option.action == "source":
            values["sources"].append((option.const, value))  # type: ignore[attr-defined]
        elif option.action == "append":
            values.setdefault(option.dest, []).append(value)  # type: ignore[attr-defined]
        else:
            values[option.dest] = value
        position += 2
    values["command"] = argv[position:]
    return Arguments(values)


def _value(option: Option, given: list[str]) -> object:
    """The option's converted value, or None where argparse should decide."""
    if not given or given[0].startswith("-"):
        return None
    try:
        value = option.type(given[0]) if option.type else given[0]
    except ValueError:
        return None
    if option.choices is not None and value not in option.choices:
        return None
    return value
