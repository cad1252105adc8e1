"""The item ranges a fan-out writes, one transaction each (`vertices.spawner.batch_bounds`)."""

from __future__ import annotations

from itertools import pairwise

from hypothesis import given
from hypothesis import strategies as st

from vertices.spawner import FIRST_BATCH, batch_bounds


def sizes(total: int, batch_size: int) -> list[int]:
    return [end - start for start, end in batch_bounds(total, batch_size)]


def test_the_first_batch_is_small_and_the_next_double_up_to_the_batch_size() -> None:
    assert sizes(1000, 500) == [64, 128, 256, 500, 52]
    assert sizes(10_000, 500)[:5] == [64, 128, 256, 500, 500]


def test_a_fan_out_smaller_than_the_first_batch_is_one_batch() -> None:
    assert list(batch_bounds(10, 500)) == [(0, 10)]
    assert list(batch_bounds(0, 500)) == []


def test_a_batch_size_under_the_first_batch_is_kept_from_the_start() -> None:
    assert list(batch_bounds(5, 2)) == [(0, 2), (2, 4), (4, 5)]
    assert sizes(200, 1) == [1] * 200


@given(total=st.integers(0, 20_000), batch_size=st.integers(1, 10_000))
def test_the_batches_cover_every_item_once_in_order(total: int, batch_size: int) -> None:
    bounds = list(batch_bounds(total, batch_size))
    edges = [0] + [end for _, end in bounds]
    assert bounds == list(pairwise(edges))
    assert edges[-1] == total
    widths = [end - start for start, end in bounds]
    assert all(0 < width <= batch_size for width in widths)
    assert not widths or widths[0] <= FIRST_BATCH
    # Each batch but the last is at least as large as the one before it.
    assert widths[:-1] == sorted(widths[:-1])
