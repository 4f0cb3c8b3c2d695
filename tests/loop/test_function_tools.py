"""Tools from plain functions (``@tool``): schema from hints and docstrings, dependency injection,
sync and async functions, rich results, and the class-based tools still working beside them."""

from __future__ import annotations

import asyncio
import base64
import threading
from dataclasses import dataclass
from typing import Annotated, Any, Literal

import orjson
import pytest
from pydantic import BaseModel, Field

import loop
from loop.events import ToolFinished
from loop.outcome import ToolUse
from loop.testing import FakeResponse, FakeTool, VirtualClock, text, tool_use
from loop.tools import (
    Image,
    PermissionMode,
    PermissionPolicy,
    PermissionRequest,
    PermissionVerdict,
    ToolContext,
    ToolDispatcher,
    ToolRegistry,
    tool,
)
from loop.tools.content import EMPTY_RESULT, to_content
from loop.transitions import Completed
from tests.loop.support import fake_run, of_type, run_to_end


@dataclass
class Inventory:
    stock: dict[str, int]
    calls: list[str]


@tool(read_only=True)
async def check_stock(
    ctx: ToolContext[Inventory], sku: str, warehouse: Literal["north", "south"] = "north"
) -> str:
    """Look up how many items of a product are in stock.

    Checks one warehouse's count; nothing is reserved.

    Args:
        sku: The product's stock-keeping unit, e.g. "AB-12".
        warehouse: Which warehouse to ask.
    """
    ctx.deps.calls.append(f"{ctx.tool_use_id}:{sku}@{warehouse}")
    return f"{sku}: {ctx.deps.stock.get(sku, 0)} in {warehouse}"


class Line(BaseModel):
    sku: str
    quantity: Annotated[int, Field(ge=1)]


@tool(destructive=True, name="place_order")
def order(lines: list[Line], note: str | None = None) -> dict[str, Any]:
    """Place an order.

    Parameters
    ----------
    lines
        What to order.
    note
        Free text for the warehouse.
    """
    return {
        "ordered": [line.model_dump() for line in lines],
        "note": note,
        "thread": threading.current_thread().name,
    }


def test_the_schema_comes_from_hints_and_the_docstring() -> None:
    definition = check_stock.definition()
    assert definition["name"] == "check_stock"
    assert definition["description"] == (
        "Look up how many items of a product are in stock.\n\nChecks one warehouse's count; nothing is reserved."
    )
    schema = definition["input_schema"]
    assert schema["required"] == ["sku"]
    assert schema["properties"]["sku"] == {
        "description": 'The product\'s stock-keeping unit, e.g. "AB-12".',
        "title": "Sku",
        "type": "string",
    }
    assert schema["properties"]["warehouse"]["enum"] == ["north", "south"]
    assert schema["properties"]["warehouse"]["default"] == "north"
    assert "ctx" not in schema["properties"]
    assert schema["additionalProperties"] is False
    assert (check_stock.read_only, check_stock.destructive) == (True, False)
    assert check_stock.is_concurrency_safe(check_stock.input_model.model_validate({"sku": "x"}))


def test_numpy_docstrings_nested_models_and_the_declared_permission_level() -> None:
    schema = order.input_schema()
    assert order.name == "place_order" and order.description == "Place an order."
    assert schema["properties"]["lines"]["description"] == "What to order."
    assert schema["properties"]["note"]["description"] == "Free text for the warehouse."
    line = schema["$defs"]["Line"]
    assert line["properties"]["quantity"]["minimum"] == 1
    assert (order.read_only, order.destructive) == (False, True)


@pytest.mark.parametrize(
    "define",
    [
        lambda: tool(lambda *args: None),
        lambda: tool(lambda **kwargs: None),
        lambda: tool(read_only=True, destructive=True)(lambda: None),
    ],
)
def test_functions_the_model_cannot_call_are_refused(define: Any) -> None:
    with pytest.raises((TypeError, ValueError)):
        define()


def test_the_context_parameter_must_come_first() -> None:
    def late(sku: str, ctx: ToolContext[Inventory]) -> str:
        return sku

    with pytest.raises(TypeError, match="must come first"):
        tool(late)


async def test_a_run_injects_the_deps_and_validates_the_input() -> None:
    inventory = Inventory({"AB-12": 7}, [])
    run, model = fake_run(
        [
            FakeResponse.of(
                tool_use("check_stock", {"sku": "AB-12", "warehouse": "south"}, id="toolu_1"),
                tool_use("check_stock", {"sku": "AB-12", "warehouse": "east"}, id="toolu_2"),
            ),
            FakeResponse.of(text("7 in the south.")),
        ],
        tools=[check_stock],
    )
    run = loop.query(
        loop.QueryParams(
            "how many AB-12?",
            tools=[check_stock],
            deps=loop.LoopDeps(call_model=model, clock=VirtualClock()),
            tool_deps=inventory,
        )
    )
    events = await run_to_end(run)
    assert run.terminal == Completed("end_turn")
    assert inventory.calls == ["toolu_1:AB-12@south"]  # the invalid call never ran
    results = {e.tool_use_id: e.result for e in of_type(events, ToolFinished)}
    assert results["toolu_1"]["content"] == "AB-12: 7 in south"
    assert results["toolu_2"]["is_error"] is True
    assert "warehouse: Input should be 'north' or 'south'" in results["toolu_2"]["content"]


async def test_a_sync_tool_runs_in_a_worker_thread_and_returns_structured_json() -> None:
    dispatcher = ToolDispatcher(
        ToolRegistry([order]),
        clock=VirtualClock(),
        policy=PermissionPolicy(mode=PermissionMode.BYPASS_PERMISSIONS),
    )
    block = await dispatcher.dispatch(
        ToolUse("toolu_o", "place_order", {"lines": [{"sku": "AB-12", "quantity": 2}]}), turn=1
    )
    assert "is_error" not in block
    assert isinstance(block["content"], str)
    import orjson

    payload = orjson.loads(block["content"])
    assert payload["ordered"] == [{"sku": "AB-12", "quantity": 2}] and payload["note"] is None
    assert payload["thread"] != threading.current_thread().name


async def test_a_destructive_function_tool_asks_even_in_accept_edits() -> None:
    asked: list[PermissionRequest] = []

    async def refuse(request: PermissionRequest) -> PermissionVerdict:
        asked.append(request)
        return PermissionVerdict(False, "no")

    dispatcher = ToolDispatcher(
        ToolRegistry([order]),
        clock=VirtualClock(),
        policy=PermissionPolicy(mode=PermissionMode.ACCEPT_EDITS),
        can_use_tool=refuse,
    )
    block = await dispatcher.dispatch(ToolUse("t", "place_order", {"lines": []}), turn=1)
    assert block["is_error"] is True and [r.tool_name for r in asked] == ["place_order"]


PNG = base64.b64decode(
    "iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mP8z8BQDwAEhQGAhKmMIQAAAABJRU5ErkJggg=="
)


@tool(read_only=True)
async def screenshot() -> list[Any]:
    """Take a screenshot."""
    return ["The screen:", Image(PNG), {"type": "text", "text": "(1x1)"}]


async def test_images_and_blocks_go_into_the_tool_result() -> None:
    run, model = fake_run(
        [FakeResponse.of(tool_use("screenshot", {})), FakeResponse.of(text("A dot."))], tools=[screenshot]
    )
    await run_to_end(run)
    assert run.terminal == Completed("end_turn")
    sent = model.requests[1].body["messages"][-1]["content"][0]
    content = sent["content"]
    assert content[0] == {"type": "text", "text": "The screen:"}
    assert content[1]["type"] == "image"
    assert content[1]["source"] == {
        "type": "base64",
        "media_type": "image/png",
        "data": base64.b64encode(PNG).decode(),
    }
    assert content[2]["text"] == "(1x1)"


class Point(BaseModel):
    x: int
    y: int


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        ("plain", "plain"),
        (Point(x=1, y=2), '{"x":1,"y":2}'),
        ({"a": [1, 2]}, '{"a":[1,2]}'),
        ([1, 2], "[1,2]"),
        (3, "3"),
        (None, "null"),
        ({"type": "tool_use", "id": "x"}, '{"type":"tool_use","id":"x"}'),  # never a forged block
        (
            [Point(x=0, y=0), "done"],
            [{"type": "text", "text": '{"x":0,"y":0}'}, {"type": "text", "text": "done"}],
        ),
    ],
)
def test_return_values_become_tool_result_content(value: Any, expected: Any) -> None:
    assert to_content(value) == expected


@tool(read_only=True)
def hand_built() -> list[Any]:
    """Content blocks built by hand, some of them broken."""
    return [{"type": "text"}, "", {"type": "text", "text": "  "}, {"type": "image", "source": "nope"}, "ok"]


async def test_broken_or_empty_result_blocks_never_reach_the_api() -> None:
    # They were sent verbatim: the API refuses an empty text block ("text content blocks must be
    # non-empty"), and with it in the history every later request of the session.
    run, model = fake_run(
        [FakeResponse.of(tool_use("hand_built", {})), FakeResponse.of(text("ok"))], tools=[hand_built]
    )
    await run_to_end(run)
    assert run.terminal == Completed("end_turn")
    assert model.requests[1].body["messages"][-1]["content"][0]["content"] == [
        {"type": "text", "text": '{"type":"text"}'},
        {"type": "text", "text": '{"type":"image","source":"nope"}'},
        {"type": "text", "text": "ok"},
    ]


PNG_SOURCE = {"type": "base64", "media_type": "image/png", "data": "iVBORw0KGgo="}


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        ({"type": "text", "text": ""}, EMPTY_RESULT),
        (["", {"type": "text", "text": "\n"}], EMPTY_RESULT),
        ({"type": "text", "text": 3}, [{"type": "text", "text": '{"type":"text","text":3}'}]),
        ({"type": "image", "source": PNG_SOURCE}, [{"type": "image", "source": PNG_SOURCE}]),
        (
            {"type": "image", "source": {**PNG_SOURCE, "media_type": "image/bmp"}},
            [{"type": "text", "text": orjson.dumps({"type": "image", "source": {**PNG_SOURCE, "media_type": "image/bmp"}}).decode()}],
        ),
        ({"type": "image", "source": {"type": "url", "url": "https://x/a.png"}}, [{"type": "image", "source": {"type": "url", "url": "https://x/a.png"}}]),
        ({"type": "document", "source": {"type": "text", "media_type": "text/plain", "data": "d"}}, [{"type": "document", "source": {"type": "text", "media_type": "text/plain", "data": "d"}}]),
        ({"type": "document"}, [{"type": "text", "text": '{"type":"document"}'}]),
        ({"type": "search_result", "source": "s", "title": "t", "content": [{"type": "text", "text": ""}]}, [{"type": "text", "text": '{"type":"search_result","source":"s","title":"t","content":[{"type":"text","text":""}]}'}]),
    ],
)  # fmt: skip
def test_result_blocks_are_checked(value: Any, expected: Any) -> None:
    assert to_content(value) == expected


def test_an_image_with_an_unsupported_media_type_is_refused() -> None:
    with pytest.raises(ValueError, match="media type"):
        Image(b"x", "image/tiff")


async def test_a_tool_returning_something_that_is_not_json_is_an_error_result() -> None:
    @tool
    def odd() -> object:
        """Return an object."""
        return object()

    dispatcher = ToolDispatcher(
        ToolRegistry([odd]), clock=VirtualClock(), policy=PermissionPolicy(mode=PermissionMode.DONT_ASK)
    )
    block = await dispatcher.dispatch(ToolUse("t", "odd", {}), turn=1)
    assert block["is_error"] is True and "TypeError" in block["content"]


async def test_long_text_blocks_are_truncated_without_touching_images() -> None:
    @tool(read_only=True, max_result_size_chars=10)
    async def big() -> list[Any]:
        """Big output."""
        return ["x" * 50, Image(PNG)]

    dispatcher = ToolDispatcher(ToolRegistry([big]), clock=VirtualClock())
    block = await dispatcher.dispatch(ToolUse("t", "big", {}), turn=1)
    text_part, image_part = block["content"]
    assert text_part["text"].startswith("x" * 10 + "\n\n[Result truncated: 40 of 50")
    assert image_part["type"] == "image"


async def test_function_and_class_tools_run_side_by_side() -> None:
    reader = FakeTool("read_file", result="print('hi')")
    inventory = Inventory({}, [])
    clock = VirtualClock()
    from loop.testing import FakeModel

    model = FakeModel(
        [
            FakeResponse.of(tool_use("read_file", {"path": "a"}), tool_use("check_stock", {"sku": "Q"})),
            FakeResponse.of(text("ok")),
        ],
        clock=clock,
    )
    run = loop.query(
        loop.QueryParams(
            "go",
            tools=[reader, check_stock],
            deps=loop.LoopDeps(call_model=model, clock=clock),
            permissions=PermissionPolicy(mode=PermissionMode.DONT_ASK),
            tool_deps=inventory,
        )
    )
    await asyncio.wait_for(run.wait(), 5)
    assert run.terminal == Completed("end_turn")
    assert [c.input for c in reader.calls] == [{"path": "a"}]
    assert len(inventory.calls) == 1
    names = [d["name"] for d in model.requests[0].body["tools"]]
    assert names[:2] == ["read_file", "check_stock"]
