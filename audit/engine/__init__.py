"""Execution: the one streaming loop, the jobs, the readers and the executor.

``execute(out, plan, pairs)`` runs (or resumes) a run: the deterministic stage on a
local process pool, then the LLM stage (model writers, the LLM reader) when the
plan has one; files go through ``audit.rundir``, scores through ``audit.scoring``.
Opening the LLM backends is ``audit.engine.clients`` (imported only for an LLM stage:
the backends' HTTP stack costs a quarter of a second), and so is ``audit.engine.batch``
(LLM requests as offline batches).
"""

from audit.engine._executor import (
    Job,
    execute,
    finish,
    plan_jobs,
)
from audit.engine._jobs import instances, run_job
from audit.engine._llm_reader import (
    judge,
    parse_answer,
    reader_request,
)
from audit.engine._llm_stage import Unit, run_unit
from audit.engine._progress import RequestEstimate, RequestTally, RunProgress, Stage, Tallies
from audit.engine._streaming import (
    over_budget,
    phrasing_seeds,
)

__all__ = [
    "Job",
    "RequestEstimate",
    "RequestTally",
    "RunProgress",
    "Stage",
    "Tallies",
    "Unit",
    "execute",
    "finish",
    "instances",
    "judge",
    "over_budget",
    "parse_answer",
    "phrasing_seeds",
    "plan_jobs",
    "reader_request",
    "run_job",
    "run_unit",
]
