"""The keys file syntax (teams and roles) and the key ring, including the keys-file reloader's
decisions (driven by calling ``check``/``reload`` directly: no timers)."""

from __future__ import annotations

import logging
import os
from pathlib import Path

import pytest

from gateway.key_reload import SIGHUP, START_UP, KeyReloader
from gateway.keys import DEFAULT_TEAM, KeyRing, Role, parse_key_list, parse_key_text


def test_roles_and_teams_in_the_keys_file() -> None:
    keys = list(
        parse_key_text(
            "# comment\nsk-a team-a\nsk-b\nsk-m monitoring role=metrics\nsk-n role=metrics\n"
            "sk-c role=client team-c\n",
            "keys",
        )
    )
    ring = KeyRing(keys)
    found = {name: ring.lookup(name) for name in ("sk-a", "sk-b", "sk-m", "sk-n", "sk-c")}
    assert {name: (k.team, k.role) for name, k in found.items() if k} == {
        "sk-a": ("team-a", Role.CLIENT),
        "sk-b": (DEFAULT_TEAM, Role.CLIENT),
        "sk-m": ("monitoring", Role.METRICS),
        "sk-n": (DEFAULT_TEAM, Role.METRICS),
        "sk-c": ("team-c", Role.CLIENT),
    }
    assert ring.has_metrics_keys
    assert ring.teams == {"team-a", DEFAULT_TEAM, "team-c"}  # metrics keys spend nothing
    assert ring.lookup("sk-") is None and ring.team_for("sk-a") == "team-a"
    assert not KeyRing(parse_key_list("sk-x,sk-y")).has_metrics_keys


@pytest.mark.parametrize(
    ("line", "message"),
    [
        ("sk-secret-1 a b", r"keys:1: expected 'key \[team\]' with an optional role"),
        ("sk-secret-1 role=metrics role=client", r"keys:1: expected 'key \[team\]'"),
        ("sk-secret-1 team role=root", r"keys:1: unknown role 'root' \(expected one of: client, metrics, admin\)"),
    ],
)
def test_invalid_lines_are_named_without_the_key(line: str, message: str) -> None:
    with pytest.raises(ValueError, match=message) as raised:
        list(parse_key_text(line, "keys"))
    assert "sk-secret-1" not in str(raised.value)


def test_presented_keys_are_compared_as_the_bytes_sent() -> None:
    """aiohttp (and ``os.environ``) hand bytes that are not UTF-8 over as lone surrogates
    (``surrogateescape``): hashing them never fails, and only the same bytes match."""
    from_environ = b"sk-\xff\xfe".decode("utf-8", "surrogateescape")  # a key set from raw bytes
    ring = KeyRing([*parse_key_list(f"sk-plain,{from_environ}"), *parse_key_text("sk-clé team-x", "keys")])
    for presented in (b"\xff\xfe", b"caf\xe9", b"\xc3\x28", b"sk-plain\x80", b"\xed\xa0\x80"):
        assert ring.lookup(presented.decode("utf-8", "surrogateescape")) is None
    assert ring.lookup(b"sk-\xff\xfe".decode("utf-8", "surrogateescape")) is not None
    assert ring.team_for("sk-clé".encode().decode("utf-8", "surrogateescape")) == "team-x"
    assert ring.lookup("sk-\ud800") is None  # a lone surrogate no header yields: still no error


def test_repr_shows_no_key_material() -> None:
    (key,) = parse_key_text("sk-secret-2 ops role=metrics", "keys")
    assert repr(key) == "InboundKey(team='ops', role='metrics')"


def _write(path: Path, text: str) -> None:
    """Replace the file atomically (write a sibling, rename it over), as editors and kubelet do."""
    staging = path.with_suffix(".new")
    staging.write_text(text)
    os.replace(staging, path)


def test_reloader_swaps_the_set_on_change_and_keeps_it_on_errors(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    path = tmp_path / "keys"
    path.write_text("sk-old team-a\n")
    ring = KeyRing([])
    seen: list[frozenset[str]] = []
    reloader = KeyReloader(
        ring, parse_key_list("sk-static"), path, interval_s=1, on_reload=lambda r: seen.append(r.teams)
    )
    caplog.set_level(logging.INFO, logger="switchyard.keys")
    assert reloader.reload(START_UP)
    assert ring.team_for("sk-old") == "team-a" and ring.team_for("sk-static") == DEFAULT_TEAM
    assert not reloader.check()  # unchanged file: nothing read, nothing logged
    assert caplog.records == []

    _write(path, "sk-new team-b\nsk-metrics role=metrics\n")
    assert reloader.check()
    assert ring.lookup("sk-old") is None and ring.team_for("sk-new") == "team-b"
    assert ring.team_for("sk-static") == DEFAULT_TEAM  # GATEWAY_API_KEYS stay
    assert seen[-1] == {"team-b", DEFAULT_TEAM}
    (line,) = [r.getMessage() for r in caplog.records]
    assert "3 keys (1 metrics-only), 2 added, 1 removed; teams: default,team-b" in line
    caplog.clear()

    # an invalid version keeps the keys in force and is reported once, whatever the poll count
    _write(path, "sk-newer team-c\nsk-broken a b\n")
    assert not reloader.check()
    assert not reloader.check()
    assert ring.team_for("sk-new") == "team-b" and ring.lookup("sk-newer") is None
    (line,) = [r.getMessage() for r in caplog.records]
    assert "keys:2: expected 'key [team]'" in line and "keeping the 3 keys in force" in line
    assert "sk-" not in line
    caplog.clear()

    # an empty file revokes the file's keys; GATEWAY_API_KEYS still admit their holders
    _write(path, "# nothing\n")
    assert reloader.check()
    assert ring.entries() == tuple(parse_key_list("sk-static"))
    caplog.clear()

    # a deleted file (a removed Secret) is reported once; its return is a change
    path.unlink()
    assert not reloader.check() and not reloader.check()
    assert len(caplog.records) == 1 and "cannot read it (FileNotFoundError" in caplog.records[0].getMessage()
    _write(path, "sk-back\n")
    assert reloader.check() and ring.team_for("sk-back") == DEFAULT_TEAM

    # an explicit request on an unchanged file says so instead of staying silent
    caplog.clear()
    assert not reloader.reload(SIGHUP)
    assert "unchanged (SIGHUP)" in caplog.records[-1].getMessage()
    assert reloader.reloads == 3 and reloader.failures == 2


def test_reloader_follows_a_kubernetes_secret_volume_swap(tmp_path: Path) -> None:
    """kubelet writes a Secret into a new timestamped directory and swaps the ``..data`` symlink;
    the mounted name is a symlink through ``..data``. ``stat`` must follow it."""
    volume = tmp_path / "volume"
    volume.mkdir()

    def publish(version: str, text: str) -> None:
        (volume / version).mkdir()
        (volume / version / "api-keys").write_text(text)
        (volume / "..data_tmp").symlink_to(version)
        os.replace(volume / "..data_tmp", volume / "..data")

    publish("..2026_01_01_00_00_00.1", "sk-first\n")
    (volume / "api-keys").symlink_to("..data/api-keys")
    ring = KeyRing([])
    reloader = KeyReloader(ring, (), volume / "api-keys", interval_s=1)
    reloader.reload(START_UP)
    publish("..2026_01_01_00_01_00.2", "sk-second ops\n")
    assert reloader.check()
    assert ring.lookup("sk-first") is None and ring.team_for("sk-second") == "ops"


def test_a_file_that_would_leave_no_key_is_refused_unless_the_gateway_may_be_open(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    path = tmp_path / "keys"
    path.write_text("sk-a\n")
    closed, open_ = KeyRing([]), KeyRing([])
    guarded = KeyReloader(closed, (), path, interval_s=1)
    permissive = KeyReloader(open_, (), path, interval_s=1, allow_empty=True)
    guarded.reload(START_UP)
    permissive.reload(START_UP)
    _write(path, "# nobody\n")
    assert not guarded.check() and closed.team_for("sk-a") == DEFAULT_TEAM
    assert "holds no key (and GATEWAY_ALLOW_UNAUTHENTICATED is off)" in caplog.records[-1].getMessage()
    assert permissive.check() and len(open_) == 0
