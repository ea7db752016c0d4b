"""check_fits on catalog cards (no GPU, no torch needed)."""

from __future__ import annotations

import pytest

import headroom

LORA = "examples/llama-8b-lora.json"  # about 53 GB: fits an H100, not an RTX 4090


@pytest.mark.parametrize("gpu", ["rtx-4090", "a100-40gb", "h100-80gb", "h200"])
def test_check_fits_follows_the_estimates_fits(gpu):
    check = headroom.check_fits(LORA, gpu=gpu, action="return")
    assert check.fits == headroom.estimate(LORA).fits(gpu)
    assert check.capacity_bytes == headroom.find_gpu(gpu).usable_bytes


def test_a_job_that_does_not_fit_raises_with_the_advice():
    with pytest.raises(headroom.DoesNotFit) as stopped:
        headroom.check_fits(LORA, gpu="rtx-4090")
    error = stopped.value
    assert "does not fit on NVIDIA GeForce RTX 4090" in str(error)
    assert error.advice.suggestions and str(error).endswith(str(error.advice))
    assert error.estimate.driver_peak == headroom.estimate(LORA, gpu="rtx-4090").driver_peak


def test_warn_and_return_let_the_caller_go_on():
    with pytest.warns(headroom.DoesNotFitWarning, match="does not fit"):
        check = headroom.check_fits(LORA, gpu="rtx-4090", action="warn")
    assert not check.fits
    assert headroom.check_fits(LORA, gpu="h200").fits


def test_a_margin_can_tip_it():
    assert headroom.check_fits(LORA, gpu="h100-80gb", action="return").fits
    assert not headroom.check_fits(LORA, gpu="h100-80gb", margin_percent=100, action="return").fits


def test_one_card_or_one_device():
    with pytest.raises(ValueError, match="name one of device="):
        headroom.check_fits(LORA)
    with pytest.raises(ValueError, match="name one of device="):
        headroom.check_fits(LORA, device=0, gpu="h200")


def test_a_job_that_fits_only_by_freeing_the_cache_reserves_the_whole_card():
    """Chunked ESMFold at 1,500 residues peaks at 37.40 GB unlimited: an RTX
    5090 runs it only because PyTorch frees its cache at the card's end (the
    ``gpus`` table's note), an H200 outright."""
    spec = {
        "model": "esmfold-v1",
        "workload": {"mode": "inference", "dtype": "fp32", "seq_len": 1500, "batch": 1,
                     "esmfold": {"stem_dtype": "fp16", "chunk_size": 64, "num_recycles": 4}},
    }
    rtx = headroom.card_fit(spec, "rtx-5090")
    usable = headroom.find_gpu("rtx-5090").usable_bytes
    assert rtx.fits and rtx.jobs == 1
    assert rtx.reservation_bytes == usable
    assert 0 < rtx.releasing_cache_at_bytes < usable
    assert rtx.releasing_cache_at_bytes < headroom.estimate(spec).driver_peak
    h200 = headroom.card_fit(spec, "h200")
    assert h200.fits and h200.releasing_cache_at_bytes is None
    assert headroom.estimate(spec).driver_peak < h200.reservation_bytes < headroom.find_gpu("h200").usable_bytes
