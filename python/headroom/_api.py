"""The core's answers as Python objects: estimate, gpus, advise, timeline, catalog.

Every function takes the spec as a dict, a JSON string or a path to a JSON
file (``docs/spec.md`` describes it; a measurement case works unchanged) and
hands it to the core as JSON text. The numbers are exact integer bytes,
the same the ``headroom`` command prints.
"""

from __future__ import annotations

import csv
import io
import json
import os
from dataclasses import dataclass, field
from typing import Any, Mapping, Optional, Union

from . import _headroom
from ._headroom import SpecError

#: What every function accepts as a spec: a dict (as ``json.load`` gives),
#: a JSON string (starting with ``{``) or a path to a JSON file.
SpecLike = Union[Mapping[str, Any], str, "os.PathLike[str]"]


def spec_text(spec: SpecLike) -> tuple[str, Optional[str]]:
    """The spec as JSON text, and the name its errors are prefixed with.

    A path's errors start with the path, as the command line's do
    (``examples/x.json: `workload.seqlen`: unknown key; ...``); a dict's and
    a JSON string's start with the field.
    """
    if isinstance(spec, Mapping):
        return json.dumps(spec), None
    if isinstance(spec, str) and spec.lstrip().startswith("{"):
        return spec, None
    if isinstance(spec, (str, os.PathLike)):
        path = os.fspath(spec)
        with open(path, encoding="utf-8") as f:
            return f.read(), path
    raise TypeError(
        f"spec: expected a dict, a JSON string or a path, not {type(spec).__name__}"
    )


def _call(name: Optional[str], function: Any, *args: Any) -> Any:
    """Runs a native function, prefixing its SpecError with the spec's file name."""
    try:
        return function(*args)
    except SpecError as e:
        if name is None:
            raise
        raise SpecError(f"{name}: {e}") from None


def _gpu_id(gpu: Union[str, "Card"]) -> str:
    return gpu.id if isinstance(gpu, Card) else gpu


@dataclass(frozen=True)
class Card:
    """A GPU of the catalog."""

    #: Stable id, e.g. ``"rtx-4090"``.
    id: str
    #: Marketing name, e.g. ``"NVIDIA GeForce RTX 4090"``.
    name: str
    #: Memory a CUDA process can allocate (``cudaMemGetInfo``'s total), bytes.
    usable_bytes: int
    #: CUDA compute capability (``sm89``) or AMD's architecture (``gfx942``).
    architecture: str = ""
    #: Memory on the board (the marketing capacity), bytes.
    total_bytes: int = 0
    #: Total as NVML (``nvidia-smi``) reports it, bytes.
    nvml_total_bytes: int = 0
    #: Whether this card's overheads outside the allocator were measured
    #: (the H200's and the H100's); other cards' ranges are wider.
    overheads_measured: bool = False

    @staticmethod
    def _from(value: Mapping[str, Any]) -> "Card":
        return Card(**{k: value[k] for k in Card.__dataclass_fields__ if k in value})


def catalog() -> list[Card]:
    """Every GPU of the catalog (RTX 3060 to MI300X), in the catalog's order."""
    return [Card._from(c) for c in json.loads(_headroom.catalog())]


def find_gpu(name: Union[str, Card]) -> Card:
    """The catalog card ``name`` means: an id (``"rtx-4090"``) or a name that
    leaves one card (``"H100"``, ``"RTX 4090"``). ``ValueError`` otherwise,
    listing the cards it could mean."""
    return Card._from(json.loads(_headroom.find_gpu(_gpu_id(name))))


@dataclass(frozen=True)
class Share:
    """One line of the breakdown: what some of the driver-level peak is for."""

    #: The component's key: ``weights``, ``activations``, ``kv_cache``,
    #: ``cuda_context``, ``allocator_slack``, ...
    component: str
    #: Its bytes at the peak.
    bytes: int


@dataclass(frozen=True)
class LikelyRange:
    """Where the measured peak is likely to fall: the prediction widened by the
    errors of the measured cases of the same family, mode and strategy."""

    #: The low end, bytes.
    low: int
    #: The high end, bytes: what "fits" is decided from.
    high: int
    #: Measured cases behind the band.
    cases: int
    #: The family of the band (``decoder``, ``encoder``, ``esm_fold``, ...).
    family: str
    #: ``inference`` or ``training``.
    mode: str
    #: How the job is spread over GPUs (``none``, ``ddp``, ``fsdp2``, ...).
    strategy: str
    #: Lowest (predicted - measured) / measured among the cases.
    lowest_error: float
    #: Highest error among them.
    highest_error: float
    #: Whether the card's own overheads were measured.
    card_measured: bool
    #: Why the range is wide when no such job was measured, else ``None``.
    unmeasured: Optional[str] = None
    #: On a card: whether the job fits with the range's high end.
    fits: Optional[bool] = None

    @staticmethod
    def _from(value: Mapping[str, Any]) -> "LikelyRange":
        return LikelyRange(
            **{k: value[k] for k in LikelyRange.__dataclass_fields__ if k in value}
        )


@dataclass(frozen=True)
class CardFit:
    """How a job sits on one card, by the ``gpus`` table's rule."""

    #: The card.
    gpu: Card
    #: Whether it fits: its replay within the card's usable memory, less the
    #: likely range's allowance and the margin.
    fits: bool
    #: Where it fits only because PyTorch frees its cache and retries at the
    #: card's end: the driver-level peak the replay reaches on the card (else
    #: None). On a larger card the job would hold more, as cache.
    releasing_cache_at_bytes: Optional[int]
    #: What to request per job: the likely range's high end plus the margin,
    #: rounded up to a whole MiB; the whole card where it fits only by freeing
    #: its cache there.
    reservation_bytes: int
    #: How many such jobs run on the card at once (the page's "jobs per card"):
    #: 0 when it does not fit, else at least 1.
    jobs: int
    #: The safety margin on top of the likely range's high end, percent.
    margin_percent: int


def card_fit(spec: SpecLike, gpu: Union[str, Card], margin_percent: int = 0) -> CardFit:
    """Whether the job fits ``gpu``, what to request and how many such jobs run
    on it at once (``gpus``'s "fits" and "jobs" columns for that card)."""
    text, name = spec_text(spec)
    value = json.loads(
        _call(name, _headroom.card_fit, text, _gpu_id(gpu), margin_percent)
    )
    return CardFit(
        gpu=Card._from(value["gpu"]),
        fits=value["fits"],
        releasing_cache_at_bytes=value["releasing_cache_at_bytes"],
        reservation_bytes=value["reservation_bytes"],
        jobs=value["jobs"],
        margin_percent=value["margin_percent"],
    )


class Estimate:
    """The predicted peak of one job, as ``headroom estimate`` reports it.

    The figures are those of the card named (``estimate(spec, gpu=...)``),
    else of a card large enough (for a job that passes the largest card of
    the catalog, see :attr:`without_a_card`). ``to_json()`` is the command
    line's output, byte for byte.
    """

    def __init__(self, document: str, spec: str, name: Optional[str] = None):
        self._text = document
        self._spec = spec
        self._name = name
        self._doc: dict[str, Any] = json.loads(document)

    @property
    def driver_peak(self) -> int:
        """What ``nvidia-smi`` shows for the process at its peak, bytes: the
        figure that decides out-of-memory."""
        return self._doc["driver_peak"]

    @property
    def reserved_peak(self) -> int:
        """``torch.cuda.max_memory_reserved()``, bytes."""
        return self._doc["reserved_peak"]

    @property
    def allocated_peak(self) -> int:
        """``torch.cuda.max_memory_allocated()``, bytes."""
        return self._doc["allocated_peak"]

    @property
    def outside_allocator(self) -> int:
        """CUDA context and library kernels, outside torch's allocator, bytes."""
        return self._doc["outside_allocator"]

    @property
    def breakdown(self) -> list[Share]:
        """What makes up the driver-level peak, summing to it."""
        return [Share(s["component"], s["bytes"]) for s in self._doc["breakdown"]]

    @property
    def peak_op(self) -> str:
        """The op that allocated the allocated peak's last tensor."""
        return self._doc["peak_op"]

    @property
    def params(self) -> int:
        """Parameters (LoRA adapters included)."""
        return self._doc["params"]

    @property
    def weight_bytes(self) -> int:
        """Parameter and buffer bytes resident before the job."""
        return self._doc["weight_bytes"]

    @property
    def likely_range(self) -> LikelyRange:
        """Where the measured peak is likely to fall."""
        return LikelyRange._from(self._doc["likely_range"])

    @property
    def model(self) -> dict[str, str]:
        """The model: its ``id``, ``name`` and ``family``."""
        return dict(self._doc["model"])

    @property
    def inputs(self) -> dict[str, Any]:
        """The job as the core read it: ``workload`` and ``runtime`` with every
        default filled in."""
        return self._doc["inputs"]

    @property
    def gpu(self) -> Optional[Card]:
        """The card the estimate was made on, if one was named."""
        gpu = self._doc.get("gpu")
        return None if gpu is None else find_gpu(gpu["id"])

    @property
    def without_a_card(self) -> Optional[dict[str, Any]]:
        """Without a card, for a job whose peak passes the largest card: on which
        card the figures are, or that it fits none (with a ``note``)."""
        return self._doc.get("without_a_card")

    def fits(self, gpu: Union[str, Card], margin_percent: int = 0) -> bool:
        """Whether the job fits ``gpu`` (an id such as ``"rtx-4090"``, a name
        such as ``"H100"``, or a :class:`Card`), its likely range's high end
        and ``margin_percent`` included: the ``gpus`` table's "fits"."""
        return card_fit(self._spec, gpu, margin_percent).fits

    def jobs_per_card(self, gpu: Union[str, Card], margin_percent: int = 0) -> int:
        """How many such jobs run on ``gpu`` at once, as separate processes:
        the page's "jobs per card" (0 when one does not fit)."""
        return card_fit(self._spec, gpu, margin_percent).jobs

    def to_json(self) -> str:
        """The document as ``headroom estimate`` prints it (pretty JSON, newline)."""
        return self._text

    def to_dict(self) -> dict[str, Any]:
        """The document as a dict (a fresh copy)."""
        return json.loads(self._text)

    def __repr__(self) -> str:
        r = self.likely_range
        return (
            f"<Estimate {self.model['name']}: driver peak {self.driver_peak:,} bytes "
            f"({self.driver_peak / 1e9:.2f} GB), likely {r.low / 1e9:.2f} to {r.high / 1e9:.2f} GB>"
        )


def estimate(spec: SpecLike, gpu: Union[str, Card, None] = None) -> Estimate:
    """Estimates the peak memory of a job.

    ``spec`` is a dict, a JSON string or a path to a spec file; ``gpu`` a
    catalog card the job runs on (``headroom estimate --gpu``). Raises
    :class:`SpecError`, naming the field, for a spec the model refuses.

    >>> est = headroom.estimate("examples/llama-8b-generate.json")
    >>> est.driver_peak, est.fits("rtx-4090"), est.jobs_per_card("h200")
    """
    text, name = spec_text(spec)
    gpu_id = None if gpu is None else _gpu_id(gpu)
    return Estimate(_call(name, _headroom.estimate, text, gpu_id), text, name)


@dataclass(frozen=True)
class GpuRow:
    """One card's row of :func:`gpus`."""

    #: The card.
    gpu: Card
    #: Whether the job as given fits (its likely range's high end included).
    fits: bool
    #: Jobs that run on the card at once (0 when it does not fit).
    jobs: int
    #: Longest length (sequence, image side) that fits at the spec's batch.
    max_length: Optional[int]
    #: Largest batch that fits at the spec's length.
    max_batch: Optional[int]
    #: The fewest cards of this kind per strategy (``ddp``, ``zero1``,
    #: ``fsdp2``, ``tp``) that run the job, ``None`` where none does.
    fewest_gpus: dict[str, Optional[int]] = field(default_factory=dict)
    #: ESMFold: longest protein without chunking.
    max_length_unchunked: Optional[int] = None
    #: ESMFold: longest protein at the smallest chunk size.
    max_length_chunked: Optional[int] = None
    #: ESMFold: the chunk size that makes the spec's length fit (an int,
    #: ``"none needed"`` or ``"does not fit"``).
    chunk_for_length: Union[int, str, None] = None
    #: Lengths above ``max_length`` that run again, up to this one (not every one).
    length_runs_again_up_to: Optional[int] = None
    #: Batches above ``max_batch`` that run again, up to this one.
    batch_runs_again_up_to: Optional[int] = None
    #: Lengths up to this run without PyTorch freeing its cache; above it, up
    #: to ``max_length``, only because it frees its cache at the card's end.
    length_without_freeing_cache: Optional[int] = None
    #: The same for batches.
    batch_without_freeing_cache: Optional[int] = None


@dataclass(frozen=True)
class GpuTable:
    """Which cards of the catalog run a job, as ``headroom gpus`` lists them."""

    #: The job's driver-level peak on one GPU as given, bytes.
    driver_peak: int
    #: Its likely range (on the measured card).
    likely_range: LikelyRange
    #: What a scheduler should request per job: the range's high end plus the
    #: margin, in whole MiB.
    reservation_bytes: int
    #: The margin on top of the range's high end, percent.
    margin_percent: int
    #: ``"seq_len"``, or ``"image"`` for vision models.
    length_axis: str
    #: One row per card, in the catalog's order.
    rows: list[GpuRow]
    #: Strategies that could spread the job, and why one cannot, by key.
    strategies: list[str] = field(default_factory=list)
    strategies_unavailable: dict[str, str] = field(default_factory=dict)

    def row(self, gpu: Union[str, Card]) -> GpuRow:
        """The row of ``gpu`` (an id, a name or a :class:`Card`)."""
        card = find_gpu(gpu)
        return next(r for r in self.rows if r.gpu.id == card.id)


def gpus(spec: SpecLike, margin_percent: int = 0) -> GpuTable:
    """Every card of the catalog with the longest length and largest batch that
    fit, the jobs per card, and the fewest cards per strategy (``headroom gpus``)."""
    text, name = spec_text(spec)
    value = json.loads(_call(name, _headroom.gpus, text, margin_percent))
    rows = []
    for row in value["cards"]:
        fields = {k: row[k] for k in GpuRow.__dataclass_fields__ if k in row and k != "gpu"}
        rows.append(GpuRow(gpu=Card._from(row["gpu"]), **fields))
    return GpuTable(
        driver_peak=value["driver_peak"],
        likely_range=LikelyRange._from(value["likely_range"]),
        reservation_bytes=value["reservation_bytes"],
        margin_percent=value["margin_percent"],
        length_axis=value["length_axis"],
        rows=rows,
        strategies=value["strategies"],
        strategies_unavailable=value["strategies_unavailable"],
    )


@dataclass(frozen=True)
class Suggestion:
    """One change that makes a job fit a card."""

    #: The change in words, naming the spec field and its new value.
    what: str
    #: The changed job's driver-level peak per GPU on the card, bytes.
    driver_peak: int
    #: What the change costs (speed, memory of other kinds, accuracy).
    cost: str
    #: The changed job's workload and runtime, as spec JSON (``{"model": ...,
    #: "workload": workload, "runtime": runtime}`` estimates it).
    workload: dict[str, Any]
    runtime: dict[str, Any]


@dataclass(frozen=True)
class Advice:
    """What would make a job fit a card (``headroom gpus --advise GPU``)."""

    #: The card.
    gpu: Card
    #: Whether the job fits as it is (then there are no suggestions).
    fits_already: bool
    #: The changes that make it fit, best (least change) first.
    suggestions: list[Suggestion]

    def __str__(self) -> str:
        lines = [f"what would make it fit {self.gpu.name}:"]
        if self.fits_already:
            lines.append("  it fits as it is")
        elif not self.suggestions:
            lines.append("  no change tried makes it fit")
        for i, s in enumerate(self.suggestions, 1):
            lines.append(
                f"  {i}. {s.what} (peak {s.driver_peak / 1e9:.2f} GB per GPU; costs {s.cost})"
            )
        return "\n".join(lines)


def advise(spec: SpecLike, gpu: Union[str, Card], margin_percent: int = 0) -> Advice:
    """What would make the job fit ``gpu``: each suggestion one change (or a
    combination), an exact estimate on that card, ranked by how little it
    changes the job."""
    text, name = spec_text(spec)
    value = json.loads(
        _call(name, _headroom.advise, text, _gpu_id(gpu), margin_percent)
    )
    return Advice(
        gpu=Card._from(value["gpu"]),
        fits_already=value["fits_already"],
        suggestions=[Suggestion(**s) for s in value["suggestions"]],
    )


@dataclass(frozen=True)
class TimelinePoint:
    """Memory after a run of the job's allocations and frees (its highest)."""

    first_event: int
    events: int
    phase: str
    step: str
    layer: str
    op: str
    allocated_bytes: int
    reserved_bytes: int
    driver_bytes: int


@dataclass(frozen=True)
class Timeline:
    """The job's memory over time: at most 1,024 points that keep every maximum."""

    #: The points, in order.
    points: list[TimelinePoint]
    #: The same as CSV, as ``headroom estimate --timeline FILE.csv`` writes it.
    csv: str

    @property
    def peak(self) -> TimelinePoint:
        """The point of the highest driver-level bytes (the first of them)."""
        return max(self.points, key=lambda p: p.driver_bytes)


def timeline(spec: SpecLike, gpu: Union[str, Card, None] = None) -> Timeline:
    """The job's allocated, reserved and driver-level bytes over its run, with
    the phase, step, layer and op of each point."""
    text, name = spec_text(spec)
    gpu_id = None if gpu is None else _gpu_id(gpu)
    table = _call(name, _headroom.timeline, text, gpu_id)
    points = []
    for row in csv.DictReader(io.StringIO(table)):
        points.append(
            TimelinePoint(
                first_event=int(row["first_event"]),
                events=int(row["events"]),
                phase=row["phase"],
                step=row["step"],
                layer=row["layer"],
                op=row["op"],
                allocated_bytes=int(row["allocated_bytes"]),
                reserved_bytes=int(row["reserved_bytes"]),
                driver_bytes=int(row["driver_bytes"]),
            )
        )
    return Timeline(points=points, csv=table)


def read_spec(spec: SpecLike) -> dict[str, Any]:
    """The spec as the core reads it, without estimating: ``model`` (id, name,
    family) and ``inputs`` (workload and runtime, every default filled in).
    Raises :class:`SpecError` as :func:`estimate` does."""
    text, name = spec_text(spec)
    return json.loads(_call(name, _headroom.read_spec, text))


__all__ = [
    "Advice",
    "Card",
    "CardFit",
    "Estimate",
    "GpuRow",
    "GpuTable",
    "LikelyRange",
    "Share",
    "SpecError",
    "SpecLike",
    "Suggestion",
    "Timeline",
    "TimelinePoint",
    "advise",
    "card_fit",
    "catalog",
    "estimate",
    "find_gpu",
    "gpus",
    "read_spec",
    "timeline",
]
