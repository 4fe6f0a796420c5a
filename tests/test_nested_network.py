"""Nested sandboxes with network rules of their own (``sb.sandbox(Policy(net_allow=...))``):
the running sandbox's supervisor judges their processes' calls by both policies, and
tells them apart by their Landlock domain, which no process can leave or forge. Real
curl, shells and Python against real loopback servers."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import tempfile
import textwrap
import threading
import time

import pytest

from sandlock import Policy, Sandbox

SYSTEM = ["/usr", "/lib", "/lib64", "/bin", "/etc"]


def fetch(url: str) -> list[str]:
    return ["curl", "-s", "-m", "5", "-o", "/dev/null", "-w", "%{http_code}", url]


def urls(upstreams) -> tuple[str, str]:
    a, b = upstreams
    return f"http://127.0.0.2:{a.port}/a", f"http://127.0.0.3:{b.port}/b"


def both(upstreams) -> Policy:
    a, b = upstreams
    return Policy(fs_readable=SYSTEM, net_allow=[f"127.0.0.2:{a.port}", f"127.0.0.3:{b.port}"])


def test_own_rules_narrow_the_parents(upstreams):
    (a, b), (url_a, url_b) = upstreams, urls(upstreams)
    with Sandbox(both(upstreams), quiet=True) as sb:
        nested = sb.sandbox(Policy(fs_readable=SYSTEM, net_allow=[f"127.0.0.2:{a.port}"]))
        assert nested.run(fetch(url_a)).stdout == b"200"
        refused = nested.run(fetch(url_b))
        assert (refused.stdout, refused.exit_code) == (b"000", 7)
        assert sb.sandbox(Policy(fs_readable=SYSTEM, net_allow=["*"])).run(fetch(url_b)).stdout == b"200"
    assert a.paths() == ["/a"] and b.paths() == ["/b"]  # the parent's rules, for the parent's


def test_own_rules_never_widen_the_parents(upstreams):
    (a, b), (url_a, url_b) = upstreams, urls(upstreams)
    parent = Policy(fs_readable=SYSTEM, net_allow=[f"127.0.0.2:{a.port}"])
    with Sandbox(parent, quiet=True) as sb:
        wider = sb.sandbox(Policy(fs_readable=SYSTEM, net_allow=["127.0.0.0/8"]))
        assert wider.run(fetch(url_a)).stdout == b"200"
        assert wider.run(fetch(url_b)).exit_code == 7
    assert b.paths() == []


def test_sibling_nested_sandboxes_each_have_their_own(upstreams):
    (a, b), (url_a, url_b) = upstreams, urls(upstreams)
    with Sandbox(both(upstreams), quiet=True) as sb:
        to_a = sb.sandbox(Policy(fs_readable=SYSTEM, net_allow=[f"127.0.0.2:{a.port}"]))
        to_b = sb.sandbox(Policy(fs_readable=SYSTEM, net_allow=[f"127.0.0.3:{b.port}"]))
        assert [to_a.run(fetch(url)).stdout for url in (url_a, url_b)] == [b"200", b"000"]
        assert [to_b.run(fetch(url)).stdout for url in (url_a, url_b)] == [b"000", b"200"]


def test_names_in_nested_rules_are_the_sandboxs_pinned_names(upstreams):
    a, b = upstreams
    parent = Policy(fs_readable=SYSTEM, resolve=["web.test=127.0.0.2", "other.test=127.0.0.3"],
                    net_allow=[f"web.test:{a.port}", f"other.test:{b.port}"])
    with Sandbox(parent, quiet=True) as sb:
        nested = sb.sandbox(Policy(fs_readable=SYSTEM, net_allow=[f"web.test:{a.port}"]))
        assert nested.run(fetch(f"http://web.test:{a.port}/web")).stdout == b"200"
        assert nested.run(fetch(f"http://other.test:{b.port}/other")).exit_code == 7
    assert a.paths() == ["/web"] and b.paths() == []


def test_descendants_and_orphans_stay_under_the_nested_rules(upstreams, tmp_path):
    """A process that leaves its process group and outlives what started it (reparented
    to the sandbox's init) is still in the nested sandbox's domain."""
    (a, b), (url_a, url_b) = upstreams, urls(upstreams)
    out = tmp_path / "out"
    # (the starter ends once the orphan is in a session of its own, out of its group)
    script = (f"setsid sh -c 'touch {out}.moved; sleep 0.3; {' '.join(fetch(url_b))} > {out}.b; "
              f"{' '.join(fetch(url_a))} > {out}.a' >/dev/null 2>&1 & "
              f"while [ ! -e {out}.moved ]; do sleep 0.01; done")
    with Sandbox(both(upstreams).replace(fs_writable=[str(tmp_path)]), quiet=True) as sb:
        nested = sb.sandbox(Policy(fs_readable=SYSTEM, fs_writable=[str(tmp_path)],
                                   net_allow=[f"127.0.0.2:{a.port}"]))
        assert nested.run(["sh", "-c", script]).exit_code == 0
        deadline = time.monotonic() + 10
        while not (tmp_path / "out.a").exists() or not (tmp_path / "out.a").read_text():
            assert time.monotonic() < deadline, f"the orphan never ran: {sorted(tmp_path.iterdir())}"
            time.sleep(0.05)
    assert (tmp_path / "out.b").read_text() == "000" and (tmp_path / "out.a").read_text() == "200"
    assert b.paths() == []


def connect_from_threads(host: str, port: int, count: int) -> list[int]:
    """Each of ``count`` threads connects once: their errnos (0 for a connection)."""
    results = [-1] * count

    def one(index: int) -> None:
        with socket.socket() as sock:
            results[index] = sock.connect_ex((host, port))

    threads = [threading.Thread(target=one, args=(index,)) for index in range(count)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    return results


def test_every_thread_of_a_nested_call_is_judged(upstreams):
    a, b = upstreams
    with Sandbox(both(upstreams), quiet=True) as sb:
        nested = sb.sandbox(Policy(fs_readable=SYSTEM, net_allow=[f"127.0.0.2:{a.port}"]))
        assert nested.call(connect_from_threads, args=("127.0.0.2", a.port, 8)).value == [0] * 8
        refused = nested.call(connect_from_threads, args=("127.0.0.3", b.port, 8)).value
        assert set(refused) == {13}  # EACCES, each
        assert sb.call(connect_from_threads, args=("127.0.0.3", b.port, 4)).value == [0] * 4


def test_nested_rules_and_policy_fn_together(upstreams):
    """policy_fn reviews calls after the nested rules, and lets other calls go on
    meanwhile: the nested sandbox's questions stay one at a time."""
    a, b = upstreams
    seen = []

    def review(event, ctx):
        if event.category == "network":
            seen.append((event.port, event.denied))
        return 0

    with Sandbox(both(upstreams), quiet=True, policy_fn=review) as sb:
        nested = sb.sandbox(Policy(fs_readable=SYSTEM, net_allow=[f"127.0.0.2:{a.port}"]))
        assert nested.call(connect_from_threads, args=("127.0.0.2", a.port, 8)).value == [0] * 8
        assert set(nested.call(connect_from_threads, args=("127.0.0.3", b.port, 8)).value) == {13}
    assert (b.port, True) in seen and (a.port, False) in seen  # denied: the nested rules'


def bind_port(port: int) -> int:
    with socket.socket() as sock:
        try:
            sock.bind(("127.0.0.1", port))
        except OSError as exc:
            return exc.errno
        return 0


def test_bind_rules_narrow_too():
    from httpservers import free_port_on

    first = second = free_port_on("127.0.0.1")
    while second == first:
        second = free_port_on("127.0.0.1")
    ports = [first, second]
    with Sandbox(Policy(fs_readable=SYSTEM, net_bind=["*"]), quiet=True) as sb:
        nested = sb.sandbox(Policy(fs_readable=SYSTEM, net_bind=[str(ports[0])]))
        assert nested.call(bind_port, args=(ports[0],)).value == 0
        assert nested.call(bind_port, args=(ports[1],)).value == 13
        assert sb.call(bind_port, args=(ports[1],)).value == 0


def test_a_nested_process_cannot_signal_its_resident(upstreams):
    """Its resident tells sandlock which processes are the nested sandbox's: none of
    them may end it."""
    (a, _), (url_a, url_b) = upstreams, urls(upstreams)
    with Sandbox(both(upstreams), quiet=True) as sb:
        nested = sb.sandbox(Policy(fs_readable=SYSTEM, net_allow=[f"127.0.0.2:{a.port}"]))
        killed = nested.run(["sh", "-c", "kill -9 $PPID"])
        assert killed.exit_code == 1 and b"Operation not permitted" in killed.stderr
        assert [nested.run(fetch(url)).stdout for url in (url_a, url_b)] == [b"200", b"000"]


def test_a_resident_gone_fails_closed(upstreams, capfd, tmp_path):
    """If a nested resident dies (here killed from outside), a thread it can no longer
    be asked about, and that may be its (it runs under more seccomp filters than the
    sandbox's own processes), gets no network, and sandlock says why; the sandbox's
    own processes are not asked, and keep theirs."""
    (a, _), (url_a, _) = upstreams, urls(upstreams)
    out = tmp_path / "out"
    with Sandbox(both(upstreams).replace(fs_writable=[str(tmp_path)]), quiet=True) as sb:
        nested = sb.sandbox(Policy(fs_readable=SYSTEM, fs_writable=[str(tmp_path)],
                                   net_allow=[f"127.0.0.2:{a.port}"]))
        # (out of its group, which ends with the resident, like the orphan test's)
        script = (f"setsid sh -c 'touch {out}.moved; sleep 1; {' '.join(fetch(url_a))} > {out}' "
                  f">/dev/null 2>&1 & while [ ! -e {out}.moved ]; do sleep 0.01; done; sleep 30")
        late = nested.exec(["sh", "-c", script])
        while not (tmp_path / "out.moved").exists():
            time.sleep(0.01)
        os.kill(_parent_of(late.pid), signal.SIGKILL)
        assert sb.call(connect_from_threads, args=("127.0.0.2", a.port, 1)).value == [0]
        deadline = time.monotonic() + 10
        while not out.exists() or not out.read_text():
            assert time.monotonic() < deadline, "the nested command never ended"
            time.sleep(0.05)
    assert out.read_text() == "000"
    assert "resident is gone" in capfd.readouterr().err


def _parent_of(pid: int) -> int:
    with open(f"/proc/{pid}/status") as status:
        return next(int(line.split()[1]) for line in status if line.startswith("PPid:"))


UNPRIVILEGED = textwrap.dedent("""
    import sys
    from sandlock import Policy, Sandbox
    port_a, port_b = map(int, sys.argv[1:])
    fetch = ["curl", "-s", "-m", "5", "-o", "/dev/null", "-w", "%{http_code}"]
    system = ["/usr", "/lib", "/lib64", "/bin", "/etc"]
    a, b = f"http://127.0.0.2:{port_a}/a", f"http://127.0.0.3:{port_b}/b"
    parent = Policy(fs_readable=system, net_allow=[f"127.0.0.2:{port_a}", f"127.0.0.3:{port_b}"])
    with Sandbox(parent, quiet=True) as sb:
        nested = sb.sandbox(Policy(fs_readable=system, net_allow=[f"127.0.0.2:{port_a}"]))
        print(nested.run([*fetch, a]).stdout.decode(), nested.run([*fetch, b]).stdout.decode(),
              sb.sandbox(Policy(fs_readable=system, net_allow=["*"])).run([*fetch, b]).stdout.decode())
""")


def test_nested_network_rules_as_an_unprivileged_user(upstreams, as_nobody):
    a, b = upstreams
    result = subprocess.run(as_nobody([sys.executable, "-c", UNPRIVILEGED, str(a.port), str(b.port)]),
                            capture_output=True, text=True, cwd=tempfile.gettempdir(), timeout=60)
    assert result.stdout.split() == ["200", "000", "200"], result.stderr


def test_what_a_nested_sandbox_still_refuses_is_named():
    from sandlock import PolicyError

    with Sandbox(Policy()) as sb:
        with pytest.raises(PolicyError, match="dns_servers"):
            sb.sandbox(Policy(fs_readable=SYSTEM, net_allow=["*:443"], dns_servers=["127.0.0.1"]))


# --- HTTP rules: the parent's proxy applies a nested sandbox's too ----------------------


def test_nested_http_rules_narrow_the_parents():
    from httpservers import Upstream, free_port_on

    port = free_port_on("127.0.0.2")
    with Upstream("127.0.0.2", port, name="api") as api:
        parent = Policy(fs_readable=SYSTEM, resolve=["api.test=127.0.0.2"], http_ports=[port],
                        https_inspect="off", http_allow=["GET api.test/*"])
        with Sandbox(parent, quiet=True) as sb:
            nested = sb.sandbox(Policy(fs_readable=SYSTEM, http_allow=["GET api.test/public/*"]))
            codes = [nested.run(fetch(f"http://api.test:{port}{path}")).stdout
                     for path in ("/public/notes", "/private", "/public/../private")]
            assert codes == [b"200", b"403", b"403"]
            post = nested.run(["curl", "-s", "-o", "/dev/null", "-w", "%{http_code}", "-X", "POST",
                               f"http://api.test:{port}/public/notes"])
            assert post.stdout == b"403"  # the parent's rules too: GET only
            assert sb.sandbox(Policy(fs_readable=SYSTEM, net_allow=["*"])).run(
                fetch(f"http://api.test:{port}/private")).stdout == b"200"
    assert api.paths() == ["/public/notes", "/private"]


def test_nested_http_rules_need_the_parents_proxy():
    from sandlock import PolicyError

    with Sandbox(Policy(net_allow=["*:80"]), quiet=True) as sb:
        with pytest.raises(PolicyError, match="http_allow.*no HTTP rules"):
            sb.sandbox(Policy(fs_readable=SYSTEM, http_allow=["GET example.test/*"]))


def test_nested_http_rules_over_https(tmp_path, monkeypatch):
    """Inspected by the parent's proxy, with its CA (which nested processes can read);
    where the parent passes TLS through (no CA), path rules of the nested sandbox
    refuse the connection rather than let it through unseen."""
    import trustme
    from httpservers import Upstream, free_port_on

    ca = trustme.CA()
    ca_file = tmp_path / "ca.pem"
    ca.cert_pem.write_to_path(str(ca_file))
    monkeypatch.setenv("XDG_DATA_HOME", str(tmp_path / "data"))  # no persistent CA
    port = free_port_on("127.0.0.2")
    url = f"https://api.test:{port}"
    common = dict(fs_readable=SYSTEM, resolve=["api.test=127.0.0.2"], http_ports=[port],
                  upstream_ca=[str(ca_file)])
    curl = ["curl", "-sS", "-m", "10"]
    with Upstream("127.0.0.2", port, name="api", tls=ca, tls_names=("api.test",)) as api:
        with Sandbox(Policy(**common, http_allow=["GET api.test/*"]), quiet=True) as sb:
            nested = sb.sandbox(Policy(fs_readable=SYSTEM, http_allow=["GET api.test/public/*"]))
            assert nested.run([*curl, f"{url}/public/x"]).stdout == b"api GET /public/x\n"
            assert b"nested sandbox" in nested.run([*curl, f"{url}/private"]).stdout
        with Sandbox(Policy(**{**common, "fs_readable": [*SYSTEM, str(tmp_path)]},
                            http_allow=["* api.test"]), quiet=True) as sb:
            nested = sb.sandbox(Policy(fs_readable=[*SYSTEM, str(tmp_path)],
                                       http_allow=["GET api.test/public/*"]))
            refused = nested.run([*curl, "--cacert", str(ca_file), f"{url}/public/x"])
            assert refused.exit_code == 35, refused.stderr  # (the TLS handshake was cut)
            passed = sb.sandbox(Policy(fs_readable=[*SYSTEM, str(tmp_path)], net_allow=["*"]))
            assert passed.run([*curl, "--cacert", str(ca_file), f"{url}/any"]).exit_code == 0
    assert api.paths() == ["/public/x", "/any"]


def test_nested_sandboxes_with_network_rules_are_bounded(upstreams):
    """Every one is asked about each new thread that might be its: at most 64."""
    from sandlock import SetupError

    a, _ = upstreams
    with Sandbox(both(upstreams), quiet=True) as sb:
        nests = [sb.sandbox(Policy(fs_readable=SYSTEM, net_allow=[f"127.0.0.2:{a.port}"]))
                 for _ in range(64)]
        with pytest.raises(SetupError, match="at most 64"):
            sb.sandbox(Policy(fs_readable=SYSTEM, net_allow=[f"127.0.0.2:{a.port}"]))
        assert nests[-1].call(connect_from_threads, args=("127.0.0.2", a.port, 1)).value == [0]
