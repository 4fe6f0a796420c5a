"""sandlock vet and sandlock.shellpolicy: zkit's shell-command vetting (seeds/002). The
cases are the document's: cd, redirects, syntax errors; in verify mode mutations,
through wrappers and git's global options, while installs, kill and filters pass."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from conftest import SANDLOCK, sandlock
from sandlock import shellpolicy

BASELINE = {
    # command: refusal code, or None for allowed
    "ls -la src": None,
    "grep -rn TODO . | sort | head -20": None,
    "make test > /dev/null 2>&1": None,
    "pytest -q 2>&1 | tail -5": None,
    "cd src": "cd",
    "cd src && make": "cd",
    "(cd docs; ls)": "cd",
    "pushd /etc": "cd",
    "echo hi > notes.txt": "redirect",
    "make >> build.log 2>&1": "redirect",
    "cat a &> out": "redirect",
    "ls >| listing": "redirect",
    "ls >& listing": "redirect",  # bash's other spelling of &>
    "ls >&2; ls 2>&-; echo warn > /dev/stderr": None,
    "for f in *.py; do wc -l $f > $f.count; done": "redirect",
    'echo "unterminated': "syntax",
    "if then fi": "syntax",
    "ls |": "syntax",
}
VERIFY = {
    "pip install -r requirements.txt": None,
    "npm install": None,
    "go test ./...": None,
    "kill 4242": None,
    "sed -n 1,5p setup.py": None,
    "perl -ne 'print if /x/' f": None,
    "git status && git diff HEAD~1": None,
    "find . -name '*.py' -newer x": None,
    "rm -rf build": "mutation",
    "mv a b": "mutation",
    "cp a b": "mutation",
    "tee out.txt": "mutation",
    "chmod +x run.sh": "mutation",
    "sed -i s/a/b/ f": "mutation",
    "perl -pi -e s/a/b/ f": "mutation",
    "git commit -am wip": "mutation",
    "git checkout main": "mutation",
    "git reset --hard": "mutation",
    "go mod tidy": "mutation",
    "go get example.com/x": "mutation",
    "sudo rm -f /etc/x": "mutation",
    "sudo -u nobody timeout -s KILL 5 rm a": "mutation",
    "find . -name '*.o' | xargs -n 1 rm": "mutation",
    "find . -name '*.o' -delete": "mutation",
    "find . -exec rm {} +": "mutation",
    "env A=1 nice -n 5 mv a b": "mutation",
    "\\rm x": "mutation",  # the shell removes quotes and backslashes from a name
    "r'm' x": "mutation",
    'while read f; do rm "$f"; done < list': "mutation",
    "git -C . rm foo_test.go": "mutation",
    "git -c user.name=x -C sub commit -m x": "mutation",
    "echo $(git push)": "mutation",
    "f() { rm a; }; f": "mutation",
}


@pytest.mark.parametrize(("command", "code"), BASELINE.items())
def test_baseline(command, code):
    decision = shellpolicy.decide(command)
    assert (decision.allowed, decision.code) == (code is None, code), decision.reason
    assert decision.reason


@pytest.mark.parametrize(("command", "code"), {**BASELINE, **VERIFY}.items())
def test_verify_mode(command, code):
    decision = shellpolicy.decide_verify(command)
    assert (decision.allowed, decision.code) == (code is None, code), decision.reason


def test_reasons_point_at_what_to_do_instead():
    assert "read tool" in shellpolicy.decide("cd x").reason
    assert "write or edit tool" in shellpolicy.decide("echo x > f").reason
    assert "notes.txt" in shellpolicy.decide("echo x > notes.txt").reason
    assert "git commit changes the repository" in shellpolicy.decide_verify("git commit").reason
    assert "(b)" in shellpolicy.decide_verify("mv a b").reason  # the write target


def test_cli_exit_status_and_output():
    allowed = sandlock("vet", "--", "ls -la")
    assert (allowed.returncode, allowed.stdout) == (0, "allowed\n")
    refused = sandlock("vet", "--", "cd src && make")
    assert refused.returncode == 1 and refused.stdout.startswith("refused (cd): cd: ")
    verify = sandlock("vet", "--verify", "--json", "--", "git -C . rm foo_test.go")
    assert verify.returncode == 1
    assert json.loads(verify.stdout) == {
        "allowed": False, "code": "mutation",
        "reason": "verify mode: git rm changes the repository; a verification must not "
                  "change files or the repository"}
    assert sandlock("vet", "--", "rm", "-rf", "x").returncode == 0  # words joined; baseline


def test_cli_usage_errors():
    missing = sandlock("vet")
    assert missing.returncode == 2
    assert missing.stderr == ("sandlock: error: vet: missing COMMAND "
                              "(usage: sandlock vet [--verify] -- 'COMMAND')\n")
    assert sandlock("vet", "--bogus", "--", "ls").returncode == 2


def test_a_run_never_imports_the_parser():
    result = subprocess.run([sys.executable, "-X", "importtime", *SANDLOCK[1:], "run", "--",
                             "true"], capture_output=True, text=True)
    assert result.returncode == 0, result.stderr
    assert "shellpolicy" not in result.stderr and "tree_sitter" not in result.stderr
