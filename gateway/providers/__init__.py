"""Upstream providers behind one interface (:mod:`gateway.providers.base`);
:func:`gateway.providers.factory.build_provider` picks the configured one.

Internal: the server's own; ``loop.callers.ProviderModelCaller`` is the public way to call a provider in-process.

Nothing is imported here: importing a leaf such as ``gateway.providers.models`` (the price table
does) must not load the providers, which read the settings (an import cycle).
"""
