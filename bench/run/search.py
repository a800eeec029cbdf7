"""`bench run --search`: the best configuration within a time budget, every lever's gain measured.

The question is asked at the GPUs the user has: the largest device count of the run comes first
in every phase, one device next. Three phases, every case an ordinary row of the results file:
1. **Survey**: the sweep the user asked for, every strategy the host can run at every batch of the
   ladder at its defaults: the comparison the suite exists for. The reference strategy at the
   largest device count comes first, so that the bar is set early, one device's cases next, the
   rest after. The cases race (bench/run/survey.py): a short first trial, and every trial only for
   a case within reach of its group's leader (a raced-out row says so). A strategy the host cannot
   run is a `skipped` row that says why; beyond SURVEY_SHARE of the budget a case runs its short
   trial alone (a first look), and only a budget too small even for that leaves cases out, their
   rows naming the budget.
2. **Levers**: at each model, precision, device count and batch, on the leaders (the configuration
   the ranking names, and the fastest where it is another), one dimension after another
   (bench/cases/levers.py: execution, the optimiser's kernels, memory format, the strategy's own options).
   Before any other lever anywhere, every device count gets the executions its regime calls for
   at every batch: compile reduce-overhead everywhere, and a whole-step CUDA graph where the GPU
   idles (the batch ladder of the fastest eager step any strategy reached at each batch there).
   One lever at every batch of a device count is measured in one call, so its batches share a
   worker's start. The best lever of a dimension is kept where it beats the current configuration
   beyond both intervals; the next dimension starts from it.
3. **Finals**: where the order is open (a configuration whose median is ahead by what matters, but
   whose interval overlaps the pick's), the candidates are measured again side by side,
   interleaved (A, B, A), which also measures the run's own noise: a difference within it is a
   tie (bench/cases/ranking.py `pick`).

The budget is the whole command's wall time. Each case's cost is estimated from the rows this
run already measured (by execution and device count; compiling costs the most), the finals are
reserved their share, and what the budget cannot hold is recorded as not tried, with why. The
plan, every measurement, what was kept, dropped or not tried and why are the results file's
"search" section (SCHEMA), written after every case with the rows; `bench answer` and `bench
report` read it.

In four parts: the plan (this module: the phases and their order), the budget (bench/run/budget.py:
the time left and each case's estimated cost), the runner (bench/run/runner.py: measuring through
the sweep and logging) and the ranking (bench/cases/ranking.py: what beats what).
"""
from __future__ import annotations

import os

from bench.cases.case import Case, identity
from bench.core.protocol import LOWER_BACKWARD_ENV
from bench.cases.levers import DIMENSIONS
from bench.run.finals import finals
from bench.run.lever_trials import likely_compiles, try_levers
from bench.run.precompile import SideCompiles
from bench.run.search_state import DEFAULT_BUDGET_MIN, SCHEMA, SearchState  # noqa: F401 - read from here
from bench.run.survey import survey, survey_again


class Search(SearchState):
    """The plan: the phases in order, each a function over this state."""

    def run(self, cases: list[Case]) -> list[dict]:
        self.counts = sorted({c.n_replicas for c in cases}, key=lambda n: (n == 1, -n))
        self.log["device_order"] = self.counts
        if self.side_compiles:
            self.runner.side = SideCompiles()
            # The workers started from here on lower each backward with its forward, as the side processes do.
            before = os.environ.get(LOWER_BACKWARD_ENV)
            os.environ[LOWER_BACKWARD_ENV] = "1"
            try:
                self.runner.side.submit(likely_compiles(self, cases))
                return self._phases(cases)
            finally:
                if before is None:
                    os.environ.pop(LOWER_BACKWARD_ENV, None)
                else:
                    os.environ[LOWER_BACKWARD_ENV] = before
                self.runner.side.close()
                self.log["side_compiles"] = self.runner.side.summary()
                self.sweep.save()
        return self._phases(cases)

    def _phases(self, cases: list[Case]) -> list[dict]:
        survey(self, cases)
        survey_again(self, cases)
        if self.runner.side is not None:
            self.runner.side.survey_over = True  # no side compile runs beside a lever or a final
        groups = self.runner.ok_rows(cases)
        leaders = {key: self.leaders_of(rows) for key, rows in sorted(groups.items(), key=lambda kv: self.serve(kv[0]))}
        self.budget.reserve_s = self.finals_reserve(leaders)
        # Every ok row of the file counts as measured (a resumed search keeps its levers).
        known = {identity(r) for r in self.sweep.rows.values() if r.get("status") == "ok"}
        for dimension in DIMENSIONS:
            try_levers(self, dimension, leaders, known, groups)
        finals(self, leaders)
        self.log["spent_s"] = round(self.budget.spent(), 1)
        self.sweep.save()  # the file with the finished log
        return list(self.sweep.rows.values())

