#!/usr/bin/env python3
"""headroom_parallel: the per-rank peak GPU memory of one training job on
several GPUs (DDP, FSDP2, ZeRO-1), run under torchrun.

    torchrun --standalone --nproc-per-node N headroom_parallel.py --case-json JSON \
        [--snapshot-dir DIR]
    torchrun --standalone --nproc-per-node N headroom_parallel.py --nccl-only

--nccl-only measures NCCL's memory alone (what `headroom probe
--world-size N` runs): each rank creates its CUDA context, initialises the
process group, runs one all-reduce of 4 KiB and prints
`HEADROOM_RESULT {"measured": {rank, world_size, context_bytes, nccl_bytes},
"runtime": {...}}`; no model, no transformers needed.

The case is a measurement-format object (docs/spec.md) whose
`workload.parallel` says how the job is spread:

  strategy              ddp | fsdp2 | zero1
  world_size            must equal torchrun's WORLD_SIZE
  fsdp2:  reshard_after_forward (default true; the decoder layers'),
          param_dtype (bf16), reduce_dtype (fp32); each decoder layer is
          wrapped with fully_shard, then the root (with fully_shard's default
          reshard_after_forward, None: kept gathered from forward to
          backward); the model is built on `meta` and
          materialised with to_empty() and a random init.
  ddp:    bucket_cap_mb (default 25), gradient_as_bucket_view (false);
          the model is built on the GPU in fp32.
  zero1:  DDP as above plus torch's ZeroRedundancyOptimizer around AdamW.

Each rank prints one line `HEADROOM_RESULT {...}`: the case plus `measured`:

  rank, world_size
  alloc_peak, reserved_peak  torch's peaks over the training steps (reset
                             after the model was materialised and the cache
                             emptied)
  driver_peak                highest NVML `used` of the rank's GPU during the
                             steps minus its `used` before this process
                             touched CUDA
  driver_after_load          the same difference before the first step
  context_bytes              NVML `used` growth from creating the CUDA
                             context (torch.cuda.init and one tiny tensor)
  nccl_bytes                 NVML `used` growth from the process group's
                             first collective (NCCL's communicator: its
                             buffers live outside torch's allocator), minus
                             torch's reserved growth over the same call
  oom                        true when the job ran out of memory

NVML is polled by a thread of this process every 0.2 ms; the poll needs no
CUDA context. With --snapshot-dir, rank 0 records
torch.cuda.memory._record_memory_history over the steps and writes a compact
JSON trace (action, address, size, stream, the innermost Python frames;
every frame, C++ included, for blocks of 1 GiB or more) there.

Random weights, random tokens, nothing downloaded. Set NCCL_NVLS_ENABLE=0
and TORCH_SYMM_MEM_DISABLE_MULTICAST=1 where NVLink multicast is unavailable.
"""

import argparse
import gzip
import json
import os
import threading
import time

RESULT_PREFIX = "HEADROOM_RESULT "

LLAMA = {
    "llama-3.2-1b": dict(vocab_size=128256, hidden_size=2048, intermediate_size=8192,
                         num_hidden_layers=16, num_attention_heads=32, num_key_value_heads=8,
                         tie_word_embeddings=True),
    "llama-3.2-3b": dict(vocab_size=128256, hidden_size=3072, intermediate_size=8192,
                         num_hidden_layers=28, num_attention_heads=24, num_key_value_heads=8,
                         tie_word_embeddings=True),
    "llama-3.1-8b": dict(vocab_size=128256, hidden_size=4096, intermediate_size=14336,
                         num_hidden_layers=32, num_attention_heads=32, num_key_value_heads=8,
                         tie_word_embeddings=False),
}


class Poller:
    """NVML `used` of one GPU, polled from a thread; no CUDA context."""

    def __init__(self, index):
        import pynvml
        pynvml.nvmlInit()
        self.nvml = pynvml
        self.handle = pynvml.nvmlDeviceGetHandleByIndex(index)
        self.base = self.used()
        self.peak = self.base
        self.running = True
        threading.Thread(target=self.loop, daemon=True).start()

    def used(self):
        return self.nvml.nvmlDeviceGetMemoryInfo(self.handle).used

    def loop(self):
        while self.running:
            self.peak = max(self.peak, self.used())
            time.sleep(0.0002)

    def reset(self):
        self.peak = self.used()

    def stop(self):
        self.running = False
        time.sleep(0.002)
        return max(self.peak, self.used())


def torch_dtype(torch, name):
    return {"bf16": torch.bfloat16, "fp16": torch.float16, "fp32": torch.float32}[name]


# Events of at least this many bytes keep every frame, C++ included (which
# thread freed a gradient bucket shows only there).
ALL_FRAMES_FROM = 1 << 30


def frames_of(entry, keep=4, python_only=True):
    out = []
    for f in entry.get("frames", []):
        name = f.get("filename", "")
        if python_only and (not name.endswith(".py") or "/torch/utils/" in name):
            continue
        out.append(f"{os.path.basename(name)}:{f.get('line')}:{f.get('name')}")
        if len(out) == keep:
            break
    return out


def write_trace(torch, path):
    snap = torch.cuda.memory._snapshot()
    events = []
    for trace in snap["device_traces"]:
        for e in trace:
            frames = (frames_of(e, keep=40, python_only=False) if e["size"] >= ALL_FRAMES_FROM
                      else frames_of(e))
            events.append([e["action"], e["addr"], e["size"], e["stream"], frames])
    with gzip.open(path, "wt") as f:
        json.dump({"events": events}, f)
    return len(events)


def versions(torch, local):
    return dict(gpu=torch.cuda.get_device_name(local), gpus_per_node=torch.cuda.device_count(),
                gpu_total_bytes=torch.cuda.get_device_properties(local).total_memory,
                torch=torch.__version__, cuda=torch.version.cuda,
                nccl=".".join(map(str, torch.cuda.nccl.version())),
                nccl_nvls=os.environ.get("NCCL_NVLS_ENABLE") != "0")


def without_nulls(value):
    """`value` with every null object member dropped, at any depth: the
    collector sends its whole workload, where null means "absent" (the
    rule of headroom_measure.read_case; this harness travels alone)."""
    if isinstance(value, dict):
        return {k: without_nulls(v) for k, v in value.items() if v is not None}
    if isinstance(value, list):
        return [without_nulls(v) for v in value]
    return value


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--case-json")
    ap.add_argument("--snapshot-dir")
    ap.add_argument("--nccl-only", action="store_true",
                    help="measure the process group's memory alone: init, one all-reduce")
    args = ap.parse_args()
    if not args.nccl_only and not args.case_json:
        ap.error("give --case-json (a measurement case) or --nccl-only")
    case = json.loads(args.case_json) if args.case_json else None
    rank = int(os.environ["RANK"])
    local = int(os.environ["LOCAL_RANK"])
    world = int(os.environ["WORLD_SIZE"])
    poller = Poller(local)

    import torch
    import torch.distributed as dist
    torch.cuda.set_device(local)
    torch.zeros(1, device="cuda")
    torch.cuda.synchronize()
    context_bytes = poller.used() - poller.base

    before = poller.used()
    reserved_before = torch.cuda.memory_reserved()
    dist.init_process_group("nccl", device_id=torch.device("cuda", local))
    probe = torch.ones(1024, device="cuda")
    dist.all_reduce(probe)
    torch.cuda.synchronize()
    del probe
    nccl_bytes = (poller.used() - before) - (torch.cuda.memory_reserved() - reserved_before)
    if args.nccl_only:
        poller.stop()
        measured = dict(rank=rank, world_size=world, context_bytes=context_bytes,
                        nccl_bytes=nccl_bytes)
        out = dict(measured=measured, runtime=versions(torch, local))
        print(RESULT_PREFIX + json.dumps(out), flush=True)
        dist.destroy_process_group()
        return

    w = without_nulls(case["workload"])
    par = w["parallel"]
    tr = w.get("training", {})
    strategy = par["strategy"]
    assert par.get("world_size", world) == world, "workload.parallel.world_size != WORLD_SIZE"
    from transformers import LlamaConfig, LlamaForCausalLM
    cfg = LlamaConfig(**LLAMA[case["model"]])
    cfg._attn_implementation = w.get("attention", "sdpa")
    ckpt = bool(tr.get("grad_checkpointing", False))
    precision = tr.get("precision", "fp32")
    autocast = {"amp_bf16": torch.bfloat16, "amp_fp16": torch.float16}.get(precision)

    if strategy == "fsdp2":
        from torch.distributed.fsdp import MixedPrecisionPolicy, fully_shard
        with torch.device("meta"):
            model = LlamaForCausalLM(cfg)
        if precision == "bf16":
            # bf16 sharded parameters (and AdamW state) instead of fp32.
            model = model.to(torch.bfloat16)
        if ckpt:
            model.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})
        mp = MixedPrecisionPolicy(param_dtype=torch_dtype(torch, par.get("param_dtype", "bf16")),
                                  reduce_dtype=torch_dtype(torch, par.get("reduce_dtype", "fp32")))
        reshard = bool(par.get("reshard_after_forward", True))
        for layer in model.model.layers:
            fully_shard(layer, mp_policy=mp, reshard_after_forward=reshard)
        # The root keeps fully_shard's default (None): not resharded after
        # forward, as `wrap: per_decoder_layer_then_root` measures it.
        fully_shard(model, mp_policy=mp)
        model.to_empty(device="cuda")
        with torch.no_grad():
            for p in model.parameters():
                p.normal_(0, 0.02)
        opt = torch.optim.AdamW(model.parameters(), lr=1e-5)
    elif strategy in ("ddp", "zero1"):
        from torch.nn.parallel import DistributedDataParallel as DDP
        with torch.device("cuda"):
            model = LlamaForCausalLM(cfg)
        if ckpt:
            model.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})
        model = DDP(model, device_ids=[local], bucket_cap_mb=float(par.get("bucket_cap_mb", 25)),
                    gradient_as_bucket_view=bool(par.get("gradient_as_bucket_view", False)))
        if strategy == "zero1":
            from torch.distributed.optim import ZeroRedundancyOptimizer
            opt = ZeroRedundancyOptimizer(model.parameters(), optimizer_class=torch.optim.AdamW, lr=1e-5)
        else:
            opt = torch.optim.AdamW(model.parameters(), lr=1e-5)
    else:
        raise SystemExit(f"workload.parallel.strategy {strategy!r}: allowed ddp, fsdp2, zero1")

    torch.cuda.synchronize()
    torch.cuda.empty_cache()
    torch.cuda.reset_peak_memory_stats()
    after_load = poller.used() - poller.base
    tracing = bool(args.snapshot_dir) and rank == 0
    if tracing:
        torch.cuda.memory._record_memory_history(max_entries=3_000_000)
    poller.reset()
    t0 = time.time()
    oom = False
    g = torch.Generator(device="cuda").manual_seed(1234 + rank)
    try:
        for _ in range(int(tr.get("steps", 2))):
            ids = torch.randint(0, 128000, (w["batch"], w["seq_len"]), device="cuda", generator=g)
            ctx = torch.autocast("cuda", dtype=autocast) if autocast else torch.autocast("cuda", enabled=False)
            with ctx:
                loss = model(input_ids=ids, labels=ids, use_cache=False).loss
            loss.backward()
            opt.step()
            opt.zero_grad(set_to_none=True)
        torch.cuda.synchronize()
    except torch.OutOfMemoryError:
        oom = True
    driver_peak = poller.stop() - poller.base
    measured = dict(rank=rank, world_size=world, alloc_peak=torch.cuda.max_memory_allocated(),
                    reserved_peak=torch.cuda.max_memory_reserved(), driver_peak=driver_peak,
                    driver_after_load=after_load, context_bytes=context_bytes, nccl_bytes=nccl_bytes,
                    seconds=round(time.time() - t0, 2), oom=oom,
                    num_alloc_retries=torch.cuda.memory_stats().get("num_alloc_retries", 0))
    if tracing:
        os.makedirs(args.snapshot_dir, exist_ok=True)
        n = write_trace(torch, os.path.join(args.snapshot_dir, case["case"] + ".trace.json.gz"))
        measured["trace_events"] = n
        torch.cuda.memory._record_memory_history(enabled=None)
    runtime = versions(torch, local)
    runtime["allocator"] = "default"
    import transformers
    runtime["transformers"] = transformers.__version__
    # Each case is a fresh torchrun job: nothing ran backward before it.
    runtime["process_ran_backward"] = False
    out = dict(case)
    out["runtime"] = {**case.get("runtime", {}), **runtime}
    out["measured"] = measured
    print(RESULT_PREFIX + json.dumps(out), flush=True)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
