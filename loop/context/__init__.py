"""Context management: the layers that let a session run longer than its context window.

Before every model call, in order (each a pure function ``(messages, state, settings) ->
LayerResult``): 0 tool-result budget (:mod:`.budget`), 1 snip (:mod:`.snip`), 2 microcompact
(:mod:`.microcompact`), 3 context collapse (:mod:`.collapse`), 4 auto-compact
(:mod:`.autocompact`, one summarisation call). :mod:`.pipeline` runs them; :mod:`.errors`
recognises the upstream's "too long" answers that ``loop.decide`` recovers from; the circuit
breaker and the stored tool results live in a :class:`ContextSession` that outlives one run.

Only the leaf modules are imported here (``loop.config`` imports this package).

Public: ``__all__``; the modules inside are internal.
"""

from loop.context.config import ContextConfig
from loop.context.kinds import Layer, Outcome
from loop.context.session import CircuitBreaker, ContextSession, ToolResultStore

__all__ = ["CircuitBreaker", "ContextConfig", "ContextSession", "Layer", "Outcome", "ToolResultStore"]
