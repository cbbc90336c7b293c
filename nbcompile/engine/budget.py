"""The fix search's one budget (``Budget``): seconds from when the search starts, and the time it keeps
out of them for the work after the trials.

The search runs in three phases, each stopping at its own deadline (``Phase``): its trials stop where
proving and timing the choice would eat into the time kept for them; proving the choice and timing the
finalists stop where applying the choice would; applying it, and proving the new report's fixes
(``Session.fix``), stop at the end. What is kept is known once a trial has run (``keep``): until then
every phase ends at the end.
"""

from __future__ import annotations

import dataclasses
import enum
import time


class Phase(enum.Enum):
    """A part of the search, by the deadline it stops starting work at."""

    #: The search's trials (the start, the seeds, the beam).
    TRIALS = "trials"
    #: Proving the choice on the session's trial backend and timing the finalists.
    CHOICE = "choice"
    #: Applying the choice and proving the new report's fixes: the budget's end.
    END = "end"


@dataclasses.dataclass
class Budget:
    """``seconds`` from ``start()``, less what is kept for the phases after the trials."""

    seconds: float
    #: ``time.perf_counter()`` when the search started; 0.0 before.
    began: float = 0.0
    #: Kept for applying the choice: a run of --run compiled on the session's backend, and the restart's work.
    apply_s: float = 0.0
    #: Kept, before that, for proving the choice and timing the finalists.
    choice_s: float = 0.0
    #: Whether what to keep is known (``keep``: from the first trial that ran).
    kept: bool = False

    def start(self) -> None:
        self.began = time.perf_counter()

    @property
    def end(self) -> float:
        """When the budget ends (a ``time.perf_counter()`` time), or 0.0 before it starts."""
        return self.began + self.seconds if self.began else 0.0

    def keep(self, apply_s: float, choice_s: float) -> None:
        """Keep ``apply_s`` at the end for applying the choice, and ``choice_s`` before it for proving and
        timing it."""
        self.apply_s, self.choice_s, self.kept = apply_s, choice_s, True

    def deadline(self, phase: Phase = Phase.TRIALS) -> float:
        """When ``phase`` stops starting work (a ``time.perf_counter()`` time)."""
        end = self.began + self.seconds
        if phase is Phase.END:
            return end
        if phase is Phase.CHOICE:
            return end - self.apply_s
        return end - self.apply_s - self.choice_s

    def remaining(self, phase: Phase = Phase.TRIALS) -> float:
        """Seconds left before ``phase``'s deadline (negative past it)."""
        return self.deadline(phase) - time.perf_counter()

    def can_hold(self, seconds: float, phase: Phase = Phase.TRIALS) -> bool:
        """Whether work that takes ``seconds``, started now, ends by ``phase``'s deadline."""
        return time.perf_counter() + seconds <= self.deadline(phase)

    def over(self, phase: Phase = Phase.TRIALS) -> bool:
        """Whether ``phase``'s deadline has passed."""
        return time.perf_counter() > self.deadline(phase)

    def elapsed(self) -> float:
        """Seconds since the search started (0.0 before)."""
        return time.perf_counter() - self.began if self.began else 0.0
