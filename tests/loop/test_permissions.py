"""Permission modes by tool kinds, rules by name and path prefix, and who gets asked."""

from __future__ import annotations

import pytest

from loop.tools.permissions import (
    Decision,
    PermissionMode,
    PermissionPolicy,
    PermissionRequest,
    PermissionRule,
    PermissionVerdict,
    evaluate,
    resolve,
)

M = PermissionMode
READ = PermissionRequest(
    "read_file", {"path": "src/a.py"}, "t1", read_only=True, destructive=False, paths=("src/a.py",)
)
EDIT = PermissionRequest(
    "edit_file", {"path": "src/a.py"}, "t2", read_only=False, destructive=False, paths=("src/a.py",)
)
DESTROY = PermissionRequest(
    "write_file", {"path": "src/a.py"}, "t3", read_only=False, destructive=True, paths=("src/a.py",)
)


async def _classifier(request: PermissionRequest) -> PermissionVerdict:
    return PermissionVerdict(True, "classifier")


# mode -> (read-only, edit, destructive), with a classifier and a parent configured
MATRIX = {
    M.BYPASS_PERMISSIONS: (Decision.ALLOW, Decision.ALLOW, Decision.ALLOW),
    M.DONT_ASK: (Decision.ALLOW, Decision.ALLOW, Decision.ALLOW),
    M.AUTO: (Decision.ALLOW, Decision.ASK_CLASSIFIER, Decision.ASK_CLASSIFIER),
    M.ACCEPT_EDITS: (Decision.ALLOW, Decision.ALLOW, Decision.ASK_USER),
    M.DEFAULT: (Decision.ALLOW, Decision.ASK_USER, Decision.ASK_USER),
    M.PLAN: (Decision.ALLOW, Decision.DENY, Decision.DENY),
    M.BUBBLE: (Decision.ALLOW, Decision.ASK_PARENT, Decision.ASK_PARENT),
}


def test_the_matrix_covers_every_mode() -> None:
    assert set(MATRIX) == set(PermissionMode)


@pytest.mark.parametrize("mode", list(PermissionMode))
@pytest.mark.parametrize("kind", [0, 1, 2], ids=["read_only", "edit", "destructive"])
def test_mode_matrix(mode: PermissionMode, kind: int) -> None:
    policy = PermissionPolicy(mode=mode, classifier=_classifier, parent=_classifier)
    decision, reason = evaluate(policy, (READ, EDIT, DESTROY)[kind])
    assert decision is MATRIX[mode][kind]
    assert reason


def test_auto_without_a_classifier_asks_the_user() -> None:
    assert evaluate(PermissionPolicy(mode=M.AUTO), EDIT)[0] is Decision.ASK_USER


@pytest.mark.parametrize("mode", list(PermissionMode))
def test_a_deny_rule_wins_in_every_mode(mode: PermissionMode) -> None:
    policy = PermissionPolicy(mode=mode, deny=(PermissionRule(tool="read_file"),))
    assert evaluate(policy, READ)[0] is Decision.DENY


def test_deny_by_path_prefix_matches_any_path() -> None:
    policy = PermissionPolicy(mode=M.BYPASS_PERMISSIONS, deny=(PermissionRule(path_prefix="secrets"),))
    inside = PermissionRequest("read_file", {}, "t", True, False, paths=("docs/x", "secrets/key.pem"))
    lookalike = PermissionRequest("read_file", {}, "t", True, False, paths=("secrets-public/x",))
    assert evaluate(policy, inside)[0] is Decision.DENY
    assert evaluate(policy, lookalike)[0] is Decision.ALLOW


def test_allow_rules_by_name_and_by_path_prefix() -> None:
    by_name = PermissionPolicy(allow=(PermissionRule(tool="write_file"),))
    assert evaluate(by_name, DESTROY)[0] is Decision.ALLOW
    by_path = PermissionPolicy(allow=(PermissionRule(tool="edit_file", path_prefix="src/"),))
    assert evaluate(by_path, EDIT)[0] is Decision.ALLOW
    outside = PermissionRequest("edit_file", {}, "t", False, False, paths=("src/a.py", "docs/b.md"))
    assert evaluate(by_path, outside)[0] is Decision.ASK_USER  # an allow rule must cover every path
    pathless = PermissionRequest("edit_file", {}, "t", False, False)
    assert evaluate(by_path, pathless)[0] is Decision.ASK_USER


def test_plan_mode_is_not_widened_by_allow_rules() -> None:
    policy = PermissionPolicy(mode=M.PLAN, allow=(PermissionRule(tool="edit_file"),))
    assert evaluate(policy, EDIT)[0] is Decision.DENY


def test_a_rule_needs_a_tool_or_a_path() -> None:
    with pytest.raises(ValueError, match="needs a tool name"):
        PermissionRule()


async def test_resolve_asks_the_right_party() -> None:
    asked: list[str] = []

    def answer(who: str, allowed: bool):  # type: ignore[no-untyped-def]
        async def callback(request: PermissionRequest) -> PermissionVerdict:
            asked.append(who)
            return PermissionVerdict(allowed, who)

        return callback

    policy = PermissionPolicy(
        mode=M.AUTO, classifier=answer("classifier", True), parent=answer("parent", False)
    )
    assert (await resolve(policy, EDIT, answer("user", False))).allowed
    bubble = PermissionPolicy(mode=M.BUBBLE, parent=answer("parent", False))
    assert not (await resolve(bubble, EDIT, answer("user", True))).allowed
    assert not (await resolve(PermissionPolicy(), EDIT, answer("user", False))).allowed
    assert asked == ["classifier", "parent", "user"]


async def test_nobody_to_ask_means_no() -> None:
    for policy in (PermissionPolicy(), PermissionPolicy(mode=M.BUBBLE)):
        verdict = await resolve(policy, DESTROY, None)
        assert not verdict.allowed and "nobody can be asked" in verdict.message


async def test_dont_ask_logs_what_it_allowed(caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level("INFO", logger="switchyard.loop.permissions")
    assert (await resolve(PermissionPolicy(mode=M.DONT_ASK), DESTROY, None)).allowed
    assert "dontAsk: allowed write_file (t3) without asking" in caplog.text
