"""Sweeps across hosts: one `bench run` per node, joined by torchrun's c10d rendezvous.

Every node runs the same command with `--nnodes N --node-rank R --rdzv-endpoint HOST:PORT`
(or, under Slurm's `srun`, nothing: the task count, task rank and first host of the job
come from Slurm). Node 0 leads: its parent hosts the rendezvous store (a TCPStore at the
endpoint, which must be one of node 0's addresses), runs the sweep and writes every row.
The other nodes follow: for each worker node 0 starts with a launcher that spans nodes
(torchrun), node 0 publishes the worker's spec in the store; each follower starts the same
torchrun with its own GPUs, and every torchrun agent joins the rendezvous of that worker
through the same store (`--rdzv-backend c10d --rdzv-conf is_host=false`). When node 0's
worker ends, the followers end theirs. Cases whose launcher runs one process (single, dp,
MXNet...) run on node 0 alone.

Through the store, too: a node started with other sweep arguments is refused at start-up
(each node publishes a hash of its case list and measurement settings); a follower's rank
that fails sends its reason to node 0, which puts it in the case's row; followers beat a
counter every second, so that node 0 stops with a clear message instead of waiting on a
node that is gone. Rank numbers come from the rendezvous (c10d may give global rank 0 to
any node); the reporting process is local rank 0 of node 0 (bench/run/worker.py).
"""
from __future__ import annotations

import hashlib
import json
import math
import os
import subprocess
import sys
import threading
import time
from dataclasses import dataclass
from datetime import timedelta

from bench.run.signals import Terminated

PREFIX = "parabench"
DEFAULT_PORT = 29400
# Beyond this many hosts node 0's store and its per-node bookkeeping are untried; 1024 is far above
# any run made here (2 nodes) and below where a typo (100000) would wait for nodes that never come.
MAX_NODES = 1024
# Node 0 resolves its endpoint's host within this many seconds (a DNS that never answers would
# hold the store's C++ constructor, which no signal interrupts).
RESOLVE_TIMEOUT_S = 10.0


class NodesError(Exception):
    """A multi-node run that cannot go on; the message says why and what to do."""


@dataclass(frozen=True)
class Nodes:
    nnodes: int = 1
    node_rank: int = 0
    host: str = ""
    port: int = DEFAULT_PORT
    run_id: str = "parabench"

    @property
    def leader(self) -> bool:
        return self.node_rank == 0

    @property
    def endpoint(self) -> str:
        return f"{self.host}:{self.port}"

    def rendezvous(self, launch: int) -> list[str]:
        """torchrun's arguments to join launch number `launch` (every worker is a rendezvous of its own)."""
        return ["--nnodes", str(self.nnodes), "--rdzv-backend", "c10d", "--rdzv-endpoint", self.endpoint,
                "--rdzv-id", f"{self.run_id}-{launch}", "--rdzv-conf", "is_host=false", "--max-restarts", "0"]


def from_args(nnodes: int | None, node_rank: int | None, endpoint: str | None, run_id: str | None,
              environ: dict | None = None) -> Nodes:
    """The nodes of this run: from the flags, else from Slurm (one parabench task per node:
    SLURM_NTASKS tasks, this one SLURM_PROCID, the endpoint on the job's first host)."""
    env = os.environ if environ is None else environ
    slurm = "SLURM_NTASKS" in env and "SLURM_PROCID" in env and nnodes is None
    if slurm and int(env["SLURM_NTASKS"]) > 1:
        nnodes, node_rank = int(env["SLURM_NTASKS"]), int(env["SLURM_PROCID"])
        if endpoint is None:
            endpoint = f"{first_slurm_host(env)}:{DEFAULT_PORT}"
        run_id = run_id or f"slurm-{env.get('SLURM_JOB_ID', '0')}"
    nnodes = 1 if nnodes is None else nnodes
    if not 1 <= nnodes <= MAX_NODES:
        raise NodesError(f"--nnodes takes 1 to {MAX_NODES} hosts, got {nnodes}")
    if nnodes == 1:
        given = [flag for flag, value in (("--node-rank", node_rank), ("--rdzv-endpoint", endpoint))
                 if value not in (None, "")]
        if given and not slurm:  # a rank or an endpoint means more than one host: said, never dropped
            raise NodesError(f"{' and '.join(given)} join{'s' if len(given) == 1 else ''} hosts into one run: give "
                             "--nnodes N (2 or more) too, or leave them out")
        return Nodes()
    if node_rank is None or not 0 <= node_rank < nnodes:
        raise NodesError(f"--nnodes {nnodes} needs --node-rank between 0 and {nnodes - 1}, got {node_rank}")
    if not endpoint:
        raise NodesError("--nnodes > 1 needs --rdzv-endpoint HOST:PORT (an address of node 0, the same on every node)")
    host, port = parse_endpoint(endpoint)
    return Nodes(nnodes, node_rank, host, port, run_id or "parabench")


def parse_endpoint(endpoint: str) -> tuple[str, int]:
    """HOST:PORT, [IPV6]:PORT, HOST or [IPV6] (port 29400): the host and the port, one line
    naming the fix for anything else (a bare IPv6 address reads as host and port)."""
    usage = f"--rdzv-endpoint takes HOST:PORT or [IPV6]:PORT with a port 1-65535, got {endpoint!r}"
    if endpoint.startswith("["):
        host, bracket, rest = endpoint[1:].partition("]")
        if not bracket or not host or (rest and not rest.startswith(":")):
            raise NodesError(usage)
        port = rest[1:] if rest else str(DEFAULT_PORT)
    elif endpoint.count(":") > 1:
        raise NodesError(f"{usage}: write an IPv6 address in brackets, e.g. [::1]:{DEFAULT_PORT}")
    else:
        host, _, port = endpoint.partition(":") if ":" in endpoint else (endpoint, "", str(DEFAULT_PORT))
    if not host or not port.isdigit() or not 1 <= int(port) <= 65535:
        # Port 0 would have each node pick a port of its own: the others could not find node 0's.
        raise NodesError(usage)
    return host, int(port)


def check_hostable(host: str, port: int, timeout_s: float = RESOLVE_TIMEOUT_S) -> None:
    """Node 0 hosts the store at host:port: the host must resolve (within `timeout_s`, in a
    thread, so that a signal still stops the wait) to an address of this machine, and the port
    must be free. One line naming the fix, before torch's store would retry in silence."""
    import socket

    found: dict = {}

    def resolve():
        try:
            found["addresses"] = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)
        except OSError as exc:
            found["error"] = exc

    thread = threading.Thread(target=resolve, daemon=True)
    thread.start()
    thread.join(timeout_s)
    if thread.is_alive():
        raise NodesError(f"node 0 could not resolve {host!r} of --rdzv-endpoint within {timeout_s:g} s: "
                         "give an address of node 0 (its IP address or a name the DNS knows)")
    if "error" in found:
        raise NodesError(f"node 0 cannot resolve {host!r} of --rdzv-endpoint "
                         f"({found['error'].strerror or found['error']}): "
                         "give an address of node 0 (its IP address or a name the DNS knows)")
    problems = []
    for family, kind, proto, _, address in found["addresses"]:
        try:
            with socket.socket(family, kind, proto) as probe:
                probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
                probe.bind(address)
                return
        except OSError as exc:
            problems.append(exc)
    reason = problems[0].strerror if problems else "no address"
    raise NodesError(f"node 0 cannot listen at {host}:{port} ({reason}): the endpoint must be an address of node 0 "
                     "with a free port")


def node_list(numbers: list[int], most: int = 8) -> str:
    """'1-3, 7, 9-99999': consecutive node numbers as ranges, at most `most` of them shown."""
    spans: list[list[int]] = []
    for n in sorted(numbers):
        if spans and n == spans[-1][1] + 1:
            spans[-1][1] = n
        else:
            spans.append([n, n])
    text = [f"{a}" if a == b else f"{a}-{b}" for a, b in spans]
    return ", ".join(text[:most]) + (f" and {len(text) - most} more ranges" if len(text) > most else "")


def first_slurm_host(env) -> str:
    """The first host of the job's node list (`scontrol show hostnames` expands it)."""
    nodelist = env.get("SLURM_JOB_NODELIST") or env.get("SLURM_NODELIST")
    if not nodelist:
        raise NodesError("under Slurm without SLURM_JOB_NODELIST: pass --rdzv-endpoint HOST:PORT")
    try:
        out = subprocess.run(["scontrol", "show", "hostnames", nodelist], capture_output=True, text=True, check=True,
                             timeout=30).stdout.split()
    except (OSError, subprocess.SubprocessError) as exc:
        raise NodesError(f"cannot expand the Slurm node list {nodelist!r} with scontrol ({exc}): "
                         "pass --rdzv-endpoint HOST:PORT") from None
    if not out:
        raise NodesError(f"scontrol found no host in {nodelist!r}: pass --rdzv-endpoint HOST:PORT")
    return out[0]


def sweep_hash(cases) -> str:
    """What every node must agree on: the cases (their keys) and how they are measured."""
    text = json.dumps([[list(map(str, c.key())), c.measurement()] for c in cases])
    return hashlib.sha256(text.encode()).hexdigest()[:16]


def _first_line(exc: BaseException) -> str:
    """An exception's first line: c10d's carry the C++ stack after it (hundreds of lines)."""
    text = str(exc).strip()
    return text.splitlines()[0] if text else type(exc).__name__


def _import_tcp_store():
    """torch's TCPStore, with torch's C++ log of this process (the sweep's parent, never its
    workers) kept to fatal errors: a refused or lost connection logs each retry with its
    C++ stack, 135-225 lines, where the message parabench gives is one line."""
    given = os.environ.get("TORCH_CPP_LOG_LEVEL")
    os.environ["TORCH_CPP_LOG_LEVEL"] = given or "FATAL"
    try:
        from torch.distributed import TCPStore
    finally:
        if given is None:
            del os.environ["TORCH_CPP_LOG_LEVEL"]  # the workers log as torch does
    return TCPStore


def wait_for_port(host: str, port: int, timeout_s: float, what: str) -> float:
    """Wait until something listens at host:port; the seconds left of `timeout_s`. A plain
    socket, not the store's client: its connect retries with a random back-off that ran a
    300 s limit to 363 s."""
    import socket

    countdown = Countdown(timeout_s)
    while True:
        try:
            with socket.create_connection((host, port), timeout=min(5.0, max(0.1, countdown.left()))):
                return countdown.left()
        except OSError:
            if countdown.expired():
                raise NodesError(f"{what} cannot reach the rendezvous store at {host}:{port} within {timeout_s:g} s: "
                                 "start node 0 first, check the address") from None
            countdown.say(f"{what}: waiting for node 0's rendezvous store at {host}:{port}")
            time.sleep(min(0.5, max(0.0, countdown.left())))


class Store:
    """The rendezvous store, and the keys parabench keeps in it."""

    def __init__(self, nodes: Nodes, timeout_s: float):
        TCPStore = _import_tcp_store()
        self.nodes = nodes
        if nodes.leader:
            check_hostable(nodes.host, nodes.port)
        else:
            timeout_s = max(1.0, wait_for_port(nodes.host, nodes.port, timeout_s, f"node {nodes.node_rank}"))
        try:
            self.store = TCPStore(nodes.host, nodes.port, is_master=nodes.leader, multi_tenant=True,
                                  wait_for_workers=False, timeout=timedelta(seconds=timeout_s))
        except Terminated:  # SIGTERM while torch waited: the sweep stops as on any SIGTERM (143)
            raise
        except Exception as exc:  # noqa: BLE001 - socket errors surface as several types
            if nodes.leader:
                raise NodesError(f"node 0 cannot host the rendezvous store at {nodes.endpoint} ({_first_line(exc)}): "
                                 "the endpoint must be an address of node 0 with a free port") from None
            raise NodesError(f"node {nodes.node_rank} cannot reach the rendezvous store at {nodes.endpoint} within "
                             f"{timeout_s:g} s ({_first_line(exc)}): start node 0 first, check the address") from None

    def key(self, *parts) -> str:
        return "/".join([PREFIX, self.nodes.run_id, *map(str, parts)])

    def _call(self, method: str, *args):
        """One store operation; a lost connection (node 0 gone) becomes a NodesError that
        says so, whichever of the store's error types it came as."""
        try:
            return getattr(self.store, method)(*args)
        except Terminated:  # SIGTERM raised from inside torch's call: a stop, not a lost node 0 (143)
            raise
        except Exception as exc:  # noqa: BLE001 - DistStoreError, DistNetworkError, RuntimeError...
            raise NodesError(f"lost node 0's rendezvous store at {self.nodes.endpoint} ({_first_line(exc)}): node 0 is "
                             "gone; its results file holds what finished") from None

    def set(self, value, *parts) -> None:
        self._call("set", self.key(*parts), json.dumps(value))

    def has(self, *parts) -> bool:
        return self._call("check", [self.key(*parts)])

    def get(self, *parts):
        return json.loads(self._call("get", self.key(*parts)))

    def beat(self) -> int:
        return self._call("add", self.key("beat", self.nodes.node_rank), 1)

    def beats(self, node: int) -> int:
        return self._call("add", self.key("beat", node), 0)


class Countdown:
    """What a node waits for, said at once and then every `every_s` seconds with the time left:
    a node that waits minutes in silence looks hung."""

    def __init__(self, timeout_s: float, every_s: float = 10.0):
        self.deadline = time.monotonic() + timeout_s
        self.every_s, self.said = every_s, -math.inf

    def expired(self) -> bool:
        return time.monotonic() >= self.deadline

    def left(self) -> float:
        return max(0.0, self.deadline - time.monotonic())

    def say(self, text: str) -> None:
        now = time.monotonic()
        if now - self.said >= self.every_s:
            print(f"{text} ({max(0.0, self.deadline - now):.0f} s left)", file=sys.stderr, flush=True)
            self.said = now


def agree(store: Store, digest: str, timeout_s: float) -> None:
    """Every node publishes its sweep's hash; node 0 compares them and publishes the verdict."""
    nodes = store.nodes
    store.set(digest, "hash", nodes.node_rank)
    if nodes.leader:
        countdown = Countdown(timeout_s)
        missing = [n for n in range(1, nodes.nnodes) if not store.has("hash", n)]
        while missing and not countdown.expired():
            countdown.say(f"node 0: waiting for node(s) {node_list(missing)} of {nodes.nnodes} to join at "
                          f"{nodes.endpoint} (start the same command there with its --node-rank)")
            time.sleep(0.2)
            missing = [n for n in missing if not store.has("hash", n)]
        if missing:
            verdict = f"node(s) {node_list(missing)} did not join within {timeout_s:g} s"
        else:
            differ = [n for n in range(1, nodes.nnodes) if store.get("hash", n) != digest]
            verdict = (f"node(s) {node_list(differ)} were started with other sweep arguments than node 0: "
                       "run the same command on every node (only --node-rank may differ)") if differ else "ok"
        store.set(verdict, "verdict")
        if verdict != "ok":  # the store lives in this process: keep it until the nodes that joined have read why
            joined = [n for n in range(1, nodes.nnodes) if n not in missing]
            deadline = time.monotonic() + 10
            while time.monotonic() < deadline and not all(store.has("seen", n) for n in joined):
                time.sleep(0.2)
    else:
        countdown = Countdown(timeout_s + 30)
        while not store.has("verdict"):
            if countdown.expired():
                raise NodesError(f"node 0 did not confirm the sweep within {timeout_s:g} s")
            countdown.say(f"node {nodes.node_rank}: waiting for node 0 to confirm the sweep (every node must join)")
            time.sleep(0.2)
        verdict = store.get("verdict")
        store.set(True, "seen", nodes.node_rank)
    if verdict != "ok":
        raise NodesError(verdict)
