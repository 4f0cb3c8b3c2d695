"""Model callers: the in-process gateway provider (default) and the official SDK against any URL.

``SdkModelCaller`` needs the ``anthropic`` SDK (the ``sdk`` extra: ``pip install 'switchyard[sdk]'``);
it is imported on first use, so the rest of the loop (and the gateway) runs without the SDK.

Public: ``__all__``; the modules inside are internal.
"""

from typing import TYPE_CHECKING, Any

from loop.callers.provider import ProviderModelCaller

if TYPE_CHECKING:
    from loop.callers.sdk import SdkModelCaller

__all__ = ["ProviderModelCaller", "SdkModelCaller"]


def __getattr__(name: str) -> Any:
    if name == "SdkModelCaller":
        from loop.callers.sdk import SdkModelCaller

        return SdkModelCaller
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
