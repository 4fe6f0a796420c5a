"""How many of a map's items one Ray call carries (sandlock.ray._pool.Chunks): pure,
no Ray needed."""

from __future__ import annotations

from sandlock.ray._item import ItemResult
from sandlock.ray._pool import CHUNK_MAX, CHUNK_SECONDS, Chunks


def took(*seconds: float) -> list[ItemResult]:
    return [ItemResult(n, True, None, None, "returned", None, (), 0, b"", b"", "", s)
            for n, s in enumerate(seconds)]


def test_a_fixed_size_is_kept():
    chunks = Chunks(5)
    assert chunks.size() == 5
    chunks.saw(took(0.001, 0.001))
    assert chunks.size() == 5


def test_one_item_at_a_time_until_one_has_been_seen():
    chunks = Chunks()
    assert chunks.size() == 1
    chunks.saw(took(0.0))  # (never started: says nothing)
    assert chunks.size() == 1


def test_the_size_follows_how_long_items_take():
    chunks = Chunks()
    chunks.saw(took(0.010))
    assert chunks.size() == round(CHUNK_SECONDS / 0.010)
    chunks.saw(took(*[0.5] * 20))  # items turned long: one per call
    assert chunks.size() == 1
    chunks.saw(took(*[0.0001] * 50))  # very short ones: many, up to the cap
    assert chunks.size() == CHUNK_MAX


def test_the_last_chunks_shrink_so_the_actors_end_together():
    chunks = Chunks(None, total=100, calls=4)
    chunks.saw(took(0.001))  # (by time alone: CHUNK_MAX)
    sizes = []
    while (left := 100 - sum(sizes)) > 0:
        sizes.append(min(chunks.size(), left))
        chunks.handed(sizes[-1])
    assert sizes[0] == 25 and sizes[-4:] == [1, 1, 1, 1]  # (a share of what is left: 100 / 4)
    assert sizes == sorted(sizes, reverse=True) and sum(sizes) == 100
    fixed = Chunks(10, total=100, calls=4)
    fixed.handed(95)
    assert fixed.size() == 10  # (asked for: kept)
