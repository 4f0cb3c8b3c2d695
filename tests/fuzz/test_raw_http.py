"""Malformed HTTP on raw sockets against a real ``python -m gateway serve`` (issue 13, items 4 and 8).

A corpus of the malformed-request classes (bad request lines and methods, headers without a colon,
NUL and control bytes, lines over the limits, too many headers, broken chunked encoding, conflicting
framing, TLS and HTTP/2 on the plain port, a body that breaks after its headers, a client that
hangs up mid-body), plus seeded byte-level mutations of a valid request. Every case carries a canary
that looks like a key. For every answer: no 5xx, a JSON Anthropic-shaped error for every status of
400 and above, the exact status where the class has one (400, 408, 413, 414, 431), and never the
canary. Afterwards: the process is healthy, and its stderr holds no traceback, no ERROR line and no
canary.
"""

from __future__ import annotations

import asyncio
import random
from collections.abc import Iterator
from dataclasses import dataclass

import orjson
import pytest

from emulators import EmulatorConfig
from emulators.runner import emulator_in_thread
from tests.support.serve_process import HOST, GatewayProcess, serve_process

UPSTREAM_KEY = "sk-upstream-raw-http"
CLIENT_KEY = "sk-client-raw-http"
METRICS_KEY = "sk-metrics-raw-http"
CANARY = "sk-ant-api03-CANARY7f3a"
TIMEOUT_S = "1"  # header, body and keep-alive bounds of the gateway under test
READ_BOUND_S = 6.0
MUTATIONS = 600
SEED = 1313
# bytes a mutation inserts, \xff included (keys are compared as bytes: a non-UTF-8 key is a 401)
NASTY = b"\x00\x01\x1b\x7f\xff \t:\r\n;,\"/%"

C = CANARY.encode()
K = CLIENT_KEY.encode()
BODY = orjson.dumps({"model": "claude-sonnet-4-5", "max_tokens": 8, "messages": [{"role": "user", "content": "hi"}]})


@dataclass(frozen=True)
class Case:
    name: str
    chunks: tuple[bytes, ...]
    statuses: frozenset[int]  # acceptable first statuses; empty: the client hung up, no answer expected
    pause_s: float = 0.0  # between chunks
    half_close: bool = False  # shut the write side after the last chunk


def _case(name: str, *chunks: bytes, statuses: set[int], pause_s: float = 0.0, half_close: bool = False) -> Case:
    return Case(name, chunks, frozenset(statuses), pause_s, half_close)


def _post(headers: bytes, body: bytes = b"") -> bytes:
    return b"POST /v1/messages HTTP/1.1\r\nHost: gateway\r\n" + headers + b"\r\n" + body


CORPUS: tuple[Case, ...] = (
    # request line
    _case("garbage line", b"GARBAGE " + C + b"\r\n\r\n", statuses={400}),
    # HTTP/0.9 (no version): llhttp accepts it, the route answers (404 here)
    _case("no version", b"GET /nowhere\r\nHost: g\r\nx-api-key: " + C + b"\r\n\r\n", statuses={400, 404}),
    _case("bad version", b"GET /" + C + b" HTTP/9.9\r\nHost: g\r\n\r\n", statuses={400}),
    _case("bad method chars", b"G@T /" + C + b" HTTP/1.1\r\nHost: g\r\n\r\n", statuses={400}),
    _case("long method", b"A" * 2000 + b" /" + C + b" HTTP/1.1\r\n\r\n", statuses={400}),
    _case("key in request line", b"GET /healthz " + C + b" HTTP/1.1\r\nHost: g\r\n\r\n", statuses={400}),
    _case("space in target", b"GET /a " + C + b" b HTTP/1.1\r\nHost: g\r\n\r\n", statuses={400}),
    _case("NUL in target", b"GET /" + C + b"\x00 HTTP/1.1\r\nHost: g\r\n\r\n", statuses={400}),
    _case("bad absolute URI", b"GET http://[" + C + b"/ HTTP/1.1\r\nHost: g\r\n\r\n", statuses={400}),
    _case("request line too long", b"GET /" + C + b"a" * 9000 + b" HTTP/1.1\r\nHost: g\r\n\r\n", statuses={414}),
    _case("TLS client hello", b"\x16\x03\x01\x00\xa5\x01\x00\x00\xa1\x03\x03" + C, statuses={400}),
    _case("HTTP/2 preface", b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n" + C, statuses={400}),
    # headers
    _case("header without colon", _post(b"x-api-key " + C + b"\r\n"), statuses={400}),
    _case("NUL in header value", _post(b"x-api-key: " + C + b"\x00x\r\n"), statuses={400}),
    _case("NUL in header name", _post(b"x-api\x00-key: " + C + b"\r\n"), statuses={400}),
    _case("control byte in value", _post(b"authorization: Bearer " + C + b"\x01\r\n"), statuses={400}),
    _case("space before colon", _post(b"x-api-key : " + C + b"\r\n"), statuses={400}),
    _case("non-token header name", _post(b"x(api)key: " + C + b"\r\n"), statuses={400}),
    _case("header value too long", _post(b"x-api-key: " + C + b"a" * 9000 + b"\r\n"), statuses={431}),
    _case("header name too long", _post(C + b"a" * 9000 + b": x\r\n"), statuses={431}),
    _case("too many headers", _post(b"".join(b"x-h%d: %s\r\n" % (i, C) for i in range(150))), statuses={431}),
    _case("duplicate host", _post(b"Host: " + C + b"\r\n"), statuses={400}),
    # framing
    _case(
        "content-length and chunked",
        _post(b"Content-Length: 5\r\nTransfer-Encoding: chunked\r\nx-api-key: " + C + b"\r\n", b"0\r\n\r\n"),
        statuses={400},
    ),
    _case("content-length not a number", _post(b"Content-Length: " + C + b"\r\n"), statuses={400}),
    _case("negative content-length", _post(b"Content-Length: -5\r\nx-api-key: " + C + b"\r\n"), statuses={400}),
    _case(
        "conflicting content-lengths",
        _post(b"Content-Length: 5\r\nContent-Length: 6\r\nx-api-key: " + C + b"\r\n", b"12345"),
        statuses={400},
    ),
    _case("huge content-length", _post(b"Content-Length: 99999999999999999999999\r\n"), statuses={400}),
    _case("unknown transfer-encoding", _post(b"Transfer-Encoding: " + C + b"\r\n", b"x"), statuses={400}),
    _case("over the body limit", _post(b"Content-Length: 40000000\r\nx-api-key: " + K + b"\r\n"), statuses={413}),
    _case(
        "bad chunk size",
        _post(b"Transfer-Encoding: chunked\r\nx-api-key: " + K + b"\r\n", b"ZZ" + C + b"\r\nabc\r\n0\r\n\r\n"),
        statuses={400},
    ),
    _case(
        "chunk size overflow",
        _post(b"Transfer-Encoding: chunked\r\nx-api-key: " + K + b"\r\n", b"FFFFFFFFFFFFFFFFFFFF\r\n" + C),
        statuses={400},
    ),
    _case(
        "bad chunk extension",
        _post(b"Transfer-Encoding: chunked\r\nx-api-key: " + K + b"\r\n", b"5;" + C + b"\x01\r\nhello\r\n0\r\n\r\n"),
        statuses={400},
    ),
    _case(
        "body breaks after its headers",
        _post(b"Transfer-Encoding: chunked\r\nContent-Type: application/json\r\nx-api-key: " + K + b"\r\n"),
        b"5\r\n{\"a\":\r\nXX" + C + b"\r\n",
        statuses={400},
        pause_s=0.3,
    ),
    _case(
        "body breaks after an early answer",
        _post(b"Transfer-Encoding: chunked\r\nx-api-key: " + C + b"\r\n"),
        b"5\r\nhello\r\nXX" + C + b"\r\n",
        statuses={401},
        pause_s=0.3,
    ),
    # slow or vanishing clients (the gateway's bounds here: 1 s)
    _case("only blank lines", b"\r\n\r\n", statuses={408}),
    _case("headers never end", _post(b"x-api-key: " + C + b"\r\nx-more: "), statuses={408}),
    _case(
        "body shorter than its length",
        _post(b"Content-Length: 500\r\nContent-Type: application/json\r\nx-api-key: " + K + b"\r\n", b'{"' + C),
        statuses={408},
    ),
    _case(
        "hang up mid-body",
        _post(b"Content-Length: 500\r\nx-api-key: " + K + b"\r\n", b'{"' + C),
        statuses=set(),
        pause_s=0.2,
        half_close=True,
    ),
    # pipelining: a good request, then garbage in the same packet (aiohttp's parser then reports the
    # error for the whole packet: the 400 may come first, alone)
    _case(
        "pipelined garbage",
        b"GET /healthz HTTP/1.1\r\nHost: g\r\n\r\nGET /" + C + b" HTTP/9.9\r\n\r\n",
        statuses={200, 400},
    ),
)


def _mutations(count: int, seed: int) -> tuple[Case, ...]:
    """Seeded byte-level mutations of a valid request that carries the canary as its (wrong) key."""
    rng = random.Random(seed)
    base = _post(
        b"Content-Type: application/json\r\nConnection: close\r\nx-api-key: " + C + b"\r\n"
        + b"Content-Length: " + str(len(BODY)).encode() + b"\r\n",
        BODY,
    )
    cases = []
    for index in range(count):
        data = bytearray(base)
        for _ in range(rng.randint(1, 3)):
            at = rng.randrange(len(data))
            operation = rng.randrange(4)
            if operation == 0:
                data[at:at] = bytes([rng.choice(NASTY)]) * rng.choice((1, 1, 2, 300))
            elif operation == 1:
                del data[at]
            elif operation == 2:
                data[at] = rng.choice(NASTY)
            else:
                line_end = data.find(b"\r\n", at)
                if line_end > 0:
                    data[line_end:line_end] = data[at:line_end] * rng.choice((1, 50))
        cases.append(Case(f"mutation {index}", (bytes(data),), frozenset()))
    return tuple(cases)


@dataclass
class Answer:
    responses: list[tuple[int, dict[str, str], bytes]]
    raw: bytes


def _responses(raw: bytes) -> list[tuple[int, dict[str, str], bytes]]:
    """The HTTP responses in ``raw``, in order (a truncated last one is dropped)."""
    found = []
    rest = raw
    while b"\r\n\r\n" in rest:
        head, _, rest = rest.partition(b"\r\n\r\n")
        lines = head.decode("latin-1").split("\r\n")
        status = int(lines[0].split(" ")[1])
        headers = {}
        for line in lines[1:]:
            name, _, value = line.partition(":")
            headers[name.strip().lower()] = value.strip()
        length = int(headers.get("content-length", "0"))
        if len(rest) < length:
            break
        found.append((status, headers, rest[:length]))
        rest = rest[length:]
    return found


async def _exchange(port: int, case: Case) -> Answer:
    reader, writer = await asyncio.open_connection(HOST, port)
    raw = b""
    try:
        for index, chunk in enumerate(case.chunks):
            if index and case.pause_s:
                await asyncio.sleep(case.pause_s)
            writer.write(chunk)
            await writer.drain()
        if case.half_close:
            await asyncio.sleep(case.pause_s)
            writer.write_eof()
        async with asyncio.timeout(READ_BOUND_S):
            while chunk := await reader.read(65536):
                raw += chunk
    except (ConnectionResetError, BrokenPipeError):
        pass
    except TimeoutError:
        pytest.fail(f"{case.name}: the gateway neither answered nor closed within {READ_BOUND_S}s: {raw!r}")
    finally:
        writer.close()
    return Answer(_responses(raw), raw)


def _check(case: Case, answer: Answer) -> None:
    assert C not in answer.raw, f"{case.name}: the answer echoes the canary: {answer.raw[:300]!r}"
    if case.statuses:
        assert answer.responses, f"{case.name}: no complete answer: {answer.raw[:300]!r}"
        assert answer.responses[0][0] in case.statuses, f"{case.name}: {answer.raw[:300]!r}"
    elif not case.half_close:
        assert answer.responses, f"{case.name}: no complete answer: {answer.raw[:300]!r}"
    for status, headers, body in answer.responses:
        assert status < 500, f"{case.name}: {answer.raw[:300]!r}"
        if status >= 400:
            assert headers.get("content-type", "").startswith("application/json"), f"{case.name}: {headers}"
            error = orjson.loads(body)
            assert error["type"] == "error", case.name
            assert isinstance(error["error"]["type"], str) and isinstance(error["error"]["message"], str)


@pytest.fixture(scope="module")
def gateway(tmp_path_factory: pytest.TempPathFactory) -> Iterator[GatewayProcess]:
    with emulator_in_thread(EmulatorConfig(api_keys=frozenset({UPSTREAM_KEY}))) as emulator:
        env = {
            "GATEWAY_API_KEYS": CLIENT_KEY,
            "GATEWAY_METRICS_API_KEYS": METRICS_KEY,
            "ANTHROPIC_API_KEY": UPSTREAM_KEY,
            "ANTHROPIC_BASE_URL": emulator.base_url,
            "GATEWAY_HEADER_TIMEOUT_S": TIMEOUT_S,
            "GATEWAY_BODY_TIMEOUT_S": TIMEOUT_S,
            "GATEWAY_KEEPALIVE_TIMEOUT_S": TIMEOUT_S,
        }
        with serve_process(env, tmp_path_factory.mktemp("raw-http") / "gateway.err") as process:
            yield process


async def _run(gateway: GatewayProcess, cases: tuple[Case, ...], concurrency: int = 32) -> None:
    slots = asyncio.Semaphore(concurrency)

    async def one(case: Case) -> None:
        async with slots:
            _check(case, await _exchange(gateway.port, case))

    await asyncio.gather(*(one(case) for case in cases))


def _healthy_and_quiet(gateway: GatewayProcess) -> None:
    assert gateway.process.poll() is None
    assert gateway.get("/healthz")[0] == 200
    stderr = gateway.stderr()
    assert "Traceback" not in stderr
    assert CANARY not in stderr
    assert '"level":"ERROR"' not in stderr


@pytest.mark.parametrize("case", CORPUS, ids=[case.name for case in CORPUS])
async def test_corpus_case(gateway: GatewayProcess, case: Case) -> None:
    _check(case, await _exchange(gateway.port, case))


async def test_seeded_mutations(gateway: GatewayProcess) -> None:
    await _run(gateway, _mutations(MUTATIONS, SEED))
    _healthy_and_quiet(gateway)


async def test_gateway_after_the_corpus(gateway: GatewayProcess) -> None:
    """The corpus left the process serving, with warnings only: counted, rate-limited, no input."""
    await _run(gateway, CORPUS)
    _healthy_and_quiet(gateway)
    status, metrics = gateway.get("/metrics", {"x-api-key": METRICS_KEY})
    assert status == 200
    for kind in ("header", "header_too_large", "too_many_headers", "request_line_too_long", "chunked", "framing"):
        line = next(line for line in metrics.decode().splitlines() if f'kind="{kind}"' in line)
        assert float(line.rsplit(" ", 1)[1]) >= 1, line
