"""The fleet front door: who a caller is (sign-in through the company IdP or a static key), the
policy that applies to them (models, spend caps, rate limits, managed settings) and the telemetry
their clients send. :mod:`gateway.fleet.principal` is the identity every part shares.

Internal: the server's own.
"""
