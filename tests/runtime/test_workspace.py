"""Issue 10, the process plane's safety rules as pure functions: command parsing against the
allowlist and denylist, the workspace folder (nothing may leave the root), the rebuilt
environment, and masking of known secrets in captured output."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from app.runtime.errors import CommandNotAllowed, WorkspaceOutsideRoot
from app.runtime.tools.workspace import (
    ProcessPolicy,
    parse_command,
    process_environment,
    redact,
    resolve_program,
    split_names,
    workspace_dir,
    workspace_name,
)
from app.settings import Settings

ALLOW = split_names("sleep, echo,python3,,printf")


def policy(root: Path, **kw: object) -> ProcessPolicy:
    return ProcessPolicy(root=root, **{"allowlist": ALLOW, **kw})  # type: ignore[arg-type]


def test_split_names() -> None:
    assert split_names(" a, b,,c ") == {"a", "b", "c"}
    assert split_names("") == frozenset()


def test_parse_command_splits_like_a_shell_but_checks_the_program(tmp_path: Path) -> None:
    p = policy(tmp_path)
    assert parse_command("sleep 30", p) == ["sleep", "30"]
    assert parse_command("printf '%s %s' 'a b' c", p) == ["printf", "%s %s", "a b", "c"]
    # Shell syntax is only text to the program: nothing is interpreted.
    assert parse_command("echo hi; rm -rf / && $(id)", p) == [
        "echo",
        "hi;",
        "rm",
        "-rf",
        "/",
        "&&",
        "$(id)",
    ]


@pytest.mark.parametrize(
    ("command", "why"),
    [
        ("bash -c 'echo hi'", "not allowed"),
        ("rm -rf .", "not allowed"),
        ("/bin/sleep 1", "by name, not by path"),
        ("./sleep 1", "by name, not by path"),
        ("", "empty"),
        ("   ", "empty"),
        ("echo 'unclosed", "cannot be parsed"),
    ],
)
def test_parse_command_refuses(tmp_path: Path, command: str, why: str) -> None:
    with pytest.raises(CommandNotAllowed, match=why):
        parse_command(command, policy(tmp_path))


def test_denylist_wins_and_an_empty_allowlist_allows_the_rest(tmp_path: Path) -> None:
    open_policy = policy(tmp_path, allowlist=frozenset(), denylist=frozenset({"rm"}))
    assert parse_command("ls -la", open_policy) == ["ls", "-la"]
    with pytest.raises(CommandNotAllowed, match="denylist"):
        parse_command("rm x", open_policy)
    both = policy(tmp_path, denylist=frozenset({"sleep"}))
    with pytest.raises(CommandNotAllowed, match="denylist"):
        parse_command("sleep 1", both)


def test_programs_resolve_on_the_policy_path_only(tmp_path: Path) -> None:
    assert resolve_program("sleep", policy(tmp_path)).endswith("/sleep")
    with pytest.raises(CommandNotAllowed, match="not found"):
        resolve_program("sleep", policy(tmp_path, path=str(tmp_path)))


def test_workspace_name_comes_from_the_binding_or_the_session() -> None:
    assert workspace_name({"workspace": "repo-a"}, "s1") == "repo-a"
    assert workspace_name({}, "s1") == "s1"
    with pytest.raises(WorkspaceOutsideRoot):
        workspace_name({"workspace": {"path": "x"}}, "s1")


def test_workspace_dir_stays_inside_the_tenant_folder(tmp_path: Path) -> None:
    p = policy(tmp_path)
    assert workspace_dir(p, "t1", "repo-a") == (tmp_path / "t1" / "repo-a").resolve()
    assert workspace_dir(p, "t1", "team/repo") == (tmp_path / "t1" / "team" / "repo").resolve()
    assert workspace_dir(p, "t1", "a/./b") == (tmp_path / "t1" / "a" / "b").resolve()


@pytest.mark.parametrize(
    "name", ["..", "../t2/repo", "a/../../x", "/etc", "/", "~", "~root", "", " ", ".", "a\x00b"]
)
def test_workspace_dir_refuses_escapes(tmp_path: Path, name: str) -> None:
    with pytest.raises(WorkspaceOutsideRoot):
        workspace_dir(policy(tmp_path), "t1", name)


def test_workspace_dir_refuses_a_symlink_out_and_a_tenant_id_with_a_path(tmp_path: Path) -> None:
    outside = tmp_path / "outside"
    outside.mkdir()
    root = tmp_path / "root"
    (root / "t1").mkdir(parents=True)
    os.symlink(outside, root / "t1" / "link")
    with pytest.raises(WorkspaceOutsideRoot, match="outside"):
        workspace_dir(policy(root), "t1", "link")
    with pytest.raises(WorkspaceOutsideRoot):
        workspace_dir(policy(root), "../x", "repo")


def test_environment_is_rebuilt_from_nothing(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("ASR_OPENAI_API_KEY", "sk-should-never-leak")
    env = process_environment(policy(tmp_path, path="/usr/bin:/bin"), tmp_path)
    assert env["PATH"] == "/usr/bin:/bin" and env["HOME"] == str(tmp_path)
    assert set(env) == {"PATH", "HOME", "PWD", "LANG", "LC_ALL", "TERM", "PYTHONUNBUFFERED"}
    assert "sk-should-never-leak" not in env.values()


def test_redact_masks_known_secrets_keeping_offsets() -> None:
    data = b"key=hunter22 and hunter22 again"
    masked = redact(data, ("hunter22", ""))
    assert masked == b"key=******** and ******** again" and len(masked) == len(data)


def test_settings_defaults_and_validation() -> None:
    defaults = {name: field.default for name, field in Settings.model_fields.items()}
    assert defaults["processes_enabled"] is False
    assert split_names(defaults["process_allowlist"]) >= {"sleep", "echo", "python3", "printf"}
    assert defaults["delegation_max_depth"] == 3
    with pytest.raises(ValueError, match="not a program name"):
        Settings(process_allowlist="sleep,/bin/sh")
