"""``FixRun``: the one driver of the fix search over a session (``Session.fix_run``), from its first
trial to the chosen configuration applied once, when the search ends, is stopped or is interrupted.
``Session.fix`` (and so ``%nbcompile fix``) runs it whole; the panel's Fix tab steps it, one trial per
event-loop turn, so its Stop button and other cells are heard between trials."""

from __future__ import annotations

from collections.abc import Iterator
from typing import TYPE_CHECKING

from ..engine.search import PROOFS_TAIL_S, Searcher, apply_best
from ..model.fixsearch import FixSearch
from ..model.status import SearchStop

if TYPE_CHECKING:
    from .session import Session


class FixRun:
    """One fix search over a session, from start to the configuration applied."""

    def __init__(self, session: Session, searcher: Searcher) -> None:
        self._session = session
        self._searcher = searcher

    @property
    def result(self) -> FixSearch:
        return self._searcher.result

    def steps(self) -> Iterator[FixSearch]:
        """Yields after each trial (the panel runs one step per event-loop turn, so its stop button and
        other cells are heard); when the search ends, is stopped, interrupted or fails, the best is applied,
        and the search's ``progress`` hears its end once more (the record then says how it ended, never
        "searching": a view that follows the trials, the Fix tab's bar, shows the end whichever way it came)."""
        session = self._session
        try:
            yield from self._searcher.steps()  # the one driver: it keeps the user's prints out and hears interrupts
        except KeyboardInterrupt:  # one between two steps (the driver hears those during a step)
            self.result.stop()
            self.result.finish(SearchStop.STOPPED)
        except GeneratorExit:  # the stepper was dropped (the panel let go of it): the search stops here
            self.result.stop()
            self.result.finish(SearchStop.STOPPED)
            raise
        except Exception as exc:  # the search itself failed: the best found so far is still applied
            self.result.finish(SearchStop.FAILED, f"{type(exc).__name__}: {exc}".splitlines()[0])
            raise
        finally:
            try:
                if not session.closed:  # within the search's budget: its re-run was kept time for, its proofs
                    # get what is left (in a kernel they follow on the event loop's next turn, by the same end)
                    end = self._searcher.end
                    apply_best(session, self.result, prove_by=(end - PROOFS_TAIL_S) if end else None)
            finally:
                self.result.elapsed_s = max(self.result.elapsed_s, self._searcher.elapsed())
                session.last_fix = self.result
                try:
                    if self._searcher.progress is not None and not session.closed:
                        self._searcher.progress(self.result)  # the end, as the trials were: once more
                finally:
                    session.redraw()

    def run(self) -> FixSearch:
        for _ in self.steps():
            pass
        return self.result
