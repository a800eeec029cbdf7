"""Every figure the documents state, recomputed from the committed file it comes from.

`docs/claims.toml` declares each claim once:

    [[claim]]
    doc = "README.md"                                   # the document that states it
    text = "| `ddp`, PyTorch's defaults | 54.3 k | |"   # its exact text there (found once)
    file = "results/reference/h200/h200x4-knobs-ddp-r18-default.json"   # where it comes from
    values = ['k(row(n_gpus=4)["items_per_s"])']          # one expression per figure of `text`

`figures(text)` finds the figures of a text (the rule below); a claim gives one expression per
figure, in the order they stand, and each must come out as printed: within half a unit of the
figure's last printed digit (54.3 holds 54.25 to 54.35). `check` recomputes every claim and
says what does not hold.

The expression vocabulary (Python expressions over these names, nothing else):

- `row(**where)`: the one row of the claim's `file` whose columns equal `where` (status ok
  unless `where` says otherwise; `status="any"`: every status); a filter that matches no row
  or several is an error.
- `rows(**where)`: every such row (a list). `row_in(path, **where)`, `rows_in(path, **where)`:
  the same in another file. Option values: `opt(r, "bucket_cap_mb")`.
- `doc(path=None)`: the file as parsed JSON (probe files, host probes).
- `grep(pattern, path=None)`: the first group of a regular expression in a text file (logs).
- `answered(devices, batch, execution, path=None)`: the answer's own record for one cell of a
  results file (bench/report/answer.py), checked to name that execution ("eager",
  "cuda-graph", "compile:reduce-overhead").
- `fit_check(fit, real)`: `bench fit-check`'s verdicts of a fit file over a file of real runs
  (dicts with `fit_says`, `real`, `agrees`: True, False, or None where the fit did not decide).
- `const(name, path=None)`: a top-level constant of a Python module, read without importing it.
- `table(path=None)`: a CSV's complete rows as dicts, headers and cells stripped (nvidia-smi logs).
- `[claim.let]`, `name = 'expression'`: names of the claim's own, evaluated in order (rows,
  lists, small functions written as `lambda`), for the figures' expressions to share.
- `ips(r)`, `p10(r)`, `p90(r)`: a row's images/s (median, p10, p90) in thousands;
  `k(x)` = x / 1e3, `pct(a, b)` = 100 (a / b - 1), `eff(rate, single, n)` = 100 rate / (n single),
  `median`, `spread(r)` = the p10-p90 width over the median, `min`, `max`, `len`, `sum`, `abs`,
  `sorted`, `round`, `any`, `all`, `zip`, `set`.
- `phase(d, name)`: the seconds a search file's phase took (`d = doc(...)`); `both(a, b)`: one
  printed figure said of two values ("181 s in both"), the one farther from it.

What counts as a figure (outside code, links and the exemptions below): a number with a decimal
point or an exponent (3.2, 0.985, 1e-4); an integer followed by a unit (% x k M MiB GiB MB GB
KiB ms us s GB/s Gb/s TFLOP/s GFLOP MHz W, or a count: cases, runs, pairs, parameters, ok, skipped,
passed, failed, images, probes, samples),
with the integers of a range or list it closes (95-99%, 10.44 / 10.49 ms); both numbers of
"N of M"; and every number in a Markdown table's cells after the first column. Exempt: versions
(torch 2.11.0, Python 3.12, cuDNN 9.19), names that hold digits (H200, resnet18, fp32, NV18,
sm_86), shapes and layouts (3x224x224, 2x8) and dates.
"""
from __future__ import annotations

import ast
import csv
import json
import math
import re
import statistics
import tomllib
from dataclasses import dataclass, field
from pathlib import Path

from bench.cases import results, schema

REPO = Path(__file__).resolve().parents[1]
TABLE = REPO / "docs" / "claims.toml"

# --- figures in a text --------------------------------------------------------------------
UNITS = (r"%|x\b|k\b|M\b|MiB\b|GiB\b|KiB\b|MB\b|GB/s\b|Gb/s\b|GB\b|TFLOP/s\b|GFLOP\b|ms\b|us\b|s\b"
         r"|cases\b|runs\b|pairs\b|parameters\b|ok\b|skipped\b|images\b|probes\b|MHz\b|W\b|samples\b|passed\b|failed\b")
# A number is a figure's only where no letter, digit, dot or underscore is glued to its left
# (H200, resnet18, fp32, sm_86, x2 are names) and a sign counts only after a space or bracket.
_START = r"(?<![\w.])"
_PLAIN_NUM = re.compile(_START + r"(?:(?<=[\s(\[,;:|])[-+])?\d+(?:,\d{3})*(?:\.\d+)?(?:e[-+]?\d+)?")
_SEPARATOR = r"\s*(?:-|/|to|and|,)\s*"
_UNIT_RUN = re.compile(r"((?:%s%s)*%s)\s?(?:%s)" % (
    _START + r"\d[\d,.e+-]*", _SEPARATOR, _START + r"\d[\d,.e+-]*", UNITS))
_N_OF_M = re.compile(_START + r"(\d+) of (?:the |its |these |all )?(\d+)\b")
_DECIMAL = re.compile(_START + r"(?:(?<=[\s(\[,;:|])[-+])?\d*\.\d+(?:e[-+]?\d+)?|" + _START + r"\d+e[-+]?\d+")

# Blanked before a text is scanned: what is no figure.
EXEMPT = [
    r"```.*?```",  # code blocks
    r"`[^`\n]*`",  # inline code: commands, flags, file names
    r"\]\([^)]*\)",  # link targets
    r"https?://\S+",
    r"\b\d{4}-\d{2}-\d{2}(?:[T ]\d{2}:\d{2}(?::\d{2})?)?",  # dates
    r"\b\d+(?:\.\d+){2,}\b",  # versions with two dots: torch 2.11.0, NCCL 2.28.9
    r"(?:torch|CUDA|cuDNN|NCCL|Python|driver|Apex|MXNet|mxnet|numpy|Debian|HTA|Analysis|timm|Slurm|schema)"
    r"\s*[<=>]*\s*\d+(?:\.\d+)*",  # versions after their name: Python 3.12, cuDNN 9.19, Apex 25.05
    r"\d+\.\d+ or older",  # a Python version in prose
    r"\b\d+(?:x\d+)+\b",  # shapes and layouts: 3x224x224, 2x8
    r"ViT-\w+/\d+",  # a model's name: ViT-L/16
    r"\b(?:finding|findings|section|item|issue|step|rank|GPU|GPUs|node|nodes|row|rows|CPUs?)\s+\d+(?:\s*(?:and|,|-)\s*\d+)*",
]
_EXEMPT = re.compile("|".join(f"(?:{e})" for e in EXEMPT), re.S)


@dataclass(frozen=True)
class Figure:
    """One figure of a document: where it starts, and the number as printed."""

    start: int
    printed: str

    @property
    def value(self) -> float:
        return float(self.printed.replace(",", "").replace("+", ""))

    @property
    def half_unit(self) -> float:
        """Half a unit of the last printed digit: how far the printed figure may be from its value."""
        mantissa, _, exponent = self.printed.replace(",", "").lower().partition("e")
        decimals = len(mantissa.split(".")[1]) if "." in mantissa else 0
        return 0.5 * 10 ** (int(exponent or 0) - decimals)


def _blank(text: str) -> str:
    """The text with every exempt span replaced by spaces (positions kept)."""
    return _EXEMPT.sub(lambda m: re.sub(r"[^\n]", " ", m.group(0)), text)


def _numbers(text: str, start: int, end: int) -> list[Figure]:
    return [Figure(start + m.start(), m.group(0)) for m in _PLAIN_NUM.finditer(text[start:end])]


def figures(text: str) -> list[Figure]:
    """The figures of a Markdown text, in order (see the module's rule)."""
    plain = _blank(text)
    found: dict[int, Figure] = {}
    for m in _UNIT_RUN.finditer(plain):
        for f in _numbers(plain, m.start(1), m.end(1)):
            found[f.start] = f
    for m in _N_OF_M.finditer(plain):
        for group in (1, 2):
            found[m.start(group)] = Figure(m.start(group), m.group(group))
    for m in _DECIMAL.finditer(plain):
        found[m.start()] = Figure(m.start(), m.group(0))
    offset = 0
    for line in plain.splitlines(keepends=True):
        cells = line.strip().startswith("|") and not re.fullmatch(r"[\s|:-]+", line)
        if cells and not _is_header(plain, offset):
            first_cell_end = offset + line.index("|", line.index("|") + 1)
            for f in _numbers(plain, first_cell_end, offset + len(line)):
                found[f.start] = f
        offset += len(line)
    # A number inside another figure's digits (the 5 of 1e-5) is not a figure of its own.
    ordered = sorted(found.values(), key=lambda f: f.start)
    out = []
    for f in ordered:
        if out and f.start < out[-1].start + len(out[-1].printed):
            continue
        out.append(f)
    return out


def _is_header(text: str, offset: int) -> bool:
    """Whether the table line at `offset` is a header (the line after it is |---|)."""
    rest = text[offset:].split("\n", 2)
    return len(rest) > 1 and re.fullmatch(r"\s*\|[\s|:-]+\|?\s*", rest[1]) is not None


# --- the expressions --------------------------------------------------------------------
class ClaimError(Exception):
    pass


def _path(path: str | None, default: str | None) -> Path:
    chosen = path or default
    if not chosen:
        raise ClaimError("no file: give the claim a `file` or name one in the expression")
    full = REPO / chosen
    if not full.is_file():
        raise ClaimError(f"{chosen} is not a committed file")
    return full


_LOADED: dict[Path, list[dict]] = {}


def _rows_of(path: Path) -> list[dict]:
    if path not in _LOADED:
        rows = results.load(path)
        for i, r in enumerate(rows):  # the rate is derived: it must still follow from the step time
            items = r["global_batch"] * (r.get("items_per_sample") or 1)
            if r["status"] == "ok" and abs(items * 1e3 / r["step_ms_p50"] / r["items_per_s"] - 1) > 1e-6:
                raise ClaimError(f"{path.relative_to(REPO)}: row {i}: items_per_s {r['items_per_s']:.6g} "
                                 "does not follow from "
                                 f"global_batch / step_ms_p50 ({items * 1e3 / r['step_ms_p50']:.6g}): "
                                 "the raw data under a derived figure changed")
        _LOADED[path] = rows
    return _LOADED[path]


def _read_json(path: Path):
    return json.loads(path.read_text())


def _today(value):
    """A JSON document with today's names: one written before units says img_per_s (schema.today)."""
    if isinstance(value, dict):
        value = schema.today_log({"_": [value]})["_"][0]
        return {k: _today(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_today(v) for v in value]
    return value


def _derived_problem(value, where: str = "") -> str | None:
    """Where a derived figure of a JSON document no longer follows from the raw data beside it:
    a measurement's items_per_s from its windows (the median), a hand loop's best from its rows."""
    if isinstance(value, dict):
        windows, rate = value.get("windows"), value.get("items_per_s")
        if isinstance(windows, list) and windows and isinstance(rate, (int, float)):
            if abs(statistics.median(windows) - rate) > 1e-9 * abs(rate):
                return (f"{where}: items_per_s {rate:.6g} is not the median of its windows "
                        f"({statistics.median(windows):.6g})")
        if isinstance(value.get("best"), dict) and isinstance(value.get("rows"), list):
            for batch, best in value["best"].items():
                rates = [r.get("items_per_s") for r in value["rows"] if str(r.get("batch_per_gpu")) == str(batch)]
                if rates and best.get("items_per_s") != max(rates):
                    return (f"{where}best[{batch}]: {best.get('items_per_s')} is not the fastest of its rows "
                            f"({max(rates)})")
        items = value.items()
    elif isinstance(value, list):
        items = enumerate(value)
    else:
        return None
    for key, inner in items:
        found = _derived_problem(inner, f"{where}{key}." if isinstance(inner, (dict, list)) else where)
        if found:
            return found
    return None


def _doc(path: Path):
    """A JSON document, checked: a derived figure that no longer follows from its raw data fails
    every claim that reads the document."""
    doc = _today(_read_json(path))
    problem = _derived_problem(doc)
    if problem:
        raise ClaimError(f"{path.relative_to(REPO)}: {problem}: the raw data under a derived figure changed")
    return doc


def _match(rows: list[dict], where: dict) -> list[dict]:
    where = {"status": "ok", **where}
    if where["status"] == "any":
        del where["status"]
    return [r for r in rows if all(r.get(k) == v for k, v in where.items())]


def _one(path: Path, where: dict) -> dict:
    hits = _match(_rows_of(path), where)
    if len(hits) != 1:
        raise ClaimError(f"{path.relative_to(REPO)}: {len(hits)} rows where {where} (want exactly one)")
    return hits[0]


def _const(name: str, path: str) -> object:
    tree = ast.parse(_path(path, None).read_text())
    for node in tree.body:
        targets = (node.targets if isinstance(node, ast.Assign)
                   else [node.target] if isinstance(node, ast.AnnAssign) else [])
        if any(isinstance(t, ast.Name) and t.id == name for t in targets):
            return ast.literal_eval(node.value)
    raise ClaimError(f"{path} has no top-level constant {name}")


def _names(default: str | None) -> dict:
    def option(r, name):
        opts = r.get("options")
        return (json.loads(opts) if isinstance(opts, str) else opts or {}).get(name)

    return {
        "row": lambda **where: _one(_path(None, default), where),
        "rows": lambda **where: _match(_rows_of(_path(None, default)), where),
        "row_in": lambda path, **where: _one(_path(path, None), where),
        "rows_in": lambda path, **where: _match(_rows_of(_path(path, None)), where),
        "doc": lambda path=None: _doc(_path(path, default)),
        "grep": lambda pattern, path=None: _grep(pattern, _path(path, default)),
        "answered": lambda devices, batch, execution, path=None: _answered(_path(path, default), devices, batch,
                                                                           execution),
        "fit_check": lambda fit, real: _fit_check(_path(fit, None), _path(real, None)),
        "const": lambda name, path=None: _const(name, path or default),
        # A CSV's rows as dicts, headers and cells stripped (nvidia-smi's logs pad both with spaces).
        "table": lambda path=None: _table(_path(path, default)),
        "opt": option,
        "k": lambda x: x / 1e3,
        "ips": lambda r: r["items_per_s"] / 1e3,
        "p10": lambda r: r["items_per_s_p10"] / 1e3,
        "p90": lambda r: r["items_per_s_p90"] / 1e3,
        "pct": lambda a, b: 100 * (a / b - 1),
        "eff": lambda rate, single, n: 100 * rate / (n * single),
        "spread": lambda r: (r["items_per_s_p90"] - r["items_per_s_p10"]) / r["items_per_s"],
        "phase": lambda d, name: [p["seconds"] for p in d["search"]["phases"] if p["phase"] == name][0],
        # One printed figure said of two files: the one farther from it, so that both must round to it.
        "both": lambda a, b: max((a, b), key=lambda v: abs(v - round(a))),
        "median": statistics.median, "min": min, "max": max, "len": len, "sum": sum, "abs": abs,
        "sorted": sorted, "round": round, "any": any, "all": all, "zip": zip, "set": set, "dict": dict, "str": str,
        "float": float, "int": int, "math": math,
    }


def _table(path: Path) -> list[dict]:
    """A CSV's complete rows as dicts, headers and cells stripped (nvidia-smi pads both with spaces;
    a log cut off mid-line leaves a short last row, which is dropped)."""
    reader = csv.reader(path.read_text().splitlines(), skipinitialspace=True)
    header = [h.strip() for h in next(reader, [])]
    return [dict(zip(header, (c.strip() for c in r))) for r in reader if len(r) == len(header)]


def _answered(path: Path, devices: int, batch: int, execution: str) -> dict:
    """The answer's record (bench/report/answer.py) for one cell of a results file, checked to
    name `execution` (as its config says it, "eager" where none): a claim of what the answer
    named is recomputed from the answer itself, not from a row picked by hand."""
    from bench.report import answer
    from bench.report.frame import load_runs

    recs = [r for r in answer.records(load_runs([path])) if (r["devices"], r["batch_per_gpu"]) == (devices, batch)]
    if len(recs) != 1 or recs[0]["strategy"] is None:
        raise ClaimError(f"{path.relative_to(REPO)}: no one answer at {devices} device(s), {batch} per GPU")
    named = (recs[0].get("config") or {}).get("execution", "eager")
    if named != execution:
        raise ClaimError(f"{path.relative_to(REPO)}: the answer at {devices} device(s), {batch} per GPU names "
                         f"{named}, not {execution}")
    return recs[0]


def _fit_check(fit_path: Path, real_path: Path) -> list[dict]:
    """`bench fit-check`'s verdicts of a fit file over a file of real runs (bench/fit/fit.py `against`):
    one dict per real row the fit covers, `agrees` True, False or None (not decided)."""
    from bench.fit import fit

    return fit.against(fit.load(fit_path), results.load(real_path))


def _grep(pattern: str, path: Path) -> float:
    m = re.search(pattern, path.read_text(), re.M)
    if not m:
        raise ClaimError(f"{path.relative_to(REPO)}: no match for {pattern!r}")
    return float(m.group(1).replace(",", ""))


def _namespace(file: str | None, let: dict[str, str]) -> dict:
    """The vocabulary, then the claim's own names (`let`), each evaluated in order."""
    names = {"__builtins__": {}, **_names(file)}
    for name, expression in let.items():
        try:
            names[name] = eval(compile(expression, f"<let {name}>", "eval"), names)  # noqa: S307
        except ClaimError:
            raise
        except Exception as exc:
            raise ClaimError(f"let {name} = {expression}: {type(exc).__name__}: {exc}") from None
    return names


# The names that read committed files; a figure's expression must reach one of them.
READERS = {"row", "rows", "row_in", "rows_in", "doc", "grep", "const", "best_of", "answered", "table", "fit_check"}


def reads_data(expression: str, let: dict[str, str], seen: frozenset = frozenset()) -> bool:
    """Whether the expression reads a committed file, itself or through the claim's own names:
    a figure written into a claim as a literal (or computed from literals) has no source."""
    try:
        used = {n.id for n in ast.walk(ast.parse(expression, mode="eval")) if isinstance(n, ast.Name)}
    except SyntaxError:
        return True  # evaluating it says what is wrong
    return bool(used & READERS) or any(reads_data(let[n], let, seen | {n}) for n in used if n in let and n not in seen)


def evaluate(expression: str, file: str | None = None, let: dict[str, str] | None = None) -> float:
    names = _namespace(file, let or {})
    try:
        value = eval(compile(expression, "<claim>", "eval"), names)  # noqa: S307
    except ClaimError:
        raise
    except Exception as exc:  # a typo or a missing column: say which expression
        raise ClaimError(f"{expression}: {type(exc).__name__}: {exc}") from None
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
        raise ClaimError(f"{expression} gave {value!r}, not a finite number")
    return float(value)


# --- the table of claims ------------------------------------------------------------------
@dataclass
class Claim:
    doc: str
    text: str
    values: list[str]
    file: str | None = None
    let: dict[str, str] = field(default_factory=dict)
    section: str = "docs"
    problems: list[str] = field(default_factory=list)

    def where(self) -> str:
        return f"{self.doc}: {self.text[:70]!r}"


def load(path: Path = TABLE) -> tuple[list[Claim], dict]:
    """The claims and the table's settings (`[scan]`: which documents are scanned, which enforced)."""
    table = tomllib.loads(path.read_text())
    claims = []
    for section, entries in table.items():
        if section == "scan":
            continue
        for entry in entries:
            claims.append(Claim(entry["doc"], entry["text"], list(entry.get("values", [])), entry.get("file"),
                                dict(entry.get("let", {})), section))
    return claims, table.get("scan", {})


def documents(scan: dict) -> tuple[list[str], list[str]]:
    """(enforced, pending): the README and every docs/*.md, those the
    table lists as pending apart (their scan is not enforced yet)."""
    found = ["README.md", *sorted(p.relative_to(REPO).as_posix() for p in (REPO / "docs").glob("*.md"))]
    pending = [d for d in found if d in scan.get("pending", [])]
    return [d for d in found if d not in pending], pending


def locate(claim: Claim, document: str) -> int | None:
    """Where the claim's text stands in its document (None: not there, or more than once)."""
    first = document.find(claim.text)
    if first < 0 or document.find(claim.text, first + 1) >= 0:
        return None
    return first


def check(claim: Claim) -> list[str]:
    """What does not hold about one claim: its text not in its document exactly once, a count of
    expressions unlike its count of figures, a figure its expression does not give as printed."""
    doc_path = REPO / claim.doc
    if not doc_path.is_file():
        return [f"{claim.where()}: no such document"]
    document = doc_path.read_text()
    at = locate(claim, document)
    if at is None:
        times = document.count(claim.text)
        return [f"{claim.where()}: the text stands {times} times in {claim.doc} (want once, word for word)"]
    found = [f for f in figures(document) if at <= f.start < at + len(claim.text)]
    if len(found) != len(claim.values):
        return [f"{claim.where()}: {len(found)} figures in the text ({', '.join(f.printed for f in found)}) "
                f"but {len(claim.values)} expressions"]
    problems = []
    for figure, expression in zip(found, claim.values):
        if not reads_data(expression, claim.let):
            problems.append(f"{claim.where()}: {figure.printed}: {expression!r} reads no committed file: a figure "
                            "comes from the rawest committed data, never from a number written into the claim")
            continue
        try:
            value = evaluate(expression, claim.file, claim.let)
        except ClaimError as exc:
            problems.append(f"{claim.where()}: {figure.printed}: {exc}")
            continue
        if _BOUND.search(document[max(0, figure.start - 12):figure.start]):
            # "within 0.5%" is a bound, not a rounding: the worst case it covers may not pass it.
            if abs(value) > abs(figure.value) + 1e-12:
                problems.append(f"{claim.where()}: states a bound of {figure.printed}, its file gives {value:.6g}, "
                                f"past it ({expression})")
        elif abs(value - figure.value) > figure.half_unit * (1 + 1e-9) + 1e-12:
            problems.append(f"{claim.where()}: prints {figure.printed}, its file gives {value:.6g} ({expression})")
    return problems


# The words around the figures: a GPU model, a GPU count or a date a sentence states must be one
# of the files behind it (their rows' gpu_name, n_gpus or gpu_count_host, and date).
GPU_MODELS = ("H100", "H200", "A100", "B200", "GH200", "L40S", "V100")
_MODEL = re.compile(r"\b(%s)s?\b" % "|".join(GPU_MODELS))
_COUNT = re.compile(r"\b(\d+)\s*(?:x\s*)?(?:NVIDIA\s+)?(?:%s|GPUs?)\b" % "|".join(GPU_MODELS))
_DATE = re.compile(r"\b(\d{4}-\d{2}-\d{2})\b")


def _files_behind(claim: Claim) -> list[Path]:
    named = [claim.file] if claim.file else []
    for text in [*claim.values, *claim.let.values()]:
        named += re.findall(r"[\"'](results/[^\"']+\.(?:json|csv))[\"']", text)
    return [REPO / n for n in dict.fromkeys(named) if (REPO / n).is_file() and n.endswith((".json", ".csv"))]


def hardware_words(claim: Claim) -> list[str]:
    """The GPU models, GPU counts and dates the claim's text states that no row of the results
    files behind it has (files that are not results files are not asked)."""
    rows = []
    for path in _files_behind(claim):
        try:
            rows += _rows_of(path)
        except (ClaimError, results.ResultsError, ValueError, KeyError):
            continue
    if not rows:
        return []
    names = " ".join(str(r.get("gpu_name") or "") for r in rows)
    counts = {int(r[k]) for r in rows for k in ("n_gpus", "gpu_count_host") if str(r.get(k) or "").isdigit()}
    dates = {str(r.get("date") or "")[:10] for r in rows}
    text = " ".join(claim.text.split())
    wrong = [f"{m} (the files' GPUs: {sorted({str(r.get('gpu_name')) for r in rows})})"
             for m in dict.fromkeys(_MODEL.findall(text)) if m not in names]
    if counts:
        wrong += [f"{n} GPUs (the files': {sorted(counts)})" for n in dict.fromkeys(_COUNT.findall(text))
                  if int(n) not in counts]
    wrong += [f"{d} (the files' dates: {sorted(dates)})" for d in dict.fromkeys(_DATE.findall(text))
              if d not in dates]
    return wrong


# Words that make the figure after them a bound its data must keep to, not a value it rounds.
_BOUND = re.compile(r"(?:within|at most|under|below|less than)\s+[+-]?$")


def undeclared(doc: str, claims: list[Claim]) -> list[Figure]:
    """The figures of a document that no claim's text covers: figures with no source."""
    document = (REPO / doc).read_text()
    spans = [(at, at + len(c.text)) for c in claims if c.doc == doc and (at := locate(c, document)) is not None]
    return [f for f in figures(document) if not any(a <= f.start < b for a, b in spans)]


def context(doc: str, figure: Figure, width: int = 50) -> str:
    document = (REPO / doc).read_text()
    line_no = document.count("\n", 0, figure.start) + 1
    snippet = document[max(0, figure.start - width):figure.start + width].replace("\n", " ")
    return f"{doc}:{line_no}: {figure.printed} in ...{snippet}..."
