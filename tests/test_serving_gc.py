"""`asr serve`'s garbage-collector tuning (app/serving.py): the young generation's threshold
from ASR_GC_YOUNG_THRESHOLD, the older generations' left as Python has them."""

from __future__ import annotations

import gc
from collections.abc import Iterator

import pytest

from app.serving import tune_young_collections
from app.settings import Settings


@pytest.fixture
def restored_thresholds() -> Iterator[tuple[int, int, int]]:
    before = gc.get_threshold()
    try:
        yield before
    finally:
        gc.set_threshold(*before)


def test_the_young_threshold_is_set_and_the_older_ones_kept(
    restored_thresholds: tuple[int, int, int],
) -> None:
    tune_young_collections(Settings().gc_young_threshold)
    assert gc.get_threshold() == (50_000, *restored_thresholds[1:])


def test_zero_leaves_pythons_setting(restored_thresholds: tuple[int, int, int]) -> None:
    tune_young_collections(0)
    assert gc.get_threshold() == restored_thresholds


def test_the_setting_is_bounded() -> None:
    assert Settings(gc_young_threshold=0).gc_young_threshold == 0
    with pytest.raises(ValueError):
        Settings(gc_young_threshold=-1)
