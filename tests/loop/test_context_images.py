"""Images in the history and the context estimate: an image counts as what the API charges for it
at most (it scales images down first), not as its base64 bytes, so a screenshot does not end the
run at the blocking limit nor make every pass compact."""

from __future__ import annotations

import base64
import os

import loop
from loop.events import Compaction, ContextBoundary
from loop.testing import FakeResponse, text, tool_use
from loop.tokens import IMAGE_TOKENS, estimate_tokens, message_bytes
from tests.loop.support import fake_run, of_type, pairing_violations, run_to_end


def image_block(size: int) -> dict[str, object]:
    data = base64.b64encode(os.urandom(size)).decode()
    return {"type": "image", "source": {"type": "base64", "media_type": "image/png", "data": data}}


def test_an_image_counts_at_most_image_tokens_wherever_it_is() -> None:
    big = image_block(3_000_000)
    small = image_block(600)
    for content in (
        [big, {"type": "text", "text": "what is wrong here?"}],
        [{"type": "tool_result", "tool_use_id": "t1", "content": [{"type": "text", "text": "shot"}, big]}],
    ):
        message = {"role": "user", "content": content}
        assert IMAGE_TOKENS <= estimate_tokens([message]) < IMAGE_TOKENS + 100
        assert message_bytes([message]) < (IMAGE_TOKENS + 100) * 3  # what the layers count as freed
    tiny = {"role": "user", "content": [small]}
    assert estimate_tokens([tiny]) < 400  # a small image still counts its bytes


@loop.tool(read_only=True)
def screenshot() -> loop.Image:
    """Take a screenshot of the screen."""
    return loop.Image(os.urandom(3_000_000), "image/png")  # a 2560x1440 PNG is about that size


async def test_screenshots_do_not_end_the_run_at_the_blocking_limit() -> None:
    script = [FakeResponse.of(tool_use("screenshot", {})) for _ in range(3)]
    run, model = fake_run([*script, FakeResponse.of(text("the button is red"))], tools=[screenshot])
    events = await run_to_end(run)
    assert run.terminal == loop.Completed("end_turn")
    assert model.calls() == 4 and model.calls("compact") == 0
    assert of_type(events, Compaction) == [] and of_type(events, ContextBoundary) == []
    assert pairing_violations(run.state.messages) == []
