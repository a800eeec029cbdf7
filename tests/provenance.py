"""Results and logs as they were written: every committed results file names, in each row's
`command`, the output that wrote it, and that output agrees with where the file lies.

A sweep records its command line with its folders shortened (`--out .../bases.json`:
bench.measure.envinfo.portable), so what can be checked is the file's name and whatever
folders the command still shows:

- `--out NAME`: the file is NAME; the folders the command shows are the tail of the file's
  folder, or a documented move of the whole folder (MOVED).
- `--results-dir DIR` without `--out`: the file is `run-<start>-<host>[-<pid>].json` in DIR, the
  host that of its rows, the start within a day of its first row.
- A file that unites runs (a GPU baseline, UNIONS): its rows' names are those runs'.

A log (`*.log`) says where its commands wrote (`... written to PATH`): each such path must be
one its commands name (`--out`, `--json`, `--results-dir`, with `dir=...` expanded), and the file
must be committed under the same name in a folder of the same name (the folder moved as a
whole). A path edited after the run, in a row or in a log, breaks one of these.
"""
from __future__ import annotations

import datetime
import json
import re
import shlex
from pathlib import Path

from bench.cases import results

# Folders moved as a whole after the run: (as the command shows it, where it lies now).
MOVED = [
    ("results/baselines", "results/reference/baselines"),  # the CI baseline, before results/reference/ existed
    # A device machine's output folder, brought back whole (scripts/answer_proof.sh wrote to /tmp/proof).
    ("proof", "results/reference/h200x2/answer"),
    ("proof", "results/reference/h200x4/answer"),
    # `make fit-check GPUS=0,1 MODEL=vit-large` on 2 H200s, its folder brought back whole.
    ("results/fit-check-20261127-171620", "results/reference/h200x2/fit-check"),
    # `make fit-check GPUS=0,1 MODEL=timm:resnet50` on 2 of 4 H200s, and GPUS=0,1,2,3 MODEL=vit-large.
    ("results/fit-check-20261127-191453", "results/reference/h200x2/fit-check-resnet50"),
    ("results/fit-check-20261127-192218", "results/reference/h200x4/fit-check"),
    # `make fit-check GPUS=0,1 MODEL=gpt2-1.5b RESULTS=/tmp/r` on 2 H200s, its folder brought back whole.
    ("/tmp/r/fit-check-20261129-094242", "results/reference/h200x2/fit-gpt2-1.5b"),
    # `make fit-check GPUS=2,3 MODEL=gpt2-1.5b RESULTS=/tmp/r` on 2 of 4 H200s (scripts/pending_x2.sh).
    ("/tmp/r/fit-check-20261129-191019", "results/reference/h200x4/fit-gpt2-1.5b"),
    # fsdp2's real runs of that fit (FIT_STRATEGIES=fsdp2), later, on 2 H200s: rows added to its file.
    ("/tmp/r/fit-check-20261129-214521", "results/reference/h200x4/fit-gpt2-1.5b"),
    # A ddp run beside nvidia-smi's log on the same host (NVML's power-cap share against the clocks).
    ("results/throttle", "results/reference/h200x4/throttle"),
]
# Files that are the union of other runs' rows (a GPU baseline): file -> the runs its rows name.
UNIONS = {
    "results/reference/baselines/nvidia-h200.json": {"h200x2-sweep-r18.json", "h200x2-sweep-small.json"},
    # DataParallel with cuDNN autotuning on and off (docs/findings.md, finding 3), two runs in one file.
    "results/reference/h200/h200x4-dp-cudnn.json": {"h200x4-dp-cudnn-on.json", "h200x4-dp-cudnn-off.json"},
    # The real 2-GPU runs a fit was held against, one run per strategy (scripts/fit_check.sh) and one below.
    "results/reference/h100/x2/real-vit-large-x2.json": {"real-vit-large-ddp-x2.json", "real-vit-large-zero1-x2.json",
                                                         "real-vit-large-fsdp2-x2.json",
                                                         "real-vit-large-ddp-x2-below.json"},
    # `make fit-check`'s real runs, one per strategy, in one file (scripts/fit_check.sh's per-strategy files).
    **{f"results/reference/{where}/real-{model}-x{n}.json": {f"real-{model}-{s}-x{n}.json"
                                                              for s in ("ddp", "zero1", "fsdp2")}
       for where, model, n in (("h200x2/fit-check", "vit-large", 2), ("h200x2/fit-check-resnet50", "timm:resnet50", 2),
                               ("h200x4/fit-check", "vit-large", 4), ("h200x2/fit-gpt2-1.5b", "gpt2-1.5b", 2))},
    # The fit-check's time limit ended it before fsdp2's real run, which a later fit-check of that
    # fit alone ran on a machine of 2 H200s (FIT_STRATEGIES=fsdp2).
    "results/reference/h200x4/fit-gpt2-1.5b/real-gpt2-1.5b-x2.json": {
        "real-gpt2-1.5b-ddp-x2.json", "real-gpt2-1.5b-zero1-x2.json", "real-gpt2-1.5b-fsdp2-x2.json"},
    # scripts/answer_proof.sh's three listings (a CUDA graph, compile reduce-overhead, its foreach SGD), in one file.
    **{f"results/reference/{where}/answer/listings.json": {"listing-graph.json", "listing-compile-ro.json",
                                                           "listing-compile-ro-foreach.json"}
       for where in ("h200x2", "h200x4")},
}


def _output(command: str) -> tuple[str | None, str | None]:
    """(--out, --results-dir) of a recorded command line."""
    try:
        words = shlex.split(command)
    except ValueError:
        words = command.split()
    out = folder = None
    for i, word in enumerate(words):
        for flag in ("--out", "--results-dir"):
            value = word[len(flag) + 1:] if word.startswith(flag + "=") else (
                words[i + 1] if word == flag and i + 1 < len(words) else None)
            if value is not None:
                if flag == "--out":
                    out = value
                else:
                    folder = value
    return out, folder


def _shown_folders(recorded: str) -> list[str]:
    """The folders a recorded path still shows (none for `.../name` or a bare name)."""
    parts = recorded.split("/")[:-1]
    return [] if not parts or parts[0] == "..." else parts


def _agrees(shown: list[str], relative: Path) -> bool:
    """Whether the folders a command shows are where the file lies (or a documented move)."""
    folder = relative.parent.as_posix()
    if not shown:
        return True
    said = "/".join(shown)
    if folder == said or folder.endswith("/" + said):
        return True
    return any(said == old and folder == new for old, new in MOVED)


def results_problems(path: Path, root: Path) -> list[str]:
    """What does not agree between a results file's rows and where the file lies."""
    relative = path.relative_to(root)
    problems = []
    rows = results.load(path)
    union = UNIONS.get(relative.as_posix())
    named = set()
    for i, row in enumerate(rows):
        command = row.get("command") or ""
        where = f"{relative}: row {i}"
        if not command:
            problems.append(f"{where} carries no command")
            continue
        out, folder = _output(command)
        if out:
            name = out.split("/")[-1]
            named.add(name)
            if union is not None:
                if name not in union:
                    problems.append(f"{where} names {out}, not one of the runs this file unites "
                                    f"({', '.join(sorted(union))})")
                elif not _agrees(_shown_folders(out), relative):
                    problems.append(f"{where} was written to {out}, but the file uniting it lies in {relative.parent}")
            elif name != path.name:
                problems.append(f"{where} was written as {out}, but the file is {path.name}")
            elif not _agrees(_shown_folders(out), relative):
                problems.append(f"{where} was written to {out}, but the file lies in {relative.parent}")
        elif folder:
            problems += _default_name_problems(where, path, relative, folder, row, rows)
        else:
            problems.append(f"{where}: its command names no output (--out or --results-dir)")
    if union is not None and named != union:
        problems.append(f"{relative} unites {', '.join(sorted(union))} but its rows name {', '.join(sorted(named))}")
    return problems


def _default_name_problems(where: str, path: Path, relative: Path, folder: str, row: dict,
                           rows: list[dict]) -> list[str]:
    m = re.fullmatch(r"run-(\d{8}-\d{6})-(.+?)(?:-\d+)?\.json", path.name)
    if not m:
        return [f"{where} was written into {folder} under its default name, but the file is {path.name}"]
    if m.group(2) != row.get("host"):
        return [f"{where}: the file's name says host {m.group(2)}, the row {row.get('host')}"]
    start = datetime.datetime.strptime(m.group(1), "%Y%m%d-%H%M%S")
    first = min(datetime.datetime.fromisoformat(str(r["date"])).replace(tzinfo=None) for r in rows if r.get("date"))
    if abs((first - start).total_seconds()) > 86400:
        return [f"{where}: the file's name says the run started {start}, its first row is of {first}"]
    if not _agrees(_shown_folders(folder + "/x"), relative):
        return [f"{where} was written into {folder}, but the file lies in {relative.parent}"]
    return []


WRITTEN = re.compile(r"written to (\S+?\.(?:json|csv))\b")


def log_problems(path: Path, root: Path, committed: set[str]) -> list[str]:
    """Every path a log says it wrote must be one its commands name, and be committed under
    that name in a folder of the same name."""
    text = path.read_text(errors="replace")
    relative = path.relative_to(root)
    targets = _log_targets(text)
    problems = []
    for m in WRITTEN.finditer(text):
        written = m.group(1)
        if targets and not any(t.fullmatch(written) for t in targets):
            problems.append(f"{relative}: says it wrote {written}, which none of its commands names")
        tail = "/".join(written.split("/")[-2:])
        folder, name = tail.rpartition("/")[0], written.rsplit("/", 1)[-1]
        moved = [f"{now}/{name}" for shown, now in MOVED if shown.rsplit("/", 1)[-1] == folder]
        united = {f"{union.rpartition('/')[0]}/{part}" for union, parts in UNIONS.items() if union in committed
                  for part in parts}  # a run whose rows a committed file unites
        if not any(c.endswith("/" + tail) for c in committed) and not any(m in committed or m in united
                                                                          for m in moved):
            problems.append(f"{relative}: wrote {written}, and no committed file is {tail}")
    return problems


def _log_targets(text: str) -> list[re.Pattern]:
    """What the log's commands write, as patterns: `--out`/`--json` paths and `--results-dir`
    folders, with `dir=...` expanded and `$(date ...)` standing for any digits."""
    dirs = {m.group(1): m.group(2).strip("\"'") for m in re.finditer(r"\b(\w+)=((?:\$\([^)]*\)|[^\s;])+);", text)}

    def pattern(value: str) -> str:
        value = value.rstrip(";").strip("\"'")
        for name, expansion in dirs.items():
            value = value.replace(f"${name}", expansion).replace(f"${{{name}}}", expansion)
        out = re.escape(value)
        return re.sub(r"\\\$\\\(date[^)]*\\\)", r"[0-9-]+", out)

    targets = []
    for m in re.finditer(r"--(out|json)[ =](\S+)", text):
        targets.append(re.compile(pattern(m.group(2))))
    for m in re.finditer(r"--results-dir[ =](\S+)", text):
        targets.append(re.compile(pattern(m.group(1)).rstrip("/") + r"/[^/\s]+"))
    # A folder a command is given whole (`bash scripts/fit_check.sh ... "$dir"`): its files are the command's.
    for name, value in dirs.items():
        if re.search(rf"(?<![\w=])\"?\$(?:{name}|\{{{name}\}})\"?(?=\s|;|$)", text, re.M):
            targets.append(re.compile(pattern(value).rstrip("/") + r"/[^/\s]+"))
    return targets


def check_tree(root: Path, files: list[str]) -> list[str]:
    """Every results file and log among `files` (paths relative to `root`)."""
    problems = []
    committed = set(files)
    for name in files:
        path = root / name
        if name.endswith(".log"):
            problems += log_problems(path, root, committed)
        elif name.endswith(".json") and _is_results(path):
            problems += results_problems(path, root)
    return problems


def _is_results(path: Path) -> bool:
    try:
        doc = json.loads(path.read_text())
    except (OSError, ValueError):
        return False
    return isinstance(doc, dict) and str(doc.get("schema", "")).startswith("parabench-results/")
