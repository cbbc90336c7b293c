"""What a run's records ended in, as data: the rule a check judged by and what it found (``CheckRule``,
``CheckKind``), how a trial ended (``TrialOutcome``) and why a fix search stopped (``SearchStop``).

Code branches on these values, never on the messages beside them: a message is only how the record is
shown. Each enum is a ``str`` (its value, the word a record shows), so a record's JSON and a comparison
with the word are as they were."""

from __future__ import annotations

import enum


class _Word(str, enum.Enum):
    """An enum whose members are their words: ``str()`` and ``format()`` give the value (what
    ``enum.StrEnum`` does from Python 3.11)."""

    def __str__(self) -> str:
        return str(self.value)

    def __format__(self, spec: str) -> str:
        return format(str(self.value), spec)


class CheckRule(_Word):
    """The rule a check judged the compiled run's values by."""

    #: Against a float64 eager reference, as PyTorch's accuracy harness does.
    FP64 = "fp64"
    #: The dtype tolerances alone (no float64 reference could be run; the check's message says why).
    TOLERANCE = "tolerance"


class CheckKind(_Word):
    """What a check found."""

    #: The compiled run's values and what it left match eager's.
    MATCHES = "matches"
    #: A real difference (``Check.ok`` False).
    DIFFERS = "differs"
    #: No comparison was made: the state could not be copied, nothing compiled ran, nothing can be
    #: compared, the values differ by design (random numbers); the message says which.
    NOT_COMPARED = "not compared"
    #: The eager reference run raised where the compiled run did not (``Check.ok`` False).
    EAGER_RAISED = "eager raised"
    #: The eager run tried to change something outside its copies (a file, a process, a module attribute no
    #: copy holds): not compared, and never run again (``Check.effect`` says what).
    OUTSIDE_EFFECT = "outside effect"
    #: The values match, but what the compiled run printed, logged or warned differs from what the eager run
    #: did on its copies (a print run after its graph shows values changed since): ``Check.ok`` False.
    OUTPUT_DIFFERS = "output differs"


class TrialOutcome(_Word):
    """How one scratch run of the fix search or a fix's proof ended (``trial.Outcome``, ``Trial``)."""

    #: It ran to its end: its counts are kept, its check says ok or FAILED.
    RAN = "ran"
    #: It could not be run: its state could not be copied, its source rewrite cannot be built.
    NOT_TRIED = "not tried"
    #: It (or the session's own run) changed what no copy holds: it is not tried, and no further trial runs.
    OUTSIDE_EFFECT = "outside effect"
    #: The allow_in_graph lint rules the configuration out whatever a run would show: it was not run.
    RULED_OUT = "ruled out"
    #: Cut at the budget's end (or its process did not answer in time): nothing it counted is kept.
    NOT_FINISHED = "not finished"
    #: torch.compile raised compiling it.
    FAILS_TO_COMPILE = "fails to compile"
    #: The compiled run raised.
    RAISED = "raised"
    #: nbcompile's own machinery failed around it (a forked child, an error of the trial itself).
    TRIAL_FAILED = "trial failed"

    @property
    def untried(self) -> bool:
        """Whether it never ran (``NOT_TRIED``, ``OUTSIDE_EFFECT``): shown as "not tried"."""
        return self in (TrialOutcome.NOT_TRIED, TrialOutcome.OUTSIDE_EFFECT)


class SearchStop(_Word):
    """Where a fix search is (``FixSearch.stop``): still searching, or why it stopped."""

    SEARCHING = "searching"
    #: No change improves on the best found.
    DONE = "done"
    #: The budget was spent (``FixSearch.budget_bound`` says what it left).
    BUDGET = "budget"
    #: Stopped by the user (the Stop button, the kernel's interrupt).
    STOPPED = "stopped"
    #: The session's own run cannot be tried on copies.
    NOT_TRIED = "not tried"
    #: The session's own run does not go through, or the search itself failed.
    FAILED = "failed"
