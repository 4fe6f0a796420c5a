"""Where each client's own CA setting is found, read as the client reads its files
(``sandlock.ca._clientcas``), and what the run's trust files then hold. Pure reads of
files made here; the clients themselves are in test_client_cas.py."""

from __future__ import annotations

import os

import pytest
import trustme

from sandlock import ca
from sandlock.ca._clientcas import client_certificates, configured_sources
from sandlock.ca._pem import certificates


@pytest.fixture
def tree(tmp_path):
    """A home, a project two levels under a directory holding package.json, and a
    machine of nothing (no npm or node on PATH, no system configuration read)."""
    home, project = tmp_path / "home", tmp_path / "work" / "pkg" / "src"
    project.mkdir(parents=True)
    home.mkdir()
    (tmp_path / "work" / "pkg" / "package.json").write_text("{}")
    env = {"HOME": str(home), "PATH": "", "npm_config_globalconfig": str(tmp_path / "none"),
           "XDG_CONFIG_DIRS": str(tmp_path / "none"), "GIT_CONFIG_NOSYSTEM": "1"}
    return tmp_path, home, project, env


def ours(found: dict, client: str, root) -> list:
    """What was found for ``client`` under the test's directory (the machine's own
    /etc/pip.conf may name the system bundle too)."""
    return [s for s in found.get(client, []) if isinstance(s, bytes) or s.startswith(str(root))]


def test_npmrc_values_as_npm_reads_them(tree):
    root, home, project, env = tree
    (home / ".npmrc").write_text('cafile = "~/corp.pem"\n; cafile=/commented\n')
    (root / "work" / "pkg" / ".npmrc").write_text(
        "cafile=${CERTS}/a.pem ; comment\ncafile=${UNSET?}rel.pem\n"
        'ca[]="-----BEGIN CERTIFICATE-----\\nQUJD\\n-----END CERTIFICATE-----"\n[section]\ncafile=/not-npm\n')
    found = configured_sources({**env, "CERTS": "/certs", "NPM_CONFIG_CAFILE": "env.pem"}, str(project))
    assert found["npm"] == [str(project / "env.pem"), str(home / "corp.pem"), "/certs/a.pem",
                            str(project / "rel.pem"),
                            b"-----BEGIN CERTIFICATE-----\nQUJD\n-----END CERTIFICATE-----"]


def test_npm_user_and_global_configs_move_with_their_variables(tree):
    root, home, project, env = tree
    (root / "user.npmrc").write_text(f"cafile={root}/u.pem\n")
    (root / "global.npmrc").write_text(f"cafile={root}/g.pem\n")
    (home / ".npmrc").write_text(f"cafile={root}/ignored.pem\n")
    env = {**env, "NPM_CONFIG_USERCONFIG": str(root / "user.npmrc"),
           "npm_config_globalconfig": str(root / "global.npmrc")}
    assert ours(configured_sources(env, str(project)), "npm", root) == [f"{root}/g.pem", f"{root}/u.pem"]


def test_pip_cert_in_any_section_and_either_separator(tree):
    root, home, project, env = tree
    (home / ".config" / "pip").mkdir(parents=True)
    (home / ".config" / "pip" / "pip.conf").write_text("[install]\ncert: ~/a.pem\n")
    (root / "venv").mkdir()
    (root / "venv" / "pip.conf").write_text("[global]\n# cert = /commented\ncert = rel.pem\n")
    found = configured_sources({**env, "VIRTUAL_ENV": str(root / "venv")}, str(project))
    assert ours(found, "pip", root) == [str(home / "a.pem"), str(project / "rel.pem")]
    off = {**env, "PIP_CONFIG_FILE": os.devnull, "PIP_CERT": "/x.pem", "REQUESTS_CA_BUNDLE": "/r.pem",
           "VIRTUAL_ENV": str(root / "venv")}
    assert configured_sources(off, str(project))["pip"] == ["/x.pem", "/r.pem"]  # no file read


def test_git_sslcainfo_with_includes_urls_and_variables(tree):
    root, home, project, env = tree
    (home / ".gitconfig").write_text('[include]\n\tpath = more.inc\n[http "https://corp.test/"]\n'
                                     "\tsslCAInfo = ~/corp.pem\n")
    (home / "more.inc").write_text("[http]\nsslcainfo = /inc.pem\n")
    (root / "work" / ".git").mkdir()
    (root / "work" / ".git" / "config").write_text("[http]\n\tsslCAInfo = /repo.pem\n")
    env = {**env, "GIT_CONFIG_COUNT": "2", "GIT_CONFIG_KEY_0": "http.https://x/.sslCAInfo",
           "GIT_CONFIG_VALUE_0": "/count.pem", "GIT_CONFIG_KEY_1": "core.editor", "GIT_CONFIG_VALUE_1": "vi"}
    assert configured_sources(env, str(project))["git"] == [
        str(home / "corp.pem"), "/inc.pem", "/repo.pem", "/count.pem"]


def test_curl_reads_the_first_curlrc_only(tree):
    root, home, project, env = tree
    (home / ".curlrc").write_text("cacert = /home.pem\n")
    assert configured_sources(env, str(project))["curl"] == ["/home.pem"]
    (root / "ch").mkdir()
    (root / "ch" / ".curlrc").write_text('# mine\n--cacert "/a \\"b\\".pem"\ncapath: /dir\n-s\n')
    found = configured_sources({**env, "CURL_HOME": str(root / "ch")}, str(project))
    assert found["curl"] == ['/a "b".pem', "/dir"]


def test_cargo_paths_are_relative_to_the_directory_holding_dot_cargo(tree):
    root, home, project, env = tree
    (root / "work" / ".cargo").mkdir()
    (root / "work" / ".cargo" / "config.toml").write_text('[http]\ncainfo = "certs/ca.pem"\n')
    (home / ".cargo").mkdir()
    (home / ".cargo" / "config").write_text('http.cainfo = "/home.pem"\n')
    found = configured_sources({**env, "CARGO_HTTP_CAINFO": "env.pem"}, str(project))
    assert found["cargo"] == [str(project / "env.pem"), str(root / "work" / "certs" / "ca.pem"), "/home.pem"]


def test_a_broken_configuration_is_skipped(tree):
    root, home, project, env = tree
    (home / ".cargo").mkdir()
    (home / ".cargo" / "config.toml").write_text("[http\ncainfo = \n")  # not TOML
    (home / ".curlrc").write_text("cacert = /ok.pem\n")
    found = configured_sources(env, str(project))
    assert "cargo" not in found and found["curl"] == ["/ok.pem"]  # (and the rest is read)


def test_only_new_certificates_leave_the_files(tree):
    """Certificate blocks only (never a key, nor the text around them), without those
    the base bundle holds, once each; the base bundle named again is not even read."""
    root, home, project, env = tree
    corp, system = trustme.CA(), trustme.CA()
    base = root / "base.pem"
    base.write_bytes(system.cert_pem.bytes())
    key = corp.private_key_pem.bytes().decode()
    (root / "corp.pem").write_text(f"Subject: corp\n{corp.cert_pem.bytes().decode()}{key}"
                                   f"{system.cert_pem.bytes().decode()}{corp.cert_pem.bytes().decode()}")
    (home / ".npmrc").write_text(f"cafile={root}/corp.pem\n")
    (home / ".curlrc").write_text(f"cacert = {base}\n")  # the base itself
    found = client_certificates(env, str(project), str(base))
    assert certificates(found["npm"]) == certificates(corp.cert_pem.bytes())
    assert b"PRIVATE" not in found["npm"] and b"Subject" not in found["npm"]
    assert found["curl"] == b""  # curl has a setting of its own: its .curlrc is replaced


def test_trust_files_give_each_configured_client_its_bundle(tree):
    root, home, project, env = tree
    corp = trustme.CA()
    corp.cert_pem.write_to_path(str(root / "corp.pem"))
    (home / ".curlrc").write_text(f"cacert = {root}/corp.pem\n")
    (home / ".gitconfig").write_text("[user]\nname = x\n")  # nothing for git
    run = root / "run"
    run.mkdir()
    authority = ca.ephemeral_ca(["a.test"])
    trust = ca.prepare_trust(authority, run, env={**env, "NPM_CONFIG_CAFILE": str(root / "corp.pem")},
                             cwd=project)
    npm = run / "ca-bundle-npm.pem"
    assert trust.env["npm_config_cafile"] == trust.env["NPM_CONFIG_CAFILE"] == str(npm)
    assert npm.read_bytes() == trust.bundle.read_bytes().replace(
        authority.cert_pem, corp.cert_pem.bytes() + authority.cert_pem)
    assert trust.env["GIT_SSL_CAINFO"] == trust.env["PIP_CERT"] == str(trust.bundle)
    assert trust.env["CURL_HOME"] == str(run)
    assert (run / ".curlrc").read_text().endswith(f'cacert = "{run}/ca-bundle-curl.pem"\n')
    assert {p.name for p in run.iterdir()} == {"ca-bundle.pem", "sandlock-ca.pem", "wgetrc", ".curlrc",
                                               "ca-bundle-npm.pem", "ca-bundle-curl.pem"}
