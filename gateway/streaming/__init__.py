"""Stream framing: incremental SSE parsing/encoding and usage observation."""
