"""The limits of one fan-out (docs/security.md, 'Input limits'), apart from `vertices.spawner`
so that `engine.settings` reads their defaults without importing the expression language."""

from __future__ import annotations

from dataclasses import dataclass

DEFAULT_BATCH = 500
DEFAULT_MAX_ITEMS = 1_000_000
DEFAULT_MAX_CHILD_INPUT_BYTES = 256 * 1024
"""A submitted run's input limit (`MAX_INPUT_BYTES`), which a child's input shares."""
DEFAULT_MAX_FANOUT_INPUT_BYTES = 256 * 1024 * 1024
"""256 MiB: a fan-out of `MAX_FANOUT_ITEMS` (1,000,000) children with inputs of up to about
270 bytes each, the size of the usual `{"id": …}` or a small record, fits; so do 1,024 children
of the largest input. Beyond it one request could have the database write gigabytes (64k
children copying a 128 KB value of a 256 KiB input are 8 GB). It is half the payload store's
high-water mark (512 MiB), the other bound on what one run's fan-out leaves in the database."""


@dataclass(frozen=True)
class FanoutLimits:
    backpressure_max_depth: int = 10_000
    batch_size: int = DEFAULT_BATCH
    max_items: int = DEFAULT_MAX_ITEMS
    """Most children one spawner step may start (`MAX_FANOUT_ITEMS`); more items fail the step
    with `too_many_items` before any child is created."""
    max_child_input_bytes: int = DEFAULT_MAX_CHILD_INPUT_BYTES
    """Largest input of one child, as compact JSON: a submitted run's limit
    (`MAX_INPUT_BYTES`), so a child is held to what its tenant could have submitted."""
    max_fanout_input_bytes: int = DEFAULT_MAX_FANOUT_INPUT_BYTES
    """Most bytes of child inputs (compact JSON) one spawner step may write in all
    (`MAX_FANOUT_INPUT_BYTES`)."""
