"""Execution: the one streaming loop, the jobs, the readers and the executor.

``execute(out, plan, pairs)`` runs (or resumes) a run: the deterministic stage on a
local process pool, then the LLM stage (model writers, the LLM reader) when the
plan has one; files go through ``audit.rundir``, scores through ``audit.scoring``.
Opening the LLM backends is ``audit.engine.clients`` (imported only for an LLM stage:
the backends' HTTP stack costs a quarter of a second), and so is ``audit.engine.batch``
(LLM requests as offline batches).
"""

from audit.engine._exact import ExactRead, read_exact
from audit.engine._executor import (
    ClientPair,
    Job,
    OpenClients,
    builtins_only,
    execute,
    finish,
    plan_jobs,
)
from audit.engine._jobs import instances, rename_memory, run_job
from audit.engine._llm_reader import (
    READER_OUTCOMES,
    ParsedAnswer,
    ReaderVerdict,
    answer_schema,
    judge,
    parse_answer,
    reader_request,
)
from audit.engine._llm_stage import Unit, plan_units, run_stage, run_unit, sample_pairs
from audit.engine._progress import RequestTally, RunProgress, Stage, Tallies
from audit.engine._rows import LLM_READ, READ, SHARED, JobRows
from audit.engine._streaming import (
    Streamed,
    astream_variant,
    finish_streams,
    over_budget,
    phrasing_seeds,
    plan_variant,
    share_identical_records,
    stream_variant,
)

__all__ = [
    "LLM_READ",
    "READ",
    "READER_OUTCOMES",
    "SHARED",
    "ClientPair",
    "ExactRead",
    "Job",
    "JobRows",
    "OpenClients",
    "ParsedAnswer",
    "ReaderVerdict",
    "RequestTally",
    "RunProgress",
    "Stage",
    "Streamed",
    "Tallies",
    "Unit",
    "answer_schema",
    "astream_variant",
    "builtins_only",
    "execute",
    "finish",
    "finish_streams",
    "instances",
    "judge",
    "over_budget",
    "parse_answer",
    "phrasing_seeds",
    "plan_jobs",
    "plan_units",
    "plan_variant",
    "read_exact",
    "reader_request",
    "rename_memory",
    "run_job",
    "run_stage",
    "run_unit",
    "sample_pairs",
    "share_identical_records",
    "stream_variant",
]
