"""Secrets: set, listed without values, rotated and deleted, with the sync and async client."""

from __future__ import annotations

import pytest

from agenthold import AsyncClient, Client, InvalidRequest, NotFound, Secret

from .conftest import unique

VALUE = "sk-python-test-1f2e3d"


def test_a_secret_is_set_listed_without_its_value_and_deleted(client: Client) -> None:
    name = unique("S").upper().replace("-", "_")
    made = client.secrets.set(
        name, VALUE, hosts=["api.example.test"], header="x-api-key", format="{value}"
    )
    assert isinstance(made, Secret)
    assert (made.name, made.hosts, made.header, made.format) == (
        name,
        ("api.example.test",),
        "x-api-key",
        "{value}",
    )
    rotated = client.secrets.set(name, VALUE + "2", hosts=["api.example.test"])
    assert rotated.created_at == made.created_at
    assert rotated.header == "Authorization"
    listed = {s.name: s for s in client.secrets.list()}
    assert name in listed
    assert VALUE not in repr(listed[name])
    with pytest.raises(InvalidRequest) as bad:
        client.secrets.set(name, VALUE, hosts=["*"])
    assert bad.value.field == "hosts"
    client.secrets.delete(name)
    with pytest.raises(NotFound):
        client.secrets.delete(name)


async def test_the_async_client_has_them_too(aclient: AsyncClient) -> None:
    name = unique("A").upper().replace("-", "_")
    made = await aclient.secrets.set(name, VALUE, hosts=["*.example.test:443"], in_body=True)
    assert made.in_body and made.hosts == ("*.example.test:443",)
    assert name in [s.name for s in await aclient.secrets.list()]
    await aclient.secrets.delete(name)
