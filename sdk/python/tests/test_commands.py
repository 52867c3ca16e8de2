"""Foreground commands: results, options, errors, and output delivered as it comes."""

from __future__ import annotations

import pytest

from agenthold import (
    Agent,
    AsyncAgent,
    CommandExitError,
    CommandTimeout,
    InvalidRequest,
)

from .conftest import unique

#: Prints a line, then waits until the file `gate` exists, then prints another. Only a client
#: that hands the first line over while the command runs can make the gate in time: the
#: command's own timeout fails the test otherwise. Nothing here depends on timing.
GATED = "echo first; while [ ! -e gate ]; do sleep 0.02; done; echo late >&2; echo second"
GATE_TIMEOUT = 60.0


def test_run_a_string_under_sh_and_a_list_as_is(agent: Agent) -> None:
    r = agent.commands.run("echo hi; echo oops >&2; exit 3")
    assert (r.stdout, r.stderr, r.exit_code, r.timed_out, r.ok) == (
        "hi\n",
        "oops\n",
        3,
        False,
        False,
    )
    r = agent.commands.run(["printf", "%s|", "a b", "$HOME"])
    assert r.stdout == "a b|$HOME|" and r.exit_code == 0 and r.ok and r.duration_ms >= 0


def test_cwd_env_and_stdin(agent: Agent) -> None:
    d = unique("cwd")
    agent.files.make_dir(d)
    r = agent.commands.run(
        "pwd; echo $GREETING; cat", cwd=d, env={"GREETING": "hello"}, stdin="in\n"
    )
    assert r.stdout.splitlines()[0].endswith("/" + d)
    assert r.stdout.splitlines()[1:] == ["hello", "in"]


def test_a_reserved_env_name_is_refused_as_update_refuses_it(fresh: Agent) -> None:
    with pytest.raises(InvalidRequest) as by_update:
        fresh.update(env={"HTTP_PROXY": "x"})
    with pytest.raises(InvalidRequest) as by_run:
        fresh.commands.run("true", env={"HTTP_PROXY": "x"})
    with pytest.raises(InvalidRequest) as by_start:
        fresh.commands.run("true", env={"HTTP_PROXY": "x"}, background=True)
    for refused in (by_run, by_start):
        assert refused.value.field == "env"
        assert str(refused.value) == str(by_update.value)
    assert fresh.commands.list() == [], "the refused process never started"


def test_check_raises_on_non_zero_exit(agent: Agent) -> None:
    with pytest.raises(CommandExitError) as info:
        agent.commands.run("echo bad >&2; exit 7", check=True)
    assert info.value.exit_code == 7 and info.value.stderr == "bad\n"
    assert agent.commands.run("true", check=True).exit_code == 0
    assert agent.commands.run("no-such-program-here").exit_code == 127


def test_timeout_raises_command_timeout_with_the_result(agent: Agent) -> None:
    with pytest.raises(CommandTimeout) as info:
        agent.commands.run("echo started; sleep 30", timeout=0.5)
    assert info.value.result is not None
    assert info.value.result.timed_out and info.value.result.exit_code == 137
    assert info.value.result.stdout == "started\n"
    assert isinstance(info.value, TimeoutError)


def test_callbacks_get_output_while_the_command_runs(agent: Agent) -> None:
    d = unique("gate")
    agent.files.make_dir(d)
    seen: list[tuple[str, str]] = []

    def on_stdout(text: str) -> None:
        seen.append(("stdout", text))
        if "first" in text:  # the command waits for this before it can end
            agent.files.write(f"{d}/gate", "")

    r = agent.commands.run(
        GATED,
        cwd=d,
        timeout=GATE_TIMEOUT,
        on_stdout=on_stdout,
        on_stderr=lambda text: seen.append(("stderr", text)),
    )
    seen.append(("exit", str(r.exit_code)))
    assert seen[0] == ("stdout", "first\n")
    assert "".join(t for s, t in seen if s == "stdout") == "first\nsecond\n"
    assert seen[-1] == ("exit", "0") and ("stderr", "late\n") in seen
    assert (r.stdout, r.stderr) == ("first\nsecond\n", "late\n")


def test_streamed_runs_raise_like_plain_ones(agent: Agent) -> None:
    with pytest.raises(CommandExitError):
        agent.commands.run("exit 2", check=True, on_stdout=print)
    with pytest.raises(CommandTimeout) as info:
        agent.commands.run("echo x; sleep 30", timeout=0.5, on_stdout=lambda _: None)
    assert info.value.result is not None and info.value.result.stdout == "x\n"


def test_bad_argument_combinations_are_refused_before_sending(agent: Agent) -> None:
    with pytest.raises(TypeError):
        agent.commands.run("cat", stdin=True)  # type: ignore[call-overload]
    with pytest.raises(ValueError):
        agent.commands.run("  ")


async def test_async_run(aagent: AsyncAgent) -> None:
    r = await aagent.commands.run("echo hi; echo oops >&2; exit 3")
    assert (r.stdout, r.stderr, r.exit_code) == ("hi\n", "oops\n", 3)
    d = unique("cwd")
    await aagent.files.make_dir(d)
    r = await aagent.commands.run(
        ["sh", "-c", "pwd; echo $V; cat"], cwd=d, env={"V": "v"}, stdin="s"
    )
    assert r.stdout.splitlines()[1:] == ["v", "s"] and r.stdout.splitlines()[0].endswith(d)
    with pytest.raises(CommandExitError):
        await aagent.commands.run("exit 1", check=True)
    with pytest.raises(CommandTimeout):
        await aagent.commands.run("sleep 30", timeout=0.5)


async def test_async_callbacks_get_output_while_the_command_runs(aagent: AsyncAgent) -> None:
    d = unique("gate")
    await aagent.files.make_dir(d)
    seen: list[tuple[str, str]] = []

    async def on_stdout(text: str) -> None:
        seen.append(("stdout", text))
        if "first" in text:
            await aagent.files.write(f"{d}/gate", b"")

    r = await aagent.commands.run(
        GATED,
        cwd=d,
        timeout=GATE_TIMEOUT,
        on_stdout=on_stdout,
        on_stderr=lambda text: seen.append(("stderr", text)),  # a plain function will do
    )
    seen.append(("exit", str(r.exit_code)))
    assert seen[0] == ("stdout", "first\n")
    assert seen[-1] == ("exit", "0") and ("stderr", "late\n") in seen
    assert r.stdout == "first\nsecond\n"
