"""The sandbox policy: one immutable, validated value shared by the CLI and the API.

Every field carries the command-line option it comes from (``field.metadata["flag"]``)
so that an error raised here names what the user typed, and its key in a policy file
(``metadata["key"]``, ``section.name``; see ``_schema`` and docs/policy.md).
"""

from __future__ import annotations

from .._errors import PolicyError
from .._record import DataclassView, field, initialise, record, replace
from ._values import CHECKS, Environment

TYPE_CHECKING = False
if TYPE_CHECKING:
    from ..limits import Size
    from ._protection import Protection

DEFAULT_HTTP_PORTS = (80, 443)
# No process cap unless asked for: the cap supervises fork, and a fork the supervisor
# has not yet received fails with EINTR when a signal comes (a kernel limit, see
# docs/usage.md "Resource limits"): not a price every run should pay. 0: no cap.
DEFAULT_MAX_PROCESSES = 0
Instant = float  # Unix seconds (time_start: given as a date or as seconds)
PortList = tuple[str, ...]  # port lists as --net-allow-bind takes them: "8080", "8000-8100", "*"
# How long the proxy lets an upstream send nothing while a request waits on it (then
# 504). Longer than the idle timeouts of the fronts public APIs sit behind (AWS ALB
# and nginx 60 s, Cloudflare 100 s), so an upstream reachable through them never hits
# it; short enough that a silent one holds a request minutes, not forever. At most a
# day (_values.MAX_UPSTREAM_TIMEOUT).
DEFAULT_UPSTREAM_TIMEOUT = 120.0


def _flag(name: str, key: str, *, path: bool = False, **kwargs: object) -> object:
    """A field set by option ``name`` and, in a policy file, by ``key``. ``path``: a file
    path, which a policy file may give relative to its own directory."""
    return field(flag=name, key=key, path=path, **kwargs)


@record
class Policy:
    """What a sandboxed command may do.

    Field names are the Sandlock documents' (``fs_readable``, ``net_bind``, ...).
    Filesystem: with no ``fs_readable``/``fs_writable`` the default workspace applies
    (read everything but credential stores, write the current directory, /tmp and the
    usual devices); with any of them, nothing else is reachable. ``fs_denied`` always
    wins.

    Built by keyword (``Policy(fs_writable=["."])``), immutable, compared and hashed by
    value; ``policy.replace(timeout=60)`` is a checked copy with changes.
    """

    fs_readable: tuple[str, ...] = _flag("--fs-read", "filesystem.read", path=True, default=())
    fs_writable: tuple[str, ...] = _flag("--fs-write", "filesystem.write", path=True, default=())
    fs_denied: tuple[str, ...] = _flag("--fs-deny", "filesystem.deny", path=True, default=())
    mode: str = _flag("--mode", "filesystem.mode", default="workspace-write")
    allow_ipc: bool = _flag("--allow-ipc", "confinement.allow_ipc", default=False)
    # Always true (the seeds' spellings of sandlock's default); allow_ipc relaxes both.
    isolate_ipc: bool = _flag("--isolate-ipc", "confinement.isolate_ipc", default=True)
    isolate_signals: bool = _flag("--isolate-signals", "confinement.isolate_signals",
                                  default=True)
    allow_syscalls: tuple[str, ...] = _flag("--allow-syscall", "confinement.allow_syscalls",
                                            default=())
    allow_sysv_ipc: bool = _flag("--allow-sysv-ipc", "confinement.allow_sysv_ipc", default=False)
    allow_autorun_writes: bool = _flag("--allow-autorun-writes", "filesystem.allow_autorun_writes",
                                       default=False)
    env: Environment = _flag("--env", "process.env", default=Environment())
    clean_env: bool = _flag("--clean-env", "process.clean_env", default=False)
    cwd: str | None = _flag("--cwd", "process.cwd", path=True, default=None)
    timeout: float | None = _flag("--timeout", "process.timeout", default=None)
    # LocalGPT's run indicator (what runs, where, with which network; how long it took)
    # on sandlock run's stderr even when it is not a terminal (docs/usage.md).
    announce: bool = _flag("--announce", "process.announce", default=False)
    best_effort: bool = _flag("--best-effort", "confinement.best_effort", default=False)
    # Upstream Sandlock's hardening (docs/usage.md, "Protections and hardening"): protections
    # skipped where missing or off, syscalls denied, the ids inside, process attributes.
    allow_degraded: tuple[Protection, ...] = _flag("--allow-degraded", "confinement.allow_degraded",
                                                   default=())
    disable: tuple[Protection, ...] = _flag("--disable", "confinement.disable", default=())
    deny_syscalls: tuple[str, ...] | None = _flag("--deny-syscalls", "confinement.deny_syscalls",
                                                  default=None)
    extra_deny_syscalls: tuple[str, ...] = _flag("--extra-deny-syscall", "confinement.extra_deny_syscalls",
                                                 default=())
    user: str | None = _flag("--user", "process.user", default=None)
    privileged: bool = _flag("--privileged", "process.privileged", default=False)
    no_coredump: bool = _flag("--no-coredump", "process.no_coredump", default=False)
    no_randomize_memory: bool = _flag("--no-randomize-memory", "process.no_randomize_memory", default=False)
    no_huge_pages: bool = _flag("--no-huge-pages", "process.no_huge_pages", default=False)
    # Network: by default nothing. Specs are kept as written (validated here, compiled
    # by the network engine) so that a policy prints back the way it was given.
    net_allow: tuple[str, ...] = _flag("--net-allow", "network.allow", default=())
    net_allow_hosts: tuple[str, ...] = _flag("--net-allow-host", "network.allow_hosts",
                                             default=())
    net_connect: PortList = _flag("--net-connect", "network.connect", default=())
    net_deny: tuple[str, ...] = _flag("--net-deny", "network.deny", default=())
    net_bind: PortList = _flag("--net-bind", "network.allow_bind", default=())
    # Upstream Sandlock's port capabilities (docs/usage.md, "Port remapping" and "A bind
    # denylist"): every TCP port bindable but these (not with net_bind); a virtual port
    # space of the sandbox's own, its ports bound for it on free real ones.
    net_deny_bind: PortList = _flag("--net-deny-bind", "network.deny_bind", default=())
    port_remap: bool = _flag("--port-remap", "network.port_remap", default=False)
    unix_allow: tuple[str, ...] = _flag("--unix-allow", "network.unix_allow", path=True, default=())
    dns_servers: tuple[str, ...] = _flag("--dns-server", "network.dns_servers", default=())
    resolve: tuple[str, ...] = _flag("--resolve", "network.resolve", default=())
    dns_allow_private: bool = _flag("--dns-allow-private", "network.dns_allow_private",
                                    default=False)
    # zkit's private network: a network namespace of the sandbox's own, only `lo` in it
    # (docs/usage.md "A private loopback"). None: sandlock decides (``private_network``).
    net_private_loopback: bool | None = _flag("--net-private-loopback",
                                              "network.private_loopback", default=None)
    # HTTP: rules as written (validated here, compiled by the proxy), the ports they
    # govern, and how HTTPS is handled (see docs/http.md).
    http_allow: tuple[str, ...] = _flag("--http-allow", "http.allow", default=())
    http_deny: tuple[str, ...] = _flag("--http-deny", "http.deny", default=())
    http_ports: tuple[int, ...] = _flag("--http-port", "http.ports", default=DEFAULT_HTTP_PORTS)
    https_inspect: str = _flag("--https-inspect", "http.inspect", default="auto")
    upstream_ca: tuple[str, ...] = _flag("--upstream-ca", "http.upstream_ca", path=True, default=())
    http_upstream_timeout: float = _flag("--http-upstream-timeout", "http.upstream_timeout",
                                         default=DEFAULT_UPSTREAM_TIMEOUT)
    http_ca: str | None = _flag("--http-ca", "ca.cert", path=True, default=None)
    http_key: str | None = _flag("--http-key", "ca.key", path=True, default=None)
    ca_env: bool = _flag("--no-ca-env", "ca.env", default=True)
    http_ca_out: str | None = _flag("--http-ca-out", "ca.out", path=True, default=None)
    # Credentials the command never holds (docs/credentials.md): their sources (NAME ->
    # "env:VAR" | "file:PATH", the [credentials] table), the rules that attach them to
    # requests after the HTTP rules (``METHODS HOST[/PATH] SCHEME NAME``), the command's
    # variables holding placeholders instead (VAR -> NAME).
    credentials: Environment = _flag("--credential", "credentials", default=Environment())
    http_auth: tuple[str, ...] = _flag("--http-auth", "http.auth", default=())
    http_auth_plain: bool = _flag("--http-auth-plain", "http.auth_plain", default=False)
    credential_env: Environment = _flag("--credential-env", "process.credential_env",
                                        default=Environment())
    # Limits: what the sandbox as a whole may consume (docs/usage.md, "Resource limits").
    max_memory: Size | None = _flag("--max-memory", "limits.max_memory", default=None)
    max_processes: int = _flag("--max-processes", "limits.max_processes",
                               default=DEFAULT_MAX_PROCESSES)
    max_cpu: float | None = _flag("--max-cpu", "limits.max_cpu", default=None)
    cpu_cores: tuple[int, ...] = _flag("--cpu-cores", "limits.cpu_cores", default=())
    max_open_files: int | None = _flag("--max-open-files", "limits.max_open_files", default=None)
    max_file_size: Size | None = _flag("--max-file-size", "limits.max_file_size", default=None)
    max_output: Size | None = _flag("--max-output", "limits.max_output", default=None)
    # The copy-on-write workspace (docs/workspace.md): the command runs in ``workdir``,
    # whose writes are captured, then committed, discarded (abort) or kept for review,
    # ``on_exit`` after a success and ``on_error`` after anything else.
    workdir: str | None = _flag("--workdir", "workspace.dir", path=True, default=None)
    on_exit: str = _flag("--on-exit", "workspace.on_exit", default="commit")
    on_error: str = _flag("--on-error", "workspace.on_error", default="abort")
    max_disk: Size | None = _flag("--max-disk", "workspace.max_disk", default=None)
    # Where the workspace's captured writes are kept (upstream's name): a directory of
    # the user's instead of $XDG_STATE_HOME/sandlock/workspaces; denied to the command.
    fs_storage: str | None = _flag("--fs-storage", "workspace.storage", path=True, default=None)
    # Upstream Sandlock's Policy fields (seed 004): they take its enums (``_upstream``)
    # or their values as strings; notif_policy is kept as the paths it denies.
    max_memory_mode: str = _flag("--max-memory-mode", "limits.max_memory_mode", default="kill")
    fs_isolation: str = _flag("--fs-isolation", "workspace.fs_isolation", default="none")
    notif_policy: tuple[str, ...] = _flag("--notif-deny", "confinement.notif_policy",
                                          path=True, default=())
    # The machine as the sandbox sees it, and reproducible runs (upstream's names;
    # docs/usage.md, "Virtual /proc" and "Deterministic execution"). num_cpus: the
    # first N of the CPUs it may run on (cpu_cores', if given), shown in /proc/cpuinfo.
    num_cpus: int | None = _flag("--num-cpus", "limits.num_cpus", default=None)
    time_start: Instant | None = _flag("--time-start", "determinism.time_start", default=None)
    random_seed: int | None = _flag("--random-seed", "determinism.random_seed", default=None)
    deterministic_dirs: bool = _flag("--deterministic-dirs", "determinism.deterministic_dirs",
                                     default=False)
    # Another root for the command (docs/usage.md "Another root"): a directory
    # (upstream's chroot) or an OCI image, unpacked into sandlock's per-user store.
    chroot: str | None = _flag("--chroot", "filesystem.chroot", path=True, default=None)
    image: str | None = _flag("--image", "filesystem.image", default=None)

    __dataclass_fields__ = DataclassView()  # dataclasses.fields/replace/asdict, on demand

    def __init__(self, **values: object) -> None:
        _take_alias(values)
        if "strict" in values or "extra_allow_syscalls" in values:
            from ._hardening import upstream_spellings

            values = upstream_spellings(values)
        for name in values:
            if name not in FIELDS:
                from ._hardening import suggestion

                raise PolicyError(name, f"Policy has no field {name!r}{suggestion(name, FIELDS)}")
        initialise(self, (), values)

    def __post_init__(self) -> None:
        # Frozen: normalised values are stored through object.__setattr__, once, here.
        for name, normalise in CHECKS.items():
            object.__setattr__(self, name, normalise(name, getattr(self, name)))
        allows = [flag_of(name) for name in ("net_allow", "net_allow_hosts", "net_connect")
                  if getattr(self, name)]
        if self.net_deny and allows:
            raise PolicyError("net_deny", f"cannot be combined with {' or '.join(allows)} "
                              "(choose an allowlist or a denylist)")
        if self.net_deny_bind and self.net_bind:
            raise PolicyError("net_deny_bind", "cannot be combined with --net-bind (choose "
                              "the ports to allow or the ports to deny)")
        self._check_mode()
        if self.num_cpus is not None and self.cpu_cores and self.num_cpus > len(self.cpu_cores):
            raise PolicyError("num_cpus", f"{self.num_cpus} CPUs cannot be shown when --cpu-cores "
                              f"gives {len(self.cpu_cores)}: the sandbox's are the first "
                              "--num-cpus of them")
        self._check_root()
        self._check_workspace()
        if self.max_memory_mode != "kill" and self.max_memory is None:
            raise PolicyError("max_memory_mode", "--max-memory-mode refuse is about the memory "
                              "limit: give --max-memory SIZE too")
        if self.user is not None or self.privileged:
            from ._hardening import check_user

            check_user(self)
        self._check_credentials()
        if (self.http_ca is None) != (self.http_key is None):
            missing = "http_key" if self.http_key is None else "http_ca"
            raise PolicyError(missing, "--http-ca and --http-key go together (give both)")
        if self.http_ca is not None:
            from ._netvalues import check_user_ca

            check_user_ca(self.http_ca, self.http_key)

    def _check_mode(self) -> None:
        if self.mode == "read-only" and self.fs_writable:
            raise PolicyError("mode", "read-only cannot be combined with --fs-write")
        if self.mode == "full-access":
            given = [flag_of(name) for name in ("fs_readable", "fs_writable", "fs_denied",
                                                "net_deny", "net_deny_bind", "port_remap",
                                                "workdir", "net_private_loopback", "chroot", "image")
                     if getattr(self, name)]
            # (made in the sandbox's namespaces, which an unconfined run has not)
            given += [flag_of(name) for name in ("time_start", "random_seed", "num_cpus")
                      if getattr(self, name) is not None]
            if given:
                raise PolicyError("mode", f"full-access confines nothing: {', '.join(given)} "
                                  "would mean nothing with it")

    def _check_root(self) -> None:
        root = "chroot" if self.chroot else "image" if self.image else None
        if root is None:
            return
        if self.chroot and self.image:
            raise PolicyError("image", "--image and --chroot each give the command its "
                              "root: choose one")
        for other in ("cwd", "workdir"):
            if getattr(self, other) is not None:
                raise PolicyError(other, f"{flag_of(other)} names a directory of the host, "
                                  f"which {flag_of(root)}'s root does not show")

    def _check_workspace(self) -> None:
        if self.workdir is None:
            changed = [name for name in ("on_exit", "on_error", "max_disk", "fs_storage", "fs_isolation")
                       if getattr(self, name) != FIELDS[name].default]
            if changed:
                raise PolicyError(changed[0], f"{flag_of(changed[0])} is about the copy-on-write "
                                  "workspace: give --workdir DIR too")
            return
        if self.workdir == "/":
            raise PolicyError("workdir", "/: the whole machine cannot be a copy-on-write "
                              "workspace (choose a project directory)")
        if self.mode == "read-only":
            raise PolicyError("mode", "read-only cannot be combined with --workdir (a "
                              "workspace is for writing)")
        if self.fs_isolation == "branchfs":
            from ._seedchecks import check_branchfs

            check_branchfs(self.workdir)

    def _check_credentials(self) -> None:
        if self.credentials or self.http_auth or self.credential_env:
            from ._credentials import check_policy

            check_policy(self)

    def replace(self, **changes: object) -> Policy:
        """A checked copy with ``changes`` (upstream's spellings taken too)."""
        _take_alias(changes, replacing=True)
        return replace(self, **changes)

    @property
    def net_allow_bind(self) -> PortList:
        """Upstream Sandlock's name of ``net_bind``."""
        return self.net_bind

    @property
    def strict(self) -> bool:
        """Upstream's spelling: False is ``best_effort`` (``Policy(strict=False)`` too)."""
        return not self.best_effort

    @property
    def sets_process_limits(self) -> bool:
        """A limit or attribute the command's process sets before exec (KernelLimits)."""
        return bool(self.max_open_files or self.max_file_size or self.cpu_cores or self.num_cpus
                    or self.no_coredump or self.no_randomize_memory or self.no_huge_pages)

    @property
    def uses_default_workspace(self) -> bool:
        return not self.fs_readable and not self.fs_writable

    @property
    def private_network(self) -> bool:
        """A network namespace of the sandbox's own (its namespaces permitting): as asked,
        else zkit's default: for a default-workspace run that reaches nothing of the
        host's network and no host abstract socket (with --allow-ipc, it may)."""
        if self.net_private_loopback is not None:
            return self.net_private_loopback
        if self.fs_readable or self.fs_writable or self.full_access or self.allow_ipc:
            return False
        if any(getattr(self, name) for name in _HOST_NETWORK):
            return False
        if self.disable:  # (Protection members: confinement's numbers are loaded)
            from ..confinement import ABSTRACT_UNIX_SOCKET_SCOPE as scope

            return scope not in self.disable
        return True

    @property
    def full_access(self) -> bool:
        return self.mode == "full-access"

    @property
    def net_allow_specs(self) -> tuple[str, ...]:
        """Every allow rule, in --net-allow's grammar: --net-allow itself, each
        --net-allow-host (every port) and each --net-connect (TCP, any host)."""
        if self.full_access:
            return ("*",)
        connect = tuple(f"tcp://*:{ports}" for ports in self.net_connect)
        return (*self.net_allow, *self.net_allow_hosts, *connect)

    @property
    def credential_files(self) -> tuple[str, ...]:
        """The files secrets are read from (``file:PATH``): denied in every policy."""
        if not self.credentials:
            return ()  # (every run asks: only policies with credentials load the module)
        from ._credentials import source_files

        return source_files(self.credentials)

    @property
    def credential_variables(self) -> tuple[str, ...]:
        """sandlock's variables secrets are read from (``env:VAR``): never the command's."""
        if not self.credentials:
            return ()
        from ._credentials import source_variables

        return source_variables(self.credentials)

    @property
    def has_http_rules(self) -> bool:
        return bool(self.http_allow or self.http_deny)


# name -> Field (``.default``, ``.metadata``: flag, key, path), in declaration order.
FIELDS = {f.name: f for f in Policy.__record_fields__}  # type: ignore[attr-defined]

# The fields that reach the host's network, which a private network would cut: the
# destinations and the HTTP proxy (net_allow, net_allow_hosts, net_connect, net_deny:
# all but some; http_allow, http_deny), servers the host reaches (net_bind, net_deny_bind,
# port_remap: real ports). Not these: unix_allow (pathname sockets are files, of no
# network namespace); dns_servers, resolve, dns_allow_private, http_* and credentials
# (about what allow or HTTP rules reach: nothing without one).
_HOST_NETWORK = ("net_allow", "net_allow_hosts", "net_connect", "net_deny", "http_allow",
                 "http_deny", "net_bind", "net_deny_bind", "port_remap")


# Errors about what is not a Policy field but a Sandbox setting or argument.
_OTHER_FLAGS = {"audit": "--audit", "argv": "COMMAND", "pass_fds": "--pass-fd", "name": "--name"}


def flag_of(field_name: str) -> str:
    """The command-line option that sets ``field_name`` (for error messages)."""
    field = FIELDS.get(field_name)
    if field is not None:
        return field.metadata["flag"]
    return _OTHER_FLAGS.get(field_name, field_name)


def check_field(field_name: str, value: object) -> None:
    """Validate one field's value on its own (PolicyError if invalid): what Policy checks
    of that field, without the checks that relate fields to each other. Lets a policy
    file point at the line of a bad value before the sources are merged."""
    CHECKS[field_name](field_name, value)


# Upstream Sandlock's spellings of a field, taken as that field (docs/api.md).
_ALIASES = {"net_allow_bind": "net_bind"}


def _take_alias(values: dict[str, object], *, replacing: bool = False) -> None:
    """``values`` with upstream's spellings renamed to the field they stand for; both
    names given at once is an error (when ``replacing``, the alias replaces the field)."""
    for alias, name in _ALIASES.items():
        if alias not in values:
            continue
        if name in values and not replacing:
            raise PolicyError(alias, f"is {name}'s other name: give one of them")
        values[name] = values.pop(alias)
