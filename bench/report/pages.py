"""Tables and figures that answer "which strategy, at which batch size, at what cost".

`python -m bench report [FILES...]` (or `make plot`) reads results files, keeps rows from
different hardware apart, and writes plots/REPORT.md (the answer first, then the sections
of bench/report/sections.py), one details page per hardware and model with its figures
and every table, CSV tables and the HTML pages. By default the report shows the newest run
(`--all`: every run, each run's answer apart); unchanged inputs give identical files.
"""
from __future__ import annotations

import os
import re
import shutil
import tempfile
from pathlib import Path

import pandas as pd

import strategies
from bench.cases import fileio
from bench.report import findings as answer
from bench.report import mdtable, sections
from bench.report.figures import PRECISION_ORDER, caption, slug
from bench.report.frame import _order, label, load_anatomy, load_frame, load_runs, newest, run_labels, run_name
from bench.workloads.data import rate_unit

_k = answer.rate  # a rate with its significant digits: 19.0k, 47, 0.7


def _status_cell(row) -> str:
    if row["status"] == "skipped":
        return f"skipped: {row['reason']}"
    return f"{row['status']}" + (f": {str(row['reason'])[:60]}" if row["status"] in ("error", "timeout") else "")


def _caveat(row) -> str:
    return row.get("caveat") if isinstance(row.get("caveat"), str) else ""


CAVEATS = "caveats (what makes a figure mislead)"
SPEEDUP = "speed-up over the baseline (scaling efficiency)"
CELLS = {
    "throughput (median, p10-p90)": lambda r: f"{_k(r['items_per_s'])} ({_k(r['items_per_s_p10'])}-"
                                              f"{_k(r['items_per_s_p90'])}) {rate_unit(r)}"
                                              + (" [caveat]" if _caveat(r) else ""),
    "step time ms (median, p10-p90)": lambda r: f"{r['step_ms_p50']:.2f} "
                                                f"({r['step_ms_p10']:.2f}-{r['step_ms_p90']:.2f})",
    "peak memory per GPU, MiB (max / min over GPUs)": lambda r: (
        f"{r['peak_alloc_mib']:.0f} / {r['peak_alloc_mib_min']:.0f}"
        if pd.notna(r.get("peak_alloc_mib")) and pd.notna(r.get("peak_alloc_mib_min")) else "n/a (CPU)"),
    SPEEDUP: lambda r: (
        f"x{r['speedup']:.2f} ({100 * r['efficiency']:.0f}%)" if pd.notna(r.get("speedup")) else "no baseline"),
    # Two significant digits below 1 (a CPU's 0.04 is not 0.0).
    "achieved TFLOP/s": lambda r: (f"{r['tflops']:.1f}" if r["tflops"] >= 0.95 else f"{r['tflops']:.2g}")
                                  if pd.notna(r.get("tflops")) else "n/a",
    CAVEATS: lambda r: _caveat(r) or "none",
}


def tables(frame: pd.DataFrame) -> dict[str, pd.DataFrame]:
    """One wide table per metric: rows strategy/GPUs/knobs, columns per-GPU batch sizes."""
    out = {}
    records = frame.to_dict("records")
    for title, cell in CELLS.items():
        if title == CAVEATS and not any(r["status"] == "ok" and _caveat(r) for r in records):
            continue  # a table of "none" says nothing
        if title.startswith("peak memory per GPU") and not any(
                r["status"] == "ok" and pd.notna(r.get("peak_alloc_mib")) for r in records):
            continue  # no device memory to show: a CPU run
        cells = [cell(r) if r["status"] == "ok" else _status_cell(r) for r in records]
        wide = frame.assign(cell=cells, row=[label(r) for r in frame.to_dict("records")])
        table = wide.pivot_table(index="row", columns="batch_per_gpu", values="cell", aggfunc="first", sort=False)
        table = table[sorted(table.columns)]  # rows keep the strategy order; batches ascend
        table.columns = [f"batch {c}" for c in table.columns]
        # The registry's baseline asked now, not at import: a strategy registered later counts.
        out[title.replace("the baseline", strategies.baseline())
            if title == SPEEDUP else title] = table.fillna("not run")
    return out


def reading_guide(rows: pd.DataFrame) -> str:
    """How to read the tables, in the units of the rows shown (images/s; a language model's tokens/s)."""
    from bench.report.figures import rate_words

    rate = rate_words(rows)
    what = {"images/s": "the images of the global batch", "tokens/s": "the tokens of the global batch (its "
            "sequences times their length)"}.get(rate, "what the global batch holds (images, or a language model's "
                                                       "tokens: sequences times their length)")
    on_gpus = bool((rows["n_gpus"].fillna(0) > 0).any()) if "n_gpus" in rows else True
    unit, count = ("GPU", "the GPU count, all hosts together") if on_gpus else ("replica", "the replica count")
    memory = ("Memory is the largest `torch.cuda.max_memory_allocated` of the GPUs. " if on_gpus else "")
    return (f"Throughput ({rate}) is {what} over the median step time, with the p10-p90 spread over every timed step "
            f"of every trial. Speed-up and efficiency compare with the baseline (`single`) at the same per-{unit} "
            f"batch (weak scaling), measured in the same results file; efficiency is speed-up over {count}. "
            f"{memory}A tie: the two spreads overlap. Rows measured on different hardware are never compared.")


def _run_labels(frame: pd.DataFrame) -> pd.DataFrame:
    """With several runs shown, each table row names its run: cases of two runs sit in
    separate rows, never in one ratio."""
    if "source" not in frame or frame["source"].nunique() < 2:
        return frame
    return frame.assign(strategy=[f"{r['strategy']} [{run_name(r['source'])}]" for _, r in frame.iterrows()])


def model_page(group: pd.DataFrame, anatomy: pd.DataFrame, out: Path, name: str) -> list[str]:
    """The details of one hardware/model: the PAGE_SECTIONS, then every table."""
    hardware, model = group["hardware"].iloc[0], group["model"].iloc[0]
    lines = [f"# {model} on {hardware}", "", f"_{caption(group)}_", "", "[Back to the answer](../REPORT.md)", "",
             reading_guide(group), ""]
    page = sections.Page(group, anatomy, out, name)
    for section in sections.PAGE_SECTIONS:
        lines += section(page)
    for precision in [p for p in PRECISION_ORDER if p in set(group["precision"])]:
        sub = _run_labels(group[group["precision"] == precision])
        for title, table in tables(sub).items():
            lines += [f"## {precision}: {title}", "", mdtable.markdown(table, index=True), ""]
            fileio.atomic_write_bytes(out / f"{slug(name, precision, title.split(' (')[0].split(',')[0])}.csv",
                                       table.to_csv().encode())
    # The page lives one folder down from the figures.
    return [re.sub(r"^(!\[[^]]*\]\()", r"\1../", line) if line.startswith("![") else
            line[1:] if line.startswith("###") else line for line in lines]


def _intro(paths: list[Path], shown: list[Path], runs: pd.DataFrame) -> list[str]:
    """What the report shows: every run's cases and dates (`runs` keeps each run's own rows,
    so a case measured again in a later run does not hide the earlier run's dates)."""
    dates = sorted(str(d)[:16] for d in runs["date"].dropna())
    span = f"{dates[0]} to {dates[-1]}" if dates and dates[0] != dates[-1] else (dates[0] if dates else "")
    frame = runs
    if len(shown) == 1:
        which = (f"Run `{run_labels(shown)[str(shown[0])]}` ({len(frame)} cases, {span})"
                 + (f": the newest of {len(paths)} results files; `--all` merges every run." if len(paths) > 1
                    else "."))
    else:
        which = f"{len(shown)} runs, {len(frame)} cases ({span}); each run's answer stands apart."
    return ["# parabench report: which strategy, at which batch size, at what cost", "",
            which + " Every ratio divides cases of one run.", ""]


def write_report(paths: list[Path], out: Path, every_run: bool = False) -> Path:
    """plots/REPORT.md, the answer on its first screen, and one details page per hardware and
    model (plots/<hardware>/<model>.md); the newest run of `paths`, or with `every_run` all.

    Drawn in a hidden folder inside `out` (the same file system: every move is a rename) and moved
    into place once whole: a report stopped while it draws (Ctrl-C, a time limit) leaves `out`'s
    files as they were, not half of a new report beside half of the old. Pages of an earlier
    report that this one does not draw (another model's) stay."""
    out.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(prefix=".drawing-", dir=out))
    try:
        report = _draw(paths, staging, every_run)
        for drawn in sorted(staging.rglob("*")):  # files only: the folders come with them
            if drawn.is_file():
                target = out / drawn.relative_to(staging)
                target.parent.mkdir(parents=True, exist_ok=True)
                os.replace(drawn, target)
    finally:
        shutil.rmtree(staging, ignore_errors=True)
    return out / report.relative_to(staging)


def _draw(paths: list[Path], out: Path, every_run: bool) -> Path:
    shown = list(paths) if every_run else newest(paths)
    frame = load_frame(shown)
    rep = sections.Report(frame=frame, runs=load_runs(shown), anatomy=load_anatomy(shown), paths=shown, out=out)
    for (hw, model), group in frame.groupby(["hardware", "model"], sort=False):
        page = out / slug(hw) / f"{slug(model)}.md"
        page.parent.mkdir(parents=True, exist_ok=True)
        lines = model_page(_order(group), rep.anatomy, out, slug(hw, model))
        fileio.atomic_write_bytes(page, ("\n".join(lines) + "\n").encode())
        rep.pages[(hw, model)] = f"{page.parent.name}/{page.name}"
    lines = _intro(paths, shown, rep.runs)
    for section in sections.SECTIONS:
        lines += section(rep)
    lines += ["## Details", "", reading_guide(frame), ""] + [f"- [{model} on {hw}]({link})" for (hw, model), link in
                                                     rep.pages.items()] + [""]
    report = out / "REPORT.md"
    fileio.atomic_write_bytes(report, ("\n".join(lines) + "\n").encode())
    from bench.report import html

    html.write_html(out)
    return report
