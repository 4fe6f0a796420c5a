"""``sandlock.confine(policy)``: the static part of a policy applied to the calling
process itself, for good, with no supervisor, no namespaces and no fork.

What it applies, what it refuses and why: docs/api.md ("confine"). Everything is
checked and compiled before anything is applied, so a refusal leaves the process as
it was.
"""

from __future__ import annotations

import os
import time

from .._errors import PolicyError, SetupError
from ..confinement import SelfConfinement, TcpRules
from ..policy import POLICY_FIELDS, Policy

TYPE_CHECKING = False  # typing costs ~5 ms to import
if TYPE_CHECKING:
    from ..limits import KernelLimits

# The fields confine() applies; every other one must keep its default value.
APPLIED = frozenset({
    "fs_readable", "fs_writable", "fs_denied", "mode", "allow_autorun_writes",
    "allow_ipc", "isolate_ipc", "isolate_signals", "allow_syscalls", "allow_sysv_ipc",
    "net_connect", "net_allow", "net_bind",
    "cpu_cores", "max_open_files", "max_file_size",
    "no_coredump", "no_randomize_memory", "no_huge_pages", "deny_syscalls", "extra_deny_syscalls",
})
# Why the others are refused when they are set (a field not named here: the first reason).
_USE_SANDBOX = "confine() cannot apply it: it needs a process around the command (use Sandbox)"
_REASONS = {
    ("env", "clean_env", "cwd"): "the environment and working directory of a running process "
                                 "are its own: set them before confine()",
    ("net_allow_hosts", "net_deny", "net_deny_bind", "port_remap", "unix_allow", "dns_servers",
     "resolve", "dns_allow_private"):
        "it is judged by sandlock's network supervisor, which a confined process has not "
        "(use Sandbox)",
    ("http_allow", "http_deny", "http_ports", "https_inspect", "upstream_ca", "http_ca",
     "http_key", "ca_env", "http_ca_out", "http_upstream_timeout"):
        "HTTP rules are enforced by sandlock's proxy (use Sandbox)",
    ("best_effort", "allow_degraded", "disable"):
        "confine() applies all of the confinement or raises SetupError",
    ("user", "privileged"): "a process that confines itself keeps its own ids (no user namespace)",
    ("num_cpus", "time_start", "random_seed", "deterministic_dirs"):
        "the sandbox's own view of the machine is made in its namespaces and answered by "
        "sandlock's supervisor, which a confined process has not (use Sandbox)",
}
REFUSED_BECAUSE = {name: reason for names, reason in _REASONS.items() for name in names}
_IN_A_SANDBOX = ("sandlock runs inside a sandbox here, where it can make neither namespaces nor a "
                 "supervisor of its own to enforce it (the enclosing sandbox's rules and limits "
                 "hold)")
_DEFAULTS = Policy()
_THREAD_EXIT_POLLS = 20  # 5 ms apart: 100 ms at most, only on the way to a refusal


def confine(policy: Policy | str) -> None:
    """Confine the calling process with ``policy`` (or the profile of that name), for
    good: Landlock (filesystem, TCP ports, signal and abstract-socket scopes), the
    seccomp filter, no_new_privs, no capability left (root too: bind a privileged port
    before). Confining again narrows further, never widens.

    Raises PolicyError naming a field it cannot apply, SetupError when the kernel lacks
    something or the process has more than one thread: nothing is applied then. A
    SetupError from the kernel while applying (rare) leaves it partly confined: end it.
    """
    if isinstance(policy, str):
        from ..policyfiles import load_profile

        policy = load_profile(policy)
    if not isinstance(policy, Policy):
        raise TypeError(f"confine() takes a Policy, not {type(policy).__name__}")
    tcp = _check(policy)
    limits = _kernel_limits(policy)
    _single_threaded()
    confinement = SelfConfinement.prepare(policy, tcp)
    try:
        if limits:  # before seccomp, which then refuses sched_setaffinity
            limits.before_confinement()
            limits.apply_rlimits()
        confinement.apply()
    finally:
        confinement.close()
    if _threads() > 1:  # started by a signal handler or a finalizer, in the meantime
        raise SetupError("a thread was started while confine() ran: that thread may be outside "
                         "the Landlock domain (end the process)")


def _check(policy: Policy, applied: frozenset[str] = APPLIED, enclosed: bool = False) -> TcpRules:
    """PolicyError for the first field confine() (or a run in a sandbox, ``enclosed``,
    which also applies ``applied``) cannot apply; the TCP rules otherwise."""
    if policy.full_access:
        raise PolicyError("mode", "full-access confines nothing: there is nothing to apply")
    if policy.uses_default_workspace and not enclosed:
        raise PolicyError("fs_readable", "confine() needs explicit grants (fs_readable, "
                          "fs_writable): the default workspace gives a sandbox its own /tmp in a "
                          "mount namespace, which a running process cannot enter")
    for name in POLICY_FIELDS:  # in declaration order: the first one is named
        if name not in applied and getattr(policy, name) != getattr(_DEFAULTS, name) \
                and not (name == "net_private_loopback" and policy.net_private_loopback is False):
            # (False: the network namespace they have; True is refused)
            raise PolicyError(name, _IN_A_SANDBOX if enclosed else
                              REFUSED_BECAUSE.get(name, _USE_SANDBOX))
    if "socket" in policy.allow_syscalls:
        raise PolicyError("allow_syscalls", "socket: without a supervisor, the network is decided "
                          "when a socket is made; that rule cannot be waived")
    return _tcp_rules(policy)


def _tcp_rules(policy: Policy) -> TcpRules:
    from ..netrules import TCP, parse_allow, parse_ports

    allowed = [parse_ports(ports) for ports in policy.net_connect]
    for spec in policy.net_allow:
        rule = parse_allow(spec)
        if not rule.any_host or rule.protocols != {TCP}:
            raise PolicyError("net_allow", f"{spec}: confine() allows TCP to any host by port "
                              "only (tcp://*:PORTS, Landlock's rules); hosts, addresses, UDP and "
                              "ICMP are judged by sandlock's network supervisor (use Sandbox)")
        allowed.append(rule.ports)
    if any(ports.all for ports in allowed):
        connect = None
    else:
        connect = tuple(sorted({port for ports in allowed for low, high in ports.ranges
                                for port in range(low, high + 1)}))
    for ports in policy.net_bind:
        if not parse_ports(ports).all:
            raise PolicyError("net_bind", f"{ports}: confine() can let a process bind every port "
                              "('*') or none: listen() on an unbound socket takes an ephemeral "
                              "port, which Landlock does not see (bind and listen before "
                              "confine(), or use Sandbox)")
    return TcpRules(connect, any_bind=bool(policy.net_bind))


def _kernel_limits(policy: Policy) -> KernelLimits | None:
    if not policy.sets_process_limits:
        return None
    from ..limits import kernel_limits

    return kernel_limits(policy)


def _single_threaded() -> None:
    threads = _threads()
    # A thread just joined may still be listed: Python's join() returns before the
    # thread's last C code has run. Give such a thread a moment to go.
    for _ in range(_THREAD_EXIT_POLLS):
        if threads == 1:
            return
        time.sleep(0.005)
        threads = _threads()
    if threads > 1:
        raise SetupError(f"confine() needs a single-threaded process, and this one has {threads} "
                         "threads: Landlock on this kernel restricts the calling thread only "
                         "(call it before starting threads, or use Sandbox)")


def _threads() -> int:
    """The calling process's threads: the entries of /proc/self/task or, where a Landlock
    domain (an earlier confine()) may not list it, the link count procfs gives it (2 +
    the threads; Landlock does not restrict stat)."""
    try:
        return len(os.listdir("/proc/self/task"))
    except OSError:
        pass
    try:
        count = os.stat("/proc/self/task").st_nlink - 2
    except OSError as exc:
        raise SetupError(f"cannot count this process's threads: /proc/self/task: "
                         f"{exc.strerror}") from None
    if count < 1:
        raise SetupError("cannot count this process's threads: /proc/self/task")
    return count


# What a run in a sandbox applies besides: it has a process around the command.
_ENCLOSED_RUN = APPLIED | {"timeout", "max_output", "env", "clean_env", "cwd"}


def enclosed_confinement(policy: Policy, cwd: str, env: dict[str, str]) -> tuple[SelfConfinement, str]:
    """A run's confinement where sandlock itself is in a sandbox (``_enclosed``): the
    static part of ``policy`` (its default workspace included, of ``cwd`` and ``env``),
    and its network (NONE, PARENTS, or OWN: rules of its own, which the enclosing
    sandbox's supervisor applies on top of its own, as for a nested sandbox)."""
    bare, tcp, rules, network = _split_network(policy)
    own = network == OWN
    if own and (policy.allow_ipc or not policy.isolate_signals):
        raise PolicyError("allow_ipc", "a run inside a sandbox with network rules of its own "
                          "keeps its command from signalling its keeper, which vouches for its "
                          "processes: signals must stay isolated")
    _check(bare, _ENCLOSED_RUN, enclosed=True)
    return SelfConfinement.prepare(bare, tcp, rules, cwd=cwd, env=env, enclosed=True), network


# A nested policy's network: none (every socket refused), its parent's, or its parent's
# narrowed by rules of its own.
NONE, PARENTS, OWN = "none", "parent's", "own"


def _split_network(policy: Policy) -> tuple[Policy, TcpRules, dict | None, str]:
    """A nested policy without its network fields, the TCP and seccomp rules for its
    network (none, or its parent's: nothing of its own decides in the kernel), and
    which network it has: NONE, PARENTS, or OWN (rules for its parent's supervisor to
    apply)."""
    network = {name: getattr(policy, name) for name in NESTED_NETWORK}
    parents = network == {**dict.fromkeys(NESTED_NETWORK, ()), "net_allow": ("*",)}
    own = any(network.values()) and not parents
    bare = policy.replace(**dict.fromkeys(NESTED_NETWORK, ()))
    if parents or own:  # the parent's filter decides
        return bare, TcpRules(connect=None, any_bind=True), {}, OWN if own else PARENTS
    return bare, TcpRules(), None, NONE  # every socket refused


# A nested sandbox's network rules of its own: judged by the parent's supervisor (and
# the HTTP rules by its proxy).
NESTED_NETWORK = ("net_allow", "net_allow_hosts", "net_connect", "net_deny", "net_bind",
                  "http_allow", "http_deny")


def nested_network_rules(policy: Policy) -> dict[str, list[str]]:
    """A nested policy's network rules as the parent's engine takes them (net._nesting),
    its IPC scope included: the parent's supervisor performs its processes' connects,
    and must not reach further than Landlock would let them."""
    from ..net import ABSTRACT_SCOPE

    return {"allow": list(policy.net_allow_specs), "deny": list(policy.net_deny),
            "bind": list(policy.net_bind), "http_allow": list(policy.http_allow),
            "http_deny": list(policy.http_deny),
            "scope": [] if policy.allow_ipc else [ABSTRACT_SCOPE]}


def nested_confinement(policy: Policy, readable: tuple[str, ...] = ()
                       ) -> tuple[SelfConfinement, KernelLimits | None, str]:
    """What a sandbox nested in a running one adds on top of it (``sb.sandbox``): the
    static part of ``policy``, compiled here, applied by its resident, and its network
    (NONE, PARENTS or OWN, rules of its own). Its network is none (a seccomp ERRNO, which takes
    precedence over the parent's notification), its parent's (``net_allow=["*"]``), or
    its parent's narrowed by rules of its own, which the parent's supervisor applies
    after its own (it performs the connects: no Landlock TCP rule would be consulted;
    nor can the nested processes have a listener of their own: the kernel allows one
    per chain of filters, EBUSY below the sandbox's; tried). See net._nests.
    ``readable``: what every process of the parent must read (its CA bundle)."""
    bare, tcp, rules, network = _split_network(policy)
    _check(bare)
    return (SelfConfinement.prepare(bare, tcp, rules, readable=readable), _kernel_limits(policy),
            network)
