"""A guard on what `sandlock run` imports: start-up is a hot path, and a module that
slips onto it costs every run (docs/performance.md). Deterministic: the command runs
long enough for the network engine's thread to finish its imports too, and the check
is on module names, never on timings (those are in bench/)."""

from __future__ import annotations

import subprocess
import sys

# sandlock's modules a default run loads: the CLI, the policy, the confinement, the
# process side, and (on a thread, after the command execs) the network engine.
SANDLOCK_MODULES = {
    "sandlock", "sandlock._errors", "sandlock._lazy", "sandlock._record",
    "sandlock.cli", "sandlock.cli._parser",
    "sandlock.policy", "sandlock.policy._values",
    "sandlock.kernel", "sandlock.kernel._bpf", "sandlock.kernel._mounts",
    "sandlock.kernel._syscalls",
    "sandlock.confine", "sandlock.confine._autorun", "sandlock.confine._fspolicy",
    "sandlock.confine._isolation", "sandlock.confine._workspace",
    "sandlock.process", "sandlock.process._child", "sandlock.process._init",
    "sandlock.process._keeper", "sandlock.process._process", "sandlock.process._reports",
    "sandlock.process._terminal",
    # the engine's thread
    "sandlock.net", "sandlock.net._audit", "sandlock.net._execute", "sandlock.net._judge",
    "sandlock.net._materialize", "sandlock.net._netpolicy", "sandlock.net._ownsockets",
    "sandlock.net._pins", "sandlock.net._ports", "sandlock.net._sockaddr",
    "sandlock.net._spec", "sandlock.net._supervisor", "sandlock.net._workers",
    "sandlock.proxy", "sandlock.proxy._rules",  # the HTTP rule grammar, not the proxy
}
# Modules that must never be on that path: heavy, and needed only by features a
# default run does not use (TLS, the proxy, policy files, DNS, vetting...).
NEVER = {
    "shutil", "bz2", "lzma", "typing", "dataclasses", "inspect", "asyncio", "subprocess", "json", "concurrent",
    "email", "http", "ssl", "tempfile", "random", "hashlib", "logging", "tomllib",
    "zipfile", "importlib.metadata", "mitmproxy", "cryptography", "dns", "tree_sitter",
    "sandlock.ca", "sandlock.shellpolicy", "sandlock.proxy._launcher",
}


def test_a_default_run_imports_nothing_it_does_not_need(tmp_path):
    done = subprocess.run([sys.executable, "-X", "importtime", "-m", "sandlock", "run", "--",
                           "sleep", "1"], capture_output=True, text=True, cwd=tmp_path, timeout=60)
    assert done.returncode == 0, done.stderr
    imported = {line.split("|")[2].strip() for line in done.stderr.splitlines()
                if line.startswith("import time:") and line.count("|") == 2}
    ours = {name for name in imported if name.split(".")[0] == "sandlock"}
    assert ours - SANDLOCK_MODULES == set(), "new sandlock modules on the run path"
    assert {name for name in imported if name in NEVER or name.split(".")[0] in NEVER} == set()
