"""sandlock installed where the sandbox's mounts hide it (a venv or a clone under /tmp,
which a default run's own /tmp covers): what init loads after the mounts (the random
devices' feed, the binder of pathname sockets) is loaded before them, so a seeded run
and a bind work as from anywhere else. The command itself cannot see the copy: the
check says so, which shows the test runs the case it is about."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys

from conftest import CHECKOUT

SEEDED_AND_BOUND = """
import os, socket, sys
print("package seen:", os.path.exists(sys.argv[1]))
with open("/dev/urandom", "rb") as random:
    print("random:", random.read(4).hex())
if os.path.exists("x.sock"):
    os.unlink("x.sock")  # (the previous run's)
s = socket.socket(socket.AF_UNIX)
s.bind("x.sock")
print("bound:", os.path.exists("x.sock"))
"""


def test_a_copy_of_sandlock_under_tmp_seeds_and_binds(tmp_path):
    package = tmp_path / "installed" / "sandlock"
    shutil.copytree(os.path.join(CHECKOUT, "sandlock"), package,
                    ignore=shutil.ignore_patterns("__pycache__"))
    work = tmp_path / "work"
    work.mkdir()
    # (not the tests' write grant of pytest's /tmp tree: it would be bound back; their
    # read grants, the interpreter and the checkout, stay)
    env = {key: value for key, value in os.environ.items() if key != "SANDLOCK_FS_WRITE"}
    env["PYTHONPATH"] = str(package.parent)
    runs = [subprocess.run([sys.executable, "-m", "sandlock", "run", "--random-seed", "7", "--",
                            sys.executable, "-c", SEEDED_AND_BOUND, str(package)],
                           cwd=work, env=env, capture_output=True, text=True, timeout=60)
            for _ in range(2)]
    for run in runs:
        assert run.returncode == 0, run.stderr
        lines = run.stdout.splitlines()
        assert lines[0] == "package seen: False" and lines[2] == "bound: True", run.stdout
    assert runs[0].stdout == runs[1].stdout  # (the seed: the same bytes both times)
