"""A sweep across hosts, worker by worker (bench/run/nodes.py says how the hosts join): node 0
publishes each worker that spans nodes in the store and says when it ends (`Leader`); every other
node starts the same worker on its own GPUs and ends it when told (`follow`)."""
from __future__ import annotations

import json
import os
import shutil
import sys
import threading
import time

from bench.core.launch_spec import LaunchSpec
from bench.core.message import SpecError
from bench.run.nodes import Nodes, NodesError, Store


class Leader:
    """Node 0's side: publishes every worker that spans nodes, and its end."""

    # Followers beat every second; this long without a beat, a follower is gone (under load
    # a beat may come late, never this late).
    SILENT_S = 10.0

    def __init__(self, store: Store):
        self.store = store
        self.launches = 0
        self._beats: dict[int, tuple[int, float]] = {}  # follower: (its beat count, when first seen at that count)

    def silent(self) -> list[int]:
        """Followers whose heartbeat has not moved for SILENT_S seconds; at once, without
        waiting (a check every second while a worker starts costs nothing)."""
        now, gone = time.monotonic(), []
        for node in range(1, self.store.nodes.nnodes):
            count = self.store.beats(node)
            seen = self._beats.get(node)
            if seen is None or seen[0] != count:
                self._beats[node] = (count, now)
            elif now - seen[1] >= self.SILENT_S:
                gone.append(node)
        return gone

    def begin(self, spec: LaunchSpec, options: dict) -> int:
        """Publish a worker's launch spec (and its strategy's options, for its command line)."""
        launch = self.launches
        self.launches += 1
        self.store.set({"spec": spec.to_json(), "options": options}, "launch", launch)
        return launch

    def end(self, launch: int) -> None:
        self.store.set(True, "launch", launch, "end")

    def follower_reasons(self, launch: int) -> str:
        """What the followers' ranks reported when they failed in this launch."""
        reasons = [self.store.get("launch", launch, "error", n) for n in range(1, self.store.nodes.nnodes)
                   if self.store.has("launch", launch, "error", n)]
        return "; ".join(f"node {r['node']}: {r['reason']}" for r in reasons)

    def gone(self, wait_s: float = 3.0) -> list[int]:
        """Followers whose heartbeat stopped (checked over `wait_s` seconds)."""
        followers = range(1, self.store.nodes.nnodes)
        before = {n: self.store.beats(n) for n in followers}
        time.sleep(wait_s)
        return [n for n in followers if self.store.beats(n) == before[n]]

    def finish(self, wait_s: float = 30.0) -> None:
        """Tell the followers the sweep is over, and keep the store up until they have read it."""
        try:
            self.store.set({"finished": True}, "launch", self.launches)
            deadline = time.monotonic() + wait_s
            followers = range(1, self.store.nodes.nnodes)
            while time.monotonic() < deadline and not all(self.store.has("bye", n) for n in followers):
                time.sleep(0.2)
        except Exception:  # noqa: BLE001 - leaving anyway; a follower that missed it says node 0 is gone
            pass


def follow(nodes: Nodes, store: Store, env: dict, cwd: str, gpus: list[int]) -> int:
    """A follower's whole sweep: start what node 0 publishes, on this node's own `gpus` (its
    --gpus), and end it when node 0 says so."""
    from bench.engine import launchers
    from bench.core import protocol
    from bench.run.procs import Scratch, Worker
    stop = threading.Event()

    def heartbeat():
        while not stop.wait(1.0):
            try:
                store.beat()
            except Exception:  # noqa: BLE001 - node 0 gone: the main loop finds out and says so
                return

    threading.Thread(target=heartbeat, daemon=True).start()
    failures, launch = [], 0
    scratch = Scratch()
    try:
        while True:
            published = _wait(store, ("launch", launch))
            if published.get("finished"):
                store.set(True, "bye", nodes.node_rank)
                break
            workdir = scratch.folder("node-")
            worker = None
            try:
                try:
                    spec = on_these_gpus(LaunchSpec.from_json(published["spec"]), gpus)
                except SpecError as exc:  # node 0 runs other code: it hears why, not just silence
                    store.set({"node": nodes.node_rank, "reason": str(exc)}, "launch", launch, "error",
                              nodes.node_rank)
                    raise NodesError(str(exc)) from None
                spec_path = os.path.join(workdir, "spec.json")
                with open(spec_path, "w") as fh:
                    json.dump(spec.to_json(), fh)
                placement = spec.placement
                launcher = launchers.by_name(spec.launcher)
                cases = ", ".join(f"{c.strategy} batch {c.batch_per_gpu}" for c in spec.cases)
                print(f"node {nodes.node_rank}: worker {launch} ({placement.label()}): {cases}", flush=True)
                run_env = {**launchers.worker_environment(launcher, placement, env),
                           protocol.ENV: os.path.join(workdir, "events.jsonl")}
                reader = protocol.EventReader(run_env[protocol.ENV])
                worker = Worker(launcher.command(spec_path, placement, published["options"], nodes.rendezvous(launch)),
                                run_env, cwd)
                reported = False
                while not store.has("launch", launch, "end"):
                    for event in reader.poll():
                        if event.get("status") in ("error", "oom") or event["event"] == "worker_error":
                            if not reported:
                                store.set({"node": nodes.node_rank, "reason": event.get("reason", "")},
                                          "launch", launch, "error", nodes.node_rank)
                                reported = True
                            failures.append(f"worker {launch}: {event.get('reason', '')}")
                    time.sleep(0.2)
            finally:
                if worker is not None:
                    worker.kill(grace_s=10.0)
                shutil.rmtree(workdir, ignore_errors=True)
            launch += 1
    except NodesError as exc:
        print(f"parabench: node {nodes.node_rank}: {exc}", file=sys.stderr)
        return 1
    finally:
        stop.set()
        scratch.close()
    if failures:
        print(f"node {nodes.node_rank}: {len(failures)} failure(s) here: " + "; ".join(failures)[:2000],
              file=sys.stderr)
        return 1
    print(f"node {nodes.node_rank}: node 0 finished the sweep after {launch} worker(s)", flush=True)
    return 0


def on_these_gpus(spec: LaunchSpec, gpus: list[int]) -> LaunchSpec:
    """Node 0's worker spec with this node's GPU ordinals (the first as many as node 0 uses)."""
    if not spec.gpus:
        return spec
    if len(gpus) < len(spec.gpus):
        raise NodesError(f"node 0 runs a worker on {len(spec.gpus)} GPUs per node; this node has {len(gpus)} "
                         f"(--gpus {','.join(map(str, gpus))})")
    return spec.on_gpus(tuple(gpus[:len(spec.gpus)]))


def _wait(store: Store, parts: tuple):
    """A key's value, polling so that a lost connection to node 0 is noticed."""
    while not store.has(*parts):
        time.sleep(0.2)
    return store.get(*parts)
