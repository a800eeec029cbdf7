"""Progress on the terminal: which case runs, how many remain, and each outcome."""
from __future__ import annotations

from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn, TimeRemainingColumn

from bench.cases.case import Case
from bench.workloads.data import rate_unit


def describe(row: dict) -> str:
    case = Case.from_row(row)
    variant = f" ({case.variant()})" if case.variant() else ""
    head = (f"{row['strategy']:<17} {row['precision']:<8} {row['model']:<14} {case.where():<8} "
            f"batch {row['batch_per_gpu']:>4}{variant}")
    if row["status"] == "ok":
        mem = f", {row['peak_alloc_mib']:.0f} MiB" if row.get("peak_alloc_mib") else ""
        caveat = f"; caveat: {row['caveat']}" if row.get("caveat") else ""
        return (f"{head}  {row['items_per_s']:>9.1f} {rate_unit(row)}  step {row['step_ms_p50']:.2f} ms "
                f"(p10-p90 {row['step_ms_p10']:.2f}-{row['step_ms_p90']:.2f}){mem}{caveat}")
    return f"{head}  {row['status'].upper()}: {row['reason']}"


class ConsoleReporter:
    def __init__(self, console: Console | None = None):
        self.console = console or Console(stderr=True)
        self.progress = Progress(
            TextColumn("[bold]{task.description}"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(),
            TextColumn("ETA"), TimeRemainingColumn(),
            console=self.console, transient=True,
        )
        self.task = None

    def begin(self, total: int) -> None:
        """A batch of cases begins (a search begins one per phase)."""
        self.progress.start()
        if self.task is None:
            self.task = self.progress.add_task("starting", total=total)
        else:
            self.progress.update(self.task, total=total, completed=0)

    def say(self, line: str) -> None:
        """A line between cases (a search's decisions)."""
        self.progress.console.print(line, highlight=False, soft_wrap=True, markup=False)

    def preparing(self, label: str) -> None:
        self.progress.update(self.task, description=f"starting {label}")

    def case_started(self, label: str) -> None:
        self.progress.update(self.task, description=label)
        if not self.console.is_terminal:
            # No live bar where the output is a file or a pipe: a line says what runs now (a
            # large model's case can take a minute with nothing else printed).
            self.progress.console.print(f"measuring {label} ...", highlight=False, soft_wrap=True, markup=False)

    def case_done(self, row: dict) -> None:
        self.progress.advance(self.task)
        self.progress.console.print(describe(row), highlight=False, soft_wrap=True, markup=False)

    def close(self) -> None:
        self.progress.stop()
