"""Resolve model names in a process of their own: `python -m bench.workloads._probe ANSWER NAME...`
appends one JSON line per name to the file ANSWER, {"name", "error"} or {"name", "parameters",
"flops_per_item", "items_per_sample", "unit"} with the data's facts (bench/workloads/data.py: "kind",
"input_shape" and "num_classes", or "vocab_size" and "seq_len"). The sweep's parent asks this (through
bench/workloads/probing.py `probe`) for names that are not built in, so that it never imports torch or
the user's module itself, and a model that cannot be built fails before anything runs. The
answer goes to a file, not stdout: what the user's code prints cannot garble it."""
from __future__ import annotations

import json
import sys


def main(answer: str, names: list[str]) -> None:
    from bench import workloads
    from bench.workloads.facts import facts

    for name in names:
        try:
            w = workloads.get_workload(name)
            found = {"name": name, **facts(name), **w.data.facts()}
        except Exception as exc:  # noqa: BLE001 - every failure is this name's one line
            text = str(exc).strip().splitlines()[0] if str(exc).strip() else ""
            found = {"name": name, "error": text if isinstance(exc, workloads.WorkloadError)
                     else f"model {name!r} cannot be built: {type(exc).__name__}: {text}"}
        with open(answer, "a") as fh:
            fh.write(json.dumps(found) + "\n")


def end_descendants() -> None:
    """SIGKILL every process this one started and left running (a factory's helper, also one in a
    session of its own, which the probe's process group does not reach)."""
    import psutil

    for child in psutil.Process().children(recursive=True):
        try:
            child.kill()
        except psutil.Error:
            pass


if __name__ == "__main__":
    try:
        main(sys.argv[1], sys.argv[2:])
    finally:
        end_descendants()
