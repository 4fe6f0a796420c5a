"""HTTP rule matching without regular expressions (proxy/_rules): the path glob, the
method and hostname-label checks, each compared with the regular expression it
replaced over many generated inputs."""

from __future__ import annotations

import random
import re

import pytest

from sandlock.proxy import parse_rule
from sandlock.proxy._rules import _label, glob_matches

ALPHABET = "ab/*\n%."


def _by_regex(pattern: str, text: str) -> bool:
    return re.fullmatch(".*".join(map(re.escape, pattern.split("*"))), text, re.DOTALL) is not None


def test_the_glob_matches_exactly_what_the_regular_expression_did():
    rng = random.Random(7)
    checked = matched = 0
    for _ in range(30000):
        pattern = "".join(rng.choice(ALPHABET) for _ in range(rng.randint(0, 7)))
        text = "".join(rng.choice(ALPHABET.replace("*", "")) for _ in range(rng.randint(0, 9)))
        expected = _by_regex(pattern, text)
        assert glob_matches(tuple(pattern.split("*")), text) == expected, (pattern, text)
        checked += 1
        matched += expected
    assert matched > 1000 and checked - matched > 1000  # both outcomes well covered


@pytest.mark.parametrize("pattern,text,expected", [
    ("/repos/*", "/repos/", True), ("/repos/*", "/repos", False),
    ("/a/*/c", "/a/b/x/c", True), ("/a/*/c", "/a/c", False), ("*", "", True),
    ("/a*a*a", "/aa", False), ("/a*a*a", "/aaa", True), ("/x", "/x/", False),
])
def test_glob_examples(pattern, text, expected):
    assert glob_matches(tuple(pattern.split("*")), text) is expected


def test_label_and_method_checks_match_their_regular_expressions():
    label = re.compile(r"(?!-)[a-z0-9_-]{1,63}(?<!-)")
    method = re.compile(r"[A-Z][A-Z0-9_-]*")
    rng = random.Random(8)
    for _ in range(20000):
        text = "".join(rng.choice("aZ0_-.é ") for _ in range(rng.randint(0, 5)))
        assert _label(text) == (label.fullmatch(text) is not None), text
        upper = text.upper()
        accepted = True
        try:
            parse_rule(f"{upper} example.com")
        except ValueError:
            accepted = False
        if upper and "," not in upper and upper != "*" and " " not in upper:
            assert accepted == (method.fullmatch(upper) is not None), upper
    assert _label("a" * 63) and not _label("a" * 64)
