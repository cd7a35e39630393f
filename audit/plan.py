"""The run plan: what an audit runs, typed, parsed once.

The command line gives conditions, transforms and budgets as strings
(``frontier:budget=2400``, ``rename:40``, ``600,1200``); they are parsed here, once,
into typed parts (``compressors.ConditionSpec``, ``TransformSpec``, integers) that the
engine, its workers and the LLM stage receive as they are.  A plan serialises back
to exactly the strings it was given (``config.json``, job keys), so run directories
written before stay valid and resumable.

Nothing here does I/O: where the pairs come from is recorded (a preset's generation
config, or a file and its sha256), not loaded.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from functools import cached_property
from typing import Annotated, Any

from pydantic import BaseModel, BeforeValidator, ConfigDict, Field, PlainSerializer

from audit.errors import PlanError
from compressors import (
    BASELINES,
    ConditionSpec,
    UnknownCompressorError,
    baseline_conditions,
    build,
    deterministic_builtins,
    parse_spec,
    registered_names,
    resolve_class,
    with_label,
)
from histories import TRANSFORMS, TransformName


@dataclass(frozen=True)
class TransformSpec:
    """One ``--transforms`` item: ``identity``, or a kind with its number of instances."""

    kind: TransformName
    count: int

    def __str__(self) -> str:
        return self.kind if self.kind == "identity" else f"{self.kind}:{self.count}"


IDENTITY = TransformSpec("identity", 1)


def parse_transform(item: str, option: str = "--transforms") -> TransformSpec:
    """``identity``, ``rename:40``, ``permute`` (one instance), ..."""
    kind, _, count_text = item.strip().partition(":")
    if kind not in TRANSFORMS:
        raise PlanError(f"{option}: unknown transform {kind!r}; known: {', '.join(TRANSFORMS)}")
    if kind == "identity":
        if count_text:
            raise PlanError(f"{option}: identity takes no count")
        return IDENTITY
    try:
        count = int(count_text) if count_text else 1
    except ValueError:
        raise PlanError(f"{option}: {item!r}: K must be an integer") from None
    if count <= 0:
        raise PlanError(f"{option}: {item!r}: K must be positive")
    return TransformSpec(kind, count)


def parse_transforms(
    text: str, option: str = "--transforms", *, with_identity: bool = False
) -> list[TransformSpec]:
    """A comma list of transforms, each kind at most once; ``with_identity``: identity
    among them (the deterministic stage's verdicts are read on the pairs as they are)."""
    specs = [parse_transform(part, option) for part in text.split(",") if part.strip()]
    if not specs:
        raise PlanError(f"{option}: no transform given")
    if len({s.kind for s in specs}) != len(specs):
        raise PlanError(f"{option}: a transform is listed twice")
    if with_identity and IDENTITY not in specs:
        raise PlanError(
            f"{option}: {text!r} has no identity: the verdicts are read on the source pairs "
            "as they are, and every transform is compared with them; add it "
            f"(identity,{text.strip()})"
        )
    return specs


def parse_budgets(text: str, option: str = "--budget") -> list[int]:
    """A comma list of positive byte budgets (duplicates dropped, order kept)."""
    budgets: list[int] = []
    for item in (part.strip() for part in text.split(",")):
        if not item:
            raise PlanError(f"{option}: {text!r} has an empty item")
        try:
            value = int(item)
        except ValueError:
            raise PlanError(f"{option}: {item!r} is not an integer number of bytes") from None
        if value <= 0:
            raise PlanError(f"{option}: {value} must be positive")
        budgets.append(value)
    if not budgets:
        raise PlanError(f"{option}: no budget given")
    return list(dict.fromkeys(budgets))


def split_conditions(text: str) -> list[str]:
    """The items of a comma list of conditions: an item that is only ``key=value`` (no
    ``:``) is one more parameter of the condition before it, so a condition keeps every
    parameter (``langchain_summary:keep_messages=4,max_tokens=64,tail``)."""
    items: list[str] = []
    for part in (p.strip() for p in text.split(",")):
        if not part:
            continue
        key, equals, _ = part.partition("=")
        if items and equals and ":" not in key and " " not in key.strip():
            items[-1] += "," + part
        else:
            items.append(part)
    return items


def _expanded(items: list[str]) -> list[str]:
    """``baselines`` (or ``baselines:k=v,...``, the parameters given to each) replaced by
    the conditions it stands for, each only once: a baseline also listed by name, with
    or without parameters, keeps its own place."""
    if not any(item.split(":", 1)[0] == BASELINES for item in items):
        return items
    listed = {item.split(":", 1)[0] for item in items}
    out: list[str] = []
    for item in items:
        name, _, params = item.partition(":")
        if name != BASELINES:
            out.append(item)
            continue
        params = ",".join(part.strip() for part in params.split(",") if part.strip())
        for baseline in baseline_conditions():
            if baseline not in listed:
                listed.add(baseline)
                out.append(f"{baseline}:{params}" if params else baseline)
    return out


def parse_conditions(text: str, option: str = "--conditions") -> list[ConditionSpec]:
    """A comma list of conditions (``name[:k=v,...]`` or ``package.module:Class``), each
    once; ``baselines`` stands for the archives and shortcut probes.  A condition is
    labelled by its ``name=``, a ``module:Class`` plugin by its class's ``name`` (its
    parameters after it), and no two conditions share a label."""
    try:
        specs = [_named(parse_spec(part)) for part in _expanded(split_conditions(text))]
        for spec in specs:
            _ = spec.budget  # a bad per-condition budget is named now, not in a worker
    except UnknownCompressorError as error:
        raise PlanError(f"{option}: {error}") from None
    if not specs:
        raise PlanError(f"{option}: no condition given")
    seen: dict[tuple[str, int | None], str] = {}
    for spec in specs:  # the same system however its label is spelled
        key = (spec.system, spec.budget)
        if key in seen:
            raise PlanError(
                f"{option}: a condition is listed twice ({seen[key]!r} and {spec.label!r})"
                if seen[key] != spec.label
                else f"{option}: a condition is listed twice ({spec.label!r})"
            )
        seen[key] = spec.label
    labels: dict[str, ConditionSpec] = {}
    registered = registered_names()
    for spec in specs:
        bare = spec.label.split(":")[0]
        if bare in registered and spec.target != bare:  # audit compare pairs by label
            raise PlanError(
                f"{option}: {spec.spec!r} would be labelled {bare!r}, a built-in condition's "
                "name: give it another (name=NAME, or its class's `name`)"
            )
        other = labels.setdefault(spec.label, spec)
        if other is not spec:
            raise PlanError(
                f"{option}: {other.spec!r} and {spec.spec!r} are both labelled "
                f"{spec.label!r}: give one a name (name=NAME, docs/adapters.md)"
            )
    return specs


def _named(spec: ConditionSpec) -> ConditionSpec:
    """A ``module:Class`` plugin labelled by its class's ``name`` and the parameters
    after it (``my_memory:NewestFirst:budget=600`` is ``newest_first:budget=600``), as
    an installed plugin is by its name, unless a ``name=`` says otherwise."""
    if ":" not in spec.target or "name" in spec.params:
        return spec
    return with_label(spec, resolve_class(spec.target).name + spec.spec[len(spec.target) :])


def _as_transform(value: Any) -> Any:
    return parse_transform(value, "transforms") if isinstance(value, str) else value


def _as_condition(value: Any) -> Any:
    """A plan's condition: its spec as written, or (when its label is its plugin class's
    name, which only importing the plugin tells) ``{"spec": ..., "label": ...}``."""
    if isinstance(value, str):
        return parse_spec(value)
    if isinstance(value, dict) and set(value) == {"spec", "label"}:
        return with_label(parse_spec(str(value["spec"])), str(value["label"]))
    return value


def _condition_json(spec: ConditionSpec) -> str | dict[str, str]:
    if parse_spec(spec.spec).label == spec.label:
        return spec.spec
    return {"spec": spec.spec, "label": spec.label}


Transform = Annotated[
    TransformSpec, BeforeValidator(_as_transform), PlainSerializer(str, return_type=str)
]
"""A transform in a plan: parsed from its string, written back as that string."""
Condition = Annotated[
    ConditionSpec,
    BeforeValidator(_as_condition),
    PlainSerializer(_condition_json, return_type=str | dict[str, str]),
]
"""A condition in a plan: parsed from its spec as written, written back as that spec
(with its label when parsing cannot tell it)."""

Cell = tuple[ConditionSpec, int]
"""A (condition, budget) cell of a plan."""


def cells_of(conditions: Sequence[ConditionSpec], budgets: Sequence[int]) -> list[Cell]:
    """Every (condition, budget): a condition with its own ``budget=`` runs only there."""
    cells: list[Cell] = []
    for spec in conditions:
        own = spec.budget
        cells.extend([(spec, own)] if own is not None else [(spec, b) for b in budgets])
    return cells


DEFAULT_TRANSFORMS = "identity,rename:5,permute:5,relabel:5,rerev:10,revalue:10,disguise:5"
"""The default audit's instances.  Power comes from independent source pairs, not from
more instances of one pair: the default pilot has 84 pairs (83 % power for a 20-point
paired difference at discordance 0.3, 3 comparisons) with 41 instances each, about the
reads of the paper pilot's 24 pairs x 141.  ``disguise`` rewrites every part of a
record at once: a table remembered from the public data survives each other one."""
PRESET_TRANSFORMS = {
    "cca-pilot-paper": "identity,rename:40,permute:40,relabel:40,rerev:10,revalue:10",
    "natural": "identity,rename:5,permute:5,relabel:5,rerev:10,disguise:5,entity:5",
}
"""A preset's own default instances: the paper's pilot keeps the ones its results were
published with, so its runs stay byte-identical; the natural preset runs the default's
that apply to natural data (not revalue: a record's text states its values), and in
revalue's place entity, which redraws values the source's own ontology gives."""


PROMPT_LAYOUT = 2
"""How the LLM reader's prompt is laid out, recorded in a plan's LLM stage (the writers'
prompts are versioned by their compressors): 2 puts the rules first (every prompt of an
audit starts with them, the writers' too), then the reader's instructions, the query
keys and the memory last, for a server's prefix cache.  A stage planned before there
was a number (layout 1: instructions, rules, memory, then the query keys) has None."""


class LLMStagePlan(BaseModel):
    """The LLM part of a run: model writers and the LLM reader on a sample of pairs."""

    model_config = ConfigDict(extra="forbid", frozen=True, arbitrary_types_allowed=True)

    reader: str | None = None
    """Backend name reading memories (None: no LLM reader)."""
    reader_model: str | None = None
    writer: str | None = None
    """Backend name writing memories for LLM conditions."""
    writer_model: str | None = None
    conditions: list[Condition] = Field(default_factory=list)
    sample: int = Field(default=6, ge=1)
    """Source pairs in the LLM stage (taken round-robin over families)."""
    repeats: int = Field(default=2, ge=1, le=100)
    transforms: list[Transform] = Field(default_factory=lambda: [IDENTITY])
    use_schema: bool = True
    """Ask the reader for its envelope through JSON schema (off: study formatting)."""
    prompt_layout: int | None = None
    """The reader's prompt layout (``PROMPT_LAYOUT`` for a stage planned now; part of
    every unit's key, and compared on resume)."""


class RunPlan(BaseModel):
    """Everything that determines a run's results (``config.json``; compared on resume)."""

    model_config = ConfigDict(extra="forbid", frozen=True, arbitrary_types_allowed=True)

    pairs: dict[str, Any]
    """Where the pairs came from: a preset and its generation config, or a file."""
    pairs_sha256: str
    conditions: list[Condition] = Field(min_length=1)
    compressor_versions: dict[str, str]
    """Each condition's label -> its compressor's versioned label."""
    budgets: list[int] = Field(min_length=1)
    transforms: list[Transform] = Field(min_length=1)
    seed: int = 0
    reader: str = "exact"
    repeats: int = 1
    llm: LLMStagePlan | None = None
    """The LLM stage (model writers and reader on a sample of pairs), if any."""
    reference: str | None = None
    """The condition every other is compared with, fixed before the run (preregistered);
    None: the report compares with the best strict condition it finds."""

    @cached_property
    def cells(self) -> list[Cell]:
        """The deterministic stage's (condition, budget) cells, in plan order."""
        return cells_of(self.conditions, self.budgets)

    @property
    def condition_labels(self) -> list[str]:
        return [spec.label for spec in self.conditions]


def compressor_versions(specs: Sequence[ConditionSpec]) -> dict[str, str]:
    """Each deterministic condition's label -> its compressor's versioned label; a
    condition that writes with or is read by a model is refused (it belongs in the LLM
    stage, with a writer and a reader)."""
    versions: dict[str, str] = {}
    for spec in specs:
        compressor = build(spec)
        if compressor.uses_llm or compressor.needs_llm_reader:
            role = "writes with" if compressor.uses_llm else "can only be read by"
            raise PlanError(
                f"--conditions: {spec.label} {role} a model: give it in --llm-conditions, "
                "with --writer and --reader (local is the embedded model)"
            )
        versions[spec.label] = compressor.label
    return versions


def default_conditions() -> list[ConditionSpec]:
    """Every deterministic built-in, baselines included: the default audit's conditions."""
    return [parse_spec(label) for label in deterministic_builtins()]


def preregistered(reference: str | None, specs: Sequence[ConditionSpec]) -> str | None:
    """``--reference`` as a condition's label (given by its label or its spec as
    written); a name that is no condition of the run is refused."""
    if reference is None:
        return None
    label = {spec.spec: spec.label for spec in specs}.get(reference, reference)
    labels = [spec.label for spec in specs]
    if label not in labels:
        raise PlanError(
            f"--reference: {label!r} is not one of the run's conditions ({', '.join(labels)})"
        )
    return label
