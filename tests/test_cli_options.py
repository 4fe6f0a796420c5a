"""The quick parse of `sandlock run` (no argparse on the start path) reads a command line
exactly as argparse does, and hands anything else to argparse."""

from __future__ import annotations

import pytest

from sandlock.cli._options import quick_run_args
from sandlock.cli._parser import build_parser

SAME = [
    ["run", "--", "/bin/true"],
    ["run", "/bin/true", "-q"],
    ["run", "-q", "--", "a", "--", "b"],
    ["run"],
    ["run", "-r", "/usr", "-r", "/etc", "-w", ".", "--", "ls", "-l"],
    ["run", "--fs-read", "/usr", "--fs-deny", "/usr/share", "ls"],
    ["run", "--net-allow", "example.com:443", "--resolve", "example.com=127.0.0.1", "curl", "x"],
    ["run", "--http-allow", "GET example.com/*", "--http-deny", "POST example.com/x", "--", "c"],
    ["run", "--http-port", "8080", "--https-inspect", "on", "--no-ca-env", "--", "c"],
    ["run", "--http-upstream-timeout", "30", "--", "c"],
    ["run", "--mode", "read-only", "--allow-autorun-writes", "--allow-ipc", "--", "c"],
    ["run", "-t", "2.5", "--env", "A=1", "--env", "B", "--clean-env", "--cwd", "/tmp", "c"],
    ["run", "--workdir", "/tmp", "--pass-fd", "5", "--pass-fd", "7", "--audit", "a.jsonl", "c"],
    ["run", "--policy", "a.toml", "-p", "web", "--policy", "b.toml", "--print-policy"],
    ["run", "-i", "--best-effort", "--dangerously-allow-full-access", "--mode", "full-access", "c"],
    ["run", "--net-allow-bind", "8000-8100", "--net-bind", "9000", "--unix-allow", "/s", "c"],
    ["run", "--isolate-ipc", "--isolate-signals", "--allow-sysv-ipc", "--allow-syscall", "ptrace"],
    ["run", "--dns-server", "127.0.0.1:53", "--dns-allow-private", "--net-connect", "443", "c"],
]

TO_ARGPARSE = [
    ["run", "--help"],
    ["run", "-h"],
    ["--version"],
    ["learn", "-o", "x", "--", "c"],
    ["run", "--timeout=5", "c"],  # --opt=value
    ["run", "-t5", "c"],  # attached short value
    ["run", "-qi", "c"],  # combined short options
    ["run", "--net-al", "x", "c"],  # an abbreviation
    ["run", "--no-such-option", "c"],
    ["run", "--timeout", "soon", "c"],  # a bad value: argparse's error
    ["run", "--mode", "everything", "c"],  # not a choice
    ["run", "--env", "-X", "c"],  # a value that looks like an option
    ["run", "--cwd"],  # no value
    ["run", "-", "c"],
]


@pytest.mark.parametrize("argv", SAME, ids=" ".join)
def test_quick_parse_reads_what_argparse_reads(argv):
    quick = quick_run_args(argv)
    assert quick is not None
    assert vars(quick) == vars(build_parser("run").parse_known_args(argv)[0])


@pytest.mark.parametrize("argv", TO_ARGPARSE, ids=" ".join)
def test_anything_else_is_left_to_argparse(argv):
    assert quick_run_args(argv) is None
