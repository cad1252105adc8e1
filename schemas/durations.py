"""Durations as people read them ("8.5 s", "4 min 12 s", "2 h 5 min"), in one place for every
layer: the command line prints spans with it, and the engine's reasons that operators read
(a deployment stage's wait) say them the same way."""

from __future__ import annotations


def duration(seconds: float) -> str:
    """A duration for people: 19 ms, 4.2 s, 3 min 12 s, 2 h 5 min, 3 d 2 h."""
    if seconds < 0:
        seconds = 0.0
    # Each unit is chosen by the value as it will be printed, so that rounding never shows
    # "1000 ms", "10.0 s" or "60 s" where the next unit up says it ("1.0 s", "10 s", "1 min").
    if round(seconds * 1000) < 1000:
        return f"{seconds * 1000:.0f} ms"
    if round(seconds, 1) < 10:
        return f"{seconds:.1f} s"
    if round(seconds) < 60:
        return f"{seconds:.0f} s"
    minutes, secs = divmod(round(seconds), 60)
    if minutes < 60:
        return f"{minutes} min {secs} s" if secs else f"{minutes} min"
    hours, minutes = divmod(minutes, 60)
    if hours < 48:
        return f"{hours} h {minutes} min" if minutes else f"{hours} h"
    days, hours = divmod(hours, 24)
    return f"{days} d {hours} h" if hours else f"{days} d"
