"""When does DDP's old bucket leave torch's allocated bytes?

One rank of the DDP job whose first bucket sometimes outlived its rebuild
(Llama-3.2-1B, amp bf16, b2 L4096, checkpointing, AdamW), run under
torchrun. A forward pre-hook on the wrapped model runs right after DDP's
`_pre_forward` (where the reducer rebuilds its buckets at the second
step) and, with the Python thread idle in `time.sleep`, polls
`torch.cuda.memory_allocated()` every millisecond for `--poll-ms`,
recording each change and whether the GPU had finished the first step
(an event recorded after it). Bytes that leave while this thread sleeps
were released by another thread.

  torchrun --standalone --nproc-per-node 1 probe_release.py [--sync-first]
"""
import argparse
import json
import os
import sys
import time

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "../../../calibration-collector/python"))
from headroom_parallel import LLAMA  # noqa: E402


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--poll-ms", type=int, default=1500)
    ap.add_argument("--sync-first", action="store_true",
                    help="synchronize and sleep 0.5 s before the second step")
    args = ap.parse_args()
    import torch
    import torch.distributed as dist
    from torch.nn.parallel import DistributedDataParallel as DDP
    from transformers import LlamaConfig, LlamaForCausalLM

    local = int(os.environ["LOCAL_RANK"])
    torch.cuda.set_device(local)
    dist.init_process_group("nccl", device_id=torch.device("cuda", local))
    cfg = LlamaConfig(**LLAMA["llama-3.2-1b"])
    cfg._attn_implementation = "sdpa"
    with torch.device("cuda"):
        model = LlamaForCausalLM(cfg)
    model.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})
    model = DDP(model, device_ids=[local], bucket_cap_mb=25.0)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-5)
    torch.cuda.synchronize()
    torch.cuda.reset_peak_memory_stats()

    record = {"step": 0, "first_step_done": None, "events": []}

    def hook(_module, _inputs):
        if record["step"] != 1:
            return
        t0 = time.perf_counter()
        last = torch.cuda.memory_allocated()
        events = [dict(ms=0.0, allocated=last, gpu_done_first_step=done.query())]
        while (time.perf_counter() - t0) * 1e3 < args.poll_ms:
            time.sleep(0.001)
            now = torch.cuda.memory_allocated()
            if now != last:
                events.append(dict(ms=round((time.perf_counter() - t0) * 1e3, 1), allocated=now,
                                   gpu_done_first_step=done.query()))
                last = now
        record["events"] = events

    model.module.register_forward_pre_hook(hook)
    g = torch.Generator(device="cuda").manual_seed(1234)
    done = torch.cuda.Event()
    peaks = []
    for step in range(3):
        record["step"] = step
        if step == 1 and args.sync_first:
            torch.cuda.synchronize()
            time.sleep(0.5)
        ids = torch.randint(0, 128000, (2, 4096), device="cuda", generator=g)
        with torch.autocast("cuda", dtype=torch.bfloat16):
            loss = model(input_ids=ids, labels=ids, use_cache=False).loss
        loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)
        if step == 0:
            done.record()
        torch.cuda.synchronize()
        peaks.append(torch.cuda.max_memory_allocated())
        torch.cuda.reset_peak_memory_stats()
    out = dict(sync_first=args.sync_first, poll_ms=args.poll_ms,
               avoid_record_streams=os.environ.get("TORCH_NCCL_AVOID_RECORD_STREAMS"),
               torch=torch.__version__, nccl=".".join(map(str, torch.cuda.nccl.version())),
               allocated_peak_per_step=peaks, hook_events=record["events"])
    print("PROBE " + json.dumps(out), flush=True)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
