"""headroom: the peak GPU memory of a PyTorch job, before it runs.

>>> import headroom
>>> est = headroom.estimate("examples/llama-8b-generate.json")
>>> est.driver_peak, est.likely_range.high, est.jobs_per_card("h200")

The same core as the ``headroom`` command line, to the byte: it replays the
job's allocations through a model of PyTorch's CUDA caching allocator and
adds what lives outside it. A spec is a dict, a JSON string or a path
(``docs/spec.md``); :func:`spec_from` writes one from a live Hugging Face
model and its arguments, and :class:`HeadroomCallback` checks a Trainer's
job at its start. Only these two need torch and transformers.
"""

from __future__ import annotations

from typing import Any

from ._api import (
    Advice,
    Card,
    CardFit,
    Estimate,
    GpuRow,
    GpuTable,
    LikelyRange,
    Share,
    SpecError,
    SpecLike,
    Suggestion,
    Timeline,
    TimelinePoint,
    advise,
    card_fit,
    catalog,
    estimate,
    find_gpu,
    gpus,
    read_spec,
    timeline,
)
from .fit_check import DoesNotFit, DoesNotFitWarning, FitCheck, check_fits
from .huggingface import spec_from

__all__ = [
    "Advice",
    "Card",
    "CardFit",
    "DoesNotFit",
    "DoesNotFitWarning",
    "Estimate",
    "FitCheck",
    "GpuRow",
    "GpuTable",
    "HeadroomCallback",
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
    "check_fits",
    "estimate",
    "find_gpu",
    "gpus",
    "read_spec",
    "spec_from",
    "timeline",
]


def __getattr__(name: str) -> Any:
    # HeadroomCallback subclasses transformers' TrainerCallback: imported on
    # first use, so the package itself needs no transformers.
    if name == "HeadroomCallback":
        from .callback import HeadroomCallback

        return HeadroomCallback
    raise AttributeError(f"module 'headroom' has no attribute {name!r}")
