"""sandlock's side of a run with HTTP rules: the proxy process and the command's trust.

Started before the command is forked, so that the proxy (whose imports take a few
hundred ms) comes up while the command starts. When HTTPS may be inspected, the
command's trust bundle must be complete before it execs (a TLS client may read it at
start-up): with a short-lived CA from the per-user cache (the default, docs/ca.md)
sandlock writes it at once; with the persistent or the user's CA, the proxy process
writes it and the command is held until it has.
"""

from __future__ import annotations

import _thread  # threading's Lock without threading (~1 ms before the command starts)
import os

from .._errors import SetupError
from ..confinement import NET_TCP, protection_degradable
from ..proxy import HttpRules
from ..proxy._launcher import ProxyProcess, ProxyUnavailable
from ..proxy._protocol import ProxyConfig, Route

TYPE_CHECKING = False  # typing costs ~2.5 ms to import: not on the start-up path
if TYPE_CHECKING:
    from collections.abc import Callable, Mapping

    from ..policy import Policy

TRUST_TIMEOUT = 30.0  # generating an EC CA takes ~50 ms; this only bounds a stuck proxy

__all__ = ["HttpRun", "ProxyUnavailable", "Route"]


class HttpRun:
    def __init__(self, policy: Policy, env: Mapping[str, str], *, audited: bool,
                 secrets: Mapping[str, str] | None = None, cwd: str | None = None) -> None:
        """``env``: the command's environment (trust variables are added to ``env_updates``);
        ``secrets``: the credentials' values, for the proxy process only; ``cwd``: the
        command's directory (where its clients find their project configuration)."""
        self.rules = HttpRules.parse(policy.http_allow, policy.http_deny, policy.http_auth)
        self.inspects = self.rules.needs_inspection(policy.https_inspect)
        self.run_dir: str | None = None
        self.proxy: ProxyProcess | None = None
        self.env_updates: dict[str, str] = {}
        self._events: list[dict] = []
        self._sink: Callable[[dict], None] | None = None
        self._lock = _thread.allocate_lock()
        self._trusted = False  # the trust files are written
        ca: dict = {}
        if self.inspects:
            from .._hostfile import private_directory

            self.run_dir = private_directory()  # (the run's trust files)
            clients = _client_cas(env, cwd or os.getcwd()) if policy.ca_env else {}
            # (for the proxy, when it writes the trust files; marshal keeps bytes)
            ca = {**_ca_settings(policy, self.rules, env), "clients": clients}
            if ca["source"] == "ephemeral":
                ca = self._trust_cached_ca(ca, env)
            if policy.ca_env:
                from .. import ca as _ca

                self.env_updates = _ca.trust_environment(self.run_dir, clients, env)
        config = ProxyConfig(
            allow=policy.http_allow, deny=policy.http_deny, inspect=policy.https_inspect,
            upstream_ca=policy.upstream_ca, audit_allowed=audited, ca=ca,
            run_dir=self.run_dir or "", ports=policy.http_ports, best_effort=protection_degradable(policy, NET_TCP),
            auth=policy.http_auth, secrets=dict(secrets or {}), auth_plain=policy.http_auth_plain,
            upstream_timeout=policy.http_upstream_timeout,
        )
        try:
            # Started at the first request, unless the command must wait for it to make the CA.
            self.proxy = ProxyProcess(config, self._on_event, self._on_incident,
                                      forkserver=_forkserver_directory(env),
                                      hidden=policy.credential_variables,
                                      eager=self.inspects and not self._trusted)
        except BaseException:
            self._remove_run_dir()
            raise

    @property
    def readable_paths(self) -> tuple[str, ...]:
        """What the command must be able to read whatever its filesystem policy."""
        return (self.run_dir,) if self.run_dir else ()

    def _trust_cached_ca(self, settings: dict, env: Mapping[str, str]) -> dict:
        """Write the run's trust files for a cached short-lived CA; the proxy gets the
        CA as a replacement proxy does (``inherited``: over its control channel)."""
        from .. import ca as _ca
        from ..confinement import sandlock_ca_cache_dir

        try:
            home = env.get("HOME") or os.path.expanduser("~")
            certificate, pem = _ca.cached_ca(settings["hosts"], sandlock_ca_cache_dir(env, home))
            _ca.write_trust_files(certificate, self.run_dir,
                                  certificate_out=settings.get("out"), clients=settings["clients"])
        except _ca.CAError as exc:  # a cache others could reach, a file not writable
            self._remove_run_dir()
            raise SetupError(f"HTTPS inspection: sandbox CA: {exc}") from None
        except OSError:  # no cache here (a HOME not ours, a read-only disk): the proxy
            return settings  # makes this run's CA, and the command waits for it
        self._trusted = True
        return {"source": "inherited", "pem": pem.decode()}

    def wait_for_trust(self) -> None:
        """Before the command execs: its trust bundle must be complete."""
        if not self.inspects or self._trusted:
            return
        error = self.proxy.wait_for_trust(TRUST_TIMEOUT)
        if error is not None:
            raise SetupError(f"HTTPS inspection: {error}")

    def attach(self, sink: Callable[[dict], None]) -> None:
        """Send the proxy's decisions to ``sink`` (the run's audit), earlier ones first."""
        with self._lock:
            self._sink = sink
            pending, self._events = self._events, []
        for event in pending:
            sink(event)

    def _on_incident(self, message: str, restarted: bool) -> None:
        """The proxy died: an audit record and a notice (in the run's audit, once
        attached; queued like the proxy's decisions until then)."""
        self._on_event({"kind": "incident", "message": message, "restarted": restarted})

    def watch_restarts(self, callback: Callable[[dict[int, tuple[str, int]]], None]) -> None:
        """``callback(addresses)`` each time a new proxy listens in place of a dead one."""
        if self.proxy is not None:
            self.proxy.on_restart = callback

    def _on_event(self, event: dict) -> None:
        with self._lock:
            sink = self._sink
            if sink is None:
                self._events.append(event)
                return
        sink(event)

    def close(self) -> None:
        """Stop the proxy, remove the trust bundle (idempotent)."""
        with self._lock:
            proxy, self.proxy = self.proxy, None
        if proxy is not None:
            proxy.close()
            self._remove_run_dir()

    def _remove_run_dir(self) -> None:
        """The trust files are plain files in one flat directory: removed without
        shutil (~2 ms to import, at the end of every inspecting run)."""
        if not self.run_dir:
            return
        try:
            for name in os.listdir(self.run_dir):
                os.unlink(os.path.join(self.run_dir, name))
            os.rmdir(self.run_dir)
        except OSError:  # something else in it: take the tree
            import shutil

            shutil.rmtree(self.run_dir, ignore_errors=True)


def _client_cas(env: Mapping[str, str], cwd: str) -> dict[str, bytes]:
    """The CAs the command's clients name in their own configuration (npm's cafile,
    pip's cert...), read as the user: their bundles must hold them (docs/ca.md)."""
    from .. import ca as _ca

    return _ca.client_certificates(env, cwd, _ca.bundle_base(os.environ))  # (write_trust_files' own)


def _forkserver_directory(env: Mapping[str, str]) -> str:
    """The user's proxy fork server lives in sandlock's runtime directory, which every
    policy denies (its token must stay out of every sandbox)."""
    from ..confinement import sandlock_runtime_dir

    home = env.get("HOME") or os.path.expanduser("~")
    return os.path.join(sandlock_runtime_dir(env, home), "proxy")


def _ca_settings(policy: Policy, rules: HttpRules, env: Mapping[str, str]) -> dict:
    """Which CA the proxy uses: the user's, the persistent one, or an ephemeral one
    name-constrained to what this run can reach."""
    settings: dict = {"hosts": _reachable_hosts(policy, rules), "out": policy.http_ca_out}
    if policy.http_ca is not None:
        return {**settings, "source": "user", "cert": policy.http_ca, "key": policy.http_key}
    from ..confinement import sandlock_ca_dir

    persistent = sandlock_ca_dir(env, env.get("HOME") or os.path.expanduser("~"))
    source = "persistent" if os.path.isdir(persistent) else "ephemeral"
    return {**settings, "source": source}


def _reachable_hosts(policy: Policy, rules: HttpRules) -> list[str]:
    """The names (and addresses) a TLS server name of this run can be: ``["*"]`` when
    any name can be reached. Networks (CIDR rules) are reached by address only, which a
    TLS server name never is."""
    if policy.net_deny:
        return ["*"]
    from ..netrules import parse_allow

    hosts = {rule.host for rule in rules.allow}
    for spec in policy.net_allow_specs:
        rule = parse_allow(spec)
        if rule.any_host:
            return ["*"]
        if rule.host is not None:
            hosts.add(rule.host)
    if "*" in hosts:
        return ["*"]
    # Deny rules alone open nothing (an --http-deny narrows what --net-allow opens): with
    # no host reachable, the CA may sign for none (".invalid" never names a real host).
    return sorted(hosts) or ["invalid"]
