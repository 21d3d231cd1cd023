"""Every record that is saved to disk or crosses a pipeline stage.

One module, so that a reader finds the shape of a task contract, a submission, a
grade or a run record in one place. Saved formats carry a ``schema_version``;
golden files of older versions live in ``tests/golden/`` and must keep loading.
"""

from __future__ import annotations

import datetime
import re
from collections.abc import Iterable
from enum import Enum
from typing import Annotated, Any, ClassVar, Literal

from pydantic import (
    AfterValidator,
    AllowInfNan,
    BaseModel,
    ConfigDict,
    Field,
    Strict,
    field_validator,
    model_serializer,
    model_validator,
)

RUN_RECORD_VERSION = "2"
"""``2``: no field outside the schema; ``1`` records may carry unknown fields (dropped)."""
TRAJECTORY_VERSION = "1"
AUDIT_VERSION = "2"
"""``2``: no field outside the schema; ``1`` lines may carry unknown fields (dropped)."""
GATEWAY_REQUEST_VERSION = "1"
SEAL_MANIFEST_VERSION = "1"
"""``1``: the first seal manifest (``seal.json``, SPEC section 13)."""
LEDGER_VERSION = "1"
"""``1``: ledger lines of SPEC section 13's six fields; named in every manifest."""
REVIEW_VERSION = "1"
"""``1``: the first review record (``review.yaml``, SPEC section 15)."""


class Record(BaseModel):
    """Base of all saved records: attribute docstrings become field descriptions."""

    model_config = ConfigDict(use_attribute_docstrings=True, extra="forbid")


class VersionedRecord(Record):
    """A saved record with a ``schema_version``: strict when written, tolerant of the past.

    An unknown field is an error (a misspelt ``flaged_exposure=True`` never passes for
    the real flag). A record of an older version, written when unknown fields were
    allowed, still loads: its fields outside the schema are dropped.
    """

    STRICT_SINCE: ClassVar[int] = 2
    """The first version written with no unknown fields."""

    @model_validator(mode="before")
    @classmethod
    def _drop_unknown_of_older_versions(cls, data: Any) -> Any:
        if not isinstance(data, dict):
            return data
        # Absent: a record being made now (every saved one has its version written).
        version = str(data.get("schema_version", cls.model_fields["schema_version"].default))
        if version.isdigit() and int(version) < cls.STRICT_SINCE:
            known = set(cls.model_fields) | {f.alias for f in cls.model_fields.values()
                                              if f.alias}
            return {k: v for k, v in data.items() if k in known}
        return data


# --------------------------------------------------------------------------- tasks

TASK_ID_PATTERN = re.compile(r"[A-Za-z0-9_-][A-Za-z0-9._-]{0,127}")
"""A task id (and a task folder name): letters, digits, ``.``, ``_`` and ``-``, at most 128
characters, not starting with a dot (so never ``.`` or ``..``). Ids become folder names,
Hydra options and MLflow params; nothing else is safe in all three."""


def check_task_id(value: str) -> str:
    """``value`` when it is a safe task id (:data:`TASK_ID_PATTERN`), else ``ValueError``.

    Examples
    --------
    >>> check_task_id("spu-bhpt")
    'spu-bhpt'
    >>> check_task_id("../hidden")  # doctest: +ELLIPSIS
    Traceback (most recent call last):
    ...
    ValueError: '../hidden' is not a safe task id: letters, digits, '.', '_' and '-' only, ...
    """
    if not TASK_ID_PATTERN.fullmatch(value):
        raise ValueError(f"{value!r} is not a safe task id: letters, digits, '.', '_' and '-' "
                         f"only, not starting with a dot, at most 128 characters")
    return value



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


NonBlank = Annotated[str, Field(min_length=1, pattern=r"\S")]
"""Text with at least one character that is not white space."""


class Retirement(Record):
    """``retired`` of ``task.yaml``: when and why a task left the benchmark (SPEC 15)."""

    date: datetime.date
    """Day of the retirement (``YYYY-MM-DD``)."""
    reason: NonBlank
    """Why, in one line (e.g. ``contamination: source recalled by 3 of 5 models``)."""


class TaskLimits(Record):
    """Per-task overrides of the run limits (SPEC section 4)."""

    # Finite and positive (issue 30): ``.nan``/``.inf`` escaped the runner as exceptions
    # and ``-1`` switched the cgroup limits off.
    time_s: Annotated[float, Field(gt=0, allow_inf_nan=False)] | None = None
    """Wall-clock limit of the agent in seconds (finite, more than 0)."""
    memory_gb: Annotated[float, Field(gt=0, allow_inf_nan=False)] | None = None
    """Memory limit in GiB (finite, more than 0)."""
    cpus: Annotated[int, Field(ge=0)] | None = None
    """CPU cores (0 or more)."""
    gpus: Annotated[int, Field(ge=0)] | None = None
    """GPUs (0 or more)."""


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
    answers: Literal["pending"] | None = None
    """``pending``: the measurements are not available yet; runs end ``sealed`` (SPEC 13)."""
    retired: Retirement | None = None
    """Set when the task has left the benchmark: out of ``task='glob(*)'`` and of the
    official statistics, its runs kept (SPEC section 15)."""

    @field_validator("version", mode="before")
    @classmethod
    def _version_as_text(cls, value: Any) -> Any:
        # YAML reads ``version: 1.0`` as a float; the contract compares text.
        return str(value) if isinstance(value, (int, float)) else value

    @field_validator("id")
    @classmethod
    def _safe_id(cls, value: str) -> str:
        return check_task_id(value)


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
    published: str | None = None
    """When the source was published, ``YYYY``, ``YYYY-MM`` or ``YYYY-MM-DD``
    (:mod:`spu.tasks.freshness`); None: unknown."""

    @field_validator("published", mode="before")
    @classmethod
    def _published_date(cls, value: Any) -> Any:
        from spu.tasks.freshness import check_date

        if value is None:
            return None
        return check_date(str(value))


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


class ReviewCheck(Record):
    """One item of the review checklist and what the reviewer found."""

    result: Literal["ok", "fail", "na", "not-checked"]
    """``ok`` checked and sound, ``fail`` checked and wrong, ``na`` does not apply,
    ``not-checked`` left open (said, not hidden)."""
    note: str = ""
    """What was compared with what, or why the item was left open."""


class ReviewIssue(Record):
    """A blocking issue the review found, and how it was fixed."""

    issue: NonBlank
    """What was wrong."""
    fix: str = ""
    """How it was fixed before freezing; empty while it is still open."""


class ReviewRecord(VersionedRecord):
    """``review.yaml`` beside ``task.yaml``: the independent review before freezing.

    Paper 2.3, step 3; SPEC section 15. Public (it names the source checks); never staged
    for the agent.
    """

    STRICT_SINCE: ClassVar[int] = 1

    schema_version: str = REVIEW_VERSION
    """Format version of this record."""
    task_id: str
    """The task reviewed."""
    task_version: str
    """Its version at the review."""
    reviewer: NonBlank
    """Who reviewed the task (a person or a team, not the task's builder)."""
    date: datetime.date
    """Day of the review (``YYYY-MM-DD``)."""
    task_digest: Annotated[str, Field(pattern=r"^[0-9a-f]{64}$")]
    """``task_digest`` of the public files reviewed (SPEC 12); a later change makes the
    review stale."""
    checks: dict[str, ReviewCheck]
    """The checklist (:data:`spu.tasks.review.CHECKLIST`), by item name."""
    verdict: Literal["accept", "reject"]
    """``accept``: the task may be frozen; ``reject``: it may not."""
    issues: list[ReviewIssue] = Field(default_factory=list)
    """Blocking issues found, each with its fix."""
    waivers: dict[str, NonBlank] = Field(default_factory=dict)
    """Construction screens (finding codes) accepted for this task, each with its reason;
    ``spu task validate --strict`` reports a waived screen as a warning, not an error."""

    @field_validator("task_version", mode="before")
    @classmethod
    def _version_as_text(cls, value: Any) -> Any:
        return str(value) if isinstance(value, (int, float)) else value

    @model_validator(mode="after")
    def _accepted_means_clean(self) -> ReviewRecord:
        if self.verdict == "accept":
            failed = [name for name, c in self.checks.items() if c.result == "fail"]
            if failed:
                raise ValueError(f"verdict accept with failed check(s) {', '.join(failed)}")
            open_ = [i.issue for i in self.issues if not i.fix.strip()]
            if open_:
                raise ValueError(f"verdict accept with a blocking issue not fixed: {open_[0]!r}")
        return self


# --------------------------------------------------------------------------- datasets

DATASET_NAME_PATTERN = re.compile(r"[a-z0-9][a-z0-9._-]{0,99}")
"""A dataset name (SPEC 16): lower-case letters, digits, ``.``, ``_`` and ``-``, not starting
with ``.``, ``_`` or ``-`` (at most 100 characters); it becomes a folder name."""

Sha256Hex = Annotated[str, Field(pattern=r"^[0-9a-f]{64}$")]
"""A SHA-256 digest in lower-case hex."""


def check_dataset_name(value: str) -> str:
    """``value`` when it is a dataset name (:data:`DATASET_NAME_PATTERN`), else ``ValueError``."""
    if not isinstance(value, str) or not DATASET_NAME_PATTERN.fullmatch(value):
        raise ValueError(f"{value!r} is not a dataset name (lower-case letters, digits, '.', "
                         f"'_' and '-', starting with a letter or a digit)")
    return value


def check_dataset_version(value: str) -> str:
    """``value`` when it is a PEP 440 version in its normal form, else ``ValueError``.

    Examples:
        >>> check_dataset_version("1.0"), check_dataset_version("2.0rc1")
        ('1.0', '2.0rc1')
        >>> check_dataset_version("v1.0")
        Traceback (most recent call last):
        ...
        ValueError: 'v1.0' is not a version in normal form (PEP 440): write 1.0
    """
    from packaging.version import InvalidVersion, Version

    try:
        normal = str(Version(value))
    except (InvalidVersion, TypeError):
        raise ValueError(f"{value!r} is not a version (PEP 440, e.g. 1.0)") from None
    if normal != value:
        raise ValueError(f"{value!r} is not a version in normal form (PEP 440): write {normal}")
    return value


DatasetName = Annotated[str, AfterValidator(check_dataset_name)]
DatasetVersion = Annotated[str, AfterValidator(check_dataset_version)]


class DatasetTask(Record):
    """One task of a dataset, as ``dataset.json`` lists it (SPEC 16)."""

    id: Annotated[str, AfterValidator(check_task_id)]
    """The task id; its files are ``tasks/<id>/`` in the archive."""
    task_version: str
    """The task's version (``task.yaml``)."""
    task_digest: Sha256Hex
    """``task_digest`` of its public files (SPEC 12)."""
    discipline: str
    """Its discipline (``task.yaml``)."""
    visibility: str
    """``public`` or ``private``."""
    answers: Literal["included", "withheld"]
    """``included``: ``tasks/<id>/hidden/answers.json`` is in the archive; ``withheld``: no
    answer key travels (runs of the task end ``sealed``)."""


class DatasetManifest(Record):
    """``dataset.json`` at the top of a dataset's archive and of its pulled copy (SPEC 16)."""

    name: DatasetName
    """The dataset's name."""
    version: DatasetVersion
    """Its version (PEP 440)."""
    created: str
    """ISO-8601 time the archive was packed (UTC)."""
    spu_version: str
    """The version of spu that packed it."""
    description: str = ""
    """One line about the dataset."""
    tasks: list[DatasetTask]
    """Every task of the dataset, by id."""


class RegistryEntry(Record):
    """One archive of a registry (SPEC 16)."""

    name: DatasetName
    """The dataset's name."""
    version: DatasetVersion
    """Its version."""
    url: Annotated[str, Field(min_length=1, max_length=4096)]
    """Where the archive is: absolute, or relative to the registry's own location."""
    sha256: Sha256Hex
    """SHA-256 of the archive's bytes."""
    bytes: Annotated[int, Strict(), Field(ge=0)]
    """The archive's size."""
    n_tasks: Annotated[int, Strict(), Field(ge=0)]
    """How many tasks it holds."""
    description: str = ""
    """One line about the dataset."""


DATASET_PULL_VERSION = "1"
"""``1``: the first pull record (``pull.json``)."""


class DatasetPull(VersionedRecord):
    """``pull.json`` beside a pulled dataset's ``dataset.json``: its origin and files.

    The SHA-256 of each file lets ``spu dataset verify`` find any file changed since the
    pull (answer keys included, which ``task_digest`` does not cover).
    """

    STRICT_SINCE: ClassVar[int] = 1

    schema_version: str = DATASET_PULL_VERSION
    """Format version of this record."""
    dataset: str
    """``NAME@VERSION``."""
    registry: str | None = None
    """The registry it was pulled from (None: the built-in dataset, from the package)."""
    source: str
    """The archive's URL or path."""
    archive_sha256: Sha256Hex
    """SHA-256 of the archive, checked against the registry before anything was kept."""
    pulled_at: str
    """ISO-8601 time of the pull (UTC)."""
    files: dict[str, Sha256Hex]
    """Every file of the dataset (POSIX path under its folder) -> SHA-256 of its bytes."""


class Registry(Record):
    """A registry of datasets: ``registry.json``, a local file or a URL (SPEC 16)."""

    datasets: list[RegistryEntry] = Field(default_factory=list)
    """Every archive it lists; one per (name, version)."""

    @model_validator(mode="after")
    def _one_entry_per_version(self) -> Registry:
        seen: set[tuple[str, str]] = set()
        for entry in self.datasets:
            key = (entry.name, entry.version)
            if key in seen:
                raise ValueError(f"{entry.name}@{entry.version} is listed twice")
            seen.add(key)
        return self


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
    disk_limit = "disk_limit"
    infra_error = "infra_error"
    cost_limit = "cost_limit"
    sealed = "sealed"
    """The task had no answer key: the run is sealed, to be graded when the key comes."""
    seal_broken = "seal_broken"
    """A file sealed with the run changed afterwards: recorded, never scored."""


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
    disk_gb: float | None = None
    """Disk limit in GiB on the workspace, the output and the logs together, or None."""
    disk_mechanism: str = "none"
    """``loop-ext4`` (a size-limited file system), ``polled`` (sizes sampled, the agent
    stopped when over) or ``none``."""
    log_mb: float | None = None
    """Cap in MiB on each of the agent's stdout and stderr (head and tail kept)."""


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
    network: str | None = None
    """The agent's network: ``pasta-filtered`` (internet, the run's host ports, nothing
    else of the host or its network), ``pasta-unfiltered`` (the filter could not be
    installed), ``offline``, ``host`` or ``docker-<mode>``; also in ``isolation``."""
    host_ports: list[int] = Field(default_factory=list)
    """Host loopback TCP ports the agent could reach (its model server, tools, proxy)."""
    unisolated_allowed: bool = False
    """An agent ran without isolation (a ``subprocess`` sandbox, or an unisolated grader)
    because ``sandbox.allow_unisolated=true`` let it."""


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
    disk_full: bool = False
    """True when the run filled its disk (``limits.disk_gb``) and was stopped."""
    log_dropped_bytes: int = 0
    """Bytes of stdout and stderr dropped by the log cap (``limits.log_mb``)."""
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
    """Index of the trajectory step whose tool output holds it (-1: found only in the
    audit log of the tools service, in a call the trajectory does not show)."""
    tool: str | None = None
    """Name of the tool that returned it."""
    matched: str | None = None
    """The text that matched, as found (decoded and normalized for titles)."""
    audit_call: int | None = None
    """Index of the audited call whose output held it, when found in the audit log."""


def exposure_kinds(hits: Iterable[ExposureHit]) -> list[str]:
    """The distinct identifier kinds among ``hits``, sorted (the run record's tag)."""
    return sorted({h.kind for h in hits})


class PolicyStop(Record):
    """A stop under the information policy (paper 3.7): the agent's, or the service's."""

    by: Literal["agent", "service"]
    """``agent``: it called ``policy_stop``; ``service``: ``tools.policy=stop`` refused
    further calls after an exposure flag."""
    step: str
    """The step that exposed a prohibited result, as the agent stated it (or the audited
    call that was flagged)."""
    reason: str
    """Why, as the agent stated it (or the identifier kinds that were found)."""
    call: int
    """Index of the audited call that recorded the stop."""
    time: str
    """ISO-8601 time (UTC) of the stop."""


class AuditEntry(VersionedRecord):
    """One line of ``<run_dir>/tools/audit.jsonl``: one call of the audited tools (SPEC 7)."""

    time: str
    """ISO-8601 time (UTC) the call arrived."""
    tool: str
    """``search``, ``fetch`` or ``policy_stop``."""
    args: dict[str, Any]
    """The arguments as the agent sent them."""
    status: str
    """``ok``, ``error`` (the provider failed or the arguments were bad) or ``refused``
    (``tools.policy=stop`` after an exposure flag)."""
    latency_s: float
    """Seconds from the call's arrival to its answer."""
    text_sha256: str
    """SHA-256 of the full text of the answer (UTF-8)."""
    chars: int
    """Characters in the full text of the answer."""
    call: int = 0
    """Index of the call in the run, from 0."""
    text_file: str | None = None
    """The full text, relative to ``<run_dir>/tools/``."""
    http_status: int | None = None
    """HTTP status of a fetch (404 for a URL outside the offline corpus)."""
    error: str | None = None
    """What went wrong, as the agent was told."""
    truncated: bool = False
    """True when the text returned to the agent was cut (the full text is in ``text_file``)."""
    exposure: list[str] = Field(default_factory=list)
    """Identifier kinds of the source study found in the answer (screened as it happened)."""
    schema_version: str = AUDIT_VERSION
    """Version of this line's format."""


class GatewayRequest(Record):
    """One line of ``<run_dir>/model/requests.jsonl``: one model request (SPEC 11).

    Written by the run's model gateway, outside the sandbox, as the request completes;
    the run's usage, cost, ``refusal`` and ``infra_error`` are read from these lines.
    """

    time: str
    """ISO-8601 time (UTC) the request arrived at the gateway."""
    endpoint: str
    """``messages``, ``count_tokens``, ``responses``, ``chat_completions``, ``models`` or
    ``other``."""
    model: str | None = None
    """The model the request asked for."""
    status: int
    """HTTP status the agent got (the upstream's, or the gateway's own refusal)."""
    latency_s: float = 0.0
    """Seconds from the request's arrival to the end of its answer."""
    ttfb_s: float | None = None
    """Seconds from the request's arrival to the first byte of the upstream's answer."""
    usage: Usage = Field(default_factory=Usage)
    """Usage the provider reported for this request (what it bills)."""
    stop_reason: str | None = None
    """Stop reason of the answer (``end_turn``, ``tool_use``, ``completed``, ``stop``...)."""
    refusal: bool = False
    """True when the provider's answer is a refusal."""
    refusal_label: str | None = None
    """The provider's refusal category (``bio``, ``cyber``, ``content_filter``), if given."""
    error_type: str | None = None
    """The provider's error type, or the gateway's (``gateway.bad_token``,
    ``gateway.model_refused``, ``gateway.cost_limit``, ``gateway.stream_dropped``,
    ``gateway.upstream_unreachable``, ``gateway.client_disconnected``)."""
    error: str | None = None
    """The error message."""
    request_id: str | None = None
    """The provider's request id (``request-id`` or ``x-request-id`` header)."""
    bytes_in: int = 0
    """Bytes of the request body."""
    bytes_out: int = 0
    """Bytes of the answer body passed to the agent."""
    stream: bool = False
    """True for a streamed (SSE) answer."""
    max_tokens: int | None = None
    """The most output tokens the request asked for (``max_tokens``, ``max_output_tokens``,
    ``max_completion_tokens``), reasoning included; None where it set no bound."""
    rate_limit_requests: int | None = None
    """The provider's stated limit of requests per minute, where its answer stated one
    (``anthropic-ratelimit-requests-limit``, ``x-ratelimit-limit-requests``)."""
    rate_limit_tokens: int | None = None
    """The provider's stated limit of input tokens per minute for this request's model,
    where its answer stated one (``anthropic-ratelimit-input-tokens-limit``); else
    ``model_gateway.rate_limit_input_tokens``. So for the other ``rate_limit_*`` fields."""
    rate_limit_output_tokens: int | None = None
    """The stated limit of output tokens per minute
    (``anthropic-ratelimit-output-tokens-limit``)."""
    rate_limit_total_tokens: int | None = None
    """The stated limit of all tokens per minute, a request counted at its ``max_tokens``
    (``x-ratelimit-limit-tokens``, ``anthropic-ratelimit-tokens-limit``)."""
    complete: bool = False
    """True when the answer arrived whole (a stream's final event, a JSON body)."""
    final: bool = False
    """True when the answer is a final answer: complete, and no tool call follows it."""
    body_file: str | None = None
    """The request and answer bodies, relative to ``<run_dir>/model/``
    (``model_gateway.log_bodies=true`` only)."""
    schema_version: str = GATEWAY_REQUEST_VERSION
    """Version of this line's format."""


class GpuUsage(Record):
    """GPU use measured by sampling the devices handed to a run (paper 4.8, E.12)."""

    devices: list[str] = Field(default_factory=list)
    """Device ids sampled (indices or UUIDs)."""
    method: str
    """How they were read: ``nvml`` or ``nvidia-smi``."""
    samples: int = 0
    """Readings taken (one per interval, over all devices)."""
    busy_samples: int = 0
    """Readings in which some device showed work (utilization at least 1%)."""
    interval_s: float = 1.0
    """Seconds between two readings."""
    gpu_seconds: float = 0.0
    """Device time weighted by utilization: 10 s at 50% count 5 s."""
    used_gpu: bool = False
    """True when any reading showed work on a device."""
    peak_utilization: float = 0.0
    """Highest utilization read, in percent."""
    peak_memory_mb: float | None = None
    """Highest device memory in use, in MiB, where readable."""
    errors: list[str] = Field(default_factory=list)
    """Readings that failed, and why (first few)."""


class GpuPlacement(Record):
    """The long-lived worker (a Ray actor) that ran an attempt, and the device it owns."""

    actor: str
    """The actor's name, unique to the launch that started it (``spu-<launch>-<n>``)."""
    devices: list[str] = Field(default_factory=list)
    """The GPU ids Ray assigned to the actor (empty on a node without GPUs)."""
    visible_devices: str | None = None
    """``CUDA_VISIBLE_DEVICES`` in the actor's process (None: not set)."""
    uuid: str | None = None
    """The device's UUID from NVML (None: no NVML, or no GPU)."""


class _OmitsEmpty(Record):
    """A part of a run's identity whose later fields are written only when set.

    The fields added after run keys were first hashed (``harness.env``, the plugins'
    options) are left out of the record while empty, so that a record without them is
    serialized, hashed and signed as it was before they existed.
    """

    OMITTED_WHEN_EMPTY: ClassVar[tuple[str, ...]] = ()

    @model_serializer(mode="wrap")
    def _omit_empty(self, handler: Any) -> Any:
        data = handler(self)
        if isinstance(data, dict):
            for name in self.OMITTED_WHEN_EMPTY:
                if name in data and not data[name]:
                    del data[name]
        return data


class ConfigIdentity(_OmitsEmpty):
    """The configuration part of a run's identity: what was asked to solve the task."""

    OMITTED_WHEN_EMPTY = ("env", "options")

    model: str
    """Model configuration name (``conf/model``)."""
    api_model: str | None = None
    """The provider's model id (``model.api_model``)."""
    endpoint: str | None = None
    """The API endpoint (``model.base_url``; None: the CLI's default)."""
    effort: str
    """Reasoning effort name (``conf/effort``)."""
    harness: str
    """Harness name (``conf/harness``, or ``module:Class``)."""
    cli_version: str | None = None
    """The pinned version of the harness's CLI (``harness.version``; None: no CLI)."""
    entrypoint_sha256: str | None = None
    """SHA-256 of ``harness.entrypoint`` (``harness=command``; None: no entrypoint)."""
    args: list[str] = Field(default_factory=list)
    """``harness.args``, the arguments given to the entrypoint."""
    env: dict[str, str] = Field(default_factory=dict)
    """``harness.env``, the variables added to the agent's environment (hashed only when
    some are set, so that runs without them keep their keys)."""
    options: dict[str, Any] = Field(default_factory=dict)
    """``harness.options`` set to other than the harness's defaults, but for those it
    declares result-neutral (hashed only when some are set)."""


class TaskIdentity(Record):
    """The task part of a run's identity."""

    id: str
    """Task identifier."""
    version: str
    """Task version."""
    task_digest: str
    """SHA-256 over the task's public files, paths and contents (``spu.tasks.digest``)."""


class ToolsIdentity(_OmitsEmpty):
    """The audited tools a run could use (SPEC section 7)."""

    OMITTED_WHEN_EMPTY = ("options",)

    provider: str | None = None
    """``tools.provider`` (``offline``, ``web``); None when the run had no tools service."""
    corpus_sha256: str | None = None
    """SHA-256 of the corpus (``tools.corpus``): of the file, or over a folder's paths and
    contents (None: no corpus, or no tools service)."""
    options: dict[str, Any] = Field(default_factory=dict)
    """``tools.options`` set to other than the provider's defaults, but for those it
    declares result-neutral (hashed only when some are set)."""


class Identity(_OmitsEmpty):
    """What ran: the fields a run key is hashed from (SPEC section 12, :mod:`spu.identity`).

    A change to any of them is another run; limits, sandbox backend and launcher are
    not part of it (:class:`RunSettings`), nor is the answer key (``spu regrade``).
    """

    OMITTED_WHEN_EMPTY = ("sandbox_options",)

    key_scheme: str = "2"
    """Version of the run-key scheme (1: the model, harness, effort, task id, version and
    repeat names only, before this record existed)."""
    config: ConfigIdentity
    """The configuration."""
    task: TaskIdentity
    """The task and its public files."""
    tools: ToolsIdentity = Field(default_factory=ToolsIdentity)
    """The tools provider and its corpus."""
    sandbox_options: dict[str, Any] = Field(default_factory=dict)
    """``sandbox.options`` (and the flat keys that predate them) set to other than the
    backend's defaults, but for those it declares result-neutral (hashed only when some
    are set); the backend itself is a setting (:class:`RunSettings`)."""
    repeat: int = 0
    """0 for the official run, 1 and up for repeated runs."""


class RunSettings(Record):
    """How a run was launched, outside its identity: changing these never runs it again."""

    limits: dict[str, float] = Field(default_factory=dict)
    """The requested limits (``limits.*``, before a task's own overrides)."""
    sandbox: str | None = None
    """The requested sandbox backend (``sandbox.name``)."""
    launcher: str | None = None
    """The Hydra launcher that ran it (``basic``, ``ray_local``...; None: not through Hydra)."""


class RunRecord(VersionedRecord):
    """``<output_root>/runs/<run_key>/run.json``: one agent run, graded (SPEC section 4)."""

    schema_version: str = RUN_RECORD_VERSION
    """Version of this record's format."""
    run_key: str
    """Stable hash of ``identity`` (:func:`spu.identity.run_key`); in records without
    ``identity``, of (model, harness, effort, task id and version, repeat)."""
    identity: Identity | None = None
    """What ran, the fields ``run_key`` is hashed from; None in records written before."""
    settings: RunSettings | None = None
    """How the run was launched (limits, sandbox), outside its identity; None before."""
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
    dataset: str | None = None
    """The dataset the task came from (``dataset=NAME@VERSION``, SPEC 16); None: a task
    root of one's own, or a record written before datasets."""
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
    """Estimated API cost at list prices, cache writes billed by ``cache_write_rate``."""
    cache_write_rate: str | None = None
    """The rule that priced ``cost_usd``: ``five_minute`` (paper E.6) or ``actual``; None in
    records written before the rule was recorded (priced ``actual``)."""
    cost_by_cache_write_rate: dict[str, float] = Field(default_factory=dict)
    """The estimate under each rule (``five_minute``, ``actual``)."""
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
    """Tool calls of the model: from the gateway's record where the run had one (every call
    its answers made or whose result it was sent), else in the trajectory."""
    web_fetches: int = 0
    """Web search and fetch calls in the trajectory."""
    requests_outside_tools: int | None = None
    """Network connections made around the audited tools (the egress log: destinations
    other than the model provider's API and the tools service), where one was kept."""
    outside_destinations: list[str] = Field(default_factory=list)
    """The distinct ``host:port`` of those connections, first seen first (at most 100)."""
    shell_downloads: int | None = None
    """Downloads started from the shell (``curl``, ``wget``, ``pip install``, ``git clone``...)
    in the model's shell calls (from the gateway's record where the run had one, else the
    trajectory), counted apart from the egress log."""
    audited_calls: int | None = None
    """Calls of the audited tools service (None: the run had no service)."""
    policy_stopped: bool = False
    """True when the run stopped under the information policy (outcome ``policy_stop``)."""
    policy_stop: PolicyStop | None = None
    """The first stop: who, at which step, why."""
    gpu_seconds: float | None = None
    """GPU time used by the agent (utilization-weighted device seconds), where measured."""
    gpu_usage: GpuUsage | None = None
    """How the GPUs handed to the run were sampled, where they were."""
    cli_version: str | None = None
    """Version of the agent CLI that ran."""
    used_gpu: bool = False
    """True when the agent ran work on a GPU (measured where ``gpu_usage`` is set)."""
    flagged_exposure: bool = False
    """True when a tool output contained an identifier of the source study."""
    training_cutoff: str | None = None
    """The model's training cutoff (``model.training_cutoff``); None: unknown."""
    task_published: str | None = None
    """When the task's source was published (the answer key's ``source.published``)."""
    published_before_cutoff: bool | None = None
    """Whether the task was published before the model's training cutoff
    (:func:`spu.tasks.freshness.published_before_cutoff`); None: unknown."""
    exposure_hits: list[ExposureHit] = Field(default_factory=list)
    """Where the exposure detector found source identifiers (first hits, capped)."""
    screen_incomplete: bool = False
    """True when a cap kept the exposure screen from reading all the model was sent (the
    gateway's record full, a text kept as its head and tail, a PDF not read); ``notes``
    says which. False in records written before the field (``docs/tools.md``)."""
    refusal_after_file: bool = False
    """The run refused after writing a valid or recoverable file: ``outcome`` is
    ``refusal`` and ``scored`` false (the paper's rule, 3.1), ``score_strict`` and
    ``score_recovered`` are the file's grade; ``spu stats --refusals-after-file=score``
    scores it."""
    excluded_for_rerun: bool = False
    """The run hit ``memory_limit`` or ``disk_limit`` after leaving a valid or recoverable
    file and was excluded to be rerun (``sweep.retry_limits_with_file=true``, the paper's
    rule, 3.1): ``scored`` is false, and a regrade keeps it so. False where such a file was
    scored as a timeout's is (the default rule)."""
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
    gpu: GpuPlacement | None = None
    """The actor and device that ran the agent, under ``hydra.launcher.placement=actors``
    (None: placed as a Ray task, or run on this machine)."""
    evidence_disagreement: str | None = None
    """Where the agent's session files claimed what the model gateway's record does not
    show (a refusal or an API error the provider never sent); the gateway's record won."""
    gateway: dict[str, Any] | None = None
    """The run's model gateway: ``endpoint``, ``api``, ``upstream``, ``api_model``,
    ``max_cost_usd``, ``record`` (None: the agent called no model)."""
    notes: list[str] = Field(default_factory=list)
    """Loud warnings about the run (e.g. a grader that could not be isolated)."""
    grade_history: list[PastGrade] = Field(default_factory=list)
    """Earlier grades replaced by ``spu regrade``, oldest first."""


# --------------------------------------------------------------------------- seals


class SealManifest(VersionedRecord):
    """``<run_dir>/seal.json``: what a run submitted, hashed and signed when it ended (SPEC 13).

    The signature is Ed25519 over the canonical JSON (sorted keys, no spaces, UTF-8) of
    every other field; ``spu seal verify`` recomputes both.
    """

    schema_version: str = SEAL_MANIFEST_VERSION
    """Version of this record's format."""
    ledger_version: str = LEDGER_VERSION
    """Version of the ledger lines this manifest's entry follows."""
    run_key: str
    """The sealed run's key."""
    attempt: int = 1
    """Which attempt of the run key was sealed (earlier ones live under ``attempts/<n>/``)."""
    identity: Identity | None = None
    """The run's identity (SPEC section 12), as in its ``run.json``."""
    outcome: Outcome
    """How the run ended when it was sealed (``sealed`` when the task had no key)."""
    time: str
    """ISO-8601 time of sealing (UTC)."""
    files: dict[str, str]
    """Sealed file, relative to the run folder (POSIX) -> SHA-256 hex of its bytes."""
    skipped: dict[str, str] = Field(default_factory=dict)
    """A path where a sealed file would be that is not a regular file -> why it was not sealed."""
    public_key_sha256: str
    """SHA-256 of the raw Ed25519 public key that signed this manifest."""
    signature: str = ""
    """Base64 Ed25519 signature of the other fields' canonical JSON."""


class LedgerEntry(Record):
    """One line of ``<output_root>/ledger.jsonl`` (SPEC section 13; format :data:`LEDGER_VERSION`).

    The signature is Ed25519 over the canonical JSON of the five other fields; ``prev``
    chains each line to the one before, so a line edited, dropped or moved breaks it.
    """

    seq: int
    """Position in the ledger, 1 for the first line."""
    run_key: str
    """The sealed run's key."""
    manifest_sha256: str
    """SHA-256 hex of the run's ``seal.json`` bytes."""
    prev: str
    """SHA-256 hex of the previous line (without its newline); 64 zeros for the first."""
    time: str
    """ISO-8601 time of sealing (UTC), the manifest's."""
    signature: str
    """Base64 Ed25519 signature of the canonical JSON of the other fields."""


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


# --------------------------------------------------------------------------- analysis


ANALYSIS_VERSION = "1"


class Activity(str, Enum):
    """Primary activity of a tool call, in the fixed priority of paper appendix E.7."""

    subagent = "subagent"
    web_search = "web_search"
    web_fetch = "web_fetch"
    software_install = "software_install"
    scientific_computation = "scientific_computation"
    submission_files = "submission_files"
    other_python = "other_python"
    code_writing = "code_writing"
    notes_and_data = "notes_and_data"
    reading_inputs = "reading_inputs"
    environment_probe = "environment_probe"
    waiting = "waiting"
    viewing_files = "viewing_files"
    planning = "planning"
    other = "other"


ACTIVITY_CLASSES: dict[Activity, str] = {
    Activity.reading_inputs: "task inputs",
    Activity.web_search: "web search and fetch",
    Activity.web_fetch: "web search and fetch",
    Activity.software_install: "setup and probes",
    Activity.environment_probe: "setup and probes",
    Activity.scientific_computation: "scientific computation",
    Activity.other_python: "other Python and code",
    Activity.code_writing: "other Python and code",
    Activity.notes_and_data: "files and notes",
    Activity.viewing_files: "files and notes",
    Activity.submission_files: "submission files",
    Activity.subagent: "other",
    Activity.waiting: "other",
    Activity.planning: "other",
    Activity.other: "other",
}
"""The eight-class merge of Figure 14a (``activity_class`` of ``calls.csv``)."""


class AuditVerdict(Record):
    """A person's check of one sampled call label (``spu analyze audit FILE``)."""

    run_key: str
    """Run of the call."""
    step: int
    """Trajectory step of the call."""
    call_index: int
    """Position of the call within its step."""
    activity: Activity
    """The label the rules gave."""
    correct: bool | None = None
    """The verdict: true, false, or null while unchecked."""
    correct_activity: Activity | None = None
    """The right label, where the rules' one was wrong."""
    note: str | None = None
    """Free text."""


# --------------------------------------------------------------------------- runs table

# The runs table (SPEC section 5) is the one saved format that is a table rather than a
# record: ``spu runs export`` writes it from tracking, ``spu.stats.simulate`` writes it
# from known parameters, and ``spu stats`` reads it. Its columns, their types and its
# writer live here so that every side uses the same format.

RUNS_TABLE_SPEC_COLUMNS: tuple[str, ...] = (
    "run_id", "config", "model", "harness", "effort", "task_id", "discipline", "subfield",
    "visibility", "repeat", "outcome", "score_strict", "score_recovered", "scored",
    "threshold", "n_items", "input_tokens", "cache_read_tokens", "cache_write_tokens",
    "output_tokens", "cost_usd", "runtime_s", "tool_calls", "web_fetches", "used_gpu",
    "flagged_exposure",
)
"""The columns of SPEC section 5, in order."""

RUNS_TABLE_EXTRA_COLUMNS: tuple[str, ...] = (
    "run_key", "task_version", "attempt", "n_attempts", "official", "retried_from",
    "experiment", "cache_write_1h_tokens", "cost_full_input_usd", "cache_write_rate",
    "cost_five_minute_usd", "cost_actual_usd", "cli_cost_usd",
    "cost_disagreement", "long_context_requests", "exposure_kinds", "refusal_label",
    "refusal_after_file",
    "requests_outside_tools", "peak_memory_bytes", "gpu_seconds", "cli_version",
    "grader_version", "sandbox", "started_at", "finished_at", "audited_calls",
    "shell_downloads", "policy_stopped", "n_groups", "departures",
    "published_before_cutoff", "task_published", "graded_from_seal",
)
"""Further columns, after the SPEC ones. ``n_groups`` counts the task's comparison groups
(from the grade), ``departures`` lists the schema departures of appendix E.1 that recovery
normalized, ``;``-joined in the order of E.1 (empty for a file without departures).
``graded_from_seal`` is true for a run that ended ``sealed`` (no key) and was graded
later from its seal (``spu regrade``, ``spu grade-bundle``).
``published_before_cutoff`` says whether the task's source was published before the
model's training cutoff, ``true``, ``false`` or ``unknown``
(:mod:`spu.tasks.freshness`); ``task_published`` is that date (``source.published``)."""

RUNS_TABLE_COLUMNS: tuple[str, ...] = RUNS_TABLE_SPEC_COLUMNS + RUNS_TABLE_EXTRA_COLUMNS
"""Every column of the runs table, in order."""

RUNS_TABLE_INT_COLUMNS: tuple[str, ...] = (
    "repeat", "input_tokens", "cache_read_tokens", "cache_write_tokens", "output_tokens",
    "tool_calls", "web_fetches", "attempt", "n_attempts", "cache_write_1h_tokens",
    "long_context_requests")
"""Whole-number columns that always have a value."""
RUNS_TABLE_NULLABLE_INT_COLUMNS: tuple[str, ...] = (
    "n_items", "requests_outside_tools", "peak_memory_bytes", "audited_calls",
    "shell_downloads", "n_groups")
"""Whole-number columns that may be empty."""
RUNS_TABLE_BOOL_COLUMNS: tuple[str, ...] = (
    "scored", "used_gpu", "flagged_exposure", "official", "cost_disagreement",
    "policy_stopped", "graded_from_seal", "refusal_after_file")
"""True/false columns."""
RUNS_TABLE_FLOAT_COLUMNS: tuple[str, ...] = (
    "score_strict", "score_recovered", "threshold", "cost_usd", "runtime_s",
    "cost_full_input_usd", "cost_five_minute_usd", "cost_actual_usd", "cli_cost_usd",
    "gpu_seconds")
"""Real-valued columns (NaN where unknown)."""

_RUNS_TABLE_DEFAULTS: dict[str, Any] = {"attempt": 1, "n_attempts": 1, "official": True,
                                        "published_before_cutoff": "unknown"}


class RunsTableWriteError(ValueError):
    """The runs table cannot be written; the message names the file."""


def runs_table_frame(data: Any, *, sort: bool = True, fill: bool = False) -> Any:
    """The runs table as a pandas DataFrame: every column, in order, with stable dtypes.

    Args:
        data: rows (an iterable of dicts) or a DataFrame holding the columns.
        sort: order the rows by configuration, task, repeat, attempt and run id.
        fill: give columns that ``data`` lacks their empty value (0, false, NaN, empty;
            ``attempt``/``n_attempts`` 1 and ``official`` true) instead of failing.

    Raises:
        KeyError: a column is missing and ``fill`` is false.
    """
    import pandas as pd

    df = data.copy() if isinstance(data, pd.DataFrame) else pd.DataFrame(list(data))
    if len(df.columns) == 0:
        df = pd.DataFrame(columns=list(RUNS_TABLE_COLUMNS))
    missing = [c for c in RUNS_TABLE_COLUMNS if c not in df.columns]
    if missing and not fill:
        raise KeyError(f"runs table lacks column(s) {', '.join(missing)}")
    for col in missing:
        if col in _RUNS_TABLE_DEFAULTS:
            df[col] = _RUNS_TABLE_DEFAULTS[col]
        elif col in RUNS_TABLE_INT_COLUMNS:
            df[col] = 0
        elif col in RUNS_TABLE_BOOL_COLUMNS:
            df[col] = False
        elif col in RUNS_TABLE_FLOAT_COLUMNS:
            df[col] = float("nan")
        else:
            df[col] = None
    df = df[list(RUNS_TABLE_COLUMNS)]
    for col in RUNS_TABLE_INT_COLUMNS:
        df[col] = df[col].astype("int64")
    for col in RUNS_TABLE_NULLABLE_INT_COLUMNS:
        df[col] = df[col].astype("Int64")
    for col in RUNS_TABLE_BOOL_COLUMNS:
        df[col] = df[col].astype(bool)
    for col in RUNS_TABLE_FLOAT_COLUMNS:
        df[col] = df[col].astype("float64")
    if sort:
        df = df.sort_values(["config", "task_id", "repeat", "attempt", "run_id"], kind="stable")
    return df.reset_index(drop=True)


def write_runs_table(df: Any, out: Any) -> Any:
    """Write a runs table as CSV or Parquet, chosen by the suffix of ``out``; returns the path.

    The file appears whole or not at all (written beside it, then renamed).

    Raises:
        RunsTableWriteError: ``out`` ends in neither ``.csv`` nor ``.parquet``.
    """
    from pathlib import Path

    out = Path(out)
    suffix = out.suffix.lower()
    if suffix not in (".csv", ".parquet"):
        raise RunsTableWriteError(f"{out}: the output must end in .csv or .parquet")
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = out.with_name(out.name + ".partial")
    if suffix == ".csv":
        df.to_csv(tmp, index=False)
    else:
        df.to_parquet(tmp, index=False)
    tmp.replace(out)
    return out
