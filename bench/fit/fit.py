"""`bench fit`: memory per device and the largest batch per device that fits, at any device
count, measured on one device.

Each device count n is a fake world (bench.engine.launchers.FakeWorld): one process as rank
0 of n ranks whose collectives do nothing, so that its shards, DDP's buckets, FSDP2's
gathered parameters and the optimiser's partition are what rank 0 of a real run of n holds,
and its activations are those of its own batch. For every (precision, strategy, n) a search
(bench.fit.search) finds the largest batch per device that fits; every probe is a row.

One worker process per model runs the probes (bench.fit.worker); this side starts
it, follows its events, and writes the results file after every probe, so that nothing
measured is lost. A worker that dies or passes the probe timeout ends its probe with that
outcome (error, timeout) and a fresh worker goes on with the probes left.

The results file (`*.fit.json`, schema parabench-fit/1) holds the rows, in `bench run`'s
conventions where they apply (case columns, hardware, command, date), and each search's
outcome; `bench report` and `bench answer` show the files found beside the results they
read. No torch here.
"""
from __future__ import annotations

import dataclasses
import json
import sys
import tempfile
import time
from pathlib import Path

from bench.cases.defaults import SEED, TIMEOUT_S
from bench.fit.spec import FitItem, FitWorkerSpec

PROBED = ("ok", "tight", "oom", "error", "timeout")  # a probe's outcomes (a skipped case has no probe)
PROBE_FIELDS = ("status", "reason", "peak_alloc_mib", "peak_reserved_mib")  # what the search reads of a probe
SCHEMA = "parabench-fit/1"
SUFFIX = ".fit.json"
DEFAULT_DEVICES = (1, 2, 4, 8, 16, 64)


class FitError(ValueError):
    """A fit that cannot start; the message names the fix."""


def strategies_to_fit() -> list[str]:
    """The registry's process-per-device reference (DDP: nothing sharded) and every strategy
    that declares it shards."""
    import strategies

    reference = strategies.reference()
    return [reference] + [n for n in strategies.names() if strategies.get(n).shards and n != reference]


def check_strategy(name: str) -> None:
    """A strategy runs in a fake world if it runs one process per device."""
    import strategies

    try:
        declared = strategies.get(name)
    except KeyError as exc:
        raise FitError(str(exc).strip("'\"")) from None
    if not declared.launcher(dict(declared.options)).multi_process:
        raise FitError(f"{name} drives every device from one process: a fake world of n ranks measures strategies "
                       f"that run one process per device ({', '.join(strategies_to_fit())})")


def cases(model: str, strategies: list[str], precisions: list[str], devices: list[int], gpus: list[int],
          settings) -> tuple[list[dict], list[dict]]:
    """The plan's items, one per (precision, strategy), each with its case per device count;
    and the rows of those that cannot run (skipped, with why)."""
    from bench.cases.case import Case, execution_unavailable_reason
    from bench.core.placement import Placement
    from bench.run.workers import unavailable_reason

    items, skipped = [], []
    for precision in precisions:
        for strategy in strategies:
            made = {n: Case.make(strategy, precision, model, Placement(tuple(gpus[:1]), n), 1, "eager", settings)
                    for n in devices}
            why = next(filter(None, (unavailable_reason(c) or execution_unavailable_reason(c) for c in made.values())),
                       None)
            if why:
                skipped += [{**c.row(), "batch_per_gpu": None, "status": "skipped", "reason": why}
                            for c in made.values()]
                continue
            items.append({"precision": precision, "strategy": strategy, "devices": list(devices),
                          # The worker sees its one GPU as device 0 (bench/cli/fit.py).
                          "cases": {str(n): dataclasses.replace(c.spec(), gpus=(0,) if gpus else ())
                                    for n, c in made.items()},
                          "rows": {str(n): c.row() for n, c in made.items()}})
    return items, skipped


def _replay(item: dict, done: dict, search_args: dict, limit_mib: float) -> list[int]:
    """The device counts of an item whose search is not over, given the probes done."""
    from bench.fit import search

    how, left = search.Search(limit_mib=limit_mib, **search_args), []
    for n in item["devices"]:
        probes = done.get(n, [])
        if search.next_batch(probes, how) is not None:
            left.append(n)
        how = how.at_next_count(probes)
    return left


@dataclasses.dataclass
class Fit:
    """One model's searches: the probes done, per (precision, strategy) and device count."""

    model: str
    items: list[dict]
    gpus: list[int]
    budget_mib: float | None
    search: dict  # bench.fit.search.Search's fields other than the limit
    seed: int = SEED
    reserve_mib: float = 0.0  # held back at n >= 2 for what a real world holds outside the allocator
    headroom: float = 0.0  # the fraction of a probe's memory a fit must leave free (bench/fit/worker.py)
    probe_timeout_s: float = TIMEOUT_S["probe"]
    startup_timeout_s: float = TIMEOUT_S["startup"]
    limit_mib: float | None = None
    done: dict = dataclasses.field(default_factory=dict)  # (precision, strategy) -> {n: [probe]}

    def left(self) -> list[FitItem]:
        """The items with a search still open, each with what it has done, as the worker reads them."""
        out = []
        first: dict[str, tuple] = {}  # precision -> its first strategy's probes at the first count
        for item in self.items:
            done = self.done.setdefault((item["precision"], item["strategy"]), {})
            after = first.get(item["precision"], ())
            if item["precision"] not in first:
                first[item["precision"]] = tuple(done.get(item["devices"][0], ()))
            if self.limit_mib is None or _replay(item, done, self.search, self.limit_mib):
                out.append(FitItem(precision=item["precision"], strategy=item["strategy"],
                                   devices=tuple(item["devices"]), cases=item["cases"], search=self.search,
                                   done={str(n): p for n, p in done.items()}, after=after))
        return out

    def record(self, event: dict) -> dict:
        probe = {k: v for k, v in event.items() if k not in ("event", "precision", "strategy", "devices")}
        self.done.setdefault((event["precision"], event["strategy"]), {}).setdefault(event["devices"], []).append(probe)
        return probe


def run_worker(fit: Fit, env: dict, on_probe, progress) -> bool:
    """One worker for what is left of `fit`; False where it made no progress (then the caller
    stops: starting another would fail the same way)."""
    from bench.core import protocol
    from bench.core.imports import ROOT
    from bench.run import procs

    left = fit.left()
    if not left:
        return False
    with tempfile.TemporaryDirectory(prefix="parabench-fit-") as folder:
        spec_path, events = Path(folder) / "spec.json", Path(folder) / "events.jsonl"
        spec = FitWorkerSpec(model=fit.model, gpus=(0,) if fit.gpus else (), budget_mib=fit.budget_mib,
                             seed=fit.seed, plan=tuple(left), reserve_mib=fit.reserve_mib, headroom=fit.headroom)
        spec_path.write_text(json.dumps(spec.to_json()))
        worker = procs.Worker([sys.executable, "-m", "bench.fit.worker", str(spec_path)],
                              {**env, protocol.ENV: str(events)}, str(ROOT))
        reader, inflight, progressed = protocol.EventReader(str(events)), None, False
        started = time.monotonic()
        try:
            while True:
                alive = worker.alive()  # before reading: every event of a worker that has ended is in the file
                for event in reader.poll():
                    if event["event"] == "ready":
                        fit.limit_mib, started = float(event["limit_mib"]), None
                    elif event["event"] == "start":
                        inflight = (event, time.monotonic())
                    elif event["event"] == "probe":
                        inflight, progressed = None, True
                        on_probe(event, fit.record(event))
                if not alive:
                    break
                now = time.monotonic()
                if started is not None and now - started > fit.startup_timeout_s:
                    worker.kill()
                    progress(f"{fit.model}: the worker did not start within {fit.startup_timeout_s:g} s")
                    return False
                if inflight is not None and now - inflight[1] > fit.probe_timeout_s:
                    worker.kill()
                    on_probe(inflight[0], fit.record({**inflight[0], "status": "timeout", "peak_alloc_mib": None,
                                                      "peak_reserved_mib": None,
                                                      "reason": f"no result within {fit.probe_timeout_s:g} s"}))
                    return True
                time.sleep(0.05)
            code = worker.exit_description()
        finally:
            worker.kill()
        if inflight is not None:  # it died in a probe: that probe's outcome
            tail = [line for line in worker.output_tail().splitlines() if line.strip()]
            on_probe(inflight[0], fit.record({**inflight[0], "status": "error", "peak_alloc_mib": None,
                                              "peak_reserved_mib": None,
                                              "reason": (f"worker died ({code}): "
                                                         f"{tail[-1] if tail else 'no output'}")[:400]}))
            return True
        if fit.limit_mib is None or (not progressed and fit.left()):
            tail = [line for line in worker.output_tail().splitlines() if line.strip()]
            progress(f"{fit.model}: the worker ended ({code}) " + (tail[-1][:300] if tail else "with no output"))
            return False
        return progressed


def measure(fit: Fit, env: dict, on_probe, progress=print) -> None:
    """Every search of `fit` to its end, a fresh worker after each one that failed."""
    while run_worker(fit, env, on_probe, progress):
        pass


def outcomes(fit: Fit) -> list[dict]:
    """Each (precision, strategy, n) search's outcome (bench.fit.search.outcome)."""
    from bench.fit import search

    out = []
    for item in fit.items:
        done = fit.done.get((item["precision"], item["strategy"]), {})
        how = search.Search(limit_mib=fit.limit_mib or 0, **fit.search)
        for n in item["devices"]:
            probes = done.get(n, [])
            out.append({"model": fit.model, "precision": item["precision"], "strategy": item["strategy"],
                        "devices": n, **search.outcome(probes, how)})
            how = how.at_next_count(probes)
    return out


# --- the file ------------------------------------------------------------------------------------
def document(rows: list[dict], found: list[dict], settings: dict) -> dict:
    return {"schema": SCHEMA, "settings": settings, "rows": rows, "outcomes": found}


def write(path: Path, doc: dict) -> None:
    from bench.cases.fileio import atomic_write_bytes

    path.parent.mkdir(parents=True, exist_ok=True)
    atomic_write_bytes(path, (json.dumps(doc, indent=1, default=str) + "\n").encode())


def load(path) -> dict:
    """A fit file, checked: FitError names what is wrong."""
    from bench.cases.fileio import ResultsError, load_document

    try:
        doc = load_document(path, SCHEMA, "fit file", "write it with `bench fit --out`", lists=("rows", "outcomes"))
    except ResultsError as exc:
        raise FitError(str(exc)) from None
    doc["path"] = str(path)
    return doc


def beside(paths: list) -> list[Path]:
    """The fit files in the folders of `paths` (results files), oldest first."""
    folders = {Path(p).parent for p in paths}
    return sorted({f for folder in folders for f in folder.glob(f"*{SUFFIX}")}, key=lambda f: (f.stat().st_mtime, f))


# --- held against real runs -----------------------------------------------------------------------
# A fake world's peak against a real run's at the same batch, as a fraction of the real one: the
# search's own resolution (a batch 2% larger moves the peak by about as much).
PEAK_TOLERANCE = 0.02


def _same_case(fit_row: dict, run_row: dict) -> bool:
    """A real run measures what the fit measured: one GPU kind, the fit's settings and the
    strategy's options, eager (the fit's execution)."""
    from bench.core.knobs import BY_NAME

    keys = ("model", "precision", "strategy", "execution", "options", "gpu_name")
    # Every knob, as each row says it: a row that predates one measured its legacy value; a knob
    # with none (cudnn.benchmark) is compared where both rows state it.
    values = [(k.value_in(fit_row), k.value_in(run_row)) for k in BY_NAME.values()]
    return (all(str(fit_row.get(k)) == str(run_row.get(k)) for k in keys)
            and all(a == b for a, b in values if a is not None and b is not None))


def _fails_from(found: dict) -> int | None:
    """The smallest batch the fit says fails: one that ran out of memory with all of the memory
    (files before the headroom have no `smallest_oom`: every failure there was one)."""
    return found["smallest_oom"] if "smallest_oom" in found else found["smallest_failed"]


def real_run(doc: dict, model: str, strategy: str, n: int) -> list[str]:
    """The `bench run` flags of the real run that holds the fit at n devices: the fit's own case
    (precision, every knob as its probes resolved it, the strategy's options, eager), so that the
    run measures what the fit measured by construction, at the batches its search probed that tell
    most: the smallest that fit (a peak to compare), the largest that fit and the smallest that ran
    out of memory (the verdicts), and the smallest tight batch (no verdict: what a real run does
    there measures the headroom). FitError where the fit has no largest batch there."""
    from bench.cases.case import Case
    from bench.core.knobs import KNOBS

    found = next((o for o in doc["outcomes"] if (o["model"], o["strategy"], o["devices"]) == (model, strategy, n)),
                 None)
    probed = [r for r in doc["rows"] if (r.get("model"), r.get("strategy"), r.get("devices")) == (model, strategy, n)
              and r.get("status") in PROBED and r.get("precision") == (found or {}).get("precision")]
    fitted = sorted(r["batch_per_gpu"] for r in probed if r["status"] == "ok")
    if found is None or not found["largest_fit"] or not fitted:
        raise FitError(f"the fit has no largest batch for {model} {strategy} at {n} devices")
    failed = _fails_from(found)
    # The smallest tight batch too, where the search closed on one: not decided, but whether a real
    # run fits there says whether the headroom was needed.
    tight = found["smallest_failed"] if found["smallest_failed"] != failed and any(
        r["batch_per_gpu"] == found["smallest_failed"] and r["status"] == "tight" for r in probed) else None
    batches = dict.fromkeys([fitted[0], found["largest_fit"]] + [b for b in (tight, failed) if b])
    case = Case.from_row(dict(probed[0]))
    args = ["--no-search", "--strategies", strategy, "--models", model, "--precisions", found["precision"],
            "--batch-sizes", ",".join(map(str, batches)), "--execution", case.execution]
    for knob in KNOBS:
        value = getattr(case, knob.name)
        if value is None or knob.name == "compile_mode" and case.execution != "compile":
            continue
        if not knob.choices:  # an on/off switch
            args += [knob.flag] if value else []
        else:  # a request that resolved to a flag (cudnn.benchmark's auto) is given as what it resolved to
            args += [knob.flag, ("on" if value else "off") if isinstance(value, bool) else str(value)]
    for name, value in case.options:
        args += ["--option", f"{name}={json.dumps(value) if isinstance(value, (bool, dict, list)) else value}"]
    return args


def against(doc: dict, rows: list[dict]) -> list[dict]:
    """The fit's figures held against real runs of n devices (rows of `bench run`, not a fake
    world). For each measured row of a case the fit covers at the row's device count: the fit's
    verdict at its batch per device (fits: at or below the largest batch that fit with the
    headroom to spare; fails: at or above the smallest that ran out of memory; between the two,
    where probes were tight: not decided) beside the run's outcome,
    and, where the fit probed that very batch and both ran, the two peaks per device."""
    outcomes = {(o["model"], o["precision"], o["strategy"], o["devices"]): o for o in doc["outcomes"]}
    probes = {(r["model"], r["precision"], r["strategy"], r["devices"], r["batch_per_gpu"]): r
              for r in doc["rows"] if r.get("status") in ("ok", "oom")}
    examples = {(r["model"], r["precision"], r["strategy"]): r for r in doc["rows"] if r.get("status") in PROBED}
    out = []
    for row in rows:
        n, batch = row.get("n_replicas"), row.get("batch_per_gpu")
        key = (row.get("model"), row.get("precision"), row.get("strategy"))
        if row.get("fake_world") or row.get("status") not in ("ok", "oom") or key + (n,) not in outcomes \
                or key not in examples or not _same_case(examples[key], row):
            continue
        found = outcomes[key + (n,)]
        lo, hi = found["largest_fit"] or 0, _fails_from(found)
        said = "fits" if lo and batch <= lo else "fails" if hi is not None and batch >= hi else "not decided"
        ran = "fits" if row["status"] == "ok" else "fails"
        entry = {"model": key[0], "precision": key[1], "strategy": key[2], "devices": n, "batch_per_gpu": batch,
                 "fit_says": said, "run": ran, "agrees": None if said == "not decided" else said == ran,
                 "fake_peak_mib": None, "run_peak_mib": None, "peak_error": None, "source": row.get("source")}
        probe = probes.get(key + (n, batch))
        if probe is not None and probe["status"] == "ok" and row["status"] == "ok" and row.get("peak_alloc_mib"):
            entry.update(fake_peak_mib=probe["peak_alloc_mib"], run_peak_mib=row["peak_alloc_mib"],
                         peak_error=probe["peak_alloc_mib"] / row["peak_alloc_mib"] - 1)
        out.append(entry)
    return out


def against_in_words(checked: list[dict]) -> str:
    """'verdicts: 6 of 6 agree; peaks: 3 of 3 within 2% (largest difference -0.4%)'."""
    decided = [c for c in checked if c["agrees"] is not None]
    peaks = [c["peak_error"] for c in checked if c["peak_error"] is not None]
    text = f"verdicts: {sum(c['agrees'] for c in decided)} of {len(decided)} agree"
    if len(decided) < len(checked):
        text += (f" ({len(checked) - len(decided)} batches between the largest that fit and the smallest that ran out "
                 "of memory: not decided)")
    if peaks:
        worst = max(peaks, key=abs)
        text += (f"; peaks: {sum(abs(e) <= PEAK_TOLERANCE for e in peaks)} of {len(peaks)} within "
                 f"{100 * PEAK_TOLERANCE:g}% (largest difference {100 * worst:+.2f}%)")
    return text


def against_holds(checked: list[dict]) -> bool:
    return all(c["agrees"] is not False for c in checked) and all(
        abs(c["peak_error"]) <= PEAK_TOLERANCE for c in checked if c["peak_error"] is not None)


# --- in words ------------------------------------------------------------------------------------
def where(doc: dict) -> str:
    rows = doc["rows"]
    hardware = next((r.get("hardware") for r in rows if r.get("hardware")), "this host")
    reserve = doc["settings"].get("reserve_mib") or 0
    source = doc["settings"].get("reserve_source")  # bench/fit/reserve.py; older files have none
    held = (f", {reserve:g} MiB held back at n >= 2 for the communicator's buffers" + (f" ({source})" if source else "")
            if reserve else "" if hardware.startswith("CPU") else
            f", {source}" if source else
            ", nothing held back for the communicator's buffers, which a real world holds outside PyTorch's "
            "allocator (bench/fit/comm_memory.py measures them; --reserve-mib holds them back)")
    headroom = doc["settings"].get("headroom") or 0
    block = " and its largest block" if doc["settings"].get("largest_block") and not hardware.startswith("CPU") else ""
    if headroom or block:
        held += (f", {100 * headroom:g}% of the memory left free beyond each peak{block} for the allocator's "
                 "fragmentation (a batch that fit with less is `tight`, not promised)")
    return (f"measured in a fake world of n on one {hardware}" if not hardware.startswith("CPU") else (
        f"measured in a fake world of n on the {hardware}, tensors tracked against a budget of "
        f"{doc['settings'].get('memory_budget_mib'):g} MiB")) + held


def _runs(fits: list[tuple[int, str]]) -> str:
    """'210 at 1, 230 at 2, 250 at 4-64': consecutive counts with the same figure together."""
    groups: list[list] = []
    for n, said in fits:
        if groups and groups[-1][1] == said:
            groups[-1][0].append(n)
        else:
            groups.append([[n], said])
    return ", ".join(f"{said} at {ns[0]}" + (f"-{ns[-1]}" if len(ns) > 1 else "") for ns, said in groups)


def sentences(doc: dict, models=None, precisions=None) -> list[str]:
    """Per model and precision, each strategy's largest batch per device at each count in one
    sentence: "vit-large, amp-bf16: ddp fits 256 per GPU at every n measured (1-64); fsdp2 fits
    240 at 1, 250 at 2-64 (measured in a fake world of n on one NVIDIA H100 ...)". Each n's own figure
    is said; "at every n" only where every n fit the same batch (793 at 1 and 778 at 2 are two figures,
    though within the search's resolution of each other).
    `models`, `precisions`: only the fits of these (a run's own), where given."""
    settings = doc["settings"]
    unit = "per GPU" if settings.get("gpus") else "per rank"
    resolution = float(settings.get("resolution") or 0)
    groups: dict = {}
    for o in doc["outcomes"]:
        if ((models is not None and o["model"] not in models)
                or (precisions is not None and o["precision"] not in precisions)):
            continue
        groups.setdefault((o["model"], o["precision"]), {}).setdefault(o["strategy"], []).append(o)
    lines = []
    for (model, precision), by_strategy in groups.items():
        parts = []
        for strategy, found in by_strategy.items():
            found = sorted(found, key=lambda o: o["devices"])
            sizes = [o["largest_fit"] for o in found]
            if None not in sizes and len(set(sizes)) == 1:
                counts = [o["devices"] for o in found]
                parts.append(f"{strategy} fits {min(sizes)} {unit} " + (f"at n = {counts[0]}" if len(counts) == 1 else
                             f"at every n measured ({counts[0]}-{counts[-1]})"))
            else:
                runs = _runs([(o["devices"], str(o["largest_fit"]) if o["largest_fit"] else o["said"]) for o in found])
                parts.append(f"{strategy} fits {runs}" if any(sizes) else f"{strategy}: {runs}")
        lines.append(f"{model}, {precision}: " + "; ".join(parts) + f" ({where(doc)}; the largest batch that fit, to "
                     f"within {100 * resolution:g}%)")
    return lines


def environment_of(gpus: list[int]) -> dict:
    from bench.measure import envinfo

    return {**envinfo.collect(), **envinfo.for_gpus(tuple(gpus[:1]))}
