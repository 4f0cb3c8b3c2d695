"""Cache-aware request handling: sticky session latches, cache_control normalisation per upstream
(``breakpoints``: at most four markers), prefix hashing and cache-break detection, and the session
store behind them.

Internal: the server's own (``loop.prompt`` re-exports ``breakpoints`` for clients).
"""
