"""Seeded mutation of parser inputs, for the fuzz tests (tests/test_fuzz_*.py).

Deterministic: each grammar's inputs are its seeds (valid samples, written in the
tests) mutated by a random.Random with a fixed seed, so that a failure names an input
that fails again, on any machine. No new dependency (Hypothesis would shrink failures,
but it is not one of sandlock's test dependencies, and a fixed corpus is what a
regression needs). The mutations are those that found the bugs: bit flips, control
characters and Unicode whitespace and digits, huge and non-ASCII numbers, deep nesting,
long dotted keys, long and cut inputs.
"""

from __future__ import annotations

import os
import random
import resource
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass

SEED = 20261128
ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
CONTROLS = "\x00\x1b\r\n\t\x7f\x85\x08\x0b\x0c\x9b"
INVISIBLE = "\u2028\u2029\u00a0\u200b\u3000\ufeff\u202e\u2066\u1680"
DIGITS = "٣٤٠２８⁵①߁௩"  # digits of other scripts: str.isdigit() is true for each
SYNTAX = "_+-.e,:;*/[]{}\"'=#\\%$()`<>|& "
NUMBERS = ("99999999999999999999999", "9" * 5000, "1e400", "1e10", "inf", "nan", "-1", "0",
           "99999999999T", "0x10", "1_000", "٣٤٣", "２G", "1111111111", "0-1111111111",
           "18446744073709551616", "9223372036854775808", "4294967296")
DEPTHS = (17, 64, 600)  # how deep a mutation nests (16 is the policy files' bound)
REPEATS = (2, 50, 2000)  # how many times a mutation repeats a span
LONG = 16 << 10  # characters of a long input


@dataclass(frozen=True)
class Knobs:
    nests: Sequence[tuple[str, str]]  # (opening, closing) pairs the grammar nests
    depths: Sequence[int]
    repeats: Sequence[int]


Mutator = Callable[[random.Random, str, Knobs], str]


def mutants(seeds: Sequence[str], count: int, *, salt: str,
            nests: Sequence[tuple[str, str]] = (), depths: Sequence[int] = DEPTHS,
            repeats: Sequence[int] = REPEATS) -> list[str]:
    """``count`` inputs, each a seed with one to three mutations; the same every run
    (``salt`` keeps two grammars' sequences apart)."""
    rng = random.Random(f"{SEED}:{salt}")
    knobs = Knobs(nests, depths, repeats)
    found = []
    for _ in range(count):
        text = rng.choice(seeds)
        for _ in range(rng.randint(1, 3)):
            text = rng.choice(MUTATORS)(rng, text, knobs)
        found.append(text)
    return found


def _flip(rng: random.Random, text: str, knobs: Knobs) -> str:
    data = bytearray(text.encode("utf-8", "surrogateescape") or b" ")
    data[rng.randrange(len(data))] ^= 1 << rng.randrange(8)
    return data.decode("utf-8", "surrogateescape")  # (as argv and file names arrive)


def _insert(rng: random.Random, text: str, knobs: Knobs) -> str:
    char = rng.choice(rng.choice((CONTROLS, INVISIBLE, DIGITS, SYNTAX)))
    where = rng.choice((0, len(text), rng.randint(0, len(text))))
    return text[:where] + char + text[where:]


def _delete(rng: random.Random, text: str, knobs: Knobs) -> str:
    start = rng.randint(0, len(text))
    return text[:start] + text[start + rng.randint(1, 8):]


def _repeat(rng: random.Random, text: str, knobs: Knobs) -> str:
    start = rng.randint(0, len(text))
    span = text[start:start + rng.randint(1, 12)]
    return text[:start] + span * rng.choice(knobs.repeats) + text[start:]


def _number(rng: random.Random, text: str, knobs: Knobs) -> str:
    """A run of digits (or a random place) becomes a huge, foreign or odd number."""
    number = rng.choice(NUMBERS)
    digits = [i for i, char in enumerate(text) if char.isdigit()]
    if not digits:
        where = rng.randint(0, len(text))
        return text[:where] + number + text[where:]
    start = end = rng.choice(digits)
    while start > 0 and text[start - 1].isdigit():
        start -= 1
    while end < len(text) and text[end].isdigit():
        end += 1
    return text[:start] + number + text[end:]


def _foreign_digits(rng: random.Random, text: str, knobs: Knobs) -> str:
    return text.translate({ord(str(d)): rng.choice(DIGITS) for d in range(10)})


def _nest(rng: random.Random, text: str, knobs: Knobs) -> str:
    if not knobs.nests:
        return _repeat(rng, text, knobs)
    opening, closing = rng.choice(knobs.nests)
    depth = rng.choice(knobs.depths)
    start = rng.randint(0, len(text))
    end = rng.randint(start, len(text))
    return text[:start] + opening * depth + text[start:end] + closing * depth + text[end:]


def _long(rng: random.Random, text: str, knobs: Knobs) -> str:
    return (text or "x") * (LONG // max(len(text), 1))


def _cut(rng: random.Random, text: str, knobs: Knobs) -> str:
    return text[:rng.randint(0, len(text))]


def _around(rng: random.Random, text: str, knobs: Knobs) -> str:
    char = rng.choice(INVISIBLE + CONTROLS + " \t")
    return rng.choice((char + text, text + char, char + text + char))


MUTATORS: tuple[Mutator, ...] = (_flip, _insert, _delete, _repeat, _number, _foreign_digits,
                                 _nest, _long, _cut, _around)


class CpuBudget:
    """CPU seconds (user and system) spent by this process, or by its children, while
    in the block: a bound that a loaded machine (other tests, other helpers) does not
    make flaky, as wall time would, and that a hang or a quadratic step still breaks."""

    def __init__(self, children: bool = False) -> None:
        self._who = resource.RUSAGE_CHILDREN if children else resource.RUSAGE_SELF
        self.spent = 0.0

    def _now(self) -> float:
        if self._who == resource.RUSAGE_SELF:
            return time.process_time()
        usage = resource.getrusage(self._who)
        return usage.ru_utime + usage.ru_stime

    def __enter__(self) -> CpuBudget:
        self._start = self._now()
        return self

    def __exit__(self, *exc: object) -> None:
        self.spent = self._now() - self._start


# --- seeds: valid inputs of each grammar ------------------------------------------------

SIZES = ["512M", "1.5G", "64k", "1048576", "256MiB", "2T"]
NUMERIC = {  # option -> seeds; an accepted value is ASCII digits (and a '.', units)
    "--max-memory": SIZES,
    "--max-file-size": ["1M", "100", "2G", "8388607T"],
    "--max-output": ["1M", "10K", "1.5K"],
    "--max-disk": ["100M", "1G"],
    "--timeout": ["30", "2.5", ".5", "600", "1000000000"],
    "--max-cpu": ["50", "12.5", "100"],
    "--max-processes": ["0", "50", "4194304"],
    "--max-open-files": ["64", "1024"],
    "--cpu-cores": ["0", "0-1", "0,1", "1", "0, 1"],
    "--http-port": ["80", "8080", "443", "65535"],
    "--net-connect": ["443", "8000-8100", "22,443"],
    "--net-bind": ["8080", "8000-8100", "*"],
}
RULES = {  # option -> seeds; an accepted value is printable text
    "--net-allow": ["github.com:22,443", "tcp://10.0.0.0/8:80", "udp://1.1.1.1:53",
                    "[2001:db8::/32]:443", "*:443", "icmp://8.8.8.8", "api.example.com"],
    "--net-deny": ["10.0.0.0/8", "192.168.1.1:22", "[::1]:80", "udp://0.0.0.0/0:53"],
    "--net-allow-host": ["pypi.org", "1.2.3.4", "files.pythonhosted.org"],
    "--resolve": ["example.test=127.0.0.1", "a.test=10.0.0.1,::1"],
    "--dns-server": ["1.1.1.1", "1.1.1.1:5353", "[::1]:53"],
    "--http-allow": ["GET api.github.com/repos/*", "GET,HEAD pypi.org/simple/*",
                     "* *.example.com", "POST [::1]/x", "GET 10.0.0.1/a%20b/*"],
    "--http-deny": ["* */admin/*", "DELETE api.github.com/*"],
    "--http-auth": ["POST api.openai.com/* bearer openai", "GET x.com/* header:X-Key openai",
                    "GET x.com basic openai"],
}
TEXT = {  # option -> seeds; names, paths and values: anything but NUL, said if refused
    "--credential": ["openai=env:OPENAI_API_KEY", "k=file:/etc/hostname"],
    "--credential-env": ["OPENAI_API_KEY=openai"],
    "--env": ["CI=1", "LANG=C.UTF-8", "HOME"],
    "--allow-syscall": ["ptrace", "bpf"],
    "--mode": ["read-only", "workspace-write"],
    "--https-inspect": ["on", "off", "auto"],
}


def context(option: str, tmp: str) -> list[str]:
    """What else the option needs to mean anything."""
    if option == "--max-disk":
        return ["--workdir", tmp]
    if option == "--http-auth":
        return ["--credential", "openai=env:HOME", "--http-allow", "* *"]
    if option == "--credential-env":
        return ["--credential", "openai=env:HOME"]
    if option == "--http-deny":  # (deny rules alone: a run's CA has no host, exit 125)
        return ["--http-allow", "GET example.com"]
    return []


FLAT = """fs_writable = ["/tmp"]
fs_readable = ["/usr", "/etc"]
clean_env = true
net_allow_hosts = ["pypi.org"]
max_memory = "512M"

[env]
CC = "gcc"
"""
EVERY_SECTION = """description = "every section"

[filesystem]
read = ["/usr"]
write = ["/tmp"]
mode = "workspace-write"

[network]
allow = ["github.com:22,443", "udp://1.1.1.1:53"]
connect = [443, "8000-8100"]
allow_bind = ["8080"]
resolve = ["example.test=127.0.0.1"]

[http]
allow = ["GET api.github.com/repos/*", "POST api.openai.com/v1/*"]
deny = ["* */admin/*"]
ports = [80, 443, 8080]
auth = ["POST api.openai.com/* bearer openai"]

[credentials]
openai = "env:HOME"

[process]
env = { CI = "1", LANG = "C.UTF-8" }
timeout = 3600
credential_env = ["OPENAI_API_KEY=openai"]

[limits]
max_memory = "1.5G"
max_processes = 50
max_cpu = 50
cpu_cores = [0]
max_file_size = 1048576
max_output = "1M"
"""
TOML_NESTS = (("[", "]"), ("{a=", "}"), ("[{a=", "}]"), ("k.", ""))


def policy_seeds() -> list[str]:
    """The policy file seeds: the two above and docs/examples."""
    examples = os.path.join(ROOT, "docs", "examples")
    return [FLAT, EVERY_SECTION, *(open(os.path.join(examples, name), encoding="utf-8").read()
                                   for name in sorted(os.listdir(examples)))]


def write_policy(path: str, text: str) -> None:
    """A policy file only its owner may write (sandlock refuses others)."""
    with open(path, "w", encoding="utf-8", errors="surrogateescape") as file:
        file.write(text)
    os.chmod(path, 0o600)


VET_SEEDS = ["ls -la", "git status && git diff", "cd /tmp && make", "echo a > out.txt",
             "grep -r x . | head -5 2>&1", 'bash -c "rm -rf build"', "find . -exec rm {} +",
             "for f in *.py; do python3 $f; done", 'echo "$(date)" `id` $((1+2))']
VET_NESTS = (("$(", ")"), ("(", ")"), ("{ ", "; }"), ('"$(', ')"'), ("<(", ")"))


# Python's words for its own limits: never what a user should read in sandlock's error.
INTERNALS = ("Traceback", "set_int_max_str_digits", "C long", "C int", "_PyTime_t",
             "RecursionError", "maximum recursion", "OverflowError", "MemoryError")


def one_error_line(stderr: str) -> str | None:
    """What is wrong with ``stderr`` as the output of a refused input: exactly one line
    ``sandlock: error: ...``, printable, no internals; None when it is right."""
    lines = stderr.split("\n")
    if len(lines) != 2 or lines[1] != "":
        return f"not one line: {stderr[:300]!r}"
    line = lines[0]
    if not line.startswith("sandlock: error: "):
        return f"not sandlock's error line: {line[:300]!r}"
    if not line.isprintable():
        return f"unescaped characters: {line[:300]!r}"
    leaked = [word for word in INTERNALS if word in line]
    if leaked:
        return f"Python's internals ({leaked[0]}): {line[:300]!r}"
    return None
