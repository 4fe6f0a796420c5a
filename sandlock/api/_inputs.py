"""``sandlock.inputs``: a gather consumer's named sources, in its own program.

    from sandlock import inputs
    code = inputs["code"]              # the whole output of the source named "code", as text
    with inputs.file("data") as data:  # or streamed, as bytes
        for line in data: ...

The consumer's environment names its sources (docs/api.md, "Fan-in"):
``SANDLOCK_INPUTS="data=3 code=0"`` and one ``SANDLOCK_INPUT_<name>=<fd>`` each,
which is what a shell consumer reads (``cat <&"$SANDLOCK_INPUT_data"``). Nothing but
os is imported: this runs in the confined consumer.
"""

from __future__ import annotations

import os

TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Iterator
    from typing import BinaryIO


class Inputs:
    """Name -> source, read from the environment on first use."""

    def __init__(self) -> None:
        self._text: dict[str, str] = {}
        self._taken: set[str] = set()

    def descriptors(self) -> dict[str, int]:
        """Each source's name and the descriptor it is read from."""
        pairs = (word.partition("=") for word in os.environ.get("SANDLOCK_INPUTS", "").split())
        return {name: int(fd) for name, _, fd in pairs if fd.isdigit()}

    def file(self, name: str) -> BinaryIO:
        """The source ``name``, to be read as a stream (once: it is a pipe)."""
        fd = self._descriptor(name)
        if name in self._taken:
            raise ValueError(f"input {name!r} was already read")
        self._taken.add(name)
        return os.fdopen(fd, "rb")

    def __getitem__(self, name: str) -> str:
        """The whole output of the source ``name`` (UTF-8), read once and kept."""
        if name not in self._text:
            with self.file(name) as source:
                self._text[name] = source.read().decode("utf-8", errors="surrogateescape")
        return self._text[name]

    def _descriptor(self, name: str) -> int:
        found = self.descriptors()
        if name not in found:
            raise KeyError(f"no input named {name!r} (this program's inputs: {sorted(found)}; "
                           f"is it the stage after a gather?)")
        return found[name]

    def __contains__(self, name: object) -> bool:
        return name in self.descriptors()

    def __iter__(self) -> Iterator[str]:
        return iter(self.descriptors())

    def __len__(self) -> int:
        return len(self.descriptors())

    def keys(self) -> list[str]:
        return list(self.descriptors())

    def __repr__(self) -> str:
        return f"<sandlock.inputs {self.descriptors()}>"


inputs = Inputs()
