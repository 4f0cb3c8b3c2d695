"""Stream framing: incremental SSE parsing/encoding and usage observation.

Internal: the server's own.
"""
