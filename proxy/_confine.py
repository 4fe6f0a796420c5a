"""The proxy process confined with sandlock's own mechanisms.

It parses hostile HTTP, TLS and HTTP/2 from the command: should mitmproxy have a hole,
what is behind it must be little. Once its CA is ready and its trust bundle written,
the process restricts itself, for good:

* no new privileges, and the capabilities a root user would abuse dropped;
* Landlock: read the Python installation and the system's libraries and TLS
  material (its imports go on at run time), the upstream CA files; write only its
  run directory and the data-less devices; TCP: connect only to the HTTP ports it
  serves, bind nothing (its listeners were made by sandlock);
* seccomp: the command's filter (no namespaces, mounts, ptrace, io_uring, raw
  sockets...) and no exec.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Iterable

from .._errors import SetupError
from ..confinement import PSEUDO_DEVICES
from ..kernel import (
    PR_SET_NO_NEW_PRIVS,
    drop_capabilities,
    landlock,
    native_arch,
    prctl,
    seccomp,
)
from ._protocol import ProxyConfig

# Of the system, what an interpreter and OpenSSL read: libraries, the loader's cache,
# name-service and TLS configuration, trust stores, time zones.
SYSTEM_READ = (
    "/usr", "/lib", "/lib64", "/lib32", "/etc/ld.so.cache", "/etc/ld.so.conf",
    "/etc/ld.so.conf.d", "/etc/ssl", "/etc/pki", "/etc/ca-certificates",
    "/etc/nsswitch.conf", "/etc/hosts", "/etc/gai.conf", "/etc/host.conf",
    "/etc/resolv.conf", "/etc/localtime", "/etc/mime.types", "/proc/self",
    "/sys/devices/system/cpu",
)


def confine_proxy(config: ProxyConfig, extra_read: Iterable[str] = ()) -> None:
    """Restrict the calling (single-threaded or not: Landlock is per thread, so call it
    before any thread but the route reader exists... see _server) process."""
    abi = landlock.abi_version()
    prctl(PR_SET_NO_NEW_PRIVS, 1)
    drop_capabilities()
    if abi == 0:
        _missing("Landlock is not available", config)
    else:
        _landlock(config, abi, extra_read).restrict_self()
    arch = native_arch()
    seccomp.install(seccomp.build_filter(arch, extra=seccomp.NO_EXEC))


def _landlock(config: ProxyConfig, abi: int, extra_read: Iterable[str]) -> landlock.Ruleset:
    handled_net = landlock.net_handled(abi)
    if not handled_net:
        _missing(f"Landlock TCP rules need ABI 4, this kernel has ABI {abi}", config)
    ruleset = landlock.Ruleset(handled_fs=landlock.fs_handled(abi), handled_net=handled_net)
    read, write = landlock.fs_read_access(abi), landlock.fs_write_access(abi)
    python = {sys.prefix, sys.base_prefix, sys.exec_prefix, *sys.path}
    for path in (*SYSTEM_READ, *python, *extra_read):
        _allow(ruleset, path, read)
    for path in (*PSEUDO_DEVICES, config.run_dir):
        _allow(ruleset, path, write)
    if handled_net:
        for port in config.ports:
            ruleset.allow_port(port, landlock.NET_CONNECT_TCP)
    return ruleset


def _allow(ruleset: landlock.Ruleset, path: str, access: int) -> None:
    if path and os.path.isabs(path):
        try:
            ruleset.allow_path(path, access)
        except FileNotFoundError:
            pass


def _missing(what: str, config: ProxyConfig) -> None:
    if not config.best_effort:
        raise SetupError(f"cannot confine the HTTP proxy: {what} (--allow-degraded NET_TCP "
                         "runs without)")
