"""Stop sequences and ``max_tokens``: cutting a scripted turn the way generation would stop.

* Stop sequences: the earliest occurrence of any requested stop sequence in a text block ends
  the turn there (the sequence itself is not returned); later blocks are dropped and
  ``stop_reason`` becomes ``stop_sequence``.
* ``max_tokens``: blocks are kept in order while their output tokens fit; a text or thinking block
  that does not fit is cut to the remaining budget (4 UTF-8 bytes per token, on a character
  boundary), a tool call that does not fit is dropped, and ``stop_reason`` becomes
  ``max_tokens``.
"""

from __future__ import annotations

from collections.abc import Sequence

from .json_types import JSONObject
from .output import ModelOutput, block_output_tokens
from .tokens import BYTES_PER_TOKEN


def cut_utf8(text: str, max_bytes: int) -> str:
    """The longest prefix of ``text`` whose UTF-8 encoding fits in ``max_bytes``."""
    encoded = text.encode("utf-8")
    if len(encoded) <= max_bytes:
        return text
    return encoded[:max_bytes].decode("utf-8", errors="ignore")


def apply_stop_sequences(output: ModelOutput, stop_sequences: Sequence[str]) -> ModelOutput:
    """End the turn at the first stop sequence found in generated text."""
    sequences = [s for s in stop_sequences if s]
    if not sequences:
        return output
    kept: list[JSONObject] = []
    for block in output.content:
        if block.get("type") == "text":
            found = [(block["text"].find(s), s) for s in sequences if s in block["text"]]
            if found:
                position, sequence = min(found)
                kept.append({**block, "text": block["text"][:position]})
                return output.with_content(
                    tuple(kept), stop_reason="stop_sequence", stop_sequence=sequence, stop_details=None
                )
        kept.append(block)
    return output


def apply_max_tokens(output: ModelOutput, max_tokens: int) -> ModelOutput:
    """Cut the turn to ``max_tokens`` output tokens."""
    remaining = max_tokens
    kept: list[JSONObject] = []
    for block in output.content:
        cost = block_output_tokens(block)
        if cost <= remaining:
            kept.append(block)
            remaining -= cost
            continue
        field = {"text": "text", "thinking": "thinking"}.get(str(block.get("type")))
        if field is not None and remaining > 0:
            kept.append({**block, field: cut_utf8(block[field], remaining * BYTES_PER_TOKEN)})
        return output.with_content(
            tuple(kept), stop_reason="max_tokens", stop_sequence=None, stop_details=None
        )
    return output


def apply_limits(output: ModelOutput, *, max_tokens: int, stop_sequences: Sequence[str] = ()) -> ModelOutput:
    """Stop sequences first, then the ``max_tokens`` budget."""
    return apply_max_tokens(apply_stop_sequences(output, stop_sequences), max_tokens)
