"""``GET /v1/models`` with several upstreams: the first upstream (file order) that can answer lists
them; one unreachable or overloaded does not take the listing down while another serves."""

from __future__ import annotations

import socket
from pathlib import Path

import anthropic
import pytest

from tests.upstreams.harness import four_upstreams

pytestmark = pytest.mark.timeout(60)


def _dead() -> dict[str, object]:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        closed = sock.getsockname()[1]
    return {
        "name": "dead",
        "provider": "anthropic",
        "base_url": f"http://127.0.0.1:{closed}",
        "credentials": {"ANTHROPIC_API_KEY": "k"},
    }


async def test_an_unreachable_first_upstream_does_not_fail_the_listing(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    async with four_upstreams(
        tmp_path, monkeypatch, order=("dead", "primary"), extra=(_dead(),), providers=("anthropic",)
    ) as fleet:
        listed = await fleet.client().models.list()
        assert any(model.id.startswith("claude-") for model in listed.data)
        assert [r.path for r in fleet.emulators["primary"].requests] == ["/v1/models"]


async def test_an_overloaded_upstream_passes_the_listing_on_and_the_last_answer_stands(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    async with four_upstreams(
        tmp_path, monkeypatch, order=("primary", "foundry"), providers=("anthropic", "foundry")
    ) as fleet:
        fleet.emulators["primary"].set_fault("fail_first=1000000:529")
        listed = await fleet.client().models.list()  # Foundry's own table
        assert listed.data
    async with four_upstreams(
        tmp_path, monkeypatch, order=("dead", "primary"), extra=(_dead(),), providers=("anthropic",)
    ) as fleet:
        fleet.emulators["primary"].set_fault("fail_first=1000000:529")
        with pytest.raises(anthropic.APIStatusError) as raised:
            await fleet.client().models.list()
        assert raised.value.status_code == 529  # the last candidate's own answer
