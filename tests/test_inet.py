"""The rule grammar reads addresses with the C library's inet_pton (``netrules._inet``), so
that policy checks before the command starts do without the ipaddress module; the
engine compares ipaddress objects. Both must read every text alike: a text one accepts
and the other refuses, or reads as another address, would make a checked policy mean
something else at run time. Compared here on systematic and random texts."""

from __future__ import annotations

import ipaddress
import itertools
import random
import subprocess
import sys

import pytest

from sandlock.netrules._inet import read_inet, read_network, to_address, to_network

_PARTS_V4 = ["0", "1", "01", "00", "255", "256", "1000", "0x1", "", " 1", "1 ", "-1", "٣", "1e1"]
_PARTS_V6 = ["0", "1", "ffff", "FFFF", "10000", "0001", "00001", "g", "", "1.2.3.4", "1.2.3.04",
             "::", "%", "\0"]


def _ipaddress_reading(text: str) -> tuple[int, int] | None:
    if "%" in text:  # ipaddress takes zone indexes; the grammar refuses them before either
        return None
    try:
        address = ipaddress.ip_address(text)
    except ValueError:
        return None
    return address.version, int(address)


def _texts() -> list[str]:
    texts = [".".join(p) for p in itertools.product(_PARTS_V4, repeat=4)][::7]
    texts += [".".join(p) for n in (1, 2, 3, 5) for p in itertools.product(_PARTS_V4[:6], repeat=n)]
    generator = random.Random(14)
    texts += [":".join(generator.choices(_PARTS_V6, k=generator.randrange(1, 10)))
              for _ in range(20_000)]
    texts += [":".join(p) for n in (2, 3) for p in itertools.product(_PARTS_V6, repeat=n)]
    alphabet = "0123456789abcdefABCDEF:.::/ %g"
    texts += ["".join(generator.choice(alphabet) for _ in range(generator.randrange(1, 24)))
              for _ in range(20_000)]
    texts += ["::", "::1", "::ffff:1.2.3.4", "1::", "1:2:3:4:5:6:7::", "::2:3:4:5:6:7:8",
              "1:2:3:4:5:6:7:8", "1:2:3:4:5:6:7:8:9", "1:2:3:4:5:6:1.2.3.4", "1::1.2.3.4",
              "1.2.3.4::", ":1::", "1:::2", "fe80::1", "0.0.0.0", "255.255.255.255"]
    return texts


def test_inet_pton_reads_every_text_as_ipaddress_does():
    differ = [text for text in _texts() if read_inet(text) != _ipaddress_reading(text)]
    assert differ == []


@pytest.mark.parametrize("text, version", [
    ("10.0.0.0/8", 4), ("192.168.1.1", 4), ("0.0.0.0/0", 4), ("2001:db8::/32", 6),
    ("::1", 6), ("::/0", 6), ("64:ff9b::/96", 6),
])
def test_the_engine_gets_the_network_the_grammar_read(text, version):
    assert to_network(read_network(text, version, "{}")) == ipaddress.ip_network(text)
    first = read_inet(text.partition("/")[0], version)
    assert to_address(first) == ipaddress.ip_address(text.partition("/")[0])


def test_policy_checks_do_not_load_ipaddress():
    # (an editable install's import finder loads ipaddress itself: forget it first)
    program = ("import sys; from sandlock import Policy; sys.modules.pop('ipaddress', None); "
               "Policy(net_allow=['10.0.0.0/8:443', 'example.test:80', '[2001:db8::1]:443'], "
               "resolve=['example.test=10.0.0.1,2001:db8::5'], dns_servers=['10.0.0.53']); "
               "Policy(net_deny=['10.1.0.0/16', '[2001:db8::/32]']); "
               "print('ipaddress' in sys.modules)")
    shown = subprocess.run([sys.executable, "-c", program], capture_output=True, text=True,
                           check=True).stdout
    assert shown.strip() == "False"
