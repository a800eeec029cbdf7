"""The report's sections, a registry: REPORT.md is the concatenation of SECTIONS, each
details page (one per hardware and model) that of PAGE_SECTIONS.

A section is one function: it takes the `Report` (the cases, the runs, the folder, the
short-label legend) or, on a details page, the `Page`, and returns Markdown lines (none
where it has nothing to say). Adding a section is one function plus one entry in a list.
"""
from __future__ import annotations

import functools
from dataclasses import dataclass, field
from pathlib import Path

import pandas as pd

import strategies
from bench.cases import fileio
from bench.core.knobs import optimizer_state_words, state_copies
from bench.report import answer as answers, answer_text
from bench.report import findings as answer
from bench.report import fitted, hostload, mdtable
from bench.report.anatomy import anatomy_section as _anatomy_details
from bench.report.figures import (PRECISION_ORDER, figure_amp, figure_efficiency, figure_knobs, figure_memory,
                                  figure_scaling, figure_throughput, rate_words, slug)
from bench.report.frame import _flag, label, run_name
from bench.report.labels import Legend
from bench.workloads.data import rate_unit, unit_of

_k = answer.rate


@dataclass
class Report:
    """What every section of REPORT.md reads."""

    frame: pd.DataFrame  # one row per case shown (the newest run, or every run with --all)
    runs: pd.DataFrame  # each run's own rows: what the answer compares
    anatomy: pd.DataFrame
    paths: list[Path]
    out: Path
    legend: Legend = field(default_factory=Legend)
    pages: dict = field(default_factory=dict)  # (hardware, model) -> details page, relative to out
    _records: list | None = None

    def records(self) -> list[dict]:
        """The answer's records, made once for every section that states them."""
        if self._records is None:
            self._records = answers.records(self.runs, self.legend)
        return self._records


@dataclass
class Page:
    """What every section of one details page reads."""

    group: pd.DataFrame  # one hardware and model
    anatomy: pd.DataFrame
    out: Path
    name: str  # the figures' file prefix


# --- REPORT.md ----------------------------------------------------------------------------
def _started(runs: pd.DataFrame, source: str) -> str:
    """When a run began (its earliest row's date, to the minute): with its path, what tells
    two runs apart."""
    dates = sorted(str(d) for d in runs[runs["source"] == source]["date"].dropna())
    return dates[0][:16].replace("T", " ") if dates else "an unknown date"


WIDTH = 100  # columns: no line of the first screen is longer


def _short(text: str, width: int = WIDTH) -> str:
    return text if len(text) <= width else text[:width - 3].rstrip(" ,;:") + "..."


def _wrapped(text: str, width: int = WIDTH) -> list[str]:
    """A sentence that must stay whole (it names a fix), in lines of at most `width` columns where
    its words allow, never breaking a `code span` (a command to copy): Markdown joins the lines into
    one paragraph again."""
    import re

    lines: list[str] = []
    for word in re.findall(r"(?:[^\s`]*`[^`]*`)+\S*|\S+", text):
        if lines and len(lines[-1]) + 1 + len(word) <= width:
            lines[-1] += " " + word
        else:
            lines.append(word)
    return lines


def first_screen(rep: Report) -> list[str]:
    """The answer at a glance, before any detail: per run, hardware, model and precision, one
    table row per device count and batch (the pick, its throughput, its speed-up), each caveat in
    one line, what could not run once per reason, and the throughput figure that stars the picks."""
    recs = rep.records()
    lines = []
    for (source, hw, model), run in rep.runs.groupby(["source", "hardware", "model"], sort=True):
        mine = [r for r in recs if (r["run"], r["hardware"], r["model"]) == (run_name(source), hw, model)]
        for precision in [p for p in PRECISION_ORDER if any(r["precision"] == p for r in mine)]:
            done = [r for r in mine if r["precision"] == precision and r["strategy"] is not None]
            if not done:
                continue
            unit = answer_text.per(done[0])
            which = f" (run `{run_name(source)}`)" if rep.runs["source"].nunique() > 1 else ""
            lines += [f"**{model} on {hw}, {precision}**: the configuration to use{which}", "",
                      f"| devices | batch/{unit} | use | {answer_text.heading_of(done[0])} "
                      f"| vs {strategies.baseline()} |",
                      "|---|---|---|---|---|"]
            for r in sorted(done, key=lambda r: (-r["devices"], r["batch_per_gpu"])):
                mark = "" if r["recommended"] else " (unjudged)"
                speed = "" if r["speedup"] is None else f"x{r['speedup']:.2f}"
                lines.append(f"| {r['where']} | {r['batch_per_gpu']} | `{r['label']}`{mark} | "
                             f"{answer.rate(r['items_per_s'])} | {speed} |")
            caveats = [f"{r['where']}, {r['batch_per_gpu']}/{unit}: unjudged, "
                       + (", ".join(f"`{x['label']}` {answer_text.may_be(x, r)}" for x in answer_text.rivals(r))
                          or "its one configuration was stopped or starved: re-run")
                       for r in done if r["unstable"]]
            caveats += [f"{r['where']}, {r['batch_per_gpu']}/{unit}: the pick's own trials were disturbed"
                        for r in done if r["disturbed"]]
            lines += [""] + [f"- {_short(c)}" for c in caveats] if caveats else []
            lines.append("")
        if not any(r["strategy"] is not None for r in mine):
            counts = run["status"].value_counts()
            lines += [_short(f"**{model} on {hw}**: nothing ran ok ("
                             + ", ".join(f"{n} {status}" for status, n in counts.items()) + ")"), ""]
        # Each what could not run and the busy host: a paragraph of its own, whole (each may name its fix).
        notes = [f"Not measured: {', '.join(who)}: {why}" for why, who in answers.not_measured(run).items()]
        busy = hostload.busy_short(run.to_dict("records"))
        notes += [busy] if busy else []
        for note in notes:
            lines += _wrapped(note) + [""]
        figure = rep.out / f"{slug(hw, model)}-throughput.png"
        if figure.exists():
            lines += [f"![{figure.stem}]({figure.name})", ""]
    return lines


def answer_section(rep: Report) -> list[str]:
    """The recommendation in sentences (one per run, hardware and model), the legend of
    short labels, then one compact table per precision and device count."""
    recs = rep.records()
    several = rep.runs["source"].nunique() > 1
    lines, tables = ["## The answer", ""], []
    for (source, hw, model), run in rep.runs.groupby(["source", "hardware", "model"], sort=True):
        mine = [r for r in recs if (r["run"], r["hardware"], r["model"]) == (run_name(source), hw, model)]
        head = f"{model} on {hw}" + (f", run `{run_name(source)}` of {_started(rep.runs, source)}" if several else "")
        lines.append(f"- **{head}**: {answer_text.actions(run, mine)}")
        for (precision, where), _ in pd.DataFrame(mine).groupby(["precision", "where"], sort=False):
            sub = [r for r in mine if (r["precision"], r["where"]) == (precision, where)]
            tables += [f"**{head}: {precision}, {where}**", "", mdtable.markdown(answer_text.table(sub)), ""]
            levers = answer_text.lever_lines(sub)
            if levers:
                tables += ["Levers measured:", ""] + [f"- {line}" for line in levers] + [""]
    lines += [""] + rep.legend.lines()
    for path, name in sorted(set(zip(rep.runs["path"], rep.runs["source"]))) if "path" in rep.runs else []:
        said = answer_text.search_lines(path, name)
        lines += [f"- {line}" for line in said] + ([""] if said else [])
    # MFU and memory per GPU are columns of GPU tables only (answer_text.table).
    on_gpus = any(answer_text.per(r) != "replica" for r in recs)
    gpu_columns = ("MFU (model FLOPs per second over the GPU's dense datasheet peak for the precision), peak memory "
                   "per GPU, " if on_gpus else "")
    return lines + [f"Per batch: the recommended configuration (the simplest that the fastest does not beat beyond "
                    f"the spreads), its throughput ({rate_words(rep.runs)}: median, p10-p90), "
                    f"speed-up over {strategies.baseline()} of the same run "
                    f"(* over its fastest setting where none had the same knobs), {gpu_columns}regime, and the "
                    "fastest other strategy. A tie: the spreads overlap; unstable: a faster case's steps or trials "
                    "were disturbed "
                    f"(a spread wider than {100 * answers.UNSTABLE:.0f}% of its median, trials or wall clock outside "
                    "it), re-run it.", ""] + tables


def findings_section(rep: Report) -> list[str]:
    lines = []
    for (hw, model), group in rep.frame.groupby(["hardware", "model"], sort=False):
        said = answer.sentences(group)
        if said:
            lines += [f"**{model} on {hw}**", ""] + [f"- {s}" for s in said] + [""]
    return (["## Findings", ""] + lines) if lines else []


def _figures(rep: Report, title: str, kinds: tuple[str, ...]) -> list[str]:
    lines = []
    for (hw, model), page in rep.pages.items():
        found = [f"{slug(hw, model)}-{k}.png" for k in kinds if (rep.out / f"{slug(hw, model)}-{k}.png").exists()]
        if found:
            lines += [f"**{model} on {hw}** ([details]({page}))", ""] + [f"![{f[:-4]}]({f})" for f in found] + [""]
    return ([f"## {title}", ""] + lines) if lines else []


def throughput_section(rep: Report) -> list[str]:
    return _figures(rep, "Throughput", ("throughput",))


def scaling_section(rep: Report) -> list[str]:
    return _figures(rep, "Scaling", ("efficiency", "scaling"))


def fit_section(rep: Report) -> list[str]:
    return fitted.section(rep.paths, set(rep.frame["model"]) if len(rep.frame) else None)


def memory_overview(rep: Report) -> list[str]:
    lines = []
    for (hw, model), group in rep.frame.groupby(["hardware", "model"], sort=False):
        lines += [line.replace("## Memory, explained", f"## {model} on {hw}: memory") for line in memory_section(group)]
    return lines


def anatomy_overview(rep: Report) -> list[str]:
    if rep.anatomy.empty:
        return []
    lines = ["## Step anatomy", ""]
    for (hw, model), rows in rep.anatomy.groupby(["hardware", "model"], sort=False):
        if (hw, model) in rep.pages:
            lines.append(f"- {model} on {hw}: {len(rows)} profiled case(s), figures and tables in "
                         f"[the details]({rep.pages[(hw, model)]}).")
    return lines + [""]


def cudnn_section(rep: Report) -> list[str]:
    effect = cudnn_effect(rep.frame)
    if not effect:
        return []
    threaded = ", ".join(s for s in strategies.names() if s in strategies.threaded())
    return ["## DataParallel and cuDNN autotuning", "",
            "DataParallel runs each replica in a new Python thread every step; cuDNN's plan cache is "
            "thread-local, so with `cudnn.benchmark` on every step autotunes every convolution again. "
            f"parabench's default (`--cudnn-benchmark auto`) turns it off for {threaded} and on "
            "for the rest; every row records the setting.", ""] + [f"- {s}" for s in effect] + [""]


def peak_section(rep: Report) -> list[str]:
    return achieved_vs_peak(rep.frame, peak_rates(rep.paths))


SECTIONS = [first_screen, answer_section, findings_section, throughput_section, scaling_section, fit_section,
            memory_overview, anatomy_overview, cudnn_section, peak_section]


# --- details pages --------------------------------------------------------------------------
def figures_section(page: Page) -> list[str]:
    g, out, name = page.group, page.out, page.name
    picks = answers.records(g)  # the answer's pick at each device count and batch, starred
    figs = []
    for kind, draw in (("throughput", functools.partial(figure_throughput, picks=picks)), ("knobs", figure_knobs),
                       ("memory", functools.partial(figure_memory, picks=picks)), ("efficiency", figure_efficiency),
                       ("amp-speedup", figure_amp), ("scaling", figure_scaling)):
        figs += draw(g, out, f"{name}-{kind}")
    return [f"![{p.stem}]({p.name})" for p in figs if p.suffix == ".png"] + [""]


def page_findings(page: Page) -> list[str]:
    return ["## Findings", ""] + [f"- {s}" for s in findings(page.group)] + [""]


def page_memory(page: Page) -> list[str]:
    return memory_section(page.group)


def page_anatomy(page: Page) -> list[str]:
    if page.anatomy.empty:
        return []
    hw, model = page.group["hardware"].iloc[0], page.group["model"].iloc[0]
    return _anatomy_details(page.anatomy[(page.anatomy["hardware"] == hw) & (page.anatomy["model"] == model)],
                            page.out, page.name)


PAGE_SECTIONS = [figures_section, page_findings, page_memory, page_anatomy]  # then every table (pages.py)


# --- the sentences and tables these sections are made of -----------------------------------



def findings(group: pd.DataFrame) -> list[str]:
    """Plain sentences computed from the data of one hardware/model group."""
    out = []
    ok = group[group["status"] == "ok"]
    for precision in [p for p in PRECISION_ORDER if p in set(group["precision"])]:
        p = ok[ok["precision"] == precision]
        for (batch, _), b in p.groupby(["batch_per_gpu", "source"], sort=True):  # within one run
            b = b.sort_values("items_per_s", ascending=False)
            if b["strategy"].nunique() > 1:  # "fastest" among one strategy's settings is not a finding
                top, second = b.iloc[0], b.iloc[1]
                overlap = top["items_per_s_p10"] <= second["items_per_s_p90"]
                regime = f", {top['regime']}" if top.get("regime") else ""
                out.append(f"{precision}, batch {batch}/GPU: fastest is {label(top)} at {_k(top['items_per_s'])} "
                           f"{rate_unit(top)}"
                           f"{regime}{' (within the spread of the next, ' + label(second) + ')' if overlap else ''}.")
        pairs = answer.reference_pairs(p)
        for threaded in sorted({r["strategy"] for r, _ in pairs}):
            ratios = [(r["batch_per_gpu"], x) for r, x in pairs if r["strategy"] == threaded]
            if min(x for _, x in ratios) < 0.9:
                worst = min(ratios, key=lambda t: t[1])
                out.append(f"{precision}: {threaded} reaches {100 * min(x for _, x in ratios):.0f}-"
                           f"{100 * max(x for _, x in ratios):.0f}% of {strategies.reference()}'s throughput "
                           "on the same GPUs "
                           f"(worst at batch {worst[0]}/GPU; batches {', '.join(str(b) for b, _ in ratios)}).")
    for precision, prow in group.groupby("precision", sort=False):
        fits = []
        for lab, rows in prow.groupby(prow.apply(label, axis=1), sort=False):
            fit, oom = rows[rows["status"] == "ok"]["batch_per_gpu"], rows[rows["status"] == "oom"]["batch_per_gpu"]
            if len(fit):
                fits.append(f"{lab} {int(fit.max())}" + (f" (OOM at {int(oom.min())})" if len(oom) else ""))
        if fits:
            out.append(f"{precision}: largest batch per GPU that ran: " + "; ".join(fits) + ".")
    return out


def _step_ms(row) -> str:
    return f"{row['step_ms_p50']:.1f} ms/step (p10-p90 {row['step_ms_p10']:.1f}-{row['step_ms_p90']:.1f})"


def cudnn_effect(frame: pd.DataFrame) -> list[str]:
    """The DataParallel cuDNN-autotuning effect, where both settings were measured."""
    out = []
    ok = frame[(frame["status"] == "ok") & frame["strategy"].isin(strategies.threaded())]
    keys = ["hardware", "model", "precision", "strategy", "n_gpus", "batch_per_gpu", "source"]  # within one run
    for key, g in ok.groupby(keys):
        on = g[g["cudnn_benchmark"].map(_flag)]
        off = g[~g["cudnn_benchmark"].map(_flag)]
        if len(on) and len(off):
            on, off = on.iloc[0], off.iloc[0]
            out.append(f"{key[3]}, {key[1]} {key[2]}, {key[4]} GPUs, batch {key[5]}/GPU on {key[0]}: "
                       f"cudnn.benchmark on {_step_ms(on)} ({_k(on['items_per_s'])} {rate_unit(on)}), "
                       f"off {_step_ms(off)} ({_k(off['items_per_s'])} {rate_unit(off)}): "
                       f"{off['items_per_s'] / on['items_per_s']:.0f}x faster off.")
    return out


def peak_rates(paths: list[Path]) -> dict[str, dict]:
    """GPU name -> the newest `python -m bench peak` probe (*.probe.json) beside the inputs."""
    found = {}
    for probe in sorted({f for p in paths for f in Path(p).parent.glob("*.probe.json")},
                        key=lambda f: f.stat().st_mtime):
        try:
            doc = fileio.read_json(probe, "peak probe", "run `bench peak` again")
        except fileio.ResultsError:  # a pipe, a device or no probe: not a peak to set rates against
            continue
        if isinstance(doc, dict) and doc.get("gpu") and doc.get("bf16_matmul_tflops"):
            found[doc["gpu"]] = {**doc, "file": probe.name}
    return found


def achieved_vs_peak(frame: pd.DataFrame, peaks: dict[str, dict]) -> list[str]:
    """Markdown: each strategy's best achieved TFLOP/s per GPU against the measured dense bf16 rate."""
    lines = []
    for gpu, peak in peaks.items():
        ok = frame[(frame["status"] == "ok") & (frame["gpu_name"] == gpu) & frame["tflops"].notna()]
        if ok.empty:
            continue
        ok = ok.assign(per_gpu=ok["tflops"] / ok["n_gpus"].clip(lower=1))
        rows = []
        for strategy, g in ok.groupby("strategy", sort=False):
            best = g.loc[g["per_gpu"].idxmax()]
            rows.append({"strategy": strategy, "best case": f"{best['model']} {best['precision']}, batch "
                         f"{int(best['batch_per_gpu'])}/GPU, {int(best['n_gpus'])} GPU"
                         f"{', ' + best['variant'] if best['variant'] else ''}",
                         "TFLOP/s (all GPUs)": round(best["tflops"], 1), "TFLOP/s per GPU": round(best["per_gpu"], 1),
                         "% of bf16 peak": round(100 * best["per_gpu"] / peak["bf16_matmul_tflops"], 1)})
        table = pd.DataFrame(rows).sort_values("TFLOP/s per GPU", ascending=False)
        per_item = " or ".join(sorted({unit_of(r).one for r in ok.to_dict("records")}))  # image, token
        lines += [f"## Achieved TFLOP/s on {gpu} against its dense bf16 matrix rate", "",
                  f"Dense matrix rates measured by `python -m bench peak` ({peak['file']}): "
                  + ", ".join(f"{k} {peak[f'{k}_matmul_tflops']:.0f}" for k in ("bf16", "fp16", "tf32", "fp32")
                              if peak.get(f"{k}_matmul_tflops"))
                  + f" TFLOP/s. Training FLOPs per {per_item} come from "
                  "torch.utils.flop_counter (forward and backward); each strategy's best case per GPU:", "",
                  mdtable.markdown(table), ""]
    return lines




def _keeps_and_sends(strategy, parameters: float, optimizer: str) -> str:
    """'zero1 shards the optimiser state (44.6 MiB) and sends per step: all-reduce of the
    gradients (44.6 MiB), ...', from the strategy's declarations."""
    shards = (f"shards {strategy.describe_shards()} "
              f"({strategy.sharded_bytes(int(parameters), optimizer) / 2**20:.1f} MiB)"
              if strategy.shards else "shards nothing")
    sends = ", ".join(c.describe(int(parameters)) for c in strategy.sends) or "nothing"
    return f"{strategy.name} {shards} and sends per step: {sends}"


def memory_section(group: pd.DataFrame) -> list[str]:
    """Per-GPU peak memory of the sharded strategies against DDP at equal batch, GPUs,
    precision and layout (same run), with what sharding can save at most: the part of the
    model state (fp32 weights, gradients and the optimiser's state: SGD's momentum, AdamW's two
    moments) it declares it shards, (N-1)/N of it, and what it declares it sends per step
    (strategies/base.py)."""
    model = group["model"].iloc[0]
    pairs = answer.sharding_pairs(group[group["status"] == "ok"])
    counts = group["parameters"].dropna() if "parameters" in group else []
    if not len(counts) or not pairs:  # the parameter count comes with the rows (the workload's)
        return []
    parameters = float(counts.iloc[0])
    tensor_mib = parameters * 4 / 2**20  # one fp32 copy of the parameters
    optimizer = str(pairs[0][1].get("optimizer") or "sgd")
    copies = 2 + state_copies(optimizer)  # weights, gradients and the optimiser's state
    rows = []
    for r, base in pairs:
        n = int(base["n_gpus"] or base["n_replicas"])  # a CPU run's ranks count as its devices
        bound = strategies.get(r["strategy"]).sharded_bytes(parameters, r.get("optimizer"))
        rows.append({"precision": r["precision"], "GPUs": n, "batch/GPU": int(r["batch_per_gpu"]),
                     "case": label(r), "peak MiB": f"{r['peak_alloc_mib']:.0f}",
                     f"{strategies.reference()} peak MiB": f"{base['peak_alloc_mib']:.0f}",
                     "saved MiB": f"{base['peak_alloc_mib'] - r['peak_alloc_mib']:.0f}",
                     "at most MiB": f"{bound / 2**20 * (n - 1) / n:.0f}",
                     f"{rate_unit(r)} vs {strategies.reference()}":
                         f"{100 * r['items_per_s'] / base['items_per_s']:.0f}% "
                         f"({100 * r['items_per_s_p10'] / base['items_per_s_p90']:.0f}-"
                         f"{100 * r['items_per_s_p90'] / base['items_per_s_p10']:.0f})"})
    share, at = max((((b["peak_alloc_mib"] - copies * tensor_mib) / b["peak_alloc_mib"], b) for _, b in pairs),
                    key=lambda t: t[0])
    shown = sorted({r["strategy"] for r, _ in pairs} | {strategies.reference()}, key=strategies.names().index)
    who = "; ".join(_keeps_and_sends(strategies.get(name), parameters, optimizer) for name in shown)
    return [f"## Memory, explained: sharding against {strategies.reference()}", "",
            f"{model} has {parameters / 1e6:.2f} M parameters: its model state (fp32 weights, gradients and "
            f"{optimizer_state_words(optimizer)}) is {copies * tensor_mib:.0f} MiB per replica. {who}. "
            "On N GPUs a strategy can save at most "
            "(N-1)/N of what it shards, per GPU ('at most'). The rest of the peak is activations and workspace, "
            f"which no strategy here shards: up to {100 * share:.0f}% of {strategies.reference()}'s peak "
            f"({label(at)}, {at['precision']}, "
            f"batch {int(at['batch_per_gpu'])}/GPU). Where the saving exceeds the bound or is negative, the "
            "difference is the strategies' own buffers (DDP's gradient buckets, gathered parameters).", "",
            mdtable.markdown(pd.DataFrame(rows)), ""]
