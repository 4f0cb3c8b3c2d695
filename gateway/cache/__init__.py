"""Cache-aware request handling: sticky session latches, cache_control normalisation per upstream,
prefix hashing and cache-break detection, and the session store behind them."""
