"""A guard on what `sandlock run` imports before the command runs: start-up is a hot
path (docs/performance.md), and a module that slips onto it costs every run.

The modules are read from ``sys.modules`` in the command's process just before exec
(it holds what sandlock, its keeper and init imported up to then), so lazy imports
count too, which ``-X importtime`` would miss. Deterministic: names, never timings
(those are in bench/)."""

from __future__ import annotations

import os
import subprocess
import sys

from conftest import CHECKOUT

# Beyond what a bare interpreter has loaded, the start path may import only these.
ALLOWED = {
    "__future__",  # `from __future__ import annotations` imports it
    "ctypes", "_ctypes", "ctypes._endian", "struct", "_struct", "types",  # the syscalls
    "errno", "gc", "math", "pwd", "select",  # C modules that cost microseconds
    # sandlock: the CLI, the policy, the confinement, the process side
    "sandlock", "sandlock._errors", "sandlock._lazy", "sandlock._record",
    "sandlock.cli", "sandlock.cli._main", "sandlock.cli._options",
    "sandlock.policy", "sandlock.policy._policy", "sandlock.policy._values",
    "sandlock.kernel", "sandlock.kernel._bpf", "sandlock.kernel._capabilities",
    "sandlock.kernel._features", "sandlock.kernel._landlock",
    "sandlock.kernel._libc", "sandlock.kernel._mounts", "sandlock.kernel._seccomp",
    "sandlock.kernel._syscalls",
    "sandlock.autorun", "sandlock.autorun._autorun",  # (the autorun files, split from confinement)
    "sandlock.confinement", "sandlock.confinement._confinement",
    "sandlock.confinement._fspolicy", "sandlock.confinement._isolation", "sandlock.confinement._workspace",
    "sandlock.confinement._filter",  # (split from _confinement: the seccomp rule choice)
    "sandlock.confinement._owncode",  # (split from _isolation: what sandlock runs from)
    "sandlock.confinement._execcaches",  # (caches the user's tools run from: private views)
    "sandlock.process", "sandlock.process._child", "sandlock.process._init",
    "sandlock.process._keeper", "sandlock.process._process", "sandlock.process._reports",
    "sandlock.process._supervision", "sandlock.process._terminal",
    "sandlock.api", "sandlock.api._sandbox", "sandlock.api._result",  # Sandbox: what a run launches
    "sandlock.api._launching",  # (split from _sandbox: the launch, and what it sets up around the process)
    "sandlock.process._inputs",  # (split from _sandbox: the checks of argv, fds, environment)
    "sandlock.process._networkslot",  # (split from _supervision: the engine, built when needed)
    "sandlock.netrules",  # the package only: its grammar is for runs with network rules
}
# Never loaded by a default run, not even after exec (TLS, the proxy, policy files,
# DNS, vetting...).
NEVER = {
    "argparse", "dataclasses", "inspect", "typing", "shutil", "subprocess", "json",
    "asyncio", "ssl", "tempfile", "logging", "tomllib", "importlib.metadata",
    "mitmproxy", "cryptography", "dns", "tree_sitter",
    "sandlock.ca", "sandlock.shellpolicy", "sandlock.proxy._launcher",
    "sandlock.api._confine_self", "sandlock.confinement._static",  # sandlock.confine() alone
    "sandlock.cow", "sandlock.process._cow", "sandlock.cli._workspace",  # --workdir runs only
    "sandlock._hostfile",  # runs that write a file of their own (--audit, --http-ca-out...)
    "mcp", "anyio", "pydantic", "sandlock.mcp", "sandlock.cli._mcp",  # `sandlock mcp` only
    "ray", "sandlock.ray",  # the Ray pool: only a program that makes one
}

DRIVER = """
import os, sys
out = int(sys.argv[1])
real_execve = os.execve
def execve(path, argv, env):
    os.write(out, ("exec " + " ".join(sys.modules) + "\\n").encode())
    real_execve(path, argv, env)
os.execve = execve
from sandlock.cli import main
code = main(sys.argv[2:])
os.write(out, ("exit " + " ".join(sys.modules) + "\\n").encode())
raise SystemExit(code)
"""


# Both interpreters without `site` (-S), sandlock from the checkout: an editable
# install's import finder runs at site's start and imports modules of its own (enum,
# collections, pathlib...), which then hid the same modules slipping onto sandlock's
# start path (a regular install, the README's, has no such finder). The default start
# path imports nothing from site-packages, so neither needs it. `site` itself is
# imported, not run: what it loads (os, stat...) every interpreter has.
_PYTHON = [sys.executable, "-S", "-c", "import site; exec(__import__('sys').argv.pop(1))"]
_ENV = {**os.environ, "PYTHONPATH": CHECKOUT}


def _modules_of(argv: list[str], cwd) -> dict[str, set[str]]:
    read, write = os.pipe()
    done = subprocess.run([*_PYTHON, DRIVER, str(write), *argv], pass_fds=(write,),
                          capture_output=True, text=True, cwd=cwd, timeout=60, env=_ENV)
    os.close(write)
    with os.fdopen(read) as lines:
        seen = {kind: set(names) for kind, *names in map(str.split, lines)}
    assert done.returncode == 0, done.stderr
    return seen


def _bare() -> set[str]:
    return set(subprocess.run([*_PYTHON, "import sys; print(*sys.modules)"], env=_ENV,
                              capture_output=True, text=True, check=True).stdout.split())


# A default run (default workspace, no network) has a private network: the keeper
# brings its `lo` up (docs/usage.md "A private loopback") with this module, loaded
# before the fork (it then sends sandlock a sock_diag socket, once init is forked). A
# run without the private network never loads it.
PRIVATE_NETWORK = {"sandlock.kernel._netns"}


def test_a_default_run_imports_nothing_it_does_not_need(tmp_path):
    seen = _modules_of(["run", "--", "/bin/true"], tmp_path)
    assert seen["exec"] - _bare() - ALLOWED - PRIVATE_NETWORK == set(), "new modules on the start path"
    assert PRIVATE_NETWORK <= seen["exec"]  # (else this test no longer sees a private network)
    assert {m for m in seen["exit"] if m in NEVER or m.split(".")[0] in NEVER} == set()


def test_a_run_without_the_private_network_does_not_load_it(tmp_path):
    for options in (["--no-net-private-loopback"], ["-r", "/usr", "-r", "/lib", "-r", "/lib64"]):
        seen = _modules_of(["run", *options, "--", "/bin/true"], tmp_path)
        assert seen["exec"] - _bare() - ALLOWED == set(), (options, "new modules on the start path")


# Network rules are read and checked before the command starts: their grammar only (the
# engine, with ipaddress, is built after exec when --resolve pins every name), and the
# resolver's files are read then (_hostsfile.SystemFiles: before the command could
# change them; the module needs neither ipaddress nor the engine).
NETWORK_GRAMMAR = {"sandlock.netrules._spec", "sandlock.netrules._inet", "sandlock.netrules._ports",
                   "sandlock.dns", "sandlock.dns._hostsfile",
                   "sandlock._grammar",  # (ports are numbers: the one grammar of them, ~0.1 ms)
                   "sandlock.policy._netvalues"}  # (the checks of network fields, out of a plain run's)


def test_a_run_with_network_rules_loads_only_their_grammar_before_exec(tmp_path):
    seen = _modules_of(["run", "--net-allow", "example.test:443", "--net-allow", "10.0.0.0/8:80",
                        "--net-allow", "[2001:db8::/32]:443", "--resolve", "example.test=127.0.0.1",
                        "--", "/bin/true"], tmp_path)
    assert seen["exec"] - _bare() - ALLOWED - NETWORK_GRAMMAR == set()
