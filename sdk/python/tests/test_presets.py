"""Presets, an agent's env and its setup script, with the sync and the async client."""

from __future__ import annotations

import time

import pytest

from agenthold import AsyncClient, Client, Conflict, InvalidRequest, Preset

from .conftest import unique

SETUP_DEADLINE = 30.0


def wait_setup(client: Client, name: str, state: str) -> None:
    deadline = time.monotonic() + SETUP_DEADLINE
    while time.monotonic() < deadline:
        setup = client.agents.get(name).setup
        if setup is not None and setup.state == state:
            return
        time.sleep(0.05)
    pytest.fail(f"the setup of {name} did not become {state}")


def test_presets_are_listed(client: Client) -> None:
    presets = client.presets.list()
    assert [p.name for p in presets] == ["plain", "py", "warm"]
    py = presets[1]
    assert isinstance(py, Preset)
    assert py.description == "for the client's tests"
    assert (py.cpus, py.env, py.default, py.setup_on_rebuild) == (
        1.0,
        {"FROM_PRESET": "p"},
        False,
        False,
    )
    assert py.setup is not None and "setup-ran" in py.setup
    assert presets[0].setup is None and presets[0].image


def test_create_with_a_preset_and_env_then_change_env(client: Client) -> None:
    with client.agents.create(unique("pre"), preset="py", env={"OWN": "o"}, idle_minutes=0) as a:
        assert (a.preset, a.cpus) == ("py", 1.0)
        assert a.env == {"FROM_PRESET": "p", "OWN": "o"}
        assert a.commands.run("echo $FROM_PRESET-$OWN").stdout == "p-o\n"
        wait_setup(client, a.id, "done")
        a.refresh()
        assert a.setup is not None and a.setup.exit_code == 0 and a.setup.process_id
        assert a.commands.run("cat setup-ran").stdout == "set up p\n"

        a.update(env={"OWN": "new"})
        assert a.env == {"OWN": "new"}
        assert a.commands.run("echo ${FROM_PRESET:-none}-$OWN").stdout == "none-new\n"

        a.rerun_setup()
        assert a.setup is not None
        deadline = time.monotonic() + SETUP_DEADLINE
        while a.commands.run("wc -l < setup-ran").stdout.strip() != "2":
            assert time.monotonic() < deadline, "the rerun did not write"
            time.sleep(0.05)


def test_bad_presets_and_env_are_refused(client: Client) -> None:
    with pytest.raises(InvalidRequest) as e:
        client.agents.create(unique("bad"), preset="nope", wait=False)
    assert e.value.field == "preset" and "py" in str(e.value)
    with pytest.raises(InvalidRequest) as e:
        client.agents.create(unique("bad"), env={"HTTP_PROXY": "x"}, wait=False)
    assert e.value.field == "env"
    with client.agents.create(unique("nosetup"), preset="plain", idle_minutes=0) as a:
        assert (a.preset, a.env, a.setup) == ("plain", {}, None)
        with pytest.raises(Conflict):
            a.rerun_setup()


async def test_async_presets_and_env(aclient: AsyncClient) -> None:
    presets = await aclient.presets.list()
    assert {p.name for p in presets} == {"plain", "py", "warm"}
    async with await aclient.agents.create(
        unique("apre"), preset="plain", env={"A": "1"}, idle_minutes=0
    ) as a:
        assert a.env == {"A": "1"}
        await a.update(env={"A": "2"})
        assert (await a.commands.run("echo $A")).stdout == "2\n"
        with pytest.raises(Conflict):
            await a.rerun_setup()
