"""framebus.net's engines: one registry by name, one transport contract, and the options that
only one engine takes kept in that engine's options (the old keywords routed there, another
engine's refused with a ValueError that names it). Nothing here opens a socket or a session."""

from __future__ import annotations

import inspect

import pytest

net = pytest.importorskip("framebus.net")
from framebus.net.engine import PublishTransport, SubscribeTransport, registry  # noqa: E402


def test_the_registry_names_the_engines_and_refuses_others():
    assert registry.names() == ["zmq", "zenoh"] and registry.DEFAULT == "zmq"
    with pytest.raises(ValueError, match="engine must be one of 'zmq', 'zenoh'"):
        registry.engine("dds")
    with pytest.raises(ValueError, match="engine must be"):
        net.publish("nope", "tcp://127.0.0.1:*", engine="dds")


def test_every_transport_meets_the_contract():
    """Each engine's transports have every call of the contract, with the contract's parameters."""
    pytest.importorskip("zmq")
    pytest.importorskip("zenoh")
    for end, contract in (("publish", PublishTransport), ("subscribe", SubscribeTransport)):
        wanted = {n for n in dir(contract) if not n.startswith("_")}
        for name in registry.names():
            transport = registry.engine(name).transport(end)
            assert transport.name == name
            for call in wanted - {"name"}:
                got = inspect.signature(getattr(transport, call)).parameters
                assert list(got) == [p for p in inspect.signature(getattr(contract, call)).parameters if p != "self"], (name, end, call)


def test_zeromq_keywords_are_routed_to_the_zeromq_options():
    opts = net.PublishOptions(mode="lossless", curve_certificate="server.key_secret", copy_threshold=64)
    assert opts.engine_options == net.ZmqPublishOptions(copy_threshold=64, curve_certificate="server.key_secret")
    assert net.PublishOptions().engine_options is None
    import dataclasses

    assert dataclasses.replace(opts, hwm=2).engine_options == opts.engine_options  # kept by replace()
    sub = net.SubscribeOptions(curve_server_certificate="server.key")
    assert sub.engine_options == net.ZmqSubscribeOptions(curve_server_certificate="server.key")
    with pytest.raises(ValueError, match="curve_location needs curve_certificate"):
        net.PublishOptions(curve_location="clients")
    with pytest.raises(ValueError, match="curve_certificate needs curve_server_certificate"):
        net.SubscribeOptions(curve_certificate="me.key_secret")


def test_an_option_of_another_engine_is_a_value_error_naming_it():
    with pytest.raises(ValueError, match="curve_certificate is an option of the zmq engine .*engine='zenoh'"):
        net.publish("nope", "framebus/nope", engine="zenoh", curve_certificate="server.key_secret")
    with pytest.raises(ValueError, match="listen is an option of the zenoh engine .*engine='zmq'"):
        net.subscribe("tcp://127.0.0.1:1", "nope", listen=["tcp/127.0.0.1:7447"])
    with pytest.raises(ValueError, match="the options given are the zmq engine's"):
        net.publish("nope", "framebus/nope", net.PublishOptions(curve_certificate="k"), engine="zenoh")
    with pytest.raises(ValueError, match="copy_threshold is an option of the zmq engine, not of the zenoh engine"):
        net.PublishOptions(engine_options=net.ZenohLink(), copy_threshold=64)
    with pytest.raises(TypeError, match="engine_options must be one of"):
        net.PublishOptions(engine_options="zenoh")


def test_the_engine_options_choose_the_engine():
    """Publisher(name, endpoint, options) builds the transport of the engine whose options it is
    given (the ZeroMQ one by default); nothing is opened before it starts."""
    pytest.importorskip("zenoh")
    pytest.importorskip("zmq")
    zenoh_pub = net.Publisher("nope", "framebus/nope", net.PublishOptions(engine_options=net.ZenohLink(scouting=False)))
    assert zenoh_pub.engine == "zenoh" and zenoh_pub.carrier.link == net.ZenohLink(scouting=False)
    assert net.Publisher("nope", "tcp://127.0.0.1:*").engine == "zmq"
    sub = net.Subscriber("framebus/nope", "nope", net.SubscribeOptions(engine_options=net.ZenohLink()))
    assert sub.engine == "zenoh" and sub.decoder is None and sub.reach_note() == ""
    with pytest.raises(net.EndpointError, match="no wildcards"):
        net.Subscriber("framebus/*", "nope", net.SubscribeOptions(engine_options=net.ZenohLink()))
