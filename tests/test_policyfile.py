"""Policy files and profiles: run --policy/-p, --print-policy, sandlock profile ...

Each field is the same Policy from a file as from its option; bad files of every kind
are exit 2 with FILE:LINE; files and options combine as docs/policy.md says.
"""

from __future__ import annotations

import dataclasses
import os
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest

from conftest import SANDLOCK, UNWIDENED, sandlock
from sandlock import Policy
from sandlock.cli import _main as _cli
from sandlock.cli._parser import build_parser


def write(path: Path, text: str, mode: int = 0o644) -> str:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)
    path.chmod(mode)
    return str(path)


def policy_of(*argv: str) -> Policy:
    """The Policy `sandlock run ARGV` would run with (the CLI's own code, in process)."""
    args, _ = build_parser().parse_known_args(["run", *argv])
    return _cli._policy_of(args)


def printed(*argv: str, **kwargs) -> subprocess.CompletedProcess:
    return sandlock("run", *argv, "--print-policy", **kwargs)


def error(result: subprocess.CompletedProcess) -> str:
    assert result.returncode == 2, result
    assert result.stdout == ""
    lines = result.stderr.splitlines()
    assert len(lines) == 1 and lines[0].startswith("sandlock: error: "), result.stderr
    return lines[0].removeprefix("sandlock: error: ")


# --- every field: the same Policy from its option and from a file --------------------


def user_ca(tmp: Path) -> tuple[Path, Path]:
    """A real CA certificate and key (--http-ca files are checked when given)."""
    import trustme

    ca = trustme.CA()
    pem, key = tmp / "ca.pem", tmp / "ca.key"
    if not pem.exists():
        ca.cert_pem.write_to_path(str(pem))
        ca.private_key_pem.write_to_path(str(key))
    return pem, key


def equivalents(tmp: Path) -> dict[str, tuple[list[str], str]]:
    """Policy field -> (options, the same in a policy file)."""
    work = tmp / "work"
    work.mkdir(exist_ok=True)
    pem, key = user_ca(tmp)
    both_ca = ([f"--http-ca={pem}", f"--http-key={key}"], f'[ca]\ncert = "{pem}"\nkey = "{key}"')
    layout = tmp / "layout"  # (an OCI image layout as far as the policy checks see)
    layout.mkdir(exist_ok=True)
    (layout / "index.json").write_text("{}")
    return {
        "fs_readable": (["-r", str(work), "--fs-read", "/usr"],
                    f'[filesystem]\nread = ["{work}", "/usr"]'),
        "fs_writable": (["-w", str(work)], f'[filesystem]\nwrite = ["{work}"]'),
        "fs_denied": (["--fs-deny", str(work / "secret")],
                    f'[filesystem]\ndeny = ["{work / "secret"}"]'),
        "mode": (["--mode", "read-only"], '[filesystem]\nmode = "read-only"'),
        "allow_ipc": (["--allow-ipc"], "[confinement]\nallow_ipc = true"),
        "allow_sysv_ipc": (["--allow-sysv-ipc"], "[confinement]\nallow_sysv_ipc = true"),
        "allow_autorun_writes": (["--allow-autorun-writes"],
                                 "[filesystem]\nallow_autorun_writes = true"),
        "allow_syscalls": (["--allow-syscall", "ptrace"],
                           '[confinement]\nallow_syscalls = ["ptrace"]'),
        "env": (["--env", "A=1", "--env", "B=x=y"], '[process]\nenv = { A = "1", B = "x=y" }'),
        "clean_env": (["--clean-env"], "[process]\nclean_env = true"),
        "cwd": (["--cwd", str(work)], f'[process]\ncwd = "{work}"'),
        "timeout": (["-t", "2.5"], "[process]\ntimeout = 2.5"),
        "announce": (["--announce"], "[process]\nannounce = true"),
        "best_effort": (["--best-effort"], "[confinement]\nbest_effort = true"),
        "allow_degraded": (["--allow-degraded", "SIGNAL_SCOPE", "--allow-degraded", "fs-truncate"],
                           '[confinement]\nallow_degraded = ["SIGNAL_SCOPE", "FS_TRUNCATE"]'),
        "disable": (["--disable", "ABSTRACT_UNIX_SOCKET_SCOPE"],
                    '[confinement]\ndisable = ["ABSTRACT_UNIX_SOCKET_SCOPE"]'),
        "deny_syscalls": (["--deny-syscalls", "mount", "--deny-syscalls", "shmget"],
                          '[confinement]\ndeny_syscalls = ["mount", "shmget"]'),
        "extra_deny_syscalls": (["--extra-deny-syscall", "getpid"],
                                '[confinement]\nextra_deny_syscalls = ["getpid"]'),
        "user": (["--user", "0:0"], '[process]\nuser = "0:0"'),
        "privileged": (["--privileged"], "[process]\nprivileged = true"),
        "no_coredump": (["--no-coredump"], "[process]\nno_coredump = true"),
        "no_randomize_memory": (["--no-randomize-memory"], "[process]\nno_randomize_memory = true"),
        "no_huge_pages": (["--no-huge-pages"], "[process]\nno_huge_pages = true"),
        "net_allow": (["--net-allow", "github.com:22,443", "--net-allow", "udp://1.1.1.1:53"],
                      '[network]\nallow = ["github.com:22,443", "udp://1.1.1.1:53"]'),
        "net_allow_hosts": (["--net-allow-host", "api.openai.com", "--net-allow-host", "10.1.2.3"],
                            '[network]\nallow_hosts = ["api.openai.com", "10.1.2.3"]'),
        "net_connect": (["--net-connect", "443", "--net-connect", "5432"],
                        '[network]\nconnect = [443, "5432"]'),
        "net_deny": (["--net-deny", "10.0.0.0/8:443"], '[network]\ndeny = ["10.0.0.0/8:443"]'),
        "net_bind": (["--net-bind", "8000-8100"],
                     '[network]\nallow_bind = ["8000-8100"]'),
        "net_deny_bind": (["--net-deny-bind", "22,8000-8100"],
                          '[network]\ndeny_bind = ["22,8000-8100"]'),
        "port_remap": (["--port-remap"], "[network]\nport_remap = true"),
        "unix_allow": (["--unix-allow", "/run/x.sock"], '[network]\nunix_allow = ["/run/x.sock"]'),
        "dns_servers": (["--dns-server", "127.0.0.53:5353"],
                        '[network]\ndns_servers = ["127.0.0.53:5353"]'),
        "resolve": (["--resolve", "api.test=127.0.0.2,::1"],
                    '[network]\nresolve = ["api.test=127.0.0.2,::1"]'),
        "dns_allow_private": (["--dns-allow-private"], "[network]\ndns_allow_private = true"),
        "net_private_loopback": (["--net-private-loopback"],
                                 "[network]\nprivate_loopback = true"),
        "chroot": (["--chroot", str(work)], f'[filesystem]\nchroot = "{work}"'),
        "image": (["--image", str(layout)], f'[filesystem]\nimage = "{layout}"'),
        "http_allow": (["--http-allow", "GET api.github.com/repos/*"],
                       '[http]\nallow = ["GET api.github.com/repos/*"]'),
        "http_deny": (["--http-deny", "* */admin/*"], '[http]\ndeny = ["* */admin/*"]'),
        "http_ports": (["--http-port", "8080", "--http-port", "80"], "[http]\nports = [8080, 80]"),
        "https_inspect": (["--https-inspect", "on"], '[http]\ninspect = "on"'),
        "upstream_ca": ([f"--upstream-ca={pem}"], f'[http]\nupstream_ca = ["{pem}"]'),
        "http_upstream_timeout": (["--http-upstream-timeout", "30"],
                                  "[http]\nupstream_timeout = 30"),
        "http_ca": both_ca,
        "http_key": both_ca,
        "ca_env": (["--no-ca-env"], "[ca]\nenv = false"),
        "http_ca_out": (["--http-ca-out", str(tmp / "out.pem")],
                        f'[ca]\nout = "{tmp / "out.pem"}"'),
        "max_memory": (["-m", "512M"], '[limits]\nmax_memory = "512M"'),
        "max_processes": (["-P", "20"], "[limits]\nmax_processes = 20"),
        "max_cpu": (["--max-cpu", "50"], "[limits]\nmax_cpu = 50"),
        "cpu_cores": (["--cpu-cores", "0"], "[limits]\ncpu_cores = [0]"),
        "max_open_files": (["--max-open-files", "256"], "[limits]\nmax_open_files = 256"),
        "max_file_size": (["--max-file-size", "50M"], "[limits]\nmax_file_size = 52428800"),
        "max_output": (["--max-output", "1M"], '[limits]\nmax_output = "1024K"'),
        "credentials": (["--credential", "api=env:API_KEY", "--credential", f"db=file:{work}/pw"],
                        f'[credentials]\napi = "env:API_KEY"\ndb = "file:{work}/pw"'),
        "http_auth": (["--http-allow", "GET a.test/*", "--credential", "api=env:K",
                       "--http-auth", "GET a.test/v1/* bearer api"],
                      '[http]\nallow = ["GET a.test/*"]\nauth = ["GET a.test/v1/* bearer api"]\n'
                      '[credentials]\napi = "env:K"'),
        "http_auth_plain": (["--http-auth-plain"], "[http]\nauth_plain = true"),
        "credential_env": (["--credential", "api=env:K", "--credential-env", "OPENAI_API_KEY=api"],
                           '[credentials]\napi = "env:K"\n[process]\n'
                           'credential_env = { OPENAI_API_KEY = "api" }'),
        "workdir": (["--workdir", str(work)], f'[workspace]\ndir = "{work}"'),
        "on_exit": (["--workdir", str(work), "--on-exit", "keep"],
                    f'[workspace]\ndir = "{work}"\non_exit = "keep"'),
        "on_error": (["--workdir", str(work), "--on-error", "commit"],
                     f'[workspace]\ndir = "{work}"\non_error = "commit"'),
        "max_disk": (["--workdir", str(work), "--max-disk", "1G"],
                     f'[workspace]\ndir = "{work}"\nmax_disk = "1G"'),
        "max_memory_mode": (["-m", "64M", "--max-memory-mode", "refuse"],
                            '[limits]\nmax_memory = "64M"\nmax_memory_mode = "refuse"'),
        "fs_storage": (["--workdir", str(work), "--fs-storage", "/var/tmp"],
                       f'[workspace]\ndir = "{work}"\nstorage = "/var/tmp"'),
        "fs_isolation": (["--workdir", str(work), "--fs-isolation", "overlayfs"],
                         f'[workspace]\ndir = "{work}"\nfs_isolation = "overlayfs"'),
        "notif_policy": (["--notif-deny", "/proc/kcore", "--notif-deny", "/sys/fs/cgroup/"],
                         '[confinement]\nnotif_policy = ["/proc/kcore", "/sys/fs/cgroup"]'),
        "num_cpus": (["--num-cpus", "1"], "[limits]\nnum_cpus = 1"),
        "time_start": (["--time-start", "2000-01-01T00:00:00Z"],
                       '[determinism]\ntime_start = "2000-01-01T00:00:00Z"'),
        "random_seed": (["--random-seed", "42"], "[determinism]\nrandom_seed = 42"),
        "deterministic_dirs": (["--deterministic-dirs"],
                               "[determinism]\ndeterministic_dirs = true"),
    }


# The seeds' spellings of what sandlock always does: true is the only value.
ALWAYS_TRUE = {"isolate_ipc", "isolate_signals"}


def test_every_policy_field_has_a_case(tmp_path):
    fields = {field.name for field in dataclasses.fields(Policy)}
    assert set(equivalents(tmp_path)) | ALWAYS_TRUE == fields


@pytest.mark.parametrize("field", [field.name for field in dataclasses.fields(Policy)
                                   if field.name not in ALWAYS_TRUE])
def test_file_and_options_give_the_same_policy(tmp_path, field):
    options, toml = equivalents(tmp_path)[field]
    path = write(tmp_path / "p.toml", toml + "\n")
    from_options, from_file = policy_of(*options), policy_of("--policy", path)
    assert from_options == from_file
    assert getattr(from_file, field) != getattr(Policy(), field)
    text = printed(*options)
    assert text.returncode == 0, text.stderr
    assert printed("--policy", path).stdout == text.stdout


def test_relative_paths_are_the_files_directory_and_tilde_is_home(tmp_path):
    (tmp_path / "conf" / "data").mkdir(parents=True)
    home = tmp_path / "home"
    (home / "cache").mkdir(parents=True)
    path = write(tmp_path / "conf" / "p.toml",
                 '[filesystem]\nread = ["data", "~/cache"]\nwrite = ["../conf/data/"]\n')
    result = printed("--policy", "conf/p.toml", cwd=tmp_path, env={**os.environ, "HOME": str(home)})
    assert result.returncode == 0, result.stderr
    assert tomllib.loads(result.stdout) == {"filesystem": {  # (how lists wrap: the paths' length)
        "read": [f"{tmp_path}/conf/data", f"{home}/cache"], "write": [f"{tmp_path}/conf/data"]}}
    elsewhere = printed("--policy", path, cwd="/", env={**os.environ, "HOME": str(home)})
    assert elsewhere.stdout == result.stdout


# --- bad files -----------------------------------------------------------------------------


@pytest.mark.parametrize("text, expected", [
    ("[network]\nalow = []\n", "p.toml:2: unknown key 'alow' in [network]: did you mean 'allow'?"),
    ("[netwrok]\nallow = []\n", "p.toml:1: unknown section [netwrok]: did you mean 'network'?"),
    ("[http]\nallow_bind = ['80']\n", "p.toml:2: unknown key 'allow_bind' in [http]: it belongs "
                                      "in [network]"),
    ("[process]\nfoo = 1\n", "p.toml:2: unknown key 'foo' in [process] (expected one of: env, "
                             "clean_env, cwd, timeout, announce, user, privileged, no_coredump, "
                             "no_randomize_memory, no_huge_pages, credential_env)"),
    ('allow = ["x"]\n', "p.toml:1: 'allow' belongs in a section: [network] or [http]"),
    ("descripton = 'x'\n", "p.toml:1: unknown top-level key 'descripton': did you mean "
                           "'description'?"),
    ("[process]\ntimeout = 'soon'\n", "p.toml:2: process.timeout: expected a number, got a string"),
    ("[network]\nallow = 'github.com'\n",
     "p.toml:2: network.allow: expected a list of strings, got a string"),
    ("[network]\nallow = [\n  'a.com',\n  443,\n]\n",
     "p.toml:4: network.allow: expected a list of strings, got an integer in the array"),
    ("[http]\nports = ['80']\n", "p.toml:2: http.ports: expected a list of integers, got a "
                                 "string in the array"),
    ("[confinement]\nallow_ipc = 'yes'\n", "p.toml:2: confinement.allow_ipc: expected a boolean, "
                                           "got a string"),
    ("[process]\nenv = { A = 1 }\n", 'p.toml:2: process.env: expected a table of strings or a '
                                     'list of "K=V" strings, got an integer in the table'),
    ("[process]\nenv = [\n  'A=1',\n  '=NONAME',\n]\n",
     "p.toml:4: process.env: invalid variable name ''"),
    ("network = 1\n", "p.toml:1: network: expected a table ([network]), got an integer"),
    ("description = 1\n", "p.toml:1: description: expected a string, got an integer"),
    ("[network]\nallow = [\n  'github.com:22',\n  'github.com:22,99999',\n]\n",
     "p.toml:4: network.allow: 'github.com:22,99999': port 99999 is out of range (1 to 65535)"),
    ("\n[http]\ndeny = ['GET api.github.com:443/x']\n",
     "p.toml:3: http.deny: 'GET api.github.com:443/x': 'api.github.com:443': no port here: "
     "HTTP ports come from --http-port"),
    ("[http]\ninspect = 'maybe'\n", "p.toml:2: http.inspect: expected one of auto, on, off, "
                                    "got 'maybe'"),
    ("[filesystem]\nread = ['missing']\n", "p.toml:2: filesystem.read: {dir}/missing: no such "
                                           "file or directory"),
    ("[network]\nallow [1]\n", "p.toml:2: invalid TOML: Expected '=' after a key in a key/value "
                               "pair (column 7)"),
    ("[network]\nallow = []\nallow = []\n", "p.toml:3: invalid TOML: Cannot overwrite a value "
                                            "(column 11)"),
    ("[network]\nallow = ['github.com']\ndeny = ['10.0.0.0/8']\n",
     "p.toml:3: network.deny: cannot be combined with --net-allow (choose an allowlist or a "
     "denylist)"),
    ("[ca]\nout = '/tmp/x.pem'\ncert = '/etc/hostname'\n",
     "p.toml:3: ca.cert: --http-ca and --http-key go together (give both)"),
])
def test_bad_file_is_exit_2_with_file_and_line(tmp_path, text, expected):
    write(tmp_path / "p.toml", text)
    message = error(printed("--policy", "p.toml", cwd=tmp_path))
    assert message == expected.format(dir=tmp_path)


def test_bad_file_is_refused_before_running_anything(tmp_path):
    write(tmp_path / "p.toml", "[network]\nallow = ['x:0']\n")
    result = sandlock("run", "--policy", "p.toml", "--", "touch", "ran", cwd=tmp_path)
    assert error(result).startswith("p.toml:2: network.allow: 'x:0': port 0")
    assert not (tmp_path / "ran").exists()


def test_missing_file_and_not_a_file(tmp_path):
    assert error(printed("--policy", str(tmp_path / "none.toml"))) == \
        f"{tmp_path}/none.toml: no such file or directory"
    assert error(printed("--policy", str(tmp_path))) == f"{tmp_path}: not a regular file"


def test_world_writable_file_is_refused(tmp_path):
    path = write(tmp_path / "p.toml", "[network]\nallow = ['*']\n", mode=0o666)
    assert error(printed("--policy", path)) == (
        f"{path}: refused: writable by every user (mode 0666; anyone could widen your sandbox "
        f"through it): chmod o-w {path}")
    os.chmod(path, 0o664)  # group-writable: the group is the user's business
    assert printed("--policy", path).returncode == 0


@pytest.mark.skipif(os.getuid() != 0, reason="chown to another user needs root")
def test_file_owned_by_another_user_is_refused(tmp_path):
    path = write(tmp_path / "p.toml", "[network]\nallow = ['*']\n")
    os.chown(path, 65534, 65534)
    assert error(printed("--policy", path)) == (
        f"{path}: refused: owned by nobody (uid 65534), not by you or root (another user could "
        "widen your sandbox through it)")


def test_a_users_own_and_roots_files_are_read(as_nobody, world_tmp):
    own = world_tmp / "own.toml"
    subprocess.run(as_nobody(["sh", "-c", f"printf '[process]\\ntimeout = 5\\n' > {own}"]),
                   check=True)
    roots = write(world_tmp / "root.toml", "[network]\nallow = ['github.com:22']\n")
    if os.getuid() != 0:
        pytest.skip("root's file: needs root to make one")
    result = subprocess.run(as_nobody([*SANDLOCK, "run", "--policy", str(own), "--policy", roots,
                                       "--print-policy"]),
                            capture_output=True, text=True, cwd="/")
    assert result.returncode == 0, result.stderr
    assert 'allow = ["github.com:22"]' in result.stdout and "timeout = 5.0" in result.stdout


# --- merging --------------------------------------------------------------------------------


def test_lists_concatenate_in_order_and_options_come_last(tmp_path):
    a = write(tmp_path / "a.toml", "[network]\nallow = ['a.test:1']\n[http]\nports = [8080]\n")
    b = write(tmp_path / "b.toml", "[network]\nallow = ['b.test:2', 'a.test:1']\n")
    policy = policy_of("--net-allow", "c.test:3", "--policy", a, "--http-port", "8081",
                       "--policy", b)
    assert policy.net_allow == ("a.test:1", "b.test:2", "c.test:3")
    assert policy.http_ports == (8080, 8081)
    assert policy_of("--policy", b).http_ports == (80, 443)  # no source gave ports


def test_single_values_override(tmp_path):
    a = write(tmp_path / "a.toml", "[process]\ntimeout = 10\nclean_env = true\n"
                                   "env = { A = '1', B = '1' }\n[http]\ninspect = 'on'\n")
    b = write(tmp_path / "b.toml", "[process]\ntimeout = 20\nclean_env = false\n"
                                   "env = ['A=2']\n")
    policy = policy_of("--policy", a, "--policy", b)
    assert (policy.timeout, policy.clean_env, policy.https_inspect) == (20.0, False, "on")
    assert dict(policy.env) == {"A": "2", "B": "1"}
    policy = policy_of("--policy", a, "--policy", b, "-t", "30", "--clean-env",
                       "--https-inspect", "off", "--env", "B=3")
    assert (policy.timeout, policy.clean_env, policy.https_inspect) == (30.0, True, "off")
    assert dict(policy.env) == {"A": "2", "B": "3"}


def test_a_conflict_between_sources_points_at_the_later_one(tmp_path):
    a = write(tmp_path / "a.toml", "[network]\nallow = ['github.com:22']\n")
    b = write(tmp_path / "b.toml", "\n[network]\ndeny = ['10.0.0.0/8']\n")
    assert error(printed("--policy", a, "--policy", b)).startswith(f"{b}:3: network.deny: cannot ")
    assert error(printed("--policy", a, "--net-deny", "10.0.0.0/8")).startswith(
        "--net-deny: cannot be combined")
    pem, private = user_ca(tmp_path)
    key = write(tmp_path / "key.toml", f"[ca]\nkey = '{private}'\n")
    cert = write(tmp_path / "cert.toml", f"[ca]\ncert = '{pem}'\n")
    assert policy_of("--policy", key, "--policy", cert).http_ca == str(pem)


def test_bad_option_on_top_of_a_file_names_the_option(tmp_path):
    a = write(tmp_path / "a.toml", "[network]\nallow = ['github.com:22']\n")
    assert error(printed("--policy", a, "--net-allow", "x:0")).startswith("--net-allow: 'x:0'")


# --- --print-policy ----------------------------------------------------------------------


def test_print_policy_round_trips(tmp_path):
    options, _ = zip(*equivalents(tmp_path).values())
    argv = [option for group in options
            if not {"--net-deny", "--net-deny-bind", "--mode", "--chroot", "--image"} & set(group)
            for option in group]  # those refuse to combine with some of the others
    argv += ["--env", "QUOTE=a \"b\" \\ c\ttab é", "--http-allow", "POST api.openai.com/v1/*"]
    first = printed(*argv)
    assert first.returncode == 0, first.stderr
    path = write(tmp_path / "printed.toml", first.stdout)
    second = printed("--policy", path)
    assert second.stdout == first.stdout
    assert policy_of("--policy", path) == policy_of(*argv)


def test_print_policy_runs_nothing_and_shows_the_default_workspace(tmp_path):
    result = sandlock("run", "--print-policy", "--", "touch", "ran", cwd=tmp_path, env=UNWIDENED)
    assert result.returncode == 0
    assert result.stdout == ("# no [filesystem] read or write paths: the default workspace "
                             "applies (docs/usage.md)\n\n"
                             "# default workspace, no network: a private network, only lo in it "
                             "(docs/usage.md, \"A private loopback\")\n")
    assert not (tmp_path / "ran").exists()


# --- profiles --------------------------------------------------------------------------


@pytest.fixture
def profiles(tmp_path):
    """XDG_CONFIG_HOME in tmp_path; returns (env, profiles directory)."""
    directory = tmp_path / "config" / "sandlock" / "profiles"
    directory.mkdir(parents=True)
    env = {**os.environ, "XDG_CONFIG_HOME": str(tmp_path / "config")}
    return env, directory


def test_profile_by_name(profiles):
    env, directory = profiles
    write(directory / "gh.toml", "description = 'GitHub'\n[http]\nallow = ['GET api.github.com']\n")
    write(directory / "ssh.toml", "[network]\nallow = ['github.com:22']\n")
    result = printed("-p", "gh", "--profile", "ssh", env=env)
    assert result.returncode == 0, result.stderr
    assert 'allow = ["github.com:22"]' in result.stdout
    assert 'allow = ["GET api.github.com"]' in result.stdout


def test_profile_and_policy_files_apply_in_the_order_given(profiles, tmp_path):
    env, directory = profiles
    write(directory / "slow.toml", "[process]\ntimeout = 100\n")
    fast = write(tmp_path / "fast.toml", "[process]\ntimeout = 1\n")
    assert "timeout = 1.0" in printed("-p", "slow", "--policy", fast, env=env).stdout
    assert "timeout = 100.0" in printed("--policy", fast, "-p", "slow", env=env).stdout


def test_unknown_profile(profiles):
    env, directory = profiles
    write(directory / "github.toml", "")
    assert error(printed("-p", "githb", env=env)) == (
        f"--profile githb: no such profile in {directory}: did you mean 'github'?")
    assert error(printed("-p", "../github", env=env)).startswith(
        "--profile ../github: not a profile name")


def test_relative_xdg_config_home_is_ignored(tmp_path):
    home = tmp_path / "home"
    write(home / ".config" / "sandlock" / "profiles" / "p.toml", "[process]\ntimeout = 7\n")
    env = {**os.environ, "HOME": str(home), "XDG_CONFIG_HOME": "relative/config"}
    assert "timeout = 7.0" in printed("-p", "p", env=env).stdout


def test_profile_list(profiles):
    env, directory = profiles
    write(directory / "github-readonly.toml", "description = 'GitHub, read-only'\n")
    write(directory / "bare.toml", "[process]\ntimeout = 1\n")
    write(directory / "broken.toml", "[process]\ntimeout = 'x'\n")
    write(directory / "notes.txt", "not a profile")
    result = sandlock("profile", "list", env=env)
    assert result.returncode == 0
    assert result.stdout.splitlines() == [
        f"agent            {AGENT}",  # the built-in one
        "bare",
        f"broken           (invalid: {directory}/broken.toml:2: process.timeout: expected a "
        "number, got a string)",
        "github-readonly  GitHub, read-only",
    ]


AGENT = "an AI agent's command: 120 s, 1M of output, 50M files, 64 processes, 256 fds"


def test_profile_list_without_profiles(tmp_path):
    env = {**os.environ, "XDG_CONFIG_HOME": str(tmp_path)}
    result = sandlock("profile", "list", env=env)
    assert (result.returncode, result.stdout) == (0, f"agent  {AGENT}\n")
    assert result.stderr == (f"sandlock: no profiles in {tmp_path}/sandlock/profiles (the "
                             "built-in ones only)\n")


def test_profile_show(profiles):
    env, directory = profiles
    text = "# my comment\n[network]\nallow = ['github.com:22']\n"
    path = write(directory / "ssh.toml", text)
    result = sandlock("profile", "show", "ssh", env=env)
    assert (result.returncode, result.stdout) == (0, f"# {path}\n{text}")
    write(directory / "bad.toml", "[network]\nallow = 1\n")
    assert error(sandlock("profile", "show", "bad", env=env)).startswith(
        f"{directory}/bad.toml:2: network.allow: expected")


def test_profile_validate(tmp_path):
    good = write(tmp_path / "good.toml", "[network]\nallow = ['github.com:22']\n")
    bad = write(tmp_path / "bad.toml",
                "[network]\nallow = ['github.com:22']\ndeny = ['10.0.0.0/8']\n")
    other = write(tmp_path / "other.toml", "[netwrk]\n")
    result = sandlock("profile", "validate", good, bad, other)
    assert result.returncode == 2
    assert result.stdout == f"{good}: ok\n"
    assert result.stderr.splitlines() == [
        f"sandlock: error: {bad}:3: network.deny: cannot be combined with --net-allow (choose an "
        "allowlist or a denylist)",
        f"sandlock: error: {other}:1: unknown section [netwrk]: did you mean 'network'?",
    ]
    assert sandlock("profile", "validate", good).returncode == 0


def test_a_file_named_on_the_command_line_runs(tmp_path):
    path = write(tmp_path / "p.toml",
                 f"[process]\nenv = {{ GREETING = 'hi' }}\ncwd = '{tmp_path}'\n")
    result = sandlock("run", "--policy", path, "--", sys.executable, "-c",
                      "import os; print(os.environ['GREETING'], os.getcwd())", cwd="/")
    assert result.stdout == f"hi {tmp_path}\n", result.stderr
