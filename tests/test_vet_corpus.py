"""The vetting against what bash really does: a generated corpus (seeded) of the bash
manual's compound commands and expansions, and the ways a line hands code to another
shell, around the rules' targets (a cd, a redirect out of the workspace, a writer in
verify mode). Every case vet approves runs with bash in a real sandbox
(tests/shellcases.py) and must not have changed directory, written outside the
workspace, or (verify mode) changed the workspace. Cases vet refuses do not run.

Controls: each construct around a plain target, and each spelling of a target, run
unvetted, do what the rule forbids (so the constructs are really executed and the
oracle sees it); the everyday verification commands stay approved and run clean."""

from __future__ import annotations

import random
import shlex
import shutil

import pytest

from sandlock import shellpolicy
from shellcases import build_shim, build_template, run_cases

SEED = 20250611
BASELINE_SAMPLE = 1500
VERIFY_SAMPLE = 900
# Set at the start of every case (exported: child shells see them), for the spellings
# that build a name at run time.
PRELUDE = "export c=cd w=rm o=-i e=echo\n"

# (template, reaches the target, runs builtins (a cd takes effect), built at run time).
# {T} is the target command, {Q} the same quoted as one word.
CONSTRUCTS = [
    ("{T}", True, True, False),
    ("{ {T}; }", True, True, False),
    ("( {T} )", True, True, False),
    ("if true; then {T}; fi", True, True, False),
    ("if false; then :; else {T}; fi", True, True, False),
    ("if false; then :; fi; {T}", True, True, False),
    ("while true; do {T}; break; done", True, True, False),
    ("until false; do {T}; break; done", True, True, False),
    ("for i in 1; do {T}; done", True, True, False),
    ("for ((i = 0; i < 1; i++)); do {T}; done", True, True, False),
    ("case a in a) {T};; esac", True, True, False),
    ("select s in a; do {T}; break; done <<< 1", True, True, False),
    ("[[ -n x ]] && {T}", True, True, False),
    ("(( 1 )) && {T}", True, True, False),
    ("f() { {T}; }; f", True, True, False),
    ("function g { {T}; }; g", True, True, False),
    ("coproc {T}\nwait", True, True, False),
    ("coproc C { {T}; }; wait", True, True, False),
    ("true | {T}", True, True, False),
    ("{T} | cat", True, True, False),
    ("false || {T}", True, True, False),
    ("{T} &\nwait", True, True, False),
    ("! {T}", True, True, False),
    ("time {T}", True, True, False),
    ("echo $({T})", True, True, False),
    ("echo `{T}`", True, True, False),
    ("cat <({T})", True, True, False),
    ("x=$({T})", True, True, False),
    ("eval {Q}", True, True, False),
    ("bash -c {Q}", True, True, False),
    ("sh -c {Q}", True, False, False),
    ("bash <<< {Q}", True, True, False),
    ("bash <<'E'\n{T}\nE", True, True, False),
    ("trap {Q} EXIT", True, True, False),
    ("shopt -s expand_aliases\nalias a={Q}\na", True, True, False),
    ("timeout 5 bash -c {Q}", True, True, False),
    ("env bash -c {Q}", True, True, False),
    ("find . -maxdepth 0 -exec bash -c {Q} \\;", True, True, False),
    ("command {T}", True, True, False),
    ("nice {T}", True, False, False),
    ("x='a[$({T})]'; : $((x))", True, True, False),
    ("PS4='$({T})'; set -x; :", True, True, False),
    ("cat <<'E' | bash\n{T}\nE", True, True, True),
    ("bash -c \"$(cat <<'E'\n{T}\nE\n)\"", True, True, True),
    ("printf '%s\\n' {Q} | tee s.sh > /dev/null; source s.sh", True, True, True),
]
# (target, effective, built at run time). {D}: a directory other than the workspace.
CD_FORMS = [
    ("cd {D}", True, False), ("\\cd {D}", True, False), ("c\\d {D}", True, False),
    ("'cd' {D}", True, False), ('"cd" {D}', True, False), ("c''d {D}", True, False),
    ("$'cd' {D}", True, False), ("$'\\x63d' {D}", True, False), ('$"cd" {D}', True, False),
    ("builtin cd {D}", True, False), ("command cd {D}", True, False),
    ("\\builtin cd {D}", True, False), ("pushd {D} >/dev/null", True, False),
    ("c{d,d}", True, False), ("c\\\nd {D}", True, False), ("exec cd {D}", False, False),
    ("$c {D}", True, True), ("${c} {D}", True, True), ('"$c" {D}', True, True),
    ("$(echo cd) {D}", True, True), ("`echo cd` {D}", True, True), ("c? {D}", True, True),
    ("${c:-cd} {D}", True, True), ("$c${x} {D}", True, True),
]
DIRECTORIES = ("..", "/", "../outside")
REDIRECT_FORMS = [
    ("echo x > {O}", False), ("echo x >> {O}", False), ("echo x &> {O}", False),
    ("echo x >| {O}", False), ("echo x 1<> {O}", False), ("echo x >& {O}", False),
    ("exec 3> {O}", False), ("echo x 2> {O}", False), ("{ echo x; } > {O}", False),
    ("$e x > {O}", True), ("echo x > $(echo {O})", True), ("echo x > \"{O}\"", False),
    ("bash -c 'echo x > {O}'", False), ("eval 'echo x > {O}'", False),
    ("sed -n '1e echo x > {O}' a.txt", False), ("mapfile -C 'echo x > {O}' -c 1 m <<< y", False),
    ("bash <<< 'echo x > {O}'", False), ("dash -c 'echo x > {O}'", False),
]
OUTSIDE = ("../outside/f", "~+/../outside/g", "../outside/h")
BENIGN = ["ls", "echo x", "true", "git status", "cat a.txt", "pwd", "echo x > /dev/null",
          "ls 2>&1", "echo x >&2", "grep -c a a.txt", "ls sub"]
WRITERS = [
    ("rm -f a.txt", False), ("touch new", False), ("sed -i s/a/b/ a.txt", False),
    ("sed -n 'w copy' a.txt", False), ("perl -pi -e s/a/b/ a.txt", False),
    ("git hash-object -w --stdin <<< fresh", False), ("git commit-tree HEAD^{tree} -m x", False),
    ("git tag t1", False), ("git branch b1", False), ("git config x.y z", False),
    ("tar -xf arch.tar", False), ("cp a.txt copy", False), ("mv a.txt moved", False),
    ("tee new < /dev/null", False), ("truncate -s 0 a.txt", False),
    ("dd if=a.txt of=copy status=none", False), ("sort -r -o a.txt a.txt", False),
    ("mkdir d1", False), ("ln -s a.txt l1", False), ("chmod +x a.txt", False),
    ("find . -name a.txt -delete", False), ("gzip a.txt", False),
    ("awk '{print > \"copy\"}' a.txt", False), ("python3 -m zipfile -c z.zip a.txt", False),
    ("vim -u NONE -es -c '%s/a/b/' -c wq a.txt", False), ("xargs rm <<< a.txt", False),
    ("find . -name a.txt -exec rm {} +", False), ("git checkout -q -b nb", False),
    ("git rm -q --cached a.txt", False), ("git -c user.name=v -c user.email=v@v commit -q --allow-empty -m x", False),
    ("printf 'blob\\ndata 2\\nhi\\n' | git fast-import --quiet", False),
    ("$w -f a.txt", True), ("sed $o s/a/b/ a.txt", True), ("eval \"$w -f a.txt\"", True),
    ("echo a.txt | xargs sed -i s/a/b/", True), ("echo -i | xargs sed s/a/b/ a.txt", True),
]
CONTROLS = ["ls", "git status", "git diff", "git log --oneline -1", "cat a.txt", "sed -n 1p a.txt",
            "grep -c a a.txt", "wc -l a.txt", "head -1 a.txt", "git show --stat HEAD",
            "find . -name '*.txt'", "tar -tf arch.tar", "sort a.txt", "true", "git branch",
            "git rev-parse HEAD", "diff a.txt sub/x.txt; true"]


@pytest.fixture(scope="module")
def lab(tmp_path_factory):
    if shutil.which("gcc") is None:
        pytest.skip("gcc is needed to build the oracle's chdir probe")
    directory = tmp_path_factory.mktemp("vetlab")
    return directory, build_template(directory), build_shim(directory)


def built_at_run_time(construct: str, target: str) -> bool:
    """find -exec fills {} into its arguments, a script's included."""
    return "-exec" in construct and "{}" in target


def case(construct: str, target: str) -> str:
    return PRELUDE + construct.replace("{Q}", shlex.quote(target)).replace("{T}", target)


def fits(construct: str, target: str) -> bool:
    """Single-quoted templates take a target without single quotes; coproc a simple command."""
    if "{T}" in construct and construct[:construct.index("{T}")].count("'") % 2 and "'" in target:
        return False
    return not (construct.startswith("coproc {T}") and target.startswith(("{", "exec")))


def baseline_cases() -> list[tuple[str, bool, str]]:
    """(case, built at run time, kind) for every construct around every baseline target."""
    targets = [(form.replace("{D}", directory), runtime, "cd")
               for form, _, runtime in CD_FORMS for directory in DIRECTORIES]
    targets += [(form.replace("{O}", path), runtime, "redirect")
                for form, runtime in REDIRECT_FORMS for path in OUTSIDE]
    targets += [(target, False, "benign") for target in BENIGN]
    return [(case(construct, target), runtime or built or built_at_run_time(construct, target), kind)
            for construct, _, _, built in CONSTRUCTS for target, runtime, kind in targets
            if fits(construct, target)]


def verify_cases() -> list[tuple[str, bool, str]]:
    targets = [(target, runtime, "writer") for target, runtime in WRITERS]
    targets += [(target, False, "control") for target in CONTROLS]
    return [(case(construct, target), runtime or built or built_at_run_time(construct, target), kind)
            for construct, _, _, built in CONSTRUCTS for target, runtime, kind in targets
            if fits(construct, target)]


def test_what_vet_approves_bash_runs_without_breaking_a_rule(lab):
    directory, template, shim = lab
    generator = random.Random(SEED)
    baseline = generator.sample(baseline_cases(), BASELINE_SAMPLE)
    verify = generator.sample(verify_cases(), VERIFY_SAMPLE)
    approved, mismatched = [], []
    for cases, decide, mode in ((baseline, shellpolicy.decide, "baseline"),
                                (verify, shellpolicy.decide_verify, "verify")):
        for text, runtime, kind in cases:
            strict = decide(text)
            if strict.allowed:
                approved.append((text, mode, kind))
            # Permissive differs only where code is built at run time.
            if not runtime and decide(text, permissive=True) != strict:
                mismatched.append(text)
    assert not mismatched, mismatched[:5]
    # The benign and read-only targets keep a good part of the corpus approved.
    assert len(approved) > 80, len(approved)
    assert not [text for text, _, kind in approved if kind in ("cd", "redirect", "writer")]
    outcomes = run_cases([text for text, _, _ in approved], template, shim)
    broken = [(text, outcome) for (text, mode, _), outcome in zip(approved, outcomes)
              if outcome.chdirs or outcome.outside or (mode == "verify" and outcome.changed)]
    assert not broken, broken[:3]


# Random lines of bash's tokens, quoting and separators around a cd or a write: where
# tree-sitter's grammar and bash read a line differently, vet must not be the one fooled.
RANDOM_LINES = 1500
CD_TOKENS = ["c", "d", "cd", " ", " ", " ", "'", '"', "\\", "\n", ";", "&", "|", "(", ")", "{",
             "}", "$", "`", "#", "<", ">", "=", "x", "..", "$'", "\\\n", "\\x63", "e", ",",
             "*", "?", "[", "]", "!", "~", "-", "\t", "2", "<<", "<<<", "EOF", "$(", "${",
             "((", "))", "==", "=~"]
WRITE_TOKENS = ["rm", "r", "m", " a.txt", " ", " ", " ", "'", '"', "\\", "\n", ";", "&", "|",
                "(", ")", "{", "}", "$", "`", "#", "<", ">", ">>", "=", "x", "../outside/f", "$'",
                "\\\n", "sed", " -i", " s/a/b/", "-", "i", "*", "~", "$(", "echo", "tee", "<<<",
                "bash", " -c", "eval", "1", "2", "&>", "git", " tag t", "touch", "<>", "=="]
CONSTRUCT_TOKENS = ["cd ..", "cd", " ..", "c", "d", " ", " ", "\n", ";", ";;", "&", "|", "(", ")",
                    "{ ", " }", "case x in ", "x) ", " esac", "if ", " then ", " fi", "for i in 1",
                    " do ", " done", "while ", "function f ", "f() ", "coproc ", "trap ", " EXIT",
                    "eval ", "'", '"', "\\", "$(", "`", "<<E\n", "\nE\n", "<<'E'\n", "<<<", "$((",
                    "))", "[[ ", " ]]", "((", "#", "bash -c ", "echo ", " > ../outside/f", ">",
                    "$'", "\\x63", "alias a=", "a", "x=", "$x", "${", "}", "select s in a",
                    "time ", "!", "-", "--", "exec ", "builtin ", "command "]


def random_lines(tokens: list[str], seed: int, needle: str) -> list[str]:
    generator = random.Random(seed)
    lines: set[str] = set()
    while len(lines) < RANDOM_LINES:
        line = "".join(generator.choice(tokens) for _ in range(generator.randint(2, 12)))
        if needle in line.replace("\\", "").replace("'", "").replace('"', "") or \
                generator.random() < 0.1:
            lines.add(line)
    return sorted(lines)


def test_random_lines_vet_approves_break_no_rule(lab):
    """And the control: of the lines vet refuses for a cd, a redirect or a write, a good
    part does change directory or the workspace when run: the lines are attacks."""
    directory, template, shim = lab
    cds = random_lines(CD_TOKENS, SEED, "cd") + random_lines(CONSTRUCT_TOKENS, SEED + 2, "")
    writes = random_lines(WRITE_TOKENS, SEED + 1, "")
    codes = {line: shellpolicy.decide(line).code for line in cds}
    codes.update({line: shellpolicy.decide_verify(line).code for line in writes})
    baseline = [line for line in cds if codes[line] is None]
    verify = [line for line in writes if codes[line] is None]
    refused = [line for line in cds if codes[line] == "cd"][:100] + \
        [line for line in writes if codes[line] in ("mutation", "redirect")][:100]
    outcomes = run_cases(baseline + verify + refused, template, shim)
    broken = [(line, outcome) for line, outcome in zip(baseline + verify, outcomes)
              if outcome.chdirs or outcome.outside or (line in verify and outcome.changed)]
    assert not broken, broken[:3]
    seen = sum(bool(outcome.chdirs or outcome.changed or outcome.outside)
               for outcome in outcomes[len(baseline) + len(verify):])
    assert seen > 20, seen


def test_the_constructs_and_spellings_really_run_their_target(lab):
    """The control: unvetted, each construct around a plain target, and each spelling
    of a target, does what the rule forbids, so the corpus's approvals mean something."""
    directory, template, shim = lab
    cases: list[tuple[str, str]] = []
    for construct, reaches, builtins, _ in CONSTRUCTS:
        if builtins:
            cases.append((case(construct, "cd .."), "cd"))
        cases.append((case(construct, "echo x > ../outside/f"), "redirect"))
        cases.append((case(construct, "rm -f a.txt"), "writer"))
    cases += [(case("{T}", form.replace("{D}", "..")), "cd") for form, effective, _ in CD_FORMS
              if effective]
    cases += [(case("{T}", form.replace("{O}", "../outside/f")), "redirect")
              for form, _ in REDIRECT_FORMS if "2>" not in form and "exec 3>" not in form]
    cases += [(case("{T}", target), "writer") for target, _ in WRITERS]
    outcomes = run_cases([text for text, _ in cases], template, shim)
    missed = [text for (text, kind), outcome in zip(cases, outcomes) if not {
        "cd": outcome.chdirs, "redirect": outcome.outside, "writer": outcome.changed}[kind]]
    assert not missed, missed


def test_the_everyday_verifications_stay_approved_and_change_nothing(lab):
    directory, template, shim = lab
    everyday = ["ls", "git status", "git diff", "pytest -q", "make test", "npm test"]
    for line in everyday:
        assert shellpolicy.decide_verify(line).allowed, line
        assert shellpolicy.decide(line).allowed, line
    runnable = ["ls", "git status", "git diff", *CONTROLS]
    outcomes = run_cases(runnable, template, shim)
    assert [(line, outcome) for line, outcome in zip(runnable, outcomes)
            if outcome.changed or outcome.outside or outcome.chdirs] == []
