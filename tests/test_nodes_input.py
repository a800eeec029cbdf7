"""What a user can type for a multi-node run: every endpoint form, node count and signal gives the
right outcome or one line naming the fix, fast, with nothing left waiting."""
import signal
import socket
import time

import pytest

from bench.run import nodes
from bench.run.signals import Terminated
from tests.conftest import run_cli


@pytest.mark.parametrize("endpoint, expected", [
    ("node0:29500", ("node0", 29500)),
    ("node0", ("node0", nodes.DEFAULT_PORT)),
    ("[::1]:29400", ("::1", 29400)),
    ("[fe80::1]", ("fe80::1", nodes.DEFAULT_PORT)),
])
def test_endpoint_forms(endpoint, expected):
    assert nodes.parse_endpoint(endpoint) == expected


@pytest.mark.parametrize("endpoint, message", [
    ("::1", "write an IPv6 address in brackets, e.g. [::1]:29400"),
    ("fe80::1:29400", "write an IPv6 address in brackets"),
    ("h:0", "a port 1-65535, got 'h:0'"),
    ("h:65536", "a port 1-65535"),
    ("[::1", "takes HOST:PORT or [IPV6]:PORT"),
    ("[::1]x", "takes HOST:PORT or [IPV6]:PORT"),
    (":29400", "takes HOST:PORT"),
])
def test_bad_endpoints_get_one_line(endpoint, message):
    with pytest.raises(nodes.NodesError, match=message.replace("[", r"\[").replace("(", r"\(")):
        nodes.parse_endpoint(endpoint)


def test_node_count_has_an_upper_bound():
    with pytest.raises(nodes.NodesError, match="--nnodes takes 1 to 1024 hosts, got 100000"):
        nodes.from_args(100000, 0, "127.0.0.1:29521", None, environ={})
    assert nodes.from_args(1024, 3, "h:1", None, environ={}).nnodes == 1024


def test_waiting_for_many_nodes_is_one_short_line():
    assert nodes.node_list([1, 2, 3, 7, 9, 10]) == "1-3, 7, 9-10"
    assert nodes.node_list(list(range(1, 100000))) == "1-99999"
    many = nodes.node_list(list(range(1, 100, 2)))
    assert many.endswith("and 42 more ranges") and len(many) < 60, many


def test_node_0_refuses_a_host_that_does_not_resolve_or_is_not_its_own():
    started = time.monotonic()
    # (A DNS that answers every name gives an address that is not this machine's: refused too.)
    with pytest.raises(nodes.NodesError, match="cannot resolve 'no-such-host.invalid'|could not resolve|cannot listen"):
        nodes.check_hostable("no-such-host.invalid", 29400, timeout_s=5)
    assert time.monotonic() - started < 10
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        with pytest.raises(nodes.NodesError, match=f"cannot listen at 127.0.0.1:{port}"):
            nodes.check_hostable("127.0.0.1", port)
    nodes.check_hostable("127.0.0.1", port)  # free again


def test_a_sigterm_inside_a_store_call_stops_the_run_not_a_lost_node_0():
    """torch checks for signals inside its store calls: the handler's Terminated comes out of the
    call and must stay a stop (exit 143), not read as node 0's store lost (exit 2)."""
    class Interrupted:
        def check(self, keys):
            raise Terminated(signal.SIGTERM)

    store = nodes.Store.__new__(nodes.Store)
    store.nodes, store.store = nodes.Nodes(2, 1, "h", 1), Interrupted()
    with pytest.raises(Terminated):
        store.has("verdict")


@pytest.mark.parametrize("endpoint, message", [
    ("::1", "write an IPv6 address in brackets"),
    ("no-such-host.invalid:29400", "no-such-host.invalid"),
])
def test_node_0_with_a_bad_endpoint_says_so_in_one_line_at_once(endpoint, message):
    started = time.monotonic()
    proc = run_cli("run", "--gpus", "", "--strategies", "single", "--batch-sizes", "2", "--nnodes", "2",
                   "--node-rank", "0", "--rdzv-endpoint", endpoint, "--startup-timeout", "60", timeout=120)
    assert proc.returncode == 2 and len(proc.stderr.strip().splitlines()) == 1 and message in proc.stderr, proc.stderr
    assert time.monotonic() - started < 45  # not the startup timeout, nor torch's silent retries
