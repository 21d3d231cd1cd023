"""Every record that is saved to disk or crosses a pipeline stage.

One module, so that a reader finds the shape of a task contract, a submission, a
grade or a run record in one place. Saved formats carry a ``schema_version``;
golden files of older versions live in ``tests/golden/`` and must keep loading.
"""

from __future__ import annotations

from enum import Enum
from typing import Annotated, Any, Literal

from pydantic import AllowInfNan, BaseModel, ConfigDict, Field, Strict, field_validator

RUN_RECORD_VERSION = "1"
TRAJECTORY_VERSION = "1"


class Record(BaseModel):
    """Base of all saved records: attribute docstrings become field descriptions."""

    model_config = ConfigDict(use_attribute_docstrings=True, extra="forbid")


# --------------------------------------------------------------------------- tasks


class Discipline(str, Enum):
    """The four disciplines of the paper (section 2.2)."""

    chemistry = "chemistry"
    materials_science = "materials science"
    biology = "biology"
    medicine = "medicine"


class Visibility(str, Enum):
    """Public tasks come from published studies, private ones from unpublished data."""

    public = "public"
    private = "private"


class TaskLimits(Record):
    """Per-task overrides of the run limits (SPEC section 4)."""

    time_s: float | None = None
    """Wall-clock limit of the agent in seconds."""
    memory_gb: float | None = None
    """Memory limit in GiB."""
    cpus: int | None = None
    """CPU cores."""
    gpus: int | None = None
    """GPUs."""


class TaskMeta(Record):
    """``task.yaml``: what the agent and the tracking see about a task."""

    model_config = ConfigDict(use_attribute_docstrings=True, extra="forbid", populate_by_name=True)

    id: str
    """Task identifier, also the folder name (``spu-xxxx``)."""
    version: str
    """Task version; a changed answer key or contract bumps it."""
    title: str
    """Neutral title that gives no hint of the source study."""
    discipline: Discipline
    """One of chemistry, materials science, biology, medicine."""
    subfield: str
    """Subfield within the discipline, e.g. ``organocatalysis``."""
    visibility: Visibility = Visibility.public
    """Public (published source) or private (unpublished measurements)."""
    limits: TaskLimits | None = None
    """Optional overrides of the default run limits."""

    @field_validator("version", mode="before")
    @classmethod
    def _version_as_text(cls, value: Any) -> Any:
        # YAML reads ``version: 1.0`` as a float; the contract compares text.
        return str(value) if isinstance(value, (int, float)) else value


class ComparisonGroup(Record):
    """One comparison group of the contract: experiments sharing one endpoint."""

    group_id: str
    """Group identifier, unique within the task."""
    endpoint: str
    """The measured endpoint, e.g. ``isolated yield (%)``."""
    weight: float
    """Weight of the group in the task score; the weights of a task sum to 1."""
    items: list[str]
    """Experiment ids of the group, in the (random) presented order."""


class Contract(Record):
    """``contract.json``: the public, machine-readable statement of what is ranked."""

    task_id: str
    """Task identifier."""
    task_version: str
    """Task version."""
    groups: list[ComparisonGroup]
    """The comparison groups."""

    @field_validator("task_version", mode="before")
    @classmethod
    def _version_as_text(cls, value: Any) -> Any:
        return str(value) if isinstance(value, (int, float)) else value


class SourceRecord(Record):
    """Where the measured values come from; used by the exposure detector, never shown."""

    model_config = ConfigDict(use_attribute_docstrings=True, extra="allow")

    doi: str | None = None
    """DOI of the source study."""
    pmid: str | None = None
    """PubMed identifier."""
    pmcid: str | None = None
    """PubMed Central identifier."""
    title: str | None = None
    """Title of the source study."""
    preprint_doi: str | None = None
    """DOI of a preprint version."""
    preprint_title: str | None = None
    """Title of a preprint version."""
    package: str | None = None
    """Software package the data were taken from (``name==version``)."""
    file: str | None = None
    """File inside that package."""


MeasuredValue = Annotated[float, Strict(), AllowInfNan(False)]
"""A measured value: a finite JSON number (never a string, a boolean or NaN coerced to one)."""


class AnswerKey(Record):
    """``hidden/answers.json``: the measured values, never visible to the agent."""

    task_id: str
    """Task identifier."""
    task_version: str
    """Task version."""
    groups: dict[str, dict[str, MeasuredValue]]
    """Measured value of each experiment, by group id and experiment id."""
    source: SourceRecord | None = None
    """Source identifiers for the exposure detector."""

    @field_validator("task_version", mode="before")
    @classmethod
    def _version_as_text(cls, value: Any) -> Any:
        return str(value) if isinstance(value, (int, float)) else value


class ProtocolSetting(Record):
    """One varied setting (a column of ``targets.csv``), as the protocol defines it."""

    name: str
    """Column name in ``targets.csv``."""
    unit: str | None = None
    """Unit of the values, where they have one."""
    description: str | None = None
    """What the setting is, in one neutral sentence."""


class ProtocolGroup(Record):
    """The endpoint of one comparison group, as the protocol defines it."""

    group_id: str
    """Group identifier, as in the contract."""
    endpoint: str
    """The measured endpoint."""
    unit: str | None = None
    """Unit of the endpoint."""
    direction: str = "order from lowest to highest"
    """How the group is ordered in a submission."""
    conditions: dict[str, Any] = Field(default_factory=dict)
    """Conditions held fixed within this group (name to value)."""
    measurement_error: float | None = None
    """Stated measurement error of the endpoint (absolute, in ``unit``), where known."""


class Protocol(Record):
    """``protocol.json``: fixed conditions, endpoint definition per group, units."""

    fixed_conditions: str | dict[str, Any] = ""
    """Conditions shared by every experiment of the task."""
    groups: list[ProtocolGroup]
    """One entry per comparison group."""
    settings: list[ProtocolSetting] = Field(default_factory=list)
    """The varied settings of ``targets.csv``, with units."""


class TargetRow(Record):
    """One row of ``targets.csv``: an experiment, its group and its varied settings."""

    model_config = ConfigDict(use_attribute_docstrings=True, extra="allow")

    experiment_id: str
    """Anonymized experiment identifier."""
    group_id: str
    """Comparison group of the experiment."""

    @property
    def settings(self) -> dict[str, str]:
        """The varied settings (every column after ``experiment_id`` and ``group_id``)."""
        return dict(self.model_extra or {})


# --------------------------------------------------------------------------- grading


class GradeStatus(str, Enum):
    """File-level status of a graded submission (SPEC section 4)."""

    valid = "valid"
    recovered = "recovered"
    invalid = "invalid"


class GroupGrade(Record):
    """Score of one comparison group."""

    group_id: str
    """Group identifier."""
    weight: float
    """Weight of the group in the task score."""
    rho: float
    """Spearman correlation of submitted positions and measured values, or -1 on error."""
    error: str | None = None
    """Null, or a short reason why the group scored -1."""


class Grade(Record):
    """What the grader decides about one submission."""

    task_id: str
    """Task identifier of the trusted contract."""
    score: float
    """Task score: the weighted sum of group scores, -1 on a whole-file error."""
    status: GradeStatus
    """``valid``, ``recovered`` (schema departure normalized) or ``invalid``."""
    groups: list[GroupGrade] = Field(default_factory=list)
    """Per-group scores, in contract order (each at -1 on a whole-file error)."""
    errors: list[str] = Field(default_factory=list)
    """Whole-file errors and notes, human readable."""
    score_strict: float
    """Score under the strict rules (schema departures at -1)."""
    recovered_departures: list[str] = Field(default_factory=list)
    """Which schema departures of appendix E.1 recovery normalized."""
    grader_version: str
    """Version of the scoring rules that produced this grade."""
    isolation: str | None = None
    """How the grading process was isolated (set by the isolated runner)."""

    def public_json(self) -> dict[str, Any]:
        """The exact object of ``spu grade --json`` (SPEC section 4)."""
        return {
            "task_id": self.task_id,
            "score": self.score,
            "status": self.status.value,
            "groups": [
                {"group_id": g.group_id, "weight": g.weight, "rho": g.rho, "error": g.error}
                for g in self.groups
            ],
            "errors": list(self.errors),
        }


class PastGrade(Record):
    """A grade of a run that ``spu regrade`` replaced, kept in the run record."""

    score_strict: float
    """The replaced strict score."""
    score_recovered: float
    """The replaced score after recovery."""
    outcome: str
    """The run's outcome under the replaced grade."""
    scored: bool
    """Whether the run was scored under the replaced grade."""
    threshold: float | None = None
    """The chance threshold the replaced grade was compared with."""
    grade: Grade | None = None
    """The replaced grade (recovered grade where recovery applied), with its grader version."""
    replaced_at: str
    """ISO-8601 time (UTC) of the regrade that replaced it."""
    reason: str | None = None
    """Why the run was regraded (e.g. an answer-key fix), as the maintainer stated it."""


# --------------------------------------------------------------------------- runs


class Outcome(str, Enum):
    """How a run ended (SPEC section 5)."""

    valid = "valid"
    recovered = "recovered"
    rejected = "rejected"
    refusal = "refusal"
    policy_stop = "policy_stop"
    no_file = "no_file"
    timeout = "timeout"
    memory_limit = "memory_limit"
    infra_error = "infra_error"


class Usage(Record):
    """Token usage in the four billing buckets of the paper (section 3.5)."""

    input: int = 0
    """Uncached input tokens."""
    cache_read: int = 0
    """Input tokens read from the prompt cache."""
    cache_write: int = 0
    """Input tokens written to the prompt cache (5-minute and 1-hour together)."""
    cache_write_1h: int = 0
    """The part of ``cache_write`` written with a 1-hour lifetime, where reported."""
    output: int = 0
    """Output tokens, reasoning included."""

    def __add__(self, other: Usage) -> Usage:
        return Usage(
            input=self.input + other.input,
            cache_read=self.cache_read + other.cache_read,
            cache_write=self.cache_write + other.cache_write,
            cache_write_1h=self.cache_write_1h + other.cache_write_1h,
            output=self.output + other.output,
        )

    def __sub__(self, other: Usage) -> Usage:
        return Usage(
            input=self.input - other.input,
            cache_read=self.cache_read - other.cache_read,
            cache_write=self.cache_write - other.cache_write,
            cache_write_1h=self.cache_write_1h - other.cache_write_1h,
            output=self.output - other.output,
        )


class EnforcedLimits(Record):
    """The limits a sandbox actually enforced, and how."""

    time_s: float
    """Wall-clock limit in seconds."""
    memory_gb: float | None = None
    """Memory limit in GiB, or None when none could be enforced."""
    memory_mechanism: str = "none"
    """``cgroup-v2``, ``cgroup-v1``, ``rlimit-as``, ``docker`` or ``none``."""
    cpus: int | None = None
    """CPU cores available to the agent."""
    cpu_mechanism: str = "none"
    """``affinity``, ``cgroup``, ``docker`` or ``none``."""
    gpus: list[str] = Field(default_factory=list)
    """GPU device ids handed to the agent."""
    pids_limit: int | None = None
    """Maximum number of processes of the agent, where one is enforced."""


class SandboxInfo(Record):
    """The sandbox backend and the isolation actually in force."""

    backend: str
    """Backend name (``local``, ``subprocess``, ``docker``)."""
    isolation: list[str] = Field(default_factory=list)
    """Isolation mechanisms in force, e.g. ``mount-namespace``, ``pid-namespace``."""
    warnings: list[str] = Field(default_factory=list)
    """What the backend could not enforce on this machine."""
    limits: EnforcedLimits | None = None
    """Limits enforced on the agent."""


class ProcessEvidence(Record):
    """Raw facts about how the agent process ended, kept with the run."""

    exit_code: int | None = None
    """Exit status of the agent process, when it exited."""
    signal: int | None = None
    """Signal that ended it, when one did (a wrapper's exit status 128+n counts as n)."""
    timed_out: bool = False
    """True when the wall-clock limit fired."""
    oom_killed: bool = False
    """True when the memory limit killed it (cgroup event or equivalent)."""
    peak_memory_bytes: int | None = None
    """Peak resident memory, where the backend can measure it."""
    duration_s: float = 0.0
    """Wall-clock duration of the agent."""
    error: str | None = None
    """Why the sandbox or harness failed to start, when it did."""


class ExposureHit(Record):
    """An identifier of the source study found in a tool output (paper 3.7, E.9)."""

    kind: str
    """``doi``, ``pmid``, ``pmcid``, ``title``, ``partial_title``, ``preprint_doi`` or
    ``preprint_title``."""
    identifier: str
    """The source identifier that was found (as written in the answer key)."""
    step: int
    """Index of the trajectory step whose tool output holds it."""
    tool: str | None = None
    """Name of the tool that returned it."""


class RunRecord(Record):
    """``<output_root>/runs/<run_key>/run.json``: one agent run, graded (SPEC section 4)."""

    model_config = ConfigDict(use_attribute_docstrings=True, extra="allow")

    schema_version: str = RUN_RECORD_VERSION
    """Version of this record's format."""
    run_key: str
    """Stable hash of (model, harness, effort, task id and version, repeat)."""
    task_id: str
    """Task identifier."""
    task_version: str
    """Task version."""
    discipline: str | None = None
    """Discipline of the task."""
    subfield: str | None = None
    """Subfield of the task."""
    visibility: str | None = None
    """``public`` or ``private``."""
    model: str
    """Model configuration name (``conf/model``)."""
    harness: str
    """Harness name (``conf/harness``)."""
    effort: str
    """Reasoning effort name (``conf/effort``)."""
    repeat: int = 0
    """0 for the official run, 1 and up for repeated runs."""
    config: str | None = None
    """Configuration label (model + effort + harness) used by the statistics."""
    outcome: Outcome
    """How the run ended."""
    scored: bool = False
    """True when the run left a valid or recoverable file and is not excluded (paper 3.1)."""
    score_strict: float = -1.0
    """Task score under the strict rules."""
    score_recovered: float = -1.0
    """Task score after recovery of schema departures."""
    grade: Grade | None = None
    """The full grade of the submission (recovered grade where recovery applied)."""
    threshold: float | None = None
    """Chance threshold of the task."""
    n_items: int | None = None
    """Number of experiments in the task."""
    usage: Usage = Field(default_factory=Usage)
    """Token usage in four buckets."""
    cost_usd: float | None = None
    """Estimated API cost from usage and list prices."""
    cli_cost_usd: float | None = None
    """Cost reported by the agent CLI itself, where it reports one."""
    cost_disagreement: bool = False
    """True when ``cli_cost_usd`` and ``cost_usd`` differ by more than 1%."""
    cost_full_input_usd: float | None = None
    """Cost with every prompt token at the input price (paper 3.5 sensitivity check)."""
    long_context_requests: int = 0
    """Model requests billed at long-context rates (prompt above the model's threshold)."""
    runtime_s: float = 0.0
    """Wall-clock duration of the agent."""
    tool_calls: int = 0
    """Tool calls in the trajectory."""
    web_fetches: int = 0
    """Web search and fetch calls in the trajectory."""
    requests_outside_tools: int | None = None
    """Network requests sent outside the audited tools, where the sandbox records them."""
    gpu_seconds: float | None = None
    """GPU time used by the agent, where the backend measures it."""
    cli_version: str | None = None
    """Version of the agent CLI that ran."""
    used_gpu: bool = False
    """True when the agent ran work on a GPU."""
    flagged_exposure: bool = False
    """True when a tool output contained an identifier of the source study."""
    exposure_hits: list[ExposureHit] = Field(default_factory=list)
    """Where the exposure detector found source identifiers (first hits, capped)."""
    refusal_label: str | None = None
    """The provider's refusal label, e.g. ``[bio]``."""
    sandbox: SandboxInfo
    """The sandbox backend and the isolation in force."""
    process: ProcessEvidence = Field(default_factory=ProcessEvidence)
    """Raw evidence of how the agent ended."""
    started_at: str | None = None
    """ISO-8601 start time (UTC)."""
    finished_at: str | None = None
    """ISO-8601 end time (UTC)."""
    attempt: int = 1
    """1 for the first attempt, 2 for the retry of an infra error."""
    retried_from: str | None = None
    """Tracking id of the attempt this one retries."""
    node: str | None = None
    """The cluster node that ran the agent (a Ray node id), where a launcher placed the
    agent away from the grading side; None for a run on this machine."""
    notes: list[str] = Field(default_factory=list)
    """Loud warnings about the run (e.g. a grader that could not be isolated)."""
    grade_history: list[PastGrade] = Field(default_factory=list)
    """Earlier grades replaced by ``spu regrade``, oldest first."""


# --------------------------------------------------------------------------- trajectories


class ToolCall(Record):
    """One tool call made by the agent."""

    id: str | None = None
    """Call identifier given by the CLI."""
    name: str
    """Tool name (``Bash``, ``WebFetch``, ``exec_command``...)."""
    arguments: Any = None
    """Arguments as the CLI recorded them."""
    output: str | None = None
    """The tool's output, where recorded."""
    is_error: bool = False
    """True when the tool reported an error."""


class TrajectoryStep(Record):
    """One step of a normalized trajectory: a model message with its tool calls."""

    index: int
    """Position in the trajectory."""
    timestamp: str | None = None
    """ISO-8601 time of the step."""
    role: Literal["user", "assistant", "system", "tool"] = "assistant"
    """Who produced the step."""
    message_id: str | None = None
    """Provider message id (used to de-duplicate streamed blocks)."""
    text: str | None = None
    """Model text."""
    reasoning: str | None = None
    """Reasoning text, where the provider gives it."""
    tool_calls: list[ToolCall] = Field(default_factory=list)
    """Tool calls of this step, with their outputs."""
    usage: Usage | None = None
    """Usage of the model call behind this step."""
    agent: str | None = None
    """Sub-agent name, when the step comes from one."""


class Trajectory(Record):
    """A whole agent run as a list of normalized steps."""

    schema_version: str = TRAJECTORY_VERSION
    """Version of the trajectory format."""
    harness: str
    """Harness that produced it."""
    cli_version: str | None = None
    """Version of the agent CLI."""
    steps: list[TrajectoryStep] = Field(default_factory=list)
    """The steps in time order."""
    usage: Usage = Field(default_factory=Usage)
    """Total usage over all model calls."""
