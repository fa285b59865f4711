"""What the engine thread tells a request in flight, as types rather than tagged tuples.

The engine thread (``worker.py``) puts these on a request's ``Handle``; the request's coroutine
reads them (``generation.py``) and the stream driver dispatches on their type
(``lifecycle.py``), so a new kind of event is a new class the type checker follows to every
place that must handle it, not a string each reader compares. A generation's events end with
exactly one ``Done`` or ``Failed``. ``Idle`` is not the engine's: the reader makes it after a
silence, for a stream to spell as its keep-alive. The engine thread sends a step's events
together (``handoff.py``).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Union

if TYPE_CHECKING:
    from ..engine.result import Result
    from ..engine.verify.logprobs import TokenLogprob


@dataclass(frozen=True)
class Text:
    """Text of the reply that has become final (stop strings and UTF-8 resolved)."""

    text: str


@dataclass(frozen=True)
class Logprobs:
    """The log-probabilities of the tokens a pass kept, when the request asked for them."""

    entries: list[TokenLogprob]


@dataclass(frozen=True)
class Done:
    """The generation ended (a stop, the budget, the context, or its client gone): its result."""

    result: Result


@dataclass(frozen=True)
class Failed:
    """The generation ended without a result: a fault ended it alone, or the engine stopped."""

    message: str


@dataclass(frozen=True)
class Idle:
    """No event for a while (made by the reader, not the engine): a stream's cue for a keep-alive."""


@dataclass(frozen=True, eq=False)
class Tick:
    """Not the engine's either: a reader's own timer, put in its queue when a wait ran out (each
    wait its own, so a tick left from an earlier wait is told apart and passed over)."""


EngineEvent = Union[Text, Logprobs, Done, Failed]
