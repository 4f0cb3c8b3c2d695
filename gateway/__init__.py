"""switchyard gateway: an Anthropic Messages API gateway for the direct API and cloud upstreams."""

__version__ = "0.1.0"
