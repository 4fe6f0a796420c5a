"""The bash parser, built once per process (loading the grammar costs ~9 ms)."""

from __future__ import annotations

import functools


@functools.cache
def parser() -> object:
    import tree_sitter
    import tree_sitter_bash

    return tree_sitter.Parser(tree_sitter.Language(tree_sitter_bash.language()))
