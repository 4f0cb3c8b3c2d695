"""switchyard agent loop: an async-generator query loop on the gateway's provider layer.

The loop itself arrives with its own issue; this package exists so the distribution's layout is
fixed from the start.
"""
