"""The short-lived CA cache (docs/ca.md): an inspecting run takes its CA from a per-user
0700 directory instead of waiting for one to be made, reuses it for twelve hours per
set of name constraints, and no sandboxed command can read it."""

from __future__ import annotations

import os
import stat
import time

import pytest

from conftest import sandlock

RULES = ["--http-allow", "GET example.test/*", "--resolve", "example.test=127.0.0.1"]


@pytest.fixture
def runtime(tmp_path, monkeypatch):
    """A runtime directory of the test's own ($XDG_RUNTIME_DIR), so that runs here use
    a cache nothing else shares."""
    directory = tmp_path / "runtime"
    directory.mkdir(mode=0o700)
    monkeypatch.setenv("XDG_RUNTIME_DIR", str(directory))
    return directory


def run_and_export(tmp_path, name: str, *rules: str, command: tuple[str, ...] = ("true",)):
    out = tmp_path / name
    done = sandlock("run", *rules, "--http-ca-out", str(out), "--", *command)
    return done, (out.read_bytes() if out.exists() else None)


def test_runs_with_the_same_rules_share_a_private_cached_ca(runtime, tmp_path):
    done, first = run_and_export(tmp_path, "a.pem", *RULES)
    assert done.returncode == 0, done.stderr
    _, second = run_and_export(tmp_path, "b.pem", *RULES)
    _, other = run_and_export(tmp_path, "c.pem", "--http-allow", "GET other.test/*",
                              "--resolve", "other.test=127.0.0.1")
    assert first == second and b"PRIVATE KEY" not in first
    assert other != first  # another set of name constraints, another CA
    cache = runtime / "sandlock" / "ca-cache"
    assert stat.S_IMODE(cache.stat().st_mode) == 0o700
    entries = list(cache.iterdir())
    assert len(entries) == 2
    assert all(stat.S_IMODE(entry.stat().st_mode) == 0o600 for entry in entries)


def test_a_ca_older_than_twelve_hours_is_replaced(runtime, tmp_path):
    _, first = run_and_export(tmp_path, "a.pem", *RULES)
    (entry,) = (runtime / "sandlock" / "ca-cache").iterdir()
    old = time.time() - 13 * 3600
    os.utime(entry, (old, old))
    _, second = run_and_export(tmp_path, "b.pem", *RULES)
    assert second != first


@pytest.mark.parametrize("policy", [[], ["-r", "/"]], ids=["default workspace", "-r /"])
def test_the_sandbox_cannot_read_the_cache(runtime, tmp_path, policy):
    run_and_export(tmp_path, "a.pem", *RULES)
    (entry,) = (runtime / "sandlock" / "ca-cache").iterdir()
    done = sandlock("run", *policy, *RULES, "--", "cat", str(entry))
    assert done.returncode != 0
    assert "PRIVATE KEY" not in done.stdout


def test_a_cache_others_can_enter_is_refused(runtime, tmp_path):
    cache = runtime / "sandlock" / "ca-cache"
    cache.mkdir(parents=True)
    cache.chmod(0o755)
    done, _ = run_and_export(tmp_path, "a.pem", *RULES)
    assert done.returncode == 125
    assert "ca-cache: sandlock's private directory must be a directory of yours" in done.stderr
    assert len(done.stderr.strip().splitlines()) == 1
