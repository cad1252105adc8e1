"""A waiter's reads of a run: the first few events read at once, a steady stream paced."""

from __future__ import annotations

from engine.operations.read_pacing import ReadPacing


def test_a_short_runs_few_events_are_read_at_once() -> None:
    pacing = ReadPacing(0.05, 3, now=0.0)  # the read before the first wait
    for now in (0.004, 0.009):  # claimed, then ended, milliseconds apart
        assert pacing.pause(now) == 0.0
        pacing.read(now)
    assert pacing.pause(0.010) > 0.0, "the burst is spent"


def test_a_steady_stream_of_events_is_read_at_most_once_per_interval() -> None:
    pacing = ReadPacing(0.05, 3, now=0.0)
    now, reads = 0.0, 0
    for _ in range(1_000):  # an event every millisecond for a second
        now += 0.001
        if pacing.pause(now) == 0.0:
            pacing.read(now)
            reads += 1
    assert 2 + 19 <= reads <= 2 + 20, reads  # the burst, then one per 50 ms


def test_the_pause_is_what_is_left_of_the_interval() -> None:
    pacing = ReadPacing(0.05, 2, now=0.0)
    pacing.read(0.0)  # the burst spent at once
    assert abs(pacing.pause(0.02) - 0.03) < 1e-9
    pacing.read(0.05)
    assert pacing.pause(0.05) == 0.05


def test_a_quiet_spell_refills_the_burst_and_no_more() -> None:
    pacing = ReadPacing(0.05, 3, now=0.0)
    pacing.read(0.001)
    pacing.read(0.002)
    assert pacing.pause(10.0) == 0.0
    for now in (10.0, 10.001, 10.002):
        assert pacing.pause(now) == 0.0
        pacing.read(now)
    assert pacing.pause(10.003) > 0.0, "three reads at once after the quiet spell, not more"
