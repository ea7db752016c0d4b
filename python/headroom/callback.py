"""``HeadroomCallback``: a transformers ``TrainerCallback`` that checks, when
training begins and before the first step allocates, that the job fits its
card, and warns or stops with what would make it fit.

This module imports transformers; ``headroom.HeadroomCallback`` imports it
only when first used, so the package works without transformers.
"""

from __future__ import annotations

from typing import Any, Optional, Union

from transformers import TrainerCallback

from ._api import Card
from .fit_check import FitCheck, check_fits
from .huggingface import spec_from


class HeadroomCallback(TrainerCallback):
    """Checks at ``on_train_begin`` that the Trainer's job fits its card.

    The spec is read from the Trainer's model and ``TrainingArguments``
    (:func:`headroom.spec_from`) with ``seq_len`` tokens per sequence. The
    card is ``gpu`` (a catalog name, ``"rtx-4090"``), else the CUDA device the
    model is on (its free memory, ``torch.cuda.mem_get_info``).

    ``action="stop"`` (the default) raises :class:`headroom.DoesNotFit`, which
    carries the advice, when the likely range's top is above the card;
    ``"warn"`` warns and lets the training run.

    >>> trainer = Trainer(model, args, callbacks=[HeadroomCallback(seq_len=2048)])
    """

    def __init__(
        self,
        seq_len: int,
        *,
        gpu: Union[str, Card, None] = None,
        device: Optional[Any] = None,
        margin_percent: int = 0,
        action: str = "stop",
    ):
        if action not in ("stop", "warn"):
            raise ValueError(f"action: {action!r}; allowed: \"stop\", \"warn\"")
        self.seq_len = seq_len
        self.gpu = gpu
        self.device = device
        self.margin_percent = margin_percent
        self.action = action
        #: The last check's answer (``None`` before training begins).
        self.check: Optional[FitCheck] = None

    def on_train_begin(self, args: Any, state: Any, control: Any, model: Any = None, **kwargs: Any) -> Any:
        """Estimates the job and stops (raises) or warns when it does not fit."""
        if model is None:
            raise ValueError("HeadroomCallback: the Trainer passed no model")
        spec = spec_from(model, seq_len=self.seq_len, args=args)
        if self.gpu is not None:
            # The job as it would run on the card named: a process tried out
            # on the CPU (`use_cpu`, which TrainingArguments needs for bf16
            # without a GPU) runs on the card there.
            spec["workload"]["training_args"]["use_cpu"] = False
        device = self.device
        if self.gpu is None and device is None:
            device = _device_of(model)
        self.check = check_fits(
            spec,
            gpu=self.gpu,
            device=None if self.gpu is not None else device,
            margin_percent=self.margin_percent,
            action="raise" if self.action == "stop" else "warn",
        )
        return control


def _device_of(model: Any) -> Any:
    """The CUDA device the model's parameters are on."""
    for p in model.parameters():
        if p.device.type == "cuda":
            return p.device
    raise ValueError(
        "HeadroomCallback: the model is not on a CUDA device; name a catalog card with gpu=\"...\""
    )


__all__ = ["HeadroomCallback"]
