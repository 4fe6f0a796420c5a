"""A commit whose directory is changed under it while it works (by whoever else can
write there): a directory swapped for a symlink, a directory moved away. The change
is made for real at a chosen moment, from a hook of the commit's own walk, on a layer
a real overlayfs made (test_cow_commit's ``Space``); the commit must never write
through the symlink, nor follow the moved directory's new parent."""

from __future__ import annotations

import errno
import os
from pathlib import Path

import pytest
from test_cow_commit import overlay_works, space  # noqa: F401 - fixtures

from sandlock.cow._changes import changes
from sandlock.cow._commit import Commit


class Swapping(Commit):
    """A commit that calls ``swap`` once, just before it places ``when``."""

    def __init__(self, upper: str, target: str, when: str, swap) -> None:
        super().__init__(upper, target, 0, True)
        self.when, self.swap = when, swap

    def place(self, node, change) -> None:
        if node.path == self.when and self.swap is not None:
            self.swap()
            self.swap = None
        super().place(node, change)


def test_a_directory_swapped_for_a_symlink_mid_commit_is_not_written_through(space):  # noqa: F811
    names = [f"f{i:02d}" for i in range(20)]
    space.build({"sub/old": "old\n"})
    space.run("; ".join(f"echo {name} > sub/{name}" for name in names))
    order = [name for name in os.listdir(os.path.join(space.upper, "sub")) if name != "old"]
    sub = os.path.join(space.dir, "sub")

    def swap() -> None:
        os.rename(sub, sub + ".moved")
        os.symlink(space.outside, sub)
        # control: a write by path now lands outside
        Path(sub, "probe").write_text("by path\n")
        os.unlink(os.path.join(space.outside, "probe"))

    Swapping(space.upper, space.dir, f"sub/{order[1]}", swap).run()
    assert os.listdir(space.outside) == []
    assert os.readlink(sub) == space.outside  # theirs, left as it is
    assert sorted(os.listdir(sub + ".moved")) == sorted(names + ["old"])  # where it was opened


def test_a_directory_moved_away_mid_commit_stops_it_at_the_next_climb(space):  # noqa: F811
    """Deeper than the descriptors the walk holds at once: climbing back, a closed
    level is opened again through '..' of the one below, and must be the same
    directory. One moved away has another parent: the commit stops there, it does
    not apply the rest in that parent."""
    chain = "/".join(["d"] * 40)
    space.build({f"{chain}/": ""})
    siblings = [f"s{i}" for i in range(200)]  # (listed in hash order: some after "d")
    space.run(f"echo deep > {chain}/deep; " + "; ".join(f"echo {s} > d/{s}" for s in siblings))
    order = os.listdir(os.path.join(space.upper, "d"))
    after = order[order.index("d") + 1:]
    if not after:
        pytest.skip("every sibling is listed before the deep directory here")
    moved = os.path.join(space.outside, "moved")

    def move() -> None:
        os.rename(os.path.join(space.dir, "d", "d"), moved)

    run = Swapping(space.upper, space.dir, f"{chain}/deep", move)
    with pytest.raises(OSError) as error:
        run.run()
    assert error.value.errno == errno.ESTALE
    assert error.value.strerror == "a directory was moved while sandlock worked in it"
    assert os.listdir(space.outside) == ["moved"]  # nothing applied in the new parent
    assert not any(os.path.exists(os.path.join(space.outside, name)) for name in after)
    applied = {change.path for change in run.found}
    assert not applied & {f"d/{name}" for name in after}
    # what was not applied is still there to commit
    left = {change.path for change in changes(space.upper, space.dir)}
    assert {f"d/{name}" for name in after} <= left
