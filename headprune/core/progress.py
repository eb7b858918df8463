"""Progress on long work: a bar on a terminal, plain lines elsewhere (a log file, CI, a batch job).

Lines go to the ``headprune`` logger (the CLI prints them on stderr): one when a stage starts, one about
every half minute with the rate and the time left, and one when it ends.
"""

from __future__ import annotations

import logging
import sys
import time

from tqdm.auto import tqdm

log = logging.getLogger("headprune")
LINE_EVERY_SECONDS = 30.0


def duration(seconds: float) -> str:
    """``45 s``, ``12 min``, ``3.2 h``."""
    if seconds < 90:
        return f"{seconds:.0f} s"
    if seconds < 5400:
        return f"{seconds / 60:.0f} min"
    return f"{seconds / 3600:.1f} h"


class Progress:
    """Counts the steps of one stage; ``bar`` shows a progress bar, otherwise timed log lines."""

    def __init__(self, total: int, label: str, *, bar: bool, unit: str = "conditions") -> None:
        self.total, self.label, self.unit, self.done = total, label, unit, 0
        self.started = self.last_line = time.monotonic()
        self.bar = tqdm(total=total, desc=label, unit=unit[:4], file=sys.stderr, leave=True,
                        dynamic_ncols=True) if bar else None
        if self.bar is None and total:
            log.info("%s: %d %s", label, total, unit)

    def update(self, steps: int = 1) -> None:
        self.done += steps
        if self.bar is not None:
            self.bar.update(steps)
            return
        now = time.monotonic()
        if now - self.last_line >= LINE_EVERY_SECONDS and self.done < self.total:
            each = (now - self.started) / self.done
            log.info("%s: %d/%d %s, %.1f s each, about %s left", self.label, self.done, self.total, self.unit, each,
                     duration(each * (self.total - self.done)))
            self.last_line = now

    def close(self) -> None:
        if self.bar is not None:
            self.bar.close()
        elif self.total:
            log.info("%s: %d %s done in %s", self.label, self.done, self.unit,
                     duration(time.monotonic() - self.started))
