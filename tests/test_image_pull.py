"""--image from a registry: a real registry (``registryserver``: HTTPS with a trustme
certificate on loopback, a Bearer token service, a blob CDN) serving images built here
(``ocibuild``, with a static echo), its names answered by the test DNS server
(``--dns-server``), and real confined runs of what was pulled.

The attacks are what a hostile or broken registry, or a planted store, would do: a
blob whose bytes are not its digest's, a manifest that is not the pinned one, a
redirect that would carry the registry's token to another host or over plain HTTP,
a token service over HTTP, names that would climb out of the store, a manifest too
large, a symlink where the pull writes, a registry that never answers. Each has its
control: the honest registry, or the same request where it is allowed.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import time

import pytest
from conftest import SANDLOCK
from dnsserver import FakeDns
from ocibuild import Entry, oci_layout
from registryserver import INDEX, MANIFEST, Registry, Silent

ECHO = r"""
#include <stdio.h>
int main(int argc, char **argv) {  /* echo; an argument "@PATH" prints the file */
  for (int i = 1; i < argc; i++) {
    if (i > 1) putchar(' ');
    if (argv[i][0] != '@') { fputs(argv[i], stdout); continue; }
    FILE *f = fopen(argv[i] + 1, "r"); int c;
    if (!f) { fputs("ENOENT", stdout); continue; }
    while ((c = fgetc(f)) != EOF) if (c != '\n') putchar(c);
    fclose(f);
  }
  putchar('\n'); return 0;
}
"""


@pytest.fixture(scope="module")
def echo(tmp_path_factory) -> bytes:
    if shutil.which("gcc") is None:
        pytest.skip("gcc is needed to build the image's static echo")
    directory = tmp_path_factory.mktemp("echo")
    (directory / "echo.c").write_text(ECHO)
    built = subprocess.run(["gcc", "-static", "-O2", "-o", str(directory / "echo"),
                            str(directory / "echo.c")], capture_output=True, text=True)
    if built.returncode != 0:
        pytest.skip(f"no static C library to build the echo: {built.stderr[-200:]}")
    return (directory / "echo").read_bytes()


def image(path, echo: bytes, motd: str = "from the registry") -> str:
    return oci_layout(str(path), [[Entry("bin", "dir", mode=0o755),
                                   Entry("bin/echo", data=echo, mode=0o755),
                                   Entry("etc/motd", data=motd.encode() + b"\n")]])


@pytest.fixture
def ca_file(upstream_ca, world_tmp) -> str:
    path = os.path.join(str(world_tmp), "ca.pem")
    shutil.copy(upstream_ca[1], path)
    os.chmod(path, 0o644)
    return path


@pytest.fixture
def registry(upstream_ca):
    with Registry(upstream_ca[0]) as server:
        yield server


@pytest.fixture
def dns(registry):
    with FakeDns(registry.zone()) as server:
        yield server


@pytest.fixture
def pushed(registry, tmp_path, echo) -> str:
    """team/tool:1 on the registry (behind its token service); its manifest digest."""
    registry.require_token()
    return registry.push(image(tmp_path / "tool", echo), "1")


@pytest.fixture
def pull(registry, dns, ca_file, world_tmp):
    """Runs ``sandlock run --image REF -- ARGV`` with the test's DNS and CA."""

    def run(ref: str, *argv: str, wrap=None, timeout: str | None = None,
            options: tuple[str, ...] = ()) -> subprocess.CompletedProcess:
        host, port = dns.address
        command = [*SANDLOCK, "run", "--dns-server", f"{host}:{port}", *options, "--image", ref,
                   "--", *(argv or ("/bin/echo", "hi"))]
        env = {**os.environ, "XDG_STATE_HOME": str(world_tmp), "SSL_CERT_FILE": ca_file}
        if timeout:
            env["SANDLOCK_PULL_TIMEOUT"] = timeout
        return subprocess.run(wrap(command) if wrap else command, capture_output=True,
                              text=True, timeout=120, cwd="/tmp", env=env)

    return run


def ref(registry: Registry, rest: str = "team/tool:1") -> str:
    return f"registry.test:{registry.port}/{rest}"


def store_entries(world_tmp, *under: str) -> list[str]:
    path = os.path.join(str(world_tmp), "sandlock", "images", *under)
    return sorted(os.listdir(path)) if os.path.isdir(path) else []


def one_line_refusal(result: subprocess.CompletedProcess, *words: str) -> None:
    assert result.returncode == 2, (result.stdout, result.stderr)
    assert len(result.stderr.splitlines()) == 1 and "Traceback" not in result.stderr, result.stderr
    assert "--image" in result.stderr and all(w in result.stderr for w in words), result.stderr


# --- pulls ------------------------------------------------------------------------------


@pytest.mark.parametrize("user", ["self", "nobody"])
def test_pull_by_tag_runs_the_image(registry, pushed, pull, dns, world_tmp, user, request):
    wrap = request.getfixturevalue("as_nobody") if user == "nobody" else None
    result = pull(ref(registry), "/bin/echo", "hi", "@/etc/motd", wrap=wrap)
    assert result.returncode == 0, result.stderr
    assert result.stdout == "hi from the registry\n"
    # The token flow happened: the token service was asked, the registry got the token.
    assert registry.requests("token")
    assert any(h.get("Authorization") == "Bearer tok-for-pulls"
               for who, _, h in registry.log if who == "registry")
    assert store_entries(world_tmp, "pulled") == [f"registry.test:{registry.port}%team%tool:1"]
    assert "A" in dns.asked("registry.test") and "A" in dns.asked("auth.test")  # (names from --dns-server)


def test_resolve_names_the_registry_without_dns(registry, pushed, pull, dns):
    resolve = ("--resolve", f"registry.test={registry.addresses['registry'][0]}",
               "--resolve", f"auth.test={registry.addresses['token'][0]}")
    result = pull(ref(registry), options=resolve)
    assert result.returncode == 0 and result.stdout == "hi\n", result.stderr
    assert dns.queries == [] and registry.requests("token")
    # (control: test_pull_by_tag_runs_the_image, where the same names are asked of the DNS server)


def test_a_second_run_uses_the_store_without_asking_the_registry(registry, pushed, pull):
    assert pull(ref(registry)).stdout == "hi\n"
    blobs = [p for p in registry.requests() if "/blobs/" in p]
    assert len(blobs) == 2  # control: the first run downloaded the config and the layer
    registry.log.clear()
    again = pull(ref(registry))
    assert again.returncode == 0 and again.stdout == "hi\n", again.stderr
    assert registry.log == []  # no manifest, no blob, no token: the store's copy


def test_pull_by_digest_and_never_again(registry, pushed, pull):
    pinned = ref(registry, f"team/tool@{pushed}")
    result = pull(pinned)
    assert result.returncode == 0 and result.stdout == "hi\n", result.stderr
    assert f"/v2/team/tool/manifests/{pushed}" in registry.requests()
    registry.log.clear()
    assert pull(pinned).stdout == "hi\n" and registry.log == []


def test_an_index_gives_this_machines_image(registry, pull, tmp_path, echo):
    import platform

    arch = {"x86_64": "amd64", "aarch64": "arm64"}.get(platform.machine(), platform.machine())
    entries = []
    for name in ("s390x", arch, "riscv64"):
        layout = image(tmp_path / name, echo, motd=f"image for {name}")
        digest = registry.push(layout, None)
        entries.append({"mediaType": MANIFEST, "digest": digest,
                        "size": len(registry.state.manifests[digest][1]),
                        "platform": {"os": "linux", "architecture": name}})
    registry.serve(json.dumps({"schemaVersion": 2, "mediaType": INDEX, "manifests": entries}).encode(),
                   "multi", INDEX)
    result = pull(ref(registry, "team/tool:multi"), "/bin/echo", "@/etc/motd")
    assert result.returncode == 0, result.stderr
    assert result.stdout == f"image for {arch}\n"


# --- a hostile registry ---------------------------------------------------------------


@pytest.mark.parametrize("user", ["self", "nobody"])
def test_a_blob_that_is_not_its_digest_is_refused_and_nothing_is_kept(registry, pushed, pull, world_tmp,
                                                                     user, request):
    wrap = request.getfixturevalue("as_nobody") if user == "nobody" else None
    manifest = json.loads(registry.state.manifests["1"][1])
    layer = manifest["layers"][0]["digest"]
    honest = registry.state.blobs[layer]
    registry.state.blobs[layer] = honest[:-1] + bytes([honest[-1] ^ 1])
    result = pull(ref(registry), wrap=wrap)
    one_line_refusal(result, layer, "does not match its digest")
    assert result.stdout == ""
    assert store_entries(world_tmp, "pulled") == []  # no partial pull, no layout
    assert [e for e in store_entries(world_tmp) if e != "pulled"] == []  # nothing unpacked
    # Control: the honest blob is accepted.
    registry.state.blobs[layer] = honest
    assert pull(ref(registry), wrap=wrap).stdout == "hi\n"


def test_a_manifest_that_is_not_the_pinned_one_is_refused(registry, pushed, pull, tmp_path, echo, world_tmp):
    other = registry.push(image(tmp_path / "other", echo, motd="substituted"), None)
    registry.state.manifests[pushed] = registry.state.manifests[other]  # served for the pin
    result = pull(ref(registry, f"team/tool@{pushed}"))
    one_line_refusal(result, "does not match its digest")
    assert store_entries(world_tmp, "pulled") == []
    # Control: pinned to the digest of what is served, it is accepted.
    assert pull(ref(registry, f"team/tool@{other}"), "/bin/echo", "@/etc/motd").stdout == "substituted\n"


def test_a_blob_redirect_to_another_host_carries_no_authorization(registry, pushed, pull):
    registry.redirect_blobs()
    result = pull(ref(registry))
    assert result.returncode == 0 and result.stdout == "hi\n", result.stderr
    cdn = [headers for who, _, headers in registry.log if who == "cdn"]
    assert len(cdn) == 2 and all("Authorization" not in h for h in cdn), cdn
    # Control: the registry itself received the token with the same blob requests.
    blob_requests = [h for who, path, h in registry.log if who == "registry" and "/blobs/" in path]
    assert blob_requests and all(h.get("Authorization") == "Bearer tok-for-pulls" for h in blob_requests)


def test_a_blob_redirect_to_plain_http_is_refused(registry, pushed, pull, world_tmp):
    registry.redirect_blobs(f"http://cdn.test:{registry.addresses['cdn'][1]}")
    result = pull(ref(registry))
    one_line_refusal(result, "not HTTPS")
    assert registry.requests("cdn") == []
    assert store_entries(world_tmp, "pulled") == []


def test_a_token_service_over_http_is_refused(registry, pushed, pull):
    registry.require_token(f"http://auth.test:{registry.addresses['token'][1]}/token")
    result = pull(ref(registry))
    one_line_refusal(result, "not HTTPS")
    assert registry.requests("token") == []
    # (control: test_pull_by_tag_runs_the_image, the same service over HTTPS)


@pytest.mark.parametrize("name", ["team/../tool:1", "team/tool:1\n", "team/tool:../../x",
                                  "team/Tool:1", "team/tool:1%2f..", "team/tool@sha256:../x"])
def test_a_malformed_name_is_refused_before_any_request(registry, pushed, pull, dns, name):
    result = pull(ref(registry, name))
    one_line_refusal(result)
    assert registry.log == [] and dns.queries == []


def test_an_oversized_manifest_is_refused(registry, pushed, pull, world_tmp):
    media_type, data = registry.state.manifests["1"]
    registry.state.manifests["big"] = (media_type, data[:-1] + b" " * (4 << 20) + b"}")
    result = pull(ref(registry, "team/tool:big"))
    one_line_refusal(result, "larger than")
    assert store_entries(world_tmp, "pulled") == []
    registry.state.manifests["big"] = (media_type, data[:-1] + b" " * 1000 + b"}")  # control
    assert pull(ref(registry, "team/tool:big")).stdout == "hi\n"


def test_a_symlink_planted_in_the_store_is_refused(registry, pushed, pull, world_tmp, tmp_path):
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    images = os.path.join(str(world_tmp), "sandlock", "images")
    os.makedirs(images, 0o700)
    os.symlink(elsewhere, os.path.join(images, "pulled"))
    result = pull(ref(registry))
    one_line_refusal(result, "symbolic link")
    assert os.listdir(elsewhere) == [] and registry.log == []
    # The layout's own name planted as a link to a layout of the attacker's: not used.
    os.unlink(os.path.join(images, "pulled"))
    os.mkdir(os.path.join(images, "pulled"), 0o700)
    planted = os.path.join(images, "pulled", f"registry.test:{registry.port}%team%tool:1")
    os.symlink(elsewhere, planted)
    result = pull(ref(registry))
    one_line_refusal(result, "not a directory of yours")
    assert os.listdir(elsewhere) == []
    os.unlink(planted)  # control: the same pull, nothing planted
    assert pull(ref(registry)).stdout == "hi\n"


def test_a_registry_that_answers_garbage_is_one_line(pull, world_tmp):
    with Silent("127.0.0.5", answer=b"\x00garbage, not HTTP\r\n\r\n") as garbage:
        host, port = garbage.address
        result = pull(f"{host}:{port}/team/tool:1")
    one_line_refusal(result)
    assert store_entries(world_tmp, "pulled") == []


@pytest.mark.parametrize("manifest", [
    b"garbage", b"[]", b'{"schemaVersion": 2, "layers": 7, "config": {}}',
    b'{"mediaType": "application/vnd.oci.image.manifest.v1+json", "config": {"digest": "sha256:../../x"}, "layers": []}',
    b'{"mediaType": "application/vnd.oci.image.manifest.v1+json", "config": [], "layers": [{}]}',
    b'{"mediaType": "application/vnd.oci.image.index.v1+json", "manifests": [{"platform": 1}]}',
    b'{"schemaVersion": 1, "fsLayers": []}'])
def test_a_malformed_manifest_is_one_line(registry, pull, manifest, world_tmp):
    registry.serve(manifest, "1", MANIFEST)
    one_line_refusal(pull(ref(registry)))
    assert store_entries(world_tmp, "pulled") == []


def test_a_registry_that_never_answers_times_out(pull, world_tmp):
    with Silent() as silent:
        host, port = silent.address
        started = time.monotonic()
        result = pull(f"{host}:{port}/team/tool:1", timeout="2")
    one_line_refusal(result, "timed out")
    assert time.monotonic() - started < 30
    assert store_entries(world_tmp, "pulled") == []


# --- credentials, plain HTTP, `sandlock image` ----------------------------------------------


def _docker_config(world_tmp, registry: Registry, user: str = "alice:secret") -> str:
    import base64

    directory = os.path.join(str(world_tmp), "docker")
    os.makedirs(directory, exist_ok=True)
    auth = base64.b64encode(user.encode()).decode()
    with open(os.path.join(directory, "config.json"), "w") as f:
        json.dump({"auths": {f"registry.test:{registry.port}": {"auth": auth}}}, f)
    return auth


def test_docker_login_credentials_go_to_the_token_service_only(registry, pushed, pull, world_tmp, monkeypatch):
    auth = _docker_config(world_tmp, registry)
    registry.redirect_blobs()
    monkeypatch.setenv("DOCKER_CONFIG", os.path.join(str(world_tmp), "docker"))
    assert pull(ref(registry)).stdout == "hi\n"
    sent = {who: [h.get("Authorization") for w, _, h in registry.log if w == who]
            for who in ("registry", "token", "cdn")}
    assert sent["token"] == [f"Basic {auth}"]
    assert f"Basic {auth}" not in sent["registry"] and sent["cdn"] == [None, None], sent
    # Control: without them, the token service is asked without credentials.
    monkeypatch.setenv("DOCKER_CONFIG", os.path.join(str(world_tmp), "nowhere"))
    registry.log.clear()
    shutil.rmtree(os.path.join(str(world_tmp), "sandlock", "images", "pulled"))
    assert pull(ref(registry)).stdout == "hi\n"
    assert [h.get("Authorization") for w, _, h in registry.log if w == "token"] == [None]


def test_a_basic_challenge_is_answered_with_the_users_credentials(registry, pull, tmp_path, echo,
                                                                  world_tmp, monkeypatch):
    registry.push(image(tmp_path / "tool", echo), "1")
    registry.state.basic = _docker_config(world_tmp, registry)
    result = pull(ref(registry))  # control: without credentials, one line naming the fix
    one_line_refusal(result, "docker login")
    monkeypatch.setenv("DOCKER_CONFIG", os.path.join(str(world_tmp), "docker"))
    assert pull(ref(registry)).stdout == "hi\n"


def test_plain_http_only_for_a_registry_named_as_this_machine(upstream_ca, dns, pull, tmp_path, echo):
    with Registry(upstream_ca[0], "127.0.0.6", "127.0.0.7", "127.0.0.8", tls=False) as plain:
        plain.push(image(tmp_path / "tool", echo), "1")
        dns.set("registry.test", ["127.0.0.6"])
        by_name = pull(f"registry.test:{plain.port}/team/tool:1")
        one_line_refusal(by_name)  # registry.test: HTTPS or nothing
        assert plain.log == []
        by_loopback = pull(f"127.0.0.6:{plain.port}/team/tool:1")
        assert by_loopback.returncode == 0 and by_loopback.stdout == "hi\n", by_loopback.stderr
        # Its plain HTTP is its own: a redirect to another loopback host over HTTP is refused.
        plain.redirect_blobs(f"http://127.0.0.8:{plain.addresses['cdn'][1]}")
        plain.serve(plain.state.manifests["1"][1], "2", MANIFEST)
        elsewhere = pull(f"127.0.0.6:{plain.port}/team/tool:2")
        one_line_refusal(elsewhere, "not HTTPS")
        assert plain.requests("cdn") == []


def test_a_localhost_registry_over_plain_http(upstream_ca, dns, pull, tmp_path, echo):
    """``localhost`` is loopback whatever the DNS server says (it is not asked), and a
    registry so named may be plain HTTP, as Docker's default."""
    with Registry(upstream_ca[0], "127.0.0.1", "127.0.0.7", "127.0.0.8", tls=False) as plain:
        plain.push(image(tmp_path / "tool", echo), "1")
        result = pull(f"localhost:{plain.port}/team/tool:1")
        assert result.returncode == 0 and result.stdout == "hi\n", result.stderr
        assert dns.queries == [] and plain.requests()


def test_image_pull_resolves_a_tag_anew(registry, pushed, pull, dns, ca_file, world_tmp, tmp_path, echo):
    assert pull(ref(registry), "/bin/echo", "@/etc/motd").stdout == "from the registry\n"
    moved = registry.push(image(tmp_path / "moved", echo, motd="moved tag"), "1")
    assert pull(ref(registry), "/bin/echo", "@/etc/motd").stdout == "from the registry\n"  # the store's
    env = {**os.environ, "XDG_STATE_HOME": str(world_tmp), "SSL_CERT_FILE": ca_file}
    host, port = dns.address
    pulled = subprocess.run([*SANDLOCK, "image", "pull", "--dns-server", f"{host}:{port}", ref(registry)],
                            capture_output=True, text=True, env=env, timeout=60)
    assert pulled.returncode == 0, pulled.stderr
    assert pulled.stdout == f"{ref(registry)}  {moved}\n"
    assert pull(ref(registry), "/bin/echo", "@/etc/motd").stdout == "moved tag\n"
    listed = subprocess.run([*SANDLOCK, "image", "ls"], capture_output=True, text=True, env=env, timeout=60)
    assert listed.stdout == f"{ref(registry)}  {moved}\n", listed.stderr
    local = subprocess.run([*SANDLOCK, "image", "pull", str(tmp_path / "moved")], capture_output=True,
                           text=True, env=env, timeout=60)
    assert local.returncode == 2 and "nothing to pull" in local.stderr
    assert len(local.stderr.splitlines()) == 1


@pytest.mark.parametrize(("written", "canonical", "api_host"), [
    ("alpine", "docker.io/library/alpine:latest", "registry-1.docker.io"),
    ("alpine:3.20", "docker.io/library/alpine:3.20", "registry-1.docker.io"),
    ("index.docker.io/team/tool", "docker.io/team/tool:latest", "registry-1.docker.io"),
    ("team/tool:v1.2_x", "docker.io/team/tool:v1.2_x", "registry-1.docker.io"),
    ("localhost/tool", "localhost/tool:latest", "localhost"),
    ("registry.test:5000/a/b/c:1", "registry.test:5000/a/b/c:1", "registry.test:5000"),
    ("[::1]:5000/tool@sha256:" + "a" * 64, "[::1]:5000/tool@sha256:" + "a" * 64, "[::1]:5000"),
])
def test_references_follow_dockers_conventions(written, canonical, api_host):
    from sandlock.image._remote import parse_remote

    remote = parse_remote(written)
    assert (remote.canonical, remote.api_host) == (canonical, api_host)
    assert "/" not in remote.store_name and ".." not in remote.store_name.split("%")


def test_the_name_checks_are_the_distribution_specs_expressions():
    """The checks are written without ``re`` (its import on every pulled run): they must
    accept exactly what the spec's expressions do, over many random strings."""
    import random
    import re

    from sandlock.image import _remote

    spec = {_remote._is_component: r"[a-z0-9]+(?:(?:[._]|__|-+)[a-z0-9]+)*",
            _remote._is_tag: r"[A-Za-z0-9_][A-Za-z0-9._-]{0,127}",
            _remote._is_domain: r"(?:[A-Za-z0-9](?:[A-Za-z0-9-]*[A-Za-z0-9])?)"
                                r"(?:\.(?:[A-Za-z0-9](?:[A-Za-z0-9-]*[A-Za-z0-9])?))*"}
    chooser = random.Random(38)
    samples = ["a" * 128, "a" * 129, "_x", "a__b", "a___b", "a--b", "a.-b", ""]
    samples += ["".join(chooser.choice("ab09._-A/:%\n") for _ in range(chooser.randint(0, 8)))
                for _ in range(20000)]
    for check, expression in spec.items():
        wrong = [s for s in samples if check(s) != bool(re.fullmatch(expression, s))]
        assert wrong == [], (check.__name__, wrong[:5])
