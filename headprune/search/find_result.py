"""``FindResult``: everything find measured, as nested frozen records, serialised to a versioned JSON.

Values are stored apart from how they are shown: the terminal line, ``report.md``, model cards and the
Hub ``model-index`` are all rendered from these fields (``headprune.report.markdown``, ``headprune.exporter.card``).
Version 1 files (headprune before typed records) and version 2 (0.2: heads admitted on the check half, recorded in
``parsimony``) are still read; version 3 records the selection on held-out (``selection``), whose verdicts an
older headprune would misread (a primary set tested at a share of alpha, or behind a gate), so it refuses them.
Version 4 tests a kept set at its part of the proposal's share and marks its estimate exploratory
(``Verdict.selected``), which a headprune reading version 3 would drop; version 3 files are read as they were
(their cut-down sets behind the proposal's gate). Version 5 confirms a set of several heads by the proposal's fixed
sequence of increments (``Verdict.steps``, ``Selection.steps``), not by the set's own test, which a headprune
reading version 4 would take for the claim; version 4 files are read as they were. Version 6 names the selection rule
that chose (``Selection.rule``, ``Verdict.rule``; ``headprune.search.rules``): the steps of find's rule since then
skip a head that does not reject, which a headprune reading version 5 would take for a sequence that stopped there;
version 5 files are read as they were (the sequence's).

A result of version 5 or later carries a ``digest``: the sha256 of everything else in it but its timings (the JSON
with sorted keys and no spaces), so that :meth:`FindResult.load` can refuse a file edited since find wrote it (a
finalist's heads changed, a guard's fields deleted), whose figures would no longer be find's for what it says. It is a
checksum, not a signature: it catches an edit, not a forgery. Files of versions 1 to 4 (headprune 0.3.0 and earlier)
have none and are read as written.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path

from headprune.core.hashing import json_digest
from headprune.core.io import read_regular_file
from headprune.core.record_json import from_json, to_json
from headprune.errors import EditedResultError, ResultFileError
from headprune.evaluation.results import Summary
from headprune.heads import Head, HeadGrid, LayerHeads, parse_heads
from headprune.search.effects import ControlEffect
from headprune.search.generations import Generations
from headprune.search.guards import GuardEffect, Guarding, claim_holds
from headprune.search.paired import Paired
from headprune.search.parsimony import HeadContribution, Parsimony
from headprune.search.result_upgrade import upgrade_v1
from headprune.search.selection import Selection
from headprune.search.settings import FindSettings
from headprune.search.shrink_record import Shrink
from headprune.search.stats import NonInferiority, Verdict

SCHEMA_VERSION = 6
RESULT_NAME = "result.json"
DIGEST_KEY = "digest"
DIGEST_SINCE = 5  # the first schema version whose files carry a digest
UNDIGESTED = (DIGEST_KEY, "timings")  # what the digest leaves out: itself, and how long the stages took


@dataclass(frozen=True)
class ModelInfo:
    """The model find ran on. ``heads``, ``kv_heads`` and ``head_dim`` are every layer's; where layers differ,
    ``grid`` holds each layer's (and those three its widest layer's: the heatmap's columns)."""

    name: str
    weight_hash: str
    family: str
    model_type: str
    layers: int
    heads: int
    kv_heads: int
    head_dim: int
    revision: str | None = None  # the Hub commit the weights were read at (None: not a Hub snapshot)
    grid: tuple[LayerHeads, ...] = ()  # each layer's heads, where the layers differ (empty: all alike)
    quantization: str | None = None  # a quantized checkpoint: how it was read (which weights, dequantized to what)

    @classmethod
    def of(cls, name: str, weight_hash: str, family: str, model_type: str, grid: HeadGrid,
           revision: str | None, quantization: str | None = None) -> ModelInfo:
        """The record of a model whose heads are ``grid`` (``quantization``: how a quantized checkpoint was read)."""
        heads, kv_heads, head_dim = (max((getattr(layer, f) for layer in grid.layers), default=0)
                                     for f in ("heads", "kv_heads", "head_dim"))
        return cls(name, weight_hash, family, model_type, grid.num_layers, heads, kv_heads, head_dim, revision,
                   () if grid.is_uniform else grid.layers, quantization)

    @property
    def head_grid(self) -> HeadGrid:
        return HeadGrid(self.grid) if self.grid else HeadGrid.uniform(self.layers, self.heads, self.kv_heads,
                                                                      self.head_dim)

    @property
    def total_heads(self) -> int:
        return self.head_grid.total

    @property
    def shape(self) -> str:
        """``24 layers x 16 heads``, or each kind of layer's count where they differ."""
        return self.head_grid.describe()


@dataclass(frozen=True)
class TaskInfo:
    """A task as find used it: ``hash`` is over the examples used (for the main task: all of it)."""

    name: str
    kind: str
    n: int
    hash: str
    spec: str | None = None  # how to load it again (None: an in-memory task)
    settings: dict[str, object] = field(default_factory=dict)
    discovery_hash: str | None = None


@dataclass(frozen=True)
class SplitInfo:
    seed: int
    discovery: int
    heldout: int
    source: str  # "split" (one task split in two) or "heldout-task"
    duplicates_dropped: int
    conflicts_dropped: int = 0  # same input as an earlier example, another answer (kept on no side)
    search: int | None = None  # improve: discovery examples in the search half (headprune.search.folds)
    check: int | None = None  # improve: discovery examples in the check half


@dataclass(frozen=True)
class Baseline:
    """The intact model on each set."""

    discovery: Summary
    heldout: Summary
    controls: tuple[Summary, ...] = ()


@dataclass(frozen=True)
class ScreenRow:
    """One head ablated alone on discovery (``estimate``: the pre-screen's first-order estimate, if any)."""

    head: str
    paired: Paired
    estimate: float | None = None
    search: Paired | None = None  # improve: the same on the search half (what ranked it)


@dataclass(frozen=True)
class SetRecord:
    """One head set evaluated on discovery."""

    heads: tuple[str, ...]
    paired: Paired
    search: Paired | None = None  # improve: the same on the search half (what ranked it)


@dataclass(frozen=True)
class Finalist:
    """One of the F best sets on discovery, with its held-out verdict and control effects."""

    rank: int
    heads: tuple[str, ...]
    discovery: Paired
    heldout: Verdict
    controls: tuple[ControlEffect, ...] = ()
    contributions: tuple[HeadContribution, ...] = ()  # each head against the set without it (parsimony)
    guards: tuple[GuardEffect, ...] = ()  # each guard on its held-out examples (the primary's: the claim)


@dataclass(frozen=True)
class GuardTask:
    """A guard as find used it (``headprune.search.guards``): the task, its metric and margin (an accuracy fraction,
    or nats of mean NLL)."""

    task: TaskInfo
    metric: str
    margin: float


@dataclass(frozen=True)
class HalvingRound:
    round: int
    paired: Paired


@dataclass(frozen=True)
class Prescreen:
    """What a pre-screen saw: attribution estimates of every head, or the successive-halving rounds."""

    method: str
    candidates: int
    estimates: dict[str, float] | None = None
    spearman_on_candidates: float | None = None
    rounds: dict[str, HalvingRound] | None = None


@dataclass(frozen=True)
class CurvePoint:
    """One set evaluated by the compress search: heads removed against discovery accuracy."""

    removed: int
    accuracy: float
    within: bool  # within max_drop of the intact model (the search could accept it)
    accepted: bool  # the search grew its set to this one


@dataclass(frozen=True)
class Savings:
    """What the sliced export of a head set saves (counted on the sliced model itself)."""

    parameters_before: int
    parameters_after: int
    bytes_before: int
    bytes_after: int
    dtype: str  # the precision the bytes are counted in
    kv_heads_before: int
    kv_heads_after: int  # key/value heads the sliced layers keep (duplicated ones counted)

    _derived = ("parameters_saved", "bytes_saved")

    @property
    def parameters_saved(self) -> int:
        return self.parameters_before - self.parameters_after

    @property
    def bytes_saved(self) -> int:
        return self.bytes_before - self.bytes_after


@dataclass(frozen=True)
class Compression:
    """``find --objective compress``: the set the search found within ``max_drop`` on discovery, its savings,
    the held-out non-inferiority verdict and the trade-off curve the search explored."""

    max_drop: float  # accuracy points
    prefer: str  # "heads" or "groups"
    heads: tuple[str, ...]
    discovery: Paired
    verdict: NonInferiority
    savings: Savings
    curve: tuple[CurvePoint, ...]
    rejected: tuple[str, ...]  # units that broke the budget when added (each a head or a group's heads joined by +)
    queue: int  # units the search could grow from
    search: str = "greedy"  # "greedy" or "beam"
    beam_width: int | None = None
    searched: int | None = None  # distinct sets the search evaluated on discovery (its cost; None in older results)
    rounds: int | None = None  # batches of sets the search evaluated (None in older results)
    sets_per_head: float | None = None  # searched / heads removed (None in older results or with nothing removed)
    stopped: str | None = None  # why the search ended: "queue", "patience" or "cost" (None in older results)


@dataclass(frozen=True)
class FindResult:
    """The record of one find run."""

    model: ModelInfo
    task: TaskInfo
    heldout_task: TaskInfo
    control_tasks: tuple[TaskInfo, ...]
    split: SplitInfo
    settings: FindSettings
    baseline: Baseline
    screen: tuple[ScreenRow, ...]
    nominees: tuple[str, ...]
    sets: tuple[SetRecord, ...]
    finalists: tuple[Finalist, ...]
    prescreen: Prescreen | None = None
    compression: Compression | None = None  # objective compress only
    timings: dict[str, float] = field(default_factory=dict, compare=False)
    schema_version: int = SCHEMA_VERSION
    means_digest: str | None = None  # mean ablation: the hash of the head means find used (see ablation.means_digest)
    parsimony: Parsimony | None = None  # files of 0.2: the admission of heads on the check half
    selection: Selection | None = None  # objective improve: how the primary set was chosen (held-out tests)
    reconfirmed: int | None = None  # protocol cel: sets run again on discovery from scratch, all in agreement
    generations: Generations | None = None  # generate tasks: held-out texts of the baseline and every finalist
    guard_tasks: tuple[GuardTask, ...] = ()  # find --guard: tasks the primary set must not hurt
    guarding: Guarding | None = None  # with guards: the candidate sets checked on their discovery examples
    shrink: Shrink | None = None  # find --shrink: the primary set grown by key/value groups, tested on fresh examples

    @property
    def primary(self) -> tuple[Head, ...]:
        """The discovery rank-1 set: the result find stands behind."""
        return parse_heads(self.finalists[0].heads) if self.finalists else ()

    @property
    def verdict(self) -> Verdict:
        """The primary set's held-out verdict."""
        return self.finalists[0].heldout

    @property
    def guards_held(self) -> bool:
        """No guards, or a candidate kept them on discovery and the primary set is non-inferior on each of them on
        held-out guard examples (``headprune.search.guards``: the claim is an intersection-union test)."""
        if self.guarding is None:
            return True
        return claim_holds(True, self.guarding.kept, self.finalists[0].guards)

    @property
    def confirmed(self) -> bool:
        """The task's improvement is confirmed and, with guards, every guard held."""
        return self.verdict.confirmed and self.guards_held

    @property
    def shrunk(self) -> bool:
        """find --shrink: the grown set is claimed (better than the original, no worse than the primary set by more
        than the margin, on data that chose neither)."""
        return self.shrink is not None and self.shrink.claimed(self.confirmed)

    @property
    def accepted(self) -> bool:
        """What the exit code reports: a confirmed improvement, or for compress a non-inferior set."""
        return self.compression.verdict.accepted if self.compression is not None else self.confirmed

    def to_dict(self) -> dict:
        """The record as JSON, with its digest last (``core.hashing.json_digest``, without :data:`UNDIGESTED`)."""
        data = to_json(self)
        return {**data, DIGEST_KEY: json_digest(data, leave_out=UNDIGESTED)}

    def save(self, path: Path) -> None:
        from headprune.core.io import atomic_write_json

        atomic_write_json(path, self.to_dict())

    @classmethod
    def from_dict(cls, data: dict) -> FindResult:
        version = data.get("schema_version")
        if version == 1:
            data = upgrade_v1(data, SCHEMA_VERSION)
        elif version in (2, 3, 4, 5):  # 0.2: no selection; 3: no parts or selected estimates; 4: no sequence;
            # 5: no rule named (the sequence's)
            data = {**data, "schema_version": SCHEMA_VERSION}
        elif version != SCHEMA_VERSION:
            raise ResultFileError(f"unsupported result schema version {version!r} "
                                  f"(this headprune reads versions 1 to {SCHEMA_VERSION})")
        return from_json(cls, data)

    @classmethod
    def load(cls, path: Path) -> FindResult:
        """Read a ``result.json`` (or the folder holding one)."""
        path = Path(path)
        if path.is_dir():
            path = path / RESULT_NAME
        try:
            text = read_regular_file(path, 10**9).decode("utf-8")  # a million heads' result is a few hundred MB
        except FileNotFoundError as error:
            raise ResultFileError(f"{path}: no such result file") from error
        except (OSError, UnicodeDecodeError, ValueError) as error:  # a FIFO or device, or too large: not read
            raise ResultFileError(f"{path}: cannot read it ({error})") from error
        try:
            data = json.loads(text)
            check_digest(data, path)
            return cls.from_dict(data)
        except EditedResultError:
            raise
        except (json.JSONDecodeError, KeyError, TypeError, ValueError, AttributeError, RecursionError) as error:
            raise ResultFileError(f"{path}: not a headprune result ({type(error).__name__}: {error})") from error


def check_digest(data: object, path: Path) -> None:
    """Refuse a result of a version that carries a digest whose digest is missing or does not match its content.

    Raises:
        EditedResultError: naming the file, with each finalist's heads as it now reads.
    """
    if not isinstance(data, dict) or not isinstance(data.get("schema_version"), int) \
            or data["schema_version"] < DIGEST_SINCE:
        return  # an older file (read as written), or no result at all (from_dict says so)
    recorded = data.get(DIGEST_KEY)
    try:
        if recorded == json_digest(data, leave_out=UNDIGESTED):
            return
    except ValueError:  # a NaN written in by hand: not what find wrote
        pass
    why = "it has no digest, which find writes into every result" if recorded is None else \
        "its content no longer matches the digest find wrote"
    finalists = data.get("finalists")
    heads = tuple(tuple(str(h) for h in f.get("heads", ())) if isinstance(f, dict) and isinstance(
        f.get("heads"), list) else () for f in finalists) if isinstance(finalists, list) else ()
    raise EditedResultError(f"{path} was edited after find wrote it ({why})", finalists=heads)
