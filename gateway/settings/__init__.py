"""The sections of :class:`gateway.config.Settings`: one frozen model per subsystem, one module each.

Each section reads its own flat variables (``GATEWAY_*``, AWS, Vertex, Foundry) from the same
environment; :mod:`gateway.config` composes them and runs the checks that span sections.

Internal: read them through ``gateway.Settings`` (``settings.listener.port``, ...).
"""
