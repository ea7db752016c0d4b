"""Does a job fit the card it is about to run on? ``check_fits`` for plain
loops; :class:`headroom.HeadroomCallback` runs it at a Trainer's start.

On a catalog card (``gpu="rtx-4090"``) the job fits by the ``gpus``
table's rule, the one :meth:`Estimate.fits` and ``jobs_per_card`` follow:
its replay fits the card's usable memory less what the likely range (and
the margin) may add. On a live device (``device=0``) the range's top is compared with what the
device can give the process: the free memory (``torch.cuda.mem_get_info``)
plus what this process's allocator already holds
(``torch.cuda.memory_reserved``) plus the CUDA context, which exists once
the free memory has been asked, and which the estimate counts.
"""

from __future__ import annotations

import warnings
from dataclasses import dataclass
from typing import Any, Optional, Union

from ._api import Advice, Card, Estimate, SpecLike, advise, card_fit, estimate, find_gpu, spec_text


class DoesNotFit(RuntimeError):
    """The job's likely peak is above what the card has: raised before the job
    allocates, carrying the estimate and the advice (what would make it fit)."""

    def __init__(self, check: "FitCheck"):
        self.check = check
        super().__init__(check.message())

    @property
    def estimate(self) -> Estimate:
        """The job's estimate."""
        return self.check.estimate

    @property
    def advice(self) -> Optional[Advice]:
        """What would make the job fit the card (``None`` on a device that is
        not in the catalog)."""
        return self.check.advice


class DoesNotFitWarning(UserWarning):
    """The job may not fit (``action="warn"``)."""


@dataclass(frozen=True)
class FitCheck:
    """The answer of :func:`check_fits`."""

    #: Whether the job fits (its likely range's top within ``capacity_bytes``).
    fits: bool
    #: The job's estimate.
    estimate: Estimate
    #: What the card (or device) can give the job, bytes.
    capacity_bytes: int
    #: The card or device, in words.
    where: str
    #: What would make it fit, when it does not (on a catalog card).
    advice: Optional[Advice] = None

    def message(self) -> str:
        """The answer in words, with the advice when the job does not fit."""
        high = self.estimate.likely_range.high
        verdict = "fits" if self.fits else "does not fit"
        text = (
            f"headroom: the job {verdict} {self.where}: its peak is likely up to "
            f"{high / 1e9:.2f} GB (driver peak {self.estimate.driver_peak / 1e9:.2f} GB) and the card has "
            f"{self.capacity_bytes / 1e9:.2f} GB for it"
        )
        if self.fits:
            return text
        if self.advice is None:
            return text + "; no catalog card matches this device, so no advice (pass gpu=NAME for it)"
        return text + "\n" + str(self.advice)


def _device_budget(device: Any, est: Estimate) -> tuple[int, str, Optional[Card]]:
    """What a live CUDA device can give the job, its name, and its catalog card
    when its name matches one."""
    import torch  # only for a live device

    props = torch.cuda.get_device_properties(device)
    free, _total = torch.cuda.mem_get_info(device)
    held = torch.cuda.memory_reserved(device)
    context = next((s.bytes for s in est.breakdown if s.component == "cuda_context"), 0)
    try:
        card: Optional[Card] = find_gpu(props.name)
    except ValueError:
        card = None
    return free + held + context, f"on {props.name} (device {device})", card


def check_fits(
    spec: SpecLike,
    *,
    device: Union[int, Any, None] = None,
    gpu: Union[str, Card, None] = None,
    margin_percent: int = 0,
    action: str = "raise",
) -> FitCheck:
    """Checks that a job fits a catalog card (``gpu="rtx-4090"``) or a live CUDA
    device (``device=0``, needs torch), before it allocates.

    ``action``: ``"raise"`` raises :class:`DoesNotFit` (with the advice) when
    it does not fit, ``"warn"`` warns (:class:`DoesNotFitWarning`), ``"return"``
    only returns the :class:`FitCheck`. ``margin_percent`` is added on top of
    the likely range's top.
    """
    if (device is None) == (gpu is None):
        raise ValueError("check_fits: name one of device= (a CUDA device) or gpu= (a catalog card)")
    if action not in ("raise", "warn", "return"):
        raise ValueError(f"action: {action!r}; allowed: \"raise\", \"warn\", \"return\"")
    text, _ = spec_text(spec)
    card: Optional[Card]
    if gpu is not None:
        named = find_gpu(gpu)
        est = estimate(spec, gpu=named)
        capacity, where, card = named.usable_bytes, f"on {named.name}", named
        fits = card_fit(text, named, margin_percent).fits
    else:
        est = estimate(spec)
        capacity, where, card = _device_budget(device, est)
        fits = est.likely_range.high * (100 + margin_percent) // 100 <= capacity
    advice = None
    if not fits and card is not None:
        advice = advise(text, card, margin_percent)
    check = FitCheck(fits=fits, estimate=est, capacity_bytes=capacity, where=where, advice=advice)
    if not fits:
        if action == "raise":
            raise DoesNotFit(check)
        if action == "warn":
            warnings.warn(check.message(), DoesNotFitWarning, stacklevel=2)
    return check


__all__ = ["DoesNotFit", "DoesNotFitWarning", "FitCheck", "check_fits"]
