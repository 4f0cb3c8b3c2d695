"""Images in the history and the context estimate: an image counts as what the API charges for it
at most (it scales images down first), not as its base64 bytes, so a screenshot does not end the
run at the blocking limit nor make every pass compact; a 413 for images' bytes teaches no token
limit."""

from __future__ import annotations

import base64
import os

import orjson

import loop
from loop.context.kinds import Layer
from loop.events import Compaction, ContextBoundary
from loop.request import ModelRequest
from loop.testing import FakeResponse, text, tool_use
from loop.tokens import IMAGE_TOKENS, estimate_tokens, message_bytes
from loop.transitions import CollapseDrain
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


async def test_a_413_for_the_bytes_of_screenshots_learns_no_token_limit() -> None:
    """The upstream refuses the body's size (413): the images' bytes, not their tokens. The drain
    sheds the old screenshots and the run goes on; a token limit learned from the small estimate
    would shrink the window and collapse the history on every turn after."""
    shot = os.urandom(1_000_000)

    @loop.tool(read_only=True)
    def capture(step: int) -> loop.Image:
        """Take a screenshot."""
        return loop.Image(shot, "image/png")

    calls: list[int] = []

    def answer(request: ModelRequest) -> FakeResponse:
        if len(orjson.dumps(request.body)) > 8_000_000:  # a body cap: 6 screenshots do not fit
            return FakeResponse.http_error(413, "request_too_large", "Request exceeds the maximum allowed number of bytes.")
        step = len(calls)
        calls.append(step)
        usage = {"input_tokens": 2_000 + 1_600 * orjson.dumps(request.body).count(b'"type":"image"'), "output_tokens": 10}
        if step == 24:
            return FakeResponse.of(text("done"), usage=usage)
        return FakeResponse.of(tool_use("capture", {"step": step}), usage=usage)

    run, model = fake_run([], tools=[capture], max_turns=40, max_repeated_tool_calls=None)
    model._then = answer  # type: ignore[attr-defined]
    events = await run_to_end(run)
    assert run.terminal == loop.Completed("end_turn")
    drains = [t for t in run.state.transitions if isinstance(t, CollapseDrain)]
    assert len(drains) >= 2 and all(d.learned_limit is None for d in drains)
    assert run.state.context.learned_limit is None
    collapses = [e for e in of_type(events, Compaction) if e.layer is Layer.COLLAPSE]
    assert len(collapses) == len(drains)  # only when the upstream refused, never on the turns between
    assert model.calls("compact") == 0 and pairing_violations(run.state.messages) == []
