"""git's files as sandlock reads them, checked against git itself: its config parser
(what a repository made during the run may keep), its index reader (the gitlinks git
recurses into). Both read files the command wrote: they must never see less than git."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from sandlock.autorun import _gitconfig, _gitindex  # noqa: E402 - internals under test

IDENTITY = {"GIT_AUTHOR_NAME": "a", "GIT_AUTHOR_EMAIL": "a@example.test",
            "GIT_COMMITTER_NAME": "a", "GIT_COMMITTER_EMAIL": "a@example.test"}

CONFIGS = [
    "[core]\n\trepositoryformatversion = 0\n\tfilemode = true\n",
    "\ufeff[core]\n\tbare = false\n",
    "[core] fsmonitor = touch x\n",  # a key on its header's line
    "[core]\n\tfsmonitor\n",
    '[remote "Origin"]\n\turl = "https://x/y.git" ; comment\n',
    '[remote "a\\"b\\\\c"]\n\turl = u\n',
    "[Remote.Foo]\n\tURL = u\n",  # the old form: its subsection lowered
    '[alias]\n\tst = "!touch x; \\\necho y"\n',  # a continuation line
    "[a]\n\tb = x  y\t z   # c\n",
    '[a]\n\tb = "  q  " x\n',
    "[a]\n\tb = x\\ty\\n\\\\\\\"\n",
    "[a]\r\n\tb = 1\r\n",
    "[a]\n\tb-c = 1\n\tB2 = 2\n",
    '[includeIf "gitdir:~/w/"]\n\tpath = ~/w/.gc\n[include]\n\tpath = other\n',
    # what git refuses (sandlock: incomplete)
    "b = 1\n",
    "[a]\n\tb = \"x\n",
    "[a]\n\tb = \\q\n",
    "[a b]\n\tc = 1\n",
    "[a]\n\t1b = 1\n",
    "[a]\n\tb ; c\n",
    '[a "b\nc"]\n\td = 1\n',
]


def git_list(path: Path) -> list[tuple[str, str | None]] | None:
    result = subprocess.run(["git", "config", "-f", str(path), "--list", "--null", "--no-includes"],
                            capture_output=True)
    if result.returncode != 0:
        return None
    pairs = []
    for item in result.stdout.split(b"\0")[:-1]:
        key, newline, value = item.decode().partition("\n")
        pairs.append((key, value if newline else None))
    return pairs


def ours(text: str) -> list[tuple[str, str | None]] | None:
    parsed = _gitconfig.parse(text)
    if not parsed.complete:
        return None
    return [(".".join(filter(None, (e.section, e.subsection, e.name))) if e.subsection is None
             else f"{e.section}.{e.subsection}.{e.name}", e.value) for e in parsed.entries]


@pytest.mark.parametrize("text", CONFIGS)
def test_the_config_parser_reads_what_git_reads(tmp_path, text):
    path = tmp_path / "config"
    path.write_bytes(text.encode())
    assert ours(text) == git_list(path)


def test_a_rendered_config_reads_back_as_the_same_entries(tmp_path):
    entries = [e for text in CONFIGS if (p := _gitconfig.parse(text)).complete
               for e in p.entries if e.section]
    path = tmp_path / "config"
    path.write_text(_gitconfig.render(entries))
    expected = [(f"{e.section}.{e.subsection}.{e.name}" if e.subsection is not None
                 else f"{e.section}.{e.name}", e.value) for e in entries]
    assert git_list(path) == expected


@pytest.mark.parametrize("url, safe", [
    ("https://example.test/r.git", True), ("git@example.test:r.git", True), ("../r", True),
    ("ext::sh -c touch% /tmp/x", False), ("fd::3", False), ("foo::bar", False),
    ("-oProxyCommand=x", False), ("ssh://-oProxyCommand=x/r", False), ("a@-x:r", False),
    ("x:-r", False), ("https://e.test/\n", False),
])
def test_remote_urls_that_would_run_something_are_refused(url, safe):
    assert _gitconfig.safe_url(url) is safe


def test_the_allowlist_keeps_what_init_and_clone_write(tmp_path):
    source = tmp_path / "src"
    subprocess.run(["git", "init", "-q", str(source)], check=True)
    subprocess.run(["git", "-C", str(source), "commit", "-q", "--allow-empty", "-m", "x"],
                   check=True, env={**os.environ, **IDENTITY})
    subprocess.run(["git", "clone", "-q", str(source), str(tmp_path / "clone")], check=True)
    for repo in (source, tmp_path / "clone"):
        parsed = _gitconfig.parse((repo / ".git" / "config").read_text())
        assert parsed.complete and all(map(_gitconfig.allowed, parsed.entries))


# --- the index -------------------------------------------------------------------------

def indexed_repository(path: Path, version: int, object_format: str, split: bool = False) -> Path:
    env = {**os.environ, **IDENTITY}
    run = lambda *argv, cwd=path: subprocess.run(argv, cwd=cwd, check=True, env=env,  # noqa: E731
                                                 capture_output=True)
    run("git", "init", "-q", f"--object-format={object_format}", str(path), cwd=None)
    (path / "a").mkdir()
    for i in range(30):
        (path / "a" / f"link-{i}.c").write_text(str(i))  # names holding "link"
    for nested in ("a/b/sub", "top"):
        run("git", "init", "-q", f"--object-format={object_format}", nested)
        run("git", "-C", nested, "commit", "-q", "--allow-empty", "-m", "x")
    run("git", "add", "-A")
    (path / "later").write_text("l")
    run("git", "add", "--intent-to-add", "later")  # (an extended flag, in versions 3 and 4)
    run("git", "update-index", "--index-version", str(version))
    if split:
        run("git", "update-index", "--split-index")
        (path / "new").write_text("n")
        run("git", "add", "new")
    return path


@pytest.mark.parametrize("object_format, size", [("sha1", 20), ("sha256", 32)])
@pytest.mark.parametrize("version", [2, 3, 4])
def test_the_index_readers_find_every_gitlink(tmp_path, version, object_format, size):
    repo = indexed_repository(tmp_path / "r", version, object_format)
    data = (repo / ".git" / "index").read_bytes()
    assert sorted(_gitindex.gitlinks(data, size)[0]) == [b"a/b/sub", b"top"]
    assert sorted(_gitindex.quick(data, size)) == [b"a/b/sub", b"top"]


def test_a_split_index_names_its_shared_part(tmp_path):
    repo = indexed_repository(tmp_path / "r", 2, "sha1", split=True)
    data = (repo / ".git" / "index").read_bytes()
    links, shared = _gitindex.gitlinks(data, 20)
    names = _gitindex.shared_index_names(data, 20)
    assert shared is not None and names == ["sharedindex." + shared.hex()]
    shared_data = (repo / ".git" / names[0]).read_bytes()
    assert sorted(links + _gitindex.gitlinks(shared_data, 20)[0]) == [b"a/b/sub", b"top"]


def test_a_gitlink_by_its_type_bits_alone_is_found_at_the_end(tmp_path):
    """git tests a mode's type bits only: 0160755 is a gitlink to it, not to ``quick``."""
    repo = indexed_repository(tmp_path / "r", 2, "sha1")
    data = bytearray((repo / ".git" / "index").read_bytes())
    at = data.find(b"\x00\x00\xe0\x00", 36)
    data[at:at + 4] = (0o160755).to_bytes(4, "big")
    found = _gitindex.gitlinks(bytes(data), 20)[0]
    assert len(found) == 2


@pytest.mark.parametrize("cut", [13, 60, 100, -30])
def test_a_truncated_index_is_an_error_not_a_guess(tmp_path, cut):
    repo = indexed_repository(tmp_path / "r", 4, "sha1")
    data = (repo / ".git" / "index").read_bytes()
    entries_end = len(data) - 20  # (cutting into the extensions or checksum still reads)
    cut = cut if cut > 0 else entries_end + cut
    with pytest.raises(_gitindex.IndexFormatError):
        _gitindex.gitlinks(data[:cut], 20)
