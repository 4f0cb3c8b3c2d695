"""The fleet component's Redis (k8s/components/fleet patches the base's StatefulSet): counters,
sign-in state and the revocation list must not be evicted, so it runs with ``noeviction``; the
rest of its command is the base's. Checked on the rendered manifests, under a real ``sh`` with a
recording ``redis-server``, and under a real redis-server (only the port changed, as in
tests/deploy/test_session_store_auth.py).
"""

from __future__ import annotations

import os
import shutil
import subprocess
import time
from pathlib import Path

from tests.deploy.manifests import Manifest, one, render, render_with
from tests.support import binaries
from tests.support.serve_process import free_port


def fleet_render(overlay: str, workdir: Path) -> list[Manifest]:
    return render_with(overlay, workdir, "ingress", "fleet")


def test_redis_keeps_counters_and_sign_ins_instead_of_evicting_them(tmp_path: Path) -> None:
    base = one(render("anthropic"), "StatefulSet", "switchyard-redis")
    fleet = one(fleet_render("anthropic", tmp_path / "k"), "StatefulSet", "switchyard-redis")
    base_container = base["spec"]["template"]["spec"]["containers"][0]
    container = fleet["spec"]["template"]["spec"]["containers"][0]
    assert {k: v for k, v in container.items() if k != "args"} == {
        k: v for k, v in base_container.items() if k != "args"
    }
    [base_script] = base_container["args"]
    [script] = container["args"]
    assert "--maxmemory-policy allkeys-lru" in base_script
    # kustomize drops a patched block's final newline; the here-document still ends at "EOF"
    assert script == base_script.replace("allkeys-lru", "noeviction").rstrip("\n")
    # run it under a real sh with a redis-server that reports what it got: the password arrives on
    # stdin (never the command line) and the eviction policy on the command line
    shell = shutil.which("sh")
    assert shell is not None
    fake = tmp_path / "bin" / "redis-server"
    fake.parent.mkdir()
    fake.write_text('#!/bin/sh\necho "args: $*"\necho "stdin: $(cat)"\n')
    fake.chmod(0o755)
    env = {"PATH": f"{fake.parent}:/usr/bin:/bin", "REDISCLI_AUTH": "hexpassword42"}
    result = subprocess.run(
        [*container["command"], script], env=env, capture_output=True, text=True, timeout=30, check=True
    )
    arguments, _, stdin = result.stdout.partition("stdin:")
    assert "--maxmemory-policy noeviction" in arguments and "hexpassword42" not in arguments
    assert stdin.strip() == "requirepass hexpassword42"
    assert not result.stderr


def test_the_patched_redis_runs_with_noeviction_and_its_password(tmp_path: Path) -> None:
    """The fleet's Redis command under a real redis-server (only the port changed, as in
    tests/deploy/test_session_store_auth.py): the effective configuration is what the comment says."""
    server, cli = binaries.require("redis-server"), binaries.require("redis-cli")
    container = one(fleet_render("vertex", tmp_path / "k"), "StatefulSet", "switchyard-redis")["spec"][
        "template"
    ]["spec"]["containers"][0]
    port = free_port()
    [script] = container["args"]
    script = script.replace("exec redis-server - ", f"exec {server} - --port {port} --bind 127.0.0.1 ", 1)
    password = "0123456789abcdef0123456789abcdef"
    env = {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "REDISCLI_AUTH": password}
    process = subprocess.Popen(
        [*container["command"], script],
        env=env,
        cwd=tmp_path,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:

        def config(name: str) -> str:
            result = subprocess.run(
                [cli, "-p", str(port), "config", "get", name],
                env=env,
                capture_output=True,
                text=True,
                timeout=10,
            )
            return (
                result.stdout.splitlines()[1]
                if result.returncode == 0 and result.stdout.count("\n") >= 2
                else ""
            )

        deadline = time.monotonic() + 15
        while not config("maxmemory-policy"):
            assert process.poll() is None and time.monotonic() < deadline, "redis-server did not start"
            time.sleep(0.05)
        assert config("maxmemory-policy") == "noeviction"
        assert (config("requirepass"), config("protected-mode"), config("maxmemory")) == (
            password,
            "yes",
            str(200 * 1024 * 1024),
        )
    finally:
        process.terminate()
        process.wait(10)
