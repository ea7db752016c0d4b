"""Per-convolution cuDNN workspace of torchvision ResNet-50 on one GPU.

For every nn.Conv2d, hooks read the allocator around the call: the workspace
is the peak allocated during the call minus what is allocated right after it
(the output stays, the workspace is gone). Forward hooks time the forward
convolution; full backward hooks time the gradient convolutions (data and
weight gradient together). Runs, in one process, the way the public H200
set ran ResNet-50 (and a fresh-process comparison first):

  1. fp32 inference, batch 64 / 256 at 224 px and batch 32 at 512 px, fresh;
  2. amp-bf16 AdamW training, batch 64 at 224 px, two steps;
  3. the same fp32 inference cases again, after training.

Each case also reports its whole peak (allocated, reserved) measured without
hooks first, so the hooks' own synchronisation cannot hide anything.

usage: python3 conv_workspaces.py OUT.jsonl [MODEL [sweep]]
With CHANNELS_LAST=1 in the environment, the model and its inputs are in
`torch.channels_last` and the cases' names end in `_cl`.
"""
import os
import gc
import json
import sys

import torch
import torchvision

out = open(sys.argv[1], "w")


def emit(record):
    out.write(json.dumps(record) + "\n")
    out.flush()
    print(json.dumps(record)[:300], flush=True)


def reset():
    gc.collect()
    torch.cuda.empty_cache()
    torch.cuda.reset_peak_memory_stats()


def peaks():
    torch.cuda.synchronize()
    return {
        "alloc_peak": torch.cuda.max_memory_allocated(),
        "reserved_peak": torch.cuda.max_memory_reserved(),
        "resident": torch.cuda.memory_allocated(),
    }


# `conv_workspaces.py OUT [MODEL [sweep]]`: ResNet-50 and the cases below
# by default; with another model name (e.g. resnet18), or with `sweep`,
# amp-bf16 training of that model at batch 32 to 256 and fp32 training at
# batch 64 instead.
MODEL = sys.argv[2] if len(sys.argv) > 2 else "resnet50"
SWEEP = MODEL != "resnet50" or sys.argv[3:4] == ["sweep"]
CHANNELS_LAST = os.environ.get("CHANNELS_LAST") == "1"
FORMAT = torch.channels_last if CHANNELS_LAST else torch.contiguous_format
TAG = "_cl" if CHANNELS_LAST else ""
model = getattr(torchvision.models, MODEL)().cuda().to(memory_format=FORMAT)
convs = [(n, m) for n, m in model.named_modules() if isinstance(m, torch.nn.Conv2d)]
records = []
state = {}


def pre(name):
    def hook(module, inputs):
        torch.cuda.synchronize()
        torch.cuda.reset_peak_memory_stats()
        state[name] = (torch.cuda.memory_allocated(), inputs[0].shape, inputs[0].dtype)

    return hook


def post(name, phase):
    def hook(module, inputs, output):
        torch.cuda.synchronize()
        before, shape, dtype = state.pop(name)
        after = torch.cuda.memory_allocated()
        peak = torch.cuda.max_memory_allocated()
        out_t = output[0] if isinstance(output, tuple) else output
        records.append(
            {
                "phase": phase,
                "conv": name,
                "kernel": list(module.kernel_size),
                "stride": list(module.stride),
                "c_in": module.in_channels,
                "c_out": module.out_channels,
                "input_shape": list(shape),
                "dtype": str(dtype),
                "out_bytes": None if out_t is None else out_t.numel() * out_t.element_size(),
                "before": before,
                "after": after,
                "workspace": peak - after,
            }
        )

    return hook


def with_hooks(fn, backward):
    handles = []
    for name, m in convs:
        handles.append(m.register_forward_pre_hook(pre(name)))
        handles.append(m.register_forward_hook(post(name, "forward")))
        if backward:
            handles.append(m.register_full_backward_pre_hook(lambda mod, g, n=name: pre(n)(mod, g)))
            handles.append(m.register_full_backward_hook(lambda mod, gi, go, n=name: post(n, "backward")(mod, go, gi)))
    try:
        fn()
    finally:
        for h in handles:
            h.remove()


def inference(batch, px, tag):
    model.eval()
    x = torch.randn(batch, 3, px, px, device="cuda").contiguous(memory_format=FORMAT)
    case = f"{MODEL}_inf_fp32_b{batch}_r{px}_{tag}{TAG}"

    def run():
        with torch.no_grad():
            model(x)

    reset()
    run()
    emit({"case": case, "hooks": False, **peaks()})
    reset()
    records.clear()
    with_hooks(run, backward=False)
    emit({"case": case, "hooks": True, "convs": records[:]})
    del x


def training(batch, px, amp=True):
    model.train()
    opt = torch.optim.AdamW(model.parameters())
    x = torch.randn(batch, 3, px, px, device="cuda").contiguous(memory_format=FORMAT)
    y = torch.randint(0, 1000, (batch,), device="cuda")
    precision = "amp_bf16" if amp else "fp32"

    def step():
        with torch.autocast("cuda", dtype=torch.bfloat16, enabled=amp):
            loss = torch.nn.functional.cross_entropy(model(x), y)
        loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)

    reset()
    step()
    step()
    emit({"case": f"{MODEL}_train_{precision}_adamw_b{batch}_r{px}{TAG}", "hooks": False, **peaks()})
    reset()
    records.clear()
    with_hooks(step, backward=True)
    emit({"case": f"{MODEL}_train_{precision}_adamw_b{batch}_r{px}{TAG}", "hooks": True, "convs": records[:]})
    del opt, x, y
    for p in model.parameters():
        p.grad = None


emit({"torch": torch.__version__, "cudnn": torch.backends.cudnn.version(), "gpu": torch.cuda.get_device_name(), "model": MODEL, "channels_last": CHANNELS_LAST})
if not SWEEP:
    for b, px in [(64, 224), (256, 224), (32, 512)]:
        inference(b, px, "fresh")
    training(64, 224)
    for b, px in [(64, 224), (256, 224), (32, 512)]:
        inference(b, px, "after_training")
else:
    for b in (32, 64, 128, 256):
        training(b, 224)
    training(64, 224, amp=False)
