"""Lines of keys, tables and array items in TOML text (for FILE:LINE in errors)."""

from __future__ import annotations

import tomllib

from sandlock.policyfiles._tomllines import locate

TEXT = '''\
# a comment with = and [brackets]
description = "x # not a comment"

[network]   # trailing comment
allow = [
  "github.com:22,443",   # ssh and https
  'udp://1.1.1.1:53',
  """multi "" \\"""
line""",
]
"quoted.key" = 1
a.b . "c" = { x = 1, y = [1, 2], z = { w = "}" } }

[[array]]
k = 1979-05-27 07:32:00Z
[process.env]
"A=B" = "1"
C = \'\'\'literal
\'\'\'\'\'
D = "after"
'''


def test_every_key_table_and_item_has_its_line():
    tomllib.loads(TEXT)  # the scanner only ever sees valid TOML
    lines = locate(TEXT)
    assert lines[("description",)] == 2
    assert lines[("network",)] == 4
    assert lines[("network", "allow")] == 5
    assert [lines[("network", "allow", i)] for i in range(3)] == [6, 7, 8]
    assert lines[("network", "quoted.key")] == 11
    assert lines[("network", "a")] == lines[("network", "a", "b", "c", "z", "w")] == 12
    assert lines[("network", "a", "b", "c", "y", 1)] == 12
    assert lines[("array",)] == 14 and lines[("array", "k")] == 15
    assert lines[("process",)] == lines[("process", "env")] == 16
    assert lines[("process", "env", "A=B")] == 17
    assert lines[("process", "env", "C")] == 18
    assert lines[("process", "env", "D")] == 20


def test_first_definition_wins():
    text = "[process]\ntimeout = 1\n[process.env]\nA = '1'\n"
    assert locate(text)[("process",)] == 1


def test_dotted_keys_at_the_top_define_their_tables():
    lines = locate('network.allow = ["x"]\n\nhttp.ports = [80]\n')
    assert lines[("network",)] == 1 and lines[("http", "ports", 0)] == 3


def test_never_raises_on_what_it_does_not_understand():
    assert locate("[unterminated") == {("unterminated",): 1}
    assert locate('a = "unterminated') == {("a",): 1}
    assert locate("= = =") == {}
