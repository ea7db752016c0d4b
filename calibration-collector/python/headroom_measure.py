#!/usr/bin/env python3
"""headroom_measure: measure the peak GPU memory of one PyTorch workload.

The numbers it writes are those of the calibration format
(docs/spec.md, "The measurement case"): one JSON object per case with `case`,
`model`, `params`, `weight_bytes`, `workload`, `runtime` and `measured`:

  measured.alloc_peak      torch.cuda.max_memory_allocated() over the case
  measured.reserved_peak   torch.cuda.max_memory_reserved() over the case
  measured.driver_peak     max NVML device 'used' during the case (polled in a
                           background thread, plus one read at the case end)
                           minus the 'used' read before this process touched
                           CUDA (torch is imported only after that read)
  measured.resident_before torch.cuda.memory_allocated() at the case start
  measured.seconds         wall time of the case
  (extra: nvml_samples, nvml_hz: how often NVML was read during the case)

Every case starts with `gc.collect(); torch.cuda.empty_cache();
torch.cuda.reset_peak_memory_stats()`, so it starts from a compact allocator
that holds the weights (and, for training, the optimizer state that earlier
cases of the same process created).

Modes
-----
--case-json JSON | --case-file F --index I
    One case in this process: build the model (random weights, directly on
    the GPU in its dtype), run the case, print one line
    `HEADROOM_RESULT {...}` (the case plus params, weight_bytes, runtime,
    measured). Exit 0; on CUDA out-of-memory the line has
    measured.oom = true and the exit code is 3; 2 = unsupported workload,
    1 = other error. driver_peak is given only with --nvml (the Rust
    collector measures the driver-level peak from outside otherwise).

--batch CASES.jsonl --out OUT.jsonl [--nvml]
    The calibration methodology: cases are grouped by what the model build
    needs (model id, parameter dtype, attention, ESMFold stem dtype, LoRA,
    gradient checkpointing, optimizer), keeping the file's order; each
    group runs in its own fresh subprocess which builds the model once and
    runs its cases one after another (optimizer state persists across the
    training cases of a group, as in the public data). One line per case is
    appended to OUT as soon as it is measured. With --one-process every
    build runs in this one process instead, one after another (only
    consecutive cases share a build: a model the file comes back to is
    built again), the model,
    its optimizer and outputs dropped and the cache emptied between builds
    (a notebook that loads one model after another; the public set was
    measured this way).

--snapshot (with either mode)
    Record torch.cuda.memory._record_memory_history over each case, keep the
    pickle under --snapshot-dir, and append a markdown summary to
    --snapshot-md: the peak-allocated moment by replay, the blocks live there
    beyond what was resident (grouped by innermost model/optimizer/functional
    frame), the largest allocations, and the alloc/free sequence (> 1 MiB) of
    the first block's forward and the first block processed by backward.
    Markers (allocations of k*512 bytes from `_headroom_marker`) delimit
    steps and blocks in the trace; they perturb the small pool only.

--probe-overheads [--out overheads.json]
    Fixed runtime costs: chains of steps, each chain in a fresh process;
    after every step NVML 'used' minus the pre-CUDA 'used', torch reserved
    and allocated (after empty_cache, so only persistent blocks remain).
    The increment of a step over the previous one in its chain, minus the
    increment of torch's reserved bytes, is the cost outside the allocator.

Workload format: see docs/spec.md. Accepted extras:
training.lora {rank|r, alpha|lora_alpha, target_modules, dropout},
training.optimizer adamw|sgd|sgd_plain|adafactor (the core's keys: sgd is SGD
with training.momentum, default 0.9; sgd_plain is momentum 0),
training.precision amp_bf16|bf16|fp32 and the extras amp_fp16|fp16.

Needs: Python stdlib, torch, transformers, torchvision, peft, nvidia-ml-py.
"""

import argparse
import gc
import json
import os
import subprocess
import sys
import threading
import time
import traceback

RESULT_PREFIX = "HEADROOM_RESULT "
EXIT_OK, EXIT_ERROR, EXIT_UNSUPPORTED, EXIT_OOM = 0, 1, 2, 3
MiB = 1 << 20

# ----------------------------------------------------------------------------
# Presets (docs/spec.md, "Presets")
# ----------------------------------------------------------------------------

# ESM-2's vocabulary: <pad> = 1, <mask> = 32 (EsmConfig has no default; the
# embeddings need both; they change no tensor shape).
ESM_TOKENS = dict(pad_token_id=1, mask_token_id=32)

HF_PRESETS = {
    "llama-3.1-8b": ("LlamaConfig", "LlamaForCausalLM", dict(
        vocab_size=128256, hidden_size=4096, intermediate_size=14336, num_hidden_layers=32,
        num_attention_heads=32, num_key_value_heads=8, tie_word_embeddings=False), 8030261248),
    "llama-3.2-1b": ("LlamaConfig", "LlamaForCausalLM", dict(
        vocab_size=128256, hidden_size=2048, intermediate_size=8192, num_hidden_layers=16,
        num_attention_heads=32, num_key_value_heads=8, tie_word_embeddings=True), 1235814400),
    "qwen2.5-7b": ("Qwen2Config", "Qwen2ForCausalLM", dict(
        vocab_size=152064, hidden_size=3584, intermediate_size=18944, num_hidden_layers=28,
        num_attention_heads=28, num_key_value_heads=4, tie_word_embeddings=False), 7615616512),
    "mistral-7b-v0.3": ("MistralConfig", "MistralForCausalLM", dict(
        vocab_size=32768, hidden_size=4096, intermediate_size=14336, num_hidden_layers=32,
        num_attention_heads=32, num_key_value_heads=8, sliding_window=None), 7248023552),
    "mistral-nemo-12b": ("MistralConfig", "MistralForCausalLM", dict(
        vocab_size=131072, hidden_size=5120, intermediate_size=14336, num_hidden_layers=40,
        num_attention_heads=32, num_key_value_heads=8, head_dim=128, sliding_window=None,
        tie_word_embeddings=False), 12247782400),
    "qwen2.5-14b": ("Qwen2Config", "Qwen2ForCausalLM", dict(
        vocab_size=152064, hidden_size=5120, intermediate_size=13824, num_hidden_layers=48,
        num_attention_heads=40, num_key_value_heads=8, tie_word_embeddings=False), 14770033664),
    "mixtral-8x7b": ("MixtralConfig", "MixtralForCausalLM", dict(
        vocab_size=32000, hidden_size=4096, intermediate_size=14336, num_hidden_layers=32,
        num_attention_heads=32, num_key_value_heads=8, num_local_experts=8,
        num_experts_per_tok=2, sliding_window=None), 46702792704),
    "gpt2": ("GPT2Config", "GPT2LMHeadModel", dict(), 124439808),
    # Never measured before 2026-12-03: each is the published config's shapes
    # (Phi-3-mini-4k-instruct, Phi-3-medium-4k-instruct, gemma-2-9b,
    # Qwen1.5-MoE-A2.7B), random weights.
    "phi-3-mini-4k": ("Phi3Config", "Phi3ForCausalLM", dict(
        vocab_size=32064, hidden_size=3072, intermediate_size=8192, num_hidden_layers=32,
        num_attention_heads=32, num_key_value_heads=32, sliding_window=2047,
        tie_word_embeddings=False, pad_token_id=32000), 3821079552),
    "phi-3-medium-4k": ("Phi3Config", "Phi3ForCausalLM", dict(
        vocab_size=32064, hidden_size=5120, intermediate_size=17920, num_hidden_layers=40,
        num_attention_heads=40, num_key_value_heads=10, sliding_window=2047,
        tie_word_embeddings=False, pad_token_id=32000), 13960238080),
    "gemma-2-9b": ("Gemma2Config", "Gemma2ForCausalLM", dict(
        vocab_size=256000, hidden_size=3584, intermediate_size=14336, num_hidden_layers=42,
        num_attention_heads=16, num_key_value_heads=8, head_dim=256, query_pre_attn_scalar=256,
        sliding_window=4096, tie_word_embeddings=True), 9241705984),
    "gemma-2-27b": ("Gemma2Config", "Gemma2ForCausalLM", dict(
        vocab_size=256000, hidden_size=4608, intermediate_size=36864, num_hidden_layers=46,
        num_attention_heads=32, num_key_value_heads=16, head_dim=128, query_pre_attn_scalar=144,
        sliding_window=4096, tie_word_embeddings=True), 27227128320),
    "qwen1.5-moe-a2.7b": ("Qwen2MoeConfig", "Qwen2MoeForCausalLM", dict(
        vocab_size=151936, hidden_size=2048, intermediate_size=5632, num_hidden_layers=24,
        num_attention_heads=16, num_key_value_heads=16, num_experts=60, num_experts_per_tok=4,
        moe_intermediate_size=1408, shared_expert_intermediate_size=5632,
        tie_word_embeddings=False), 14315784192),
    # Qwen3 dense (published configs' shapes; head_dim 128, q_norm/k_norm),
    # first measured 2026-12-03; random weights.
    "qwen3-0.6b": ("Qwen3Config", "Qwen3ForCausalLM", dict(
        vocab_size=151936, hidden_size=1024, intermediate_size=3072, num_hidden_layers=28,
        num_attention_heads=16, num_key_value_heads=8, head_dim=128,
        tie_word_embeddings=True), 596049920),
    "qwen3-1.7b": ("Qwen3Config", "Qwen3ForCausalLM", dict(
        vocab_size=151936, hidden_size=2048, intermediate_size=6144, num_hidden_layers=28,
        num_attention_heads=16, num_key_value_heads=8, head_dim=128,
        tie_word_embeddings=True), 1720574976),
    "qwen3-4b": ("Qwen3Config", "Qwen3ForCausalLM", dict(
        vocab_size=151936, hidden_size=2560, intermediate_size=9728, num_hidden_layers=36,
        num_attention_heads=32, num_key_value_heads=8, head_dim=128,
        tie_word_embeddings=True), 4022468096),
    "qwen3-8b": ("Qwen3Config", "Qwen3ForCausalLM", dict(
        vocab_size=151936, hidden_size=4096, intermediate_size=12288, num_hidden_layers=36,
        num_attention_heads=32, num_key_value_heads=8, head_dim=128,
        tie_word_embeddings=False), 8190735360),
    "qwen3-30b-a3b": ("Qwen3MoeConfig", "Qwen3MoeForCausalLM", dict(
        vocab_size=151936, hidden_size=2048, intermediate_size=6144, num_hidden_layers=48,
        num_attention_heads=32, num_key_value_heads=4, head_dim=128, num_experts=128,
        num_experts_per_tok=8, moe_intermediate_size=768, norm_topk_prob=True,
        tie_word_embeddings=False), 30532122624),
    "bert-base-uncased": ("BertConfig", "BertForMaskedLM", dict(), 109514298),
    "bert-large-uncased": ("BertConfig", "BertForMaskedLM", dict(
        hidden_size=1024, num_hidden_layers=24, num_attention_heads=16,
        intermediate_size=4096), 335174458),
    "esm2-t33-650m": ("EsmConfig", "EsmModel", dict(
        vocab_size=33, hidden_size=1280, num_hidden_layers=33, num_attention_heads=20,
        intermediate_size=5120, position_embedding_type="rotary", token_dropout=True,
        **ESM_TOKENS), 649400981),
    # Measured from 2026-12-04: the published ESM-2 configs' shapes, random
    # weights (parameter counts as the core's presets count them, with buffers).
    "esm2-t36-3b": ("EsmConfig", "EsmModel", dict(
        vocab_size=33, hidden_size=2560, num_hidden_layers=36, num_attention_heads=40,
        intermediate_size=10240, position_embedding_type="rotary", token_dropout=True,
        **ESM_TOKENS), 2870193280),
    "esm2-t30-150m": ("EsmConfig", "EsmModel", dict(
        vocab_size=33, hidden_size=640, num_hidden_layers=30, num_attention_heads=20,
        intermediate_size=2560, position_embedding_type="rotary", token_dropout=True,
        **ESM_TOKENS), 147728768),
    "esm2-t12-35m": ("EsmConfig", "EsmModel", dict(
        vocab_size=33, hidden_size=480, num_hidden_layers=12, num_attention_heads=20,
        intermediate_size=1920, position_embedding_type="rotary", token_dropout=True,
        **ESM_TOKENS), 33273216),
    "esmfold-v1": ("EsmConfig", "EsmForProteinFolding", dict(
        vocab_size=33, hidden_size=2560, num_hidden_layers=36, num_attention_heads=40,
        intermediate_size=10240, max_position_embeddings=1026, position_embedding_type="rotary",
        emb_layer_norm_before=False, token_dropout=True, is_folding_model=True, **ESM_TOKENS),
        3525038915),
}

VISION_PRESETS = {  # id -> (torchvision.models function, expected params)
    "resnet-50": ("resnet50", 25557032),
    "resnet-18": ("resnet18", 11689512),
    "resnet-101": ("resnet101", 44549160),
    "mobilenetv2": ("mobilenet_v2", 3504872),
    "vit-b-16": ("vit_b_16", 86567656),
    "vit-l-16": ("vit_l_16", 304326632),
    "resnet-34": ("resnet34", 21797672),
    "resnet-152": ("resnet152", 60192808),
}

# The model-class prefix of each encoder with classification heads.
HEAD_CLASSES = {"bert-base-uncased": "Bert", "bert-large-uncased": "Bert", "esm2-t33-650m": "Esm",
                "esm2-t36-3b": "Esm", "esm2-t30-150m": "Esm", "esm2-t12-35m": "Esm"}

# Token ids drawn for random inputs: (low, high) per model family.
TOKEN_RANGE = {"esm2-t33-650m": (4, 24), "esm2-t36-3b": (4, 24), "esm2-t30-150m": (4, 24),
               "esm2-t12-35m": (4, 24), "bert-base-uncased": (1000, 30000),
               "bert-large-uncased": (1000, 30000)}

# Where the repeated blocks live, tried in order (for snapshot markers).
BLOCK_PATHS = ["trunk.blocks", "model.layers", "transformer.h", "bert.encoder.layer",
               "encoder.layer", "encoder.layers", "features"]


class Unsupported(Exception):
    """The workload cannot run on this model (exit code 2)."""


# ----------------------------------------------------------------------------
# NVML (imported without torch, so the baseline is read before CUDA exists)
# ----------------------------------------------------------------------------

class Nvml:
    """Device-wide 'used' bytes of the visible GPU, via pynvml."""

    def __init__(self):
        import pynvml
        self.lib = pynvml
        pynvml.nvmlInit()
        self.handle = pynvml.nvmlDeviceGetHandleByIndex(self._index())

    @staticmethod
    def _index():
        first = os.environ.get("CUDA_VISIBLE_DEVICES", "0").split(",")[0].strip()
        return int(first) if first.isdigit() else 0

    def used(self):
        return int(self.lib.nvmlDeviceGetMemoryInfo(self.handle).used)

    def total(self):
        return int(self.lib.nvmlDeviceGetMemoryInfo(self.handle).total)

    def driver(self):
        v = self.lib.nvmlSystemGetDriverVersion()
        return v.decode() if isinstance(v, bytes) else v


class Poller:
    """Background thread reading NVML 'used' as fast as it can; keeps the max
    since the last reset()."""

    def __init__(self, nvml):
        self.nvml = nvml
        self.max_used = 0
        self.samples = 0
        self.since = time.perf_counter()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, daemon=True)
        sys.setswitchinterval(0.0002)  # let the poller get the GIL often
        self._thread.start()

    def _loop(self):
        while not self._stop.is_set():
            u = self.nvml.used()
            if u > self.max_used:
                self.max_used = u
            self.samples += 1

    def reset(self):
        self.max_used = self.nvml.used()
        self.samples = 0
        self.since = time.perf_counter()

    def peak(self):
        """Max since reset, including one read now; (max, samples, Hz)."""
        self.max_used = max(self.max_used, self.nvml.used())
        dt = max(time.perf_counter() - self.since, 1e-9)
        return self.max_used, self.samples, self.samples / dt

    def stop(self):
        self._stop.set()
        self._thread.join(timeout=1)


# ----------------------------------------------------------------------------
# Case parsing
# ----------------------------------------------------------------------------

DTYPE_NAMES = ("fp32", "fp16", "bf16")


# What a workload field means when a case leaves it out (or sends null):
# written here once, read through `read_case`.
WORKLOAD_DEFAULTS = {"head": "lm", "num_labels": 2}

# The key under which a read case keeps the case as it was sent: result
# lines echo the sender's workload, nulls included.
AS_SENT = "_as_sent"


def without_nulls(value):
    """`value` with every null object member dropped, at any depth: the
    collector sends its whole workload, where null means "absent"."""
    if isinstance(value, dict):
        return {k: without_nulls(v) for k, v in value.items() if v is not None}
    if isinstance(value, list):
        return [without_nulls(v) for v in value]
    return value


def read_case(sent):
    """The one way the harness reads a case: nulls are absent, the workload's
    defaults (`WORKLOAD_DEFAULTS`) filled in, the case as sent kept for the
    result line. Reading a read case again gives the same case."""
    if not isinstance(sent, dict):
        raise Unsupported(f"a case is a JSON object, not {type(sent).__name__}")
    sent = sent.get(AS_SENT, sent)
    case = without_nulls(sent)
    workload = case.get("workload")
    if not isinstance(workload, dict):
        raise Unsupported("the case has no `workload` object")
    for key, value in WORKLOAD_DEFAULTS.items():
        workload.setdefault(key, value)
    case[AS_SENT] = sent
    return case


def load_cases(path):
    cases = []
    with open(path) as f:
        for line in f:
            line = line.strip()
            if line and not line.startswith("#"):
                cases.append(json.loads(line))
    return [read_case(c) for c in cases if c.get("case") != "runtime_overheads"]


def training_of(case):
    return case["workload"].get("training") or {}


def is_training(case):
    return case["workload"].get("mode") == "training"


def lora_of(case):
    w = case["workload"]
    lora = training_of(case).get("lora") or w.get("lora")
    if not lora:
        return None
    return {
        "r": int(lora.get("rank", lora.get("r", 8))),
        "alpha": float(lora.get("alpha", lora.get("lora_alpha", 16))),
        "target_modules": list(lora.get("target_modules", lora.get("targets", ["q_proj", "v_proj"]))),
        "dropout": float(lora.get("dropout", lora.get("lora_dropout", 0.0))),
    }


def param_dtype(case):
    """Dtype the parameters are built in."""
    w = case["workload"]
    if is_training(case):
        if lora_of(case):
            return w.get("dtype", "bf16")
        precision = training_of(case).get("precision", "fp32")
        return {"amp_bf16": "fp32", "amp_fp16": "fp32"}.get(precision, precision)
    return w.get("dtype", "fp32")


def autocast_dtype(case):
    precision = training_of(case).get("precision", "") if is_training(case) else ""
    return {"amp_bf16": "bf16", "amp_fp16": "fp16"}.get(precision)


def build_spec(case):
    """What the model build (and the optimizer shared by a group) depends on."""
    w = case["workload"]
    tr = training_of(case)
    spec = {
        "model": case["model"],
        "dtype": param_dtype(case),
        "attention": w.get("attention"),
        "stem_dtype": (w.get("esmfold") or {}).get("stem_dtype"),
        "lora": lora_of(case),
        "grad_checkpointing": bool(tr.get("grad_checkpointing", False)),
        "optimizer": None,
        "head": w["head"],
        "num_labels": int(w["num_labels"]),
    }
    if is_training(case):
        spec["optimizer"] = {"name": tr.get("optimizer", "adamw").lower(),
                             "momentum": tr.get("momentum")}
    if spec["dtype"] not in DTYPE_NAMES:
        raise Unsupported(f"dtype/precision {spec['dtype']!r}")
    if case["model"] not in HF_PRESETS and case["model"] not in VISION_PRESETS:
        raise Unsupported(f"unknown model id {case['model']!r}")
    return spec


def group_cases(cases, consecutive=False):
    """Cases with the same build spec, in first-seen order; with
    `consecutive`, only runs of consecutive cases share a build (a notebook
    that comes back to a model builds it again)."""
    groups, index = [], {}
    for case in cases:
        try:
            key = json.dumps(build_spec(case), sort_keys=True)
        except Unsupported:
            key = json.dumps({"unsupported": case.get("case")})
        if consecutive and groups and index.get(key) != len(groups) - 1:
            index.pop(key, None)
        if key not in index:
            index[key] = len(groups)
            groups.append([])
        groups[index[key]].append(case)
    return groups


# ----------------------------------------------------------------------------
# Model building (torch is imported lazily)
# ----------------------------------------------------------------------------

def torch_dtype(name):
    import torch
    return {"fp32": torch.float32, "fp16": torch.float16, "bf16": torch.bfloat16}[name]


class default_dtype:
    """Context manager: torch.set_default_dtype for the duration."""

    def __init__(self, dtype):
        self.dtype = dtype

    def __enter__(self):
        import torch
        self.old = torch.get_default_dtype()
        torch.set_default_dtype(self.dtype)

    def __exit__(self, *exc):
        import torch
        torch.set_default_dtype(self.old)


def tiny_overrides(model_id):
    """--tiny: shrink HF configs for CPU tests of the harness itself."""
    if model_id == "esmfold-v1":
        from transformers.models.esm.configuration_esm import EsmFoldConfig
        fold = EsmFoldConfig(trunk=dict(num_blocks=2, sequence_state_dim=64, pairwise_state_dim=32,
                                        sequence_head_width=32, pairwise_head_width=32,
                                        structure_module=dict(num_blocks=2, sequence_dim=32,
                                                              pairwise_dim=32, ipa_dim=8)))
        return dict(hidden_size=64, num_hidden_layers=2, num_attention_heads=4,
                    intermediate_size=128, esmfold_config=fold)
    if model_id in ("gpt2",):
        return dict(n_embd=64, n_layer=2, n_head=4)
    if model_id == "mixtral-8x7b":
        return dict(hidden_size=64, intermediate_size=128, num_hidden_layers=2,
                    num_attention_heads=4, num_key_value_heads=2, num_local_experts=4)
    return dict(hidden_size=64, intermediate_size=128, num_hidden_layers=2,
                num_attention_heads=4, num_key_value_heads=2)


def hf_config(spec, tiny=False):
    """The Hugging Face config of a build spec and the model class to build
    from it (with its extra arguments); needs transformers, not torch."""
    import transformers
    cfg_name, cls_name, kwargs, _ = HF_PRESETS[spec["model"]]
    kwargs = dict(kwargs)
    if tiny:
        kwargs.update(tiny_overrides(spec["model"]))
    if spec["attention"]:
        kwargs["attn_implementation"] = spec["attention"]
    if spec["model"] == "esmfold-v1" and spec["stem_dtype"] == "fp32":
        from transformers.models.esm.configuration_esm import EsmFoldConfig
        fold = kwargs.get("esmfold_config") or EsmFoldConfig()
        fold.fp16_esm = False
        kwargs["esmfold_config"] = fold
    if spec["head"] != "lm":
        # `workload.head`: AutoModelForSequenceClassification /
        # AutoModelForTokenClassification of the same model; a decoder's
        # sequence classifier needs `pad_token_id` for a batch (0: random
        # ids never draw it).
        suffix = {"sequence_classification": "ForSequenceClassification",
                  "token_classification": "ForTokenClassification"}[spec["head"]]
        if spec["model"] in HEAD_CLASSES:
            cls_name = HEAD_CLASSES[spec["model"]] + suffix
        elif cls_name.endswith(("ForCausalLM", "LMHeadModel")) and spec["head"] == "sequence_classification":
            cls_name = cls_name.replace("ForCausalLM", suffix).replace("LMHeadModel", suffix)
            if kwargs.get("pad_token_id") is None:
                kwargs["pad_token_id"] = 0
        else:
            raise Unsupported(f"{spec['model']} has no {spec['head']} head here")
        kwargs["num_labels"] = spec["num_labels"]
    config = getattr(transformers, cfg_name)(**kwargs)
    extra = {"add_pooling_layer": False} if cls_name == "EsmModel" else {}
    return config, cls_name, extra


def build_hf(spec, device, tiny=False):
    import torch
    import transformers
    config, cls_name, extra = hf_config(spec, tiny)
    cls = getattr(transformers, cls_name)
    with torch.device(device), default_dtype(torch_dtype(spec["dtype"])):
        # ESMFold: the stem is built fp32 then .half()'d by the model's own
        # __init__ when esmfold_config.fp16_esm (the default), as HF does.
        model = cls(config, **extra)
    if spec["grad_checkpointing"]:
        model.gradient_checkpointing_enable()
    if spec["lora"]:
        model = apply_lora(model, spec["lora"])
    return model


def apply_lora(model, lora):
    from peft import LoraConfig, get_peft_model
    model.requires_grad_(False)
    cfg = LoraConfig(r=lora["r"], lora_alpha=lora["alpha"], target_modules=lora["target_modules"],
                     lora_dropout=lora["dropout"])
    return get_peft_model(model, cfg)  # peft default: adapters upcast to fp32


def build_vision(spec, device, image_size=None):
    import torch
    import torchvision
    fn_name, _ = VISION_PRESETS[spec["model"]]
    if spec["grad_checkpointing"]:
        raise Unsupported("gradient checkpointing is not supported for torchvision models")
    if spec["lora"]:
        raise Unsupported("LoRA is not supported for torchvision models")
    kwargs = {}
    if fn_name.startswith("vit") and image_size and image_size != 224:
        kwargs["image_size"] = image_size
    with torch.device(device), default_dtype(torch_dtype(spec["dtype"])):
        return getattr(torchvision.models, fn_name)(weights=None, **kwargs)


def count_weights(model):
    """(params, weight_bytes): parameters as instantiated, and parameter +
    buffer bytes (shared tensors counted once)."""
    seen, params, nbytes = set(), 0, 0
    for p in model.parameters():
        if id(p) not in seen:
            seen.add(id(p))
            params += p.numel()
            nbytes += p.numel() * p.element_size()
    for b in model.buffers():
        if id(b) not in seen:
            seen.add(id(b))
            nbytes += b.numel() * b.element_size()
    return params, nbytes


def expected_params(model_id):
    if model_id in HF_PRESETS:
        return HF_PRESETS[model_id][3]
    return VISION_PRESETS[model_id][1]


# ----------------------------------------------------------------------------
# Runtime description
# ----------------------------------------------------------------------------

def apply_allocator_limit(case, device):
    """`allocator_limit_bytes` (`run --capacity`): torch's allocator may
    reserve at most that many bytes, and frees its cache and retries at the
    limit as at the card's end (a smaller card, emulated). Before the first
    allocation."""
    limit = case.get("allocator_limit_bytes")
    if limit is None or device == "cpu":
        return
    import torch
    # An index, not the bare "cuda" the harness's --device defaults to:
    # set_per_process_memory_fraction refuses a device without one.
    index = torch.device(device).index
    if index is None:
        index = torch.cuda.current_device()
    total = torch.cuda.get_device_properties(index).total_memory
    if not 0 < int(limit) <= total:
        raise Unsupported(f"allocator_limit_bytes {limit} is not within the card's {total} bytes")
    torch.cuda.set_per_process_memory_fraction(int(limit) / total, index)


def runtime_info(nvml, device):
    import torch
    import transformers
    info = {"gpu": None, "gpu_total_bytes": None, "driver": None, "torch": torch.__version__,
            "cuda": torch.version.cuda, "transformers": transformers.__version__,
            "allocator": os.environ.get("PYTORCH_CUDA_ALLOC_CONF")
            or os.environ.get("PYTORCH_ALLOC_CONF") or "default"}
    if device == "cuda":
        info["gpu"] = torch.cuda.get_device_name(0)
        info["gpu_total_bytes"] = torch.cuda.get_device_properties(0).total_memory
    if nvml:
        info["gpu_total_bytes"] = nvml.total()
        info["driver"] = nvml.driver()
    return info


# ----------------------------------------------------------------------------
# Memory statistics (CPU fallbacks make --tiny --device cpu testable)
# ----------------------------------------------------------------------------

class Mem:
    def __init__(self, device):
        import torch
        self.torch = torch
        self.cuda = device == "cuda"

    def compact(self):
        gc.collect()
        if self.cuda:
            self.torch.cuda.synchronize()
            self.torch.cuda.empty_cache()
            self.torch.cuda.reset_peak_memory_stats()

    def sync(self):
        if self.cuda:
            self.torch.cuda.synchronize()

    def allocated(self):
        return self.torch.cuda.memory_allocated() if self.cuda else 0

    def reserved(self):
        return self.torch.cuda.memory_reserved() if self.cuda else 0

    def peaks(self):
        if not self.cuda:
            return 0, 0
        return self.torch.cuda.max_memory_allocated(), self.torch.cuda.max_memory_reserved()


# ----------------------------------------------------------------------------
# Snapshot markers
# ----------------------------------------------------------------------------

class Markers:
    """Tiny allocations of k*512 bytes from _headroom_marker identify labels in
    the allocator trace (the frame name finds them, the size says which)."""

    def __init__(self, device):
        self.device = device
        self.labels = {}
        self.enabled = False

    def label_of_size(self, size):
        for label, k in self.labels.items():
            if k * 512 == size:
                return label
        return None

    def __call__(self, label):
        if self.enabled:
            k = self.labels.setdefault(label, len(self.labels) + 1)
            _headroom_marker(k, self.device)


def _headroom_marker(k, device):
    import torch
    t = torch.empty(k * 512, dtype=torch.uint8, device=device)
    del t


def find_blocks(model):
    """The list of repeated blocks (decoder layers, trunk blocks, ...)."""
    import torch.nn as nn
    base = model.get_base_model() if hasattr(model, "get_base_model") else model
    if all(hasattr(base, f"layer{i}") for i in range(1, 5)):  # torchvision resnet
        return [b for i in range(1, 5) for b in getattr(base, f"layer{i}")]
    for path in BLOCK_PATHS:
        obj = base
        for part in path.split("."):
            obj = getattr(obj, part, None)
            if obj is None:
                break
        if isinstance(obj, (nn.ModuleList, nn.Sequential)) and len(obj) >= 2:
            return list(obj)
    return []


def first_tensor(x):
    import torch
    if isinstance(x, torch.Tensor):
        return x
    if isinstance(x, (tuple, list)):
        for item in x:
            t = first_tensor(item)
            if t is not None:
                return t
    if hasattr(x, "values") and callable(x.values):
        for item in x.values():
            t = first_tensor(item)
            if t is not None:
                return t
    return None


def install_block_markers(model, mark):
    """Markers around the first block's forward and the backward of the last
    block (the first block that backward processes). Returns hook handles."""
    blocks = find_blocks(model)
    if not blocks:
        return []
    first, last = blocks[0], blocks[-1]

    def grad_marker(label):
        def hook(grad):
            mark(label)
        return hook

    def last_pre(module, args, kwargs):
        t = args[0] if args else kwargs.get("hidden_states", first_tensor(kwargs))
        t = first_tensor(t)
        if t is not None and t.requires_grad:
            t.register_hook(grad_marker("last block backward end"))

    def last_post(module, args, kwargs, output):
        t = first_tensor(output)
        if t is not None and t.requires_grad:
            t.register_hook(grad_marker("last block backward start"))

    return [
        first.register_forward_pre_hook(lambda m, a, k: mark("first block forward start"),
                                        with_kwargs=True),
        first.register_forward_hook(lambda m, a, k, o: mark("first block forward end"),
                                    with_kwargs=True),
        last.register_forward_pre_hook(last_pre, with_kwargs=True),
        last.register_forward_hook(last_post, with_kwargs=True),
    ]


# ----------------------------------------------------------------------------
# Workloads
# ----------------------------------------------------------------------------

def random_ids(model, case, batch, seq_len, device):
    import torch
    cfg = getattr(model, "config", None)
    lo, hi = TOKEN_RANGE.get(case["model"], (3, getattr(cfg, "vocab_size", 1000)))
    hi = min(hi, getattr(cfg, "vocab_size", hi))
    lo = min(lo, hi - 1)
    ids = torch.randint(lo, hi, (batch, seq_len), device=device)
    specials = {getattr(cfg, k, None) for k in ("pad_token_id", "bos_token_id", "eos_token_id")}
    for s in specials:
        for v in (s if isinstance(s, (list, tuple)) else [s]):
            if isinstance(v, int) and lo <= v < hi:
                ids[ids == v] = lo + 1 if v != lo + 1 else lo + 2
    return ids


def head_labels(case, ids):
    """Labels for `workload.head`: the ids themselves for a language-model
    head; one class per sequence (a float target for one label, which
    transformers treats as regression) or per token for a classifier."""
    import torch
    w = case["workload"]
    head, n = w["head"], int(w["num_labels"])
    if head == "lm":
        return None
    if head == "sequence_classification":
        if n == 1:
            return torch.randn(ids.shape[0], device=ids.device)
        return torch.randint(0, n, (ids.shape[0],), device=ids.device)
    return torch.randint(0, n, ids.shape, device=ids.device)


def padding_mask(case, ids):
    """`workload.padded`: an attention mask whose first sequence starts with
    padding (a quarter of it, at most 256 tokens), as a batch of prompts of
    different lengths is left-padded; None for an unpadded batch."""
    if not case["workload"].get("padded"):
        return None
    import torch
    mask = torch.ones_like(ids)
    mask[0, :max(1, min(256, ids.shape[1] // 4))] = 0
    return mask


class Runner:
    """Holds the built model (and the optimizer of training cases) for one
    process, and runs cases on it."""

    def __init__(self, spec, device, tiny=False, first_case=None):
        import torch
        self.torch = torch
        self.spec = spec
        self.device = device
        self.tiny = tiny
        self.mark = Markers(device)
        self.optimizer = None
        self.scaler = None
        # What the process did before the case now running (result lines
        # say it: `workload.training.optimizer_state_resident`,
        # `runtime.process_ran_backward`, `runtime.process_builds_before`:
        # the models built, run and dropped in this process before this one).
        self.ran_backward = False
        self.builds_before = 0
        self.before_case = {"optimizer": False, "backward": False}
        self.is_vision = spec["model"] in VISION_PRESETS
        if self.is_vision:
            image_size = (first_case or {}).get("workload", {}).get("image_size")
            self.model = build_vision(spec, device, image_size)
        else:
            self.model = build_hf(spec, device, tiny)
        self.params, self.weight_bytes = count_weights(self.model)
        cfg = getattr(self.model, "config", None)
        self.attn_impl = getattr(cfg, "_attn_implementation", None)

    # -- dispatch --
    def run(self, case):
        w = case["workload"]
        if self.spec["model"] == "esmfold-v1":
            if is_training(case):
                raise Unsupported("ESMFold training")
            return self.esmfold(w)
        if is_training(case):
            return self.train(case)
        if self.is_vision:
            return self.vision_inference(w)
        kind = (w.get("inference") or {}).get("kind", "forward")
        if kind == "generate":
            return self.generate(case)
        return self.forward(case)

    # -- inference --
    def generate(self, case):
        torch = self.torch
        w = case["workload"]
        if not hasattr(self.model, "generate"):
            raise Unsupported(f"{case['model']} cannot generate")
        inf = w.get("inference") or {}
        n = int(inf.get("new_tokens", 16))
        self.model.eval()
        gen_cfg = self.model.generation_config
        if gen_cfg.pad_token_id is None:
            gen_cfg.pad_token_id = gen_cfg.eos_token_id if gen_cfg.eos_token_id is not None else 0
        ids = random_ids(self.model, case, w["batch"], w["seq_len"], self.device)
        mask = padding_mask(case, ids)
        extra = {} if mask is None else {"attention_mask": mask}
        # Beam search and sampling as `generate` takes them; greedy otherwise.
        extra["num_beams"] = int(inf.get("num_beams", 1))
        extra["do_sample"] = bool(inf.get("do_sample", False))
        for key in ("temperature", "top_k", "top_p"):
            if key in inf:
                extra[key] = inf[key]
        with torch.no_grad():
            out = self.model.generate(ids, max_new_tokens=n, min_new_tokens=n,
                                      use_cache=bool(inf.get("kv_cache", True)), **extra)
        assert out.shape[1] == w["seq_len"] + n, out.shape

    def forward(self, case):
        torch = self.torch
        w = case["workload"]
        self.model.eval()
        ids = random_ids(self.model, case, w["batch"], w["seq_len"], self.device)
        kwargs = {}
        import inspect
        params = inspect.signature(self.model.forward).parameters
        if "use_cache" in params:
            kwargs["use_cache"] = False
        logits = (w.get("inference") or {}).get("logits", "all")
        if logits == "last" and w.get("head", "lm") == "lm":
            # The core's `logits = "last"`: the head over the last position only.
            if "logits_to_keep" not in params:
                raise Unsupported(f"{case['model']} cannot keep only the last position's logits")
            kwargs["logits_to_keep"] = 1
        mask = padding_mask(case, ids)
        if mask is not None:
            kwargs["attention_mask"] = mask
        with torch.no_grad():
            out = self.model(input_ids=ids, **kwargs)
        del out

    def esmfold(self, w):
        torch = self.torch
        fold = w.get("esmfold") or {}
        self.model.eval()
        self.model.trunk.set_chunk_size(fold.get("chunk_size"))
        L = w["seq_len"]
        g = torch.Generator().manual_seed(L)
        aatype = torch.randint(0, 20, (1, L), generator=g).to(self.device)  # one chain, 20 aa
        mask = torch.ones_like(aatype)
        position_ids = torch.arange(L, device=self.device).unsqueeze(0)
        with torch.no_grad():  # as model.infer(), with num_recycles passed through
            out = self.model(aatype, mask, position_ids=position_ids,
                             num_recycles=fold.get("num_recycles"))
        del out

    def vision_inference(self, w):
        torch = self.torch
        self.model.eval()
        x = torch.randn(w["batch"], 3, w["image_size"], w["image_size"], device=self.device,
                        dtype=torch_dtype(self.spec["dtype"]))
        with torch.no_grad():
            out = self.model(x)
        del out

    # -- training --
    def make_optimizer(self):
        torch = self.torch
        opt = self.spec["optimizer"] or {"name": "adamw"}
        params = [p for p in self.model.parameters() if p.requires_grad]
        name = opt["name"]
        if name == "adamw":
            return torch.optim.AdamW(params, lr=1e-5)
        if name in ("sgd", "sgd_momentum"):
            m = opt.get("momentum")
            return torch.optim.SGD(params, lr=1e-4, momentum=0.9 if m is None else float(m))
        if name == "sgd_plain":
            return torch.optim.SGD(params, lr=1e-4, momentum=0.0)
        if name == "adafactor":
            if not hasattr(torch.optim, "Adafactor"):
                raise Unsupported("torch.optim.Adafactor is missing in this torch")
            return torch.optim.Adafactor(params, lr=1e-3)
        raise Unsupported(f"optimizer {name!r}")

    def train(self, case):
        torch = self.torch
        w = case["workload"]
        tr = training_of(case)
        if self.optimizer is None:
            self.optimizer = self.make_optimizer()
        self.ran_backward = True
        ac = autocast_dtype(case)
        if ac == "fp16" and self.scaler is None:
            self.scaler = torch.amp.GradScaler(self.device)
        self.model.train()
        if self.is_vision:
            x = torch.randn(w["batch"], 3, w["image_size"], w["image_size"], device=self.device,
                            dtype=torch_dtype(self.spec["dtype"]))
            y = torch.randint(0, 1000, (w["batch"],), device=self.device)
            inputs = (x, y)
        else:
            inputs = random_ids(self.model, case, w["batch"], w["seq_len"], self.device)
        # `training.use_cache` (default false, as the public harness runs):
        # without `use_cache=False` transformers fills a DynamicCache from the
        # config during the training forward (cases measured before
        # 2026-11-30's batch 5 ran that way and are annotated so).
        kwargs = {}
        if not self.is_vision:
            import inspect
            takes = "use_cache" in inspect.signature(self.model.forward).parameters
            # peft's PeftModelForCausalLM passes **kwargs on to the base model.
            if takes or hasattr(self.model, "peft_config"):
                kwargs["use_cache"] = bool(tr.get("use_cache", False))
            mask = padding_mask(case, inputs)
            if mask is not None:
                kwargs["attention_mask"] = mask
        labels = None if self.is_vision else head_labels(case, inputs)
        for step in range(int(tr.get("steps", 1))):
            self.mark(f"step {step + 1}")
            self.train_step(inputs, ac, kwargs, labels)
        self.mark("end")

    def train_step(self, inputs, ac, kwargs=None, labels=None):
        torch = self.torch
        ctx = (torch.autocast(self.device, dtype=torch_dtype(ac)) if ac
               else torch.autocast(self.device, enabled=False))
        with ctx:
            if self.is_vision:
                x, y = inputs
                loss = torch.nn.functional.cross_entropy(self.model(x), y)
            else:
                labels = inputs if labels is None else labels
                loss = self.model(input_ids=inputs, labels=labels, **(kwargs or {})).loss
        if self.scaler:
            self.scaler.scale(loss).backward()
            self.scaler.step(self.optimizer)
            self.scaler.update()
        else:
            loss.backward()
            self.optimizer.step()
        self.optimizer.zero_grad(set_to_none=True)


# ----------------------------------------------------------------------------
# Measuring one case
# ----------------------------------------------------------------------------

def is_oom(exc):
    import torch
    oom_types = tuple(t for t in (getattr(torch, "OutOfMemoryError", None),
                                  getattr(torch.cuda, "OutOfMemoryError", None)) if t)
    return isinstance(exc, oom_types) or "out of memory" in str(exc).lower()


def measure_case(runner, case, mem, nvml=None, poller=None, baseline=None, snap=None):
    """Run one case from a compact allocator; returns the `measured` dict.
    Exceptions are caught and reported (oom / error) so a group goes on."""
    mem.compact()
    resident = mem.allocated()
    reserved_start = mem.reserved()
    runner.before_case = {"optimizer": runner.optimizer is not None, "backward": runner.ran_backward}
    if poller:
        poller.reset()
    hooks = snap.start(runner) if snap else []
    t0 = time.perf_counter()
    failure = None
    try:
        runner.run(case)
        mem.sync()
    except Unsupported:
        raise
    except Exception as exc:  # noqa: BLE001 - reported in the result line
        failure = {"oom": is_oom(exc), "error": f"{type(exc).__name__}: {str(exc)[:400]}"}
        if not failure["oom"]:
            traceback.print_exc()
    seconds = time.perf_counter() - t0
    alloc_peak, reserved_peak = mem.peaks()
    measured = {"alloc_peak": alloc_peak, "reserved_peak": reserved_peak}
    if poller:
        used_max, samples, hz = poller.peak()
        measured["driver_peak"] = used_max - baseline
    measured.update({"resident_before": resident, "seconds": round(seconds, 3)})
    if poller:
        measured.update({"nvml_samples": samples, "nvml_hz": round(hz)})
    if snap:
        snap.finish(runner, case, hooks, resident, reserved_start, measured)
    if failure:
        measured.update(failure)
        gc.collect()
    return measured


def result_line(case, runner, runtime, measured):
    case = case.get(AS_SENT, case)
    out = {k: case[k] for k in case if k not in ("measured", "params", "weight_bytes", "runtime")}
    out["params"] = runner.params if runner else None
    out["weight_bytes"] = runner.weight_bytes if runner else None
    out["workload"] = case["workload"]
    out["runtime"] = runtime
    if runner is not None and runtime is not None:
        # The process's history, as the harness knows it: one optimizer per
        # build, created by the build's first training case.
        out["runtime"] = dict(runtime, process_ran_backward=runner.before_case["backward"],
                              process_builds_before=runner.builds_before)
        if case["workload"].get("mode") == "training":
            training = dict(case["workload"].get("training") or {},
                            optimizer_state_resident=runner.before_case["optimizer"])
            out["workload"] = dict(case["workload"], training=training)
    out["measured"] = measured
    if runner is not None and runner.attn_impl:
        out["attn_implementation"] = runner.attn_impl
    order = ["case", "model", "params", "weight_bytes", "workload", "runtime", "measured"]
    return {k: out[k] for k in order if k in out} | {k: v for k, v in out.items() if k not in order}


# ----------------------------------------------------------------------------
# Snapshot summary
# ----------------------------------------------------------------------------

# nn.Module internals (Linear, Conv, ... forward) are skipped too, so a Linear's
# output is attributed to the model line that called it.
SKIP_FRAME_PARTS = ("torch/nn/modules/", "torch/utils/", "torch/_", "contextlib.py",
                    "torch/amp/", "torch/autograd/graph.py", "torch/autograd/function.py",
                    "torch/cuda/", "functools.py", "threading.py", "<frozen")


def short_path(filename):
    for marker in ("site-packages/", "dist-packages/"):
        if marker in filename:
            return filename.split(marker, 1)[1]
    if filename.endswith("headroom_measure.py"):
        return "harness"
    return filename.rsplit("/", 1)[-1]


def frame_label(frames):
    """Innermost frame in model, optimizer or functional code; '?' if none
    (allocations from C++ with no Python frame, e.g. the autograd engine)."""
    if not frames:
        return "?"
    for fr in frames:
        fn = fr.get("filename", "")
        if any(part in fn for part in SKIP_FRAME_PARTS) and "torch/_tensor.py" not in fn:
            continue
        if fn.endswith("headroom_measure.py") and fr.get("name") in ("run", "measure_case"):
            continue
        return f"{short_path(fn)}:{fr.get('line')}:{fr.get('name')}"
    fr = frames[0]
    return f"{short_path(fr.get('filename', ''))}:{fr.get('line')}:{fr.get('name')}"


def is_marker(ev):
    frames = ev.get("frames") or []
    return any(fr.get("name") == "_headroom_marker" for fr in frames[:3])


def fmt_mib(n):
    return f"{n / MiB:10.1f} MiB"


def replay(trace, markers):
    """Walk the trace; returns a list of sections (split at step markers)
    with their peaks, plus per-event info for the block windows."""
    sections = [{"label": "case", "start": 0}]
    events = []  # (index, kind, size, label, cur_alloc, cur_reserved) for non-marker events
    cur, res, live = 0, 0, {}
    for i, ev in enumerate(trace):
        action = ev.get("action")
        size = int(ev.get("size", 0))
        if is_marker(ev):
            if action == "alloc":
                label = markers.label_of_size(size)
                events.append((i, "marker", size, label, cur, res))
                if label and label.startswith("step "):
                    sections.append({"label": label, "start": i})
            continue
        if action == "alloc":
            cur += size
            live[ev.get("addr")] = (size, frame_label(ev.get("frames")), i)
            events.append((i, "alloc", size, live[ev.get("addr")][1], cur, res))
        elif action in ("free_requested", "free"):
            blk = live.pop(ev.get("addr"), None)
            if blk:
                cur -= blk[0]
                events.append((i, "free", blk[0], blk[1], cur, res))
        elif action == "segment_alloc":
            res += size
        elif action in ("segment_free",):
            res -= size
    if len(sections) > 1:  # training: inputs made before step 1 belong to it
        sections = sections[1:]
        sections[0]["start"] = 0
    return sections, events


def section_report(trace, sec, end, base_alloc, base_res):
    """Peak of allocated bytes within trace[sec.start:end]; blocks live at it
    that were allocated inside the section."""
    cur, res, live = 0, 0, {}
    peak, peak_i, peak_res, max_res = None, None, 0, 0
    sec_alloc0 = None
    for i, ev in enumerate(trace[:end]):
        action = ev.get("action")
        size = int(ev.get("size", 0))
        if i == sec["start"]:
            sec_alloc0 = cur
        if is_marker(ev):
            continue
        if action == "alloc":
            cur += size
            live[ev.get("addr")] = (size, ev.get("frames"), i)
        elif action in ("free_requested", "free"):
            blk = live.pop(ev.get("addr"), None)
            if blk:
                cur -= blk[0]
        elif action == "segment_alloc":
            res += size
        elif action == "segment_free":
            res -= size
        if i >= sec["start"]:
            max_res = max(max_res, res)
            if peak is None or cur > peak:
                peak, peak_i, peak_res = cur, i, res
    if sec_alloc0 is None:
        sec_alloc0 = cur
    # second pass up to the peak to list the live blocks
    live = {}
    for i, ev in enumerate(trace[: (peak_i or 0) + 1]):
        if is_marker(ev):
            continue
        action = ev.get("action")
        if action == "alloc":
            live[ev.get("addr")] = (int(ev.get("size", 0)), ev.get("frames"), i)
        elif action in ("free_requested", "free"):
            live.pop(ev.get("addr"), None)
    live_at_peak = [b for b in live.values() if b[2] >= sec["start"]]
    return {"peak": base_alloc + (peak or 0), "peak_index": peak_i,
            "resident": base_alloc + sec_alloc0, "reserved_at_peak": base_res + peak_res,
            "max_reserved": base_res + max_res, "live": live_at_peak}


def group_blocks(blocks):
    groups = {}
    for size, frames, _ in blocks:
        label = frame_label(frames)
        g = groups.setdefault(label, [0, 0])
        g[0] += size
        g[1] += 1
    return sorted(groups.items(), key=lambda kv: -kv[1][0])


def largest_allocations(trace, start, end, n=15):
    seen, out = set(), []
    allocs = [ev for ev in trace[start:end] if ev.get("action") == "alloc" and not is_marker(ev)]
    for ev in sorted(allocs, key=lambda e: -int(e.get("size", 0))):
        key = (int(ev["size"]), frame_label(ev.get("frames")))
        if key not in seen:
            seen.add(key)
            out.append(key)
        if len(out) >= n:
            break
    return out


def block_window(events, start_label, end_label, lo, hi, min_size=MiB, max_lines=120):
    """Alloc/free events > min_size between the first start marker and the
    next end marker within trace indices [lo, hi)."""
    lines, inside, base = [], False, None
    for i, kind, size, label, cur, _ in events:
        if i < lo or i >= hi:
            continue
        if kind == "marker":
            if label == start_label and not inside and base is None:
                inside, base = True, cur
            elif label == end_label and inside:
                return lines, True
            continue
        if inside and size > min_size:
            sign = "+" if kind == "alloc" else "-"
            lines.append(f"{sign}{size / MiB:9.1f} MiB  (net {(cur - base) / MiB:9.1f})  {label}")
            if len(lines) >= max_lines:
                return lines, False
    return lines, not inside and base is None


class Snapshotter:
    """--snapshot: record the allocator history over a case and summarise it."""

    def __init__(self, md_path, pickle_dir):
        self.md_path = md_path
        self.pickle_dir = pickle_dir
        os.makedirs(pickle_dir, exist_ok=True)

    def start(self, runner):
        import torch
        runner.mark.enabled = True
        hooks = install_block_markers(runner.model, runner.mark)
        torch.cuda.memory._record_memory_history("all", context="alloc", stacks="python",
                                                 max_entries=3_000_000, clear_history=True)
        return hooks

    def finish(self, runner, case, hooks, resident, reserved_start, measured):
        import pickle
        import torch
        snapshot = torch.cuda.memory._snapshot()
        torch.cuda.memory._record_memory_history(None)
        for h in hooks:
            h.remove()
        runner.mark.enabled = False
        path = os.path.join(self.pickle_dir, f"{case['case']}.pickle")
        with open(path, "wb") as f:
            pickle.dump(snapshot, f)
        dev = torch.cuda.current_device()
        trace = snapshot["device_traces"][dev]
        md = self.summarize(case, trace, runner.mark, resident, reserved_start, measured)
        with open(self.md_path, "a") as f:
            f.write(md + "\n")

    def summarize(self, case, trace, markers, resident, reserved_start, measured):
        sections, events = replay(trace, markers)
        out = [f"## {case['case']} ({case['model']})", "",
               "workload: `" + json.dumps(case["workload"], separators=(",", ":")) + "`", "",
               f"measured: alloc_peak {measured['alloc_peak']:,} B, reserved_peak "
               f"{measured['reserved_peak']:,} B, resident_before {resident:,} B"
               + (f", driver_peak {measured['driver_peak']:,} B" if "driver_peak" in measured else "")
               + f"; {len(trace):,} trace events", ""]
        for k, sec in enumerate(sections):
            end = sections[k + 1]["start"] if k + 1 < len(sections) else len(trace)
            rep = section_report(trace, sec, end, resident, reserved_start)
            out += [f"### {sec['label']}", "",
                    f"resident at section start: {rep['resident']:,} B ({rep['resident'] / MiB:.1f} MiB); "
                    f"peak allocated by replay: {rep['peak']:,} B ({rep['peak'] / MiB:.1f} MiB) at event "
                    f"{rep['peak_index']} of {len(trace)}; reserved then (replayed): "
                    f"{rep['reserved_at_peak']:,} B ({rep['reserved_at_peak'] / MiB:.1f} MiB); max reserved "
                    f"in section: {rep['max_reserved']:,} B", "",
                    "blocks live at the peak, allocated in this section, by innermost frame:", "```"]
            for label, (size, count) in group_blocks(rep["live"])[:40]:
                out.append(f"{fmt_mib(size)} {count:6d} blocks  {label}")
            out += ["```", "largest single allocations in this section:", "```"]
            for size, label in largest_allocations(trace, sec["start"], end):
                out.append(f"{fmt_mib(size)}  {label}")
            out.append("```")
            for start_l, end_l, title in (
                    ("first block forward start", "first block forward end",
                     "first block's forward"),
                    ("last block backward start", "last block backward end",
                     "backward of the last block (the first block backward processes)")):
                if k != len(sections) - 1:
                    continue  # sequences only for the last section (steady state)
                lines, complete = block_window(events, start_l, end_l, sec["start"], end)
                if not lines and complete:
                    continue
                out += [f"alloc (+) / free (-) > 1 MiB during the {title}; net = MiB allocated "
                        "since the window opened (frees of older blocks make it negative)"
                        + ("" if complete else " (no end marker: cut)") + ":", "```"]
                out += lines or ["(none)"]
                out.append("```")
            out.append("")
        return "\n".join(out)


# ----------------------------------------------------------------------------
# Mode (a): one case in this process
# ----------------------------------------------------------------------------

def emit(obj):
    sys.stdout.write(RESULT_PREFIX + json.dumps(obj) + "\n")
    sys.stdout.flush()


def run_single(case, args):
    nvml = Nvml() if args.nvml else None
    baseline = nvml.used() if nvml else None  # before torch touches CUDA
    runner, runtime = None, None
    try:
        spec = build_spec(case)
        import torch  # noqa: F401  (first CUDA use comes after the baseline)
        apply_allocator_limit(case, args.device)
        runtime = runtime_info(nvml, args.device)
        runner = Runner(spec, args.device, args.tiny, case)
        mem = Mem(args.device)
        poller = Poller(nvml) if nvml else None
        snap = Snapshotter(args.snapshot_md, args.snapshot_dir) if args.snapshot else None
        measured = measure_case(runner, case, mem, nvml, poller, baseline, snap)
        if poller:
            poller.stop()
    except Unsupported as exc:
        emit(result_line(case, runner, runtime, {"unsupported": str(exc)}))
        return EXIT_UNSUPPORTED
    except Exception as exc:  # noqa: BLE001 - build failures (OOM while building, ...)
        traceback.print_exc()
        measured = {"oom": is_oom(exc), "error": f"{type(exc).__name__}: {str(exc)[:400]}"}
        emit(result_line(case, runner, runtime, measured))
        return EXIT_OOM if measured["oom"] else EXIT_ERROR
    emit(result_line(case, runner, runtime, measured))
    if measured.get("oom"):
        return EXIT_OOM
    return EXIT_ERROR if measured.get("error") else EXIT_OK


# ----------------------------------------------------------------------------
# Mode (b): batch, one subprocess per model build
# ----------------------------------------------------------------------------

def append_jsonl(path, obj):
    with open(path, "a") as f:
        f.write(json.dumps(obj) + "\n")
        f.flush()


def run_group(cases, args):
    """Child process of --batch: build once, run every case, append lines."""
    return run_builds([cases], args)


def run_builds(groups, args):
    """Builds one after another in this process, each running its cases;
    between builds the model, its optimizer and its outputs are dropped and
    the cache emptied, as a notebook that deletes one model and loads the
    next (only what the process keeps, such as cuBLAS workspaces, stays)."""
    nvml = Nvml() if args.nvml else None
    baseline = nvml.used() if nvml else None
    import torch
    if groups and groups[0]:
        apply_allocator_limit(groups[0][0], args.device)
    runtime = runtime_info(nvml, args.device)
    mem = Mem(args.device)
    poller = Poller(nvml) if nvml else None
    snap = Snapshotter(args.snapshot_md, args.snapshot_dir) if args.snapshot else None
    rc = EXIT_OK
    # What the builds before this one left the process: their count, and
    # whether any ran a backward pass (the autograd thread's workspace).
    builds_before, ran_backward = 0, False
    for cases in groups:
        t0 = time.perf_counter()
        try:
            spec = build_spec(cases[0])
            runner = Runner(spec, args.device, args.tiny, cases[0])
        except Unsupported as exc:
            for case in cases:
                append_jsonl(args.out, result_line(case, None, runtime, {"unsupported": str(exc)}))
            rc = EXIT_UNSUPPORTED
            continue
        log(f"built {spec['model']} ({runner.params:,} params, {runner.weight_bytes:,} B) "
            f"in {time.perf_counter() - t0:.1f}s")
        if not args.tiny and runner.params != expected_params(spec["model"]) and not spec["lora"]:
            log(f"WARNING: {spec['model']} has {runner.params} params, README says "
                f"{expected_params(spec['model'])}")
        runner.builds_before, runner.ran_backward = builds_before, ran_backward
        for case in cases:
            try:
                measured = measure_case(runner, case, mem, nvml, poller, baseline, snap)
            except Unsupported as exc:
                measured = {"unsupported": str(exc)}
            append_jsonl(args.out, result_line(case, runner, runtime, measured))
            log(f"{case['case']}: " + json.dumps(measured))
        builds_before, ran_backward = builds_before + 1, runner.ran_backward
        del runner
        gc.collect()
        if args.device != "cpu":
            torch.cuda.empty_cache()
    if poller:
        poller.stop()
    return rc


def run_batch(args):
    cases = load_cases(args.batch)
    groups = group_cases(cases, consecutive=args.one_process)
    log(f"{len(cases)} cases in {len(groups)} model builds")
    if args.one_process:
        return run_builds(groups, args)
    t_start = time.perf_counter()
    for gi, group in enumerate(groups):
        names = [c["case"] for c in group]
        left = args.deadline_s - (time.perf_counter() - t_start) if args.deadline_s else None
        if left is not None and left < 5:
            for c in group:
                append_jsonl(args.out, result_line(c, None, None, {"skipped": "deadline"}))
            continue
        log(f"group {gi + 1}/{len(groups)}: {group[0]['model']}: {', '.join(names)}")
        group_file = f"{args.out}.group{gi}.tmp"
        with open(group_file, "w") as f:
            for c in group:
                f.write(json.dumps(c[AS_SENT]) + "\n")
        cmd = [sys.executable, os.path.abspath(__file__), "--group-file", group_file,
               "--out", args.out, "--device", args.device]
        for flag in ("nvml", "snapshot", "tiny"):
            if getattr(args, flag):
                cmd.append("--" + flag.replace("_", "-"))
        cmd += ["--snapshot-md", args.snapshot_md, "--snapshot-dir", args.snapshot_dir]
        timeout = min(x for x in (args.group_timeout_s, left) if x) if (args.group_timeout_s or left) else None
        try:
            rc = subprocess.run(cmd, timeout=timeout).returncode
        except subprocess.TimeoutExpired:
            rc = "timeout"
        os.remove(group_file)
        done = {json.loads(l).get("case") for l in open(args.out)} if os.path.exists(args.out) else set()
        for c in group:
            if c["case"] not in done:
                append_jsonl(args.out, result_line(c, None, None, {"error": f"process ended: {rc}"}))
    log(f"batch done in {time.perf_counter() - t_start:.0f}s")
    return EXIT_OK


def log(msg):
    sys.stderr.write(f"[headroom {time.strftime('%H:%M:%S')}] {msg}\n")
    sys.stderr.flush()


# ----------------------------------------------------------------------------
# Mode (d): fixed overheads
# ----------------------------------------------------------------------------

def _probe_steps():
    """name -> function(state); each leaves only persistent state behind."""
    import torch
    import torch.nn.functional as F
    dev = "cuda"

    def mm(dtype):
        def step(st):
            a = torch.randn(4096, 4096, device=dev, dtype=dtype)
            b = torch.randn(4096, 4096, device=dev, dtype=dtype)
            c = a @ b
            del a, b, c
        return step

    def linear(dtype, bias, grad=False):
        def step(st):
            x = torch.randn(8, 512, 4096, device=dev, dtype=dtype, requires_grad=grad)
            lin = torch.nn.Linear(4096, 4096, bias=bias, device=dev, dtype=dtype)
            y = lin(x)
            if grad:
                st["loss"] = y.float().square().mean()
                st["keep"] = (x, lin)
            del x, y
        return step

    def backward(st):
        st.pop("loss").backward()
        st.pop("keep", None)

    def sdpa_fwd(st):
        q, k, v = (torch.randn(4, 32, 2048, 64, device=dev, dtype=torch.bfloat16, requires_grad=True)
                   for _ in range(3))
        st["loss"] = F.scaled_dot_product_attention(q, k, v, is_causal=True).float().square().mean()
        st["keep"] = (q, k, v)

    def layer_norm(dtype):
        def step(st):
            x = torch.randn(8, 512, 4096, device=dev, dtype=dtype)
            w = torch.ones(4096, device=dev, dtype=dtype)
            y = F.layer_norm(x, (4096,), w, torch.zeros_like(w))
            del x, y
        return step

    def cross_entropy(st):
        logits = torch.randn(4096, 32000, device=dev)
        target = torch.randint(0, 32000, (4096,), device=dev)
        loss = F.cross_entropy(logits, target)
        del logits, target, loss

    def conv(grad):
        def step(st):
            conv_ = torch.nn.Conv2d(64, 64, 3, padding=1, device=dev)
            x = torch.randn(64, 64, 56, 56, device=dev, requires_grad=grad)
            y = conv_(x)
            if grad:
                st["loss"] = y.square().mean()
                st["keep"] = (x, conv_)
            del x, y
        return step

    def mm_other_thread(st):
        th = threading.Thread(target=mm(torch.bfloat16), args=(st,))
        th.start()
        th.join()

    def clear_workspaces(st):
        torch._C._cuda_clearCublasWorkspaces()

    return {
        "tiny_tensor": lambda st: st.setdefault("tiny", torch.zeros(1, device=dev)),
        "matmul_bf16_4096": mm(torch.bfloat16),
        "matmul_fp32_4096_no_tf32": mm(torch.float32),
        "matmul_fp16_4096": mm(torch.float16),
        "matmul_bf16_in_new_thread": mm_other_thread,
        "linear_bias_bf16_3d": linear(torch.bfloat16, True),
        "linear_nobias_bf16_3d": linear(torch.bfloat16, False),
        "linear_bias_fp32_3d": linear(torch.float32, True),
        "linear_nobias_fp32_3d": linear(torch.float32, False),
        "linear_fwd_bf16_for_backward": linear(torch.bfloat16, False, grad=True),
        "linear_fwd_fp32_for_backward": linear(torch.float32, False, grad=True),
        "linear_bias_fwd_bf16_for_backward": linear(torch.bfloat16, True, grad=True),
        "backward": backward,
        "sdpa_bf16_forward": sdpa_fwd,
        "layer_norm_fp32": layer_norm(torch.float32),
        "layer_norm_bf16": layer_norm(torch.bfloat16),
        "cross_entropy_fp32": cross_entropy,
        "conv3x3_fp32_forward": conv(False),
        "conv3x3_fp32_forward_for_backward": conv(True),
        "clear_cublas_workspaces": clear_workspaces,
    }


PROBE_CHAINS = {
    "context": ["tiny_tensor"],
    "matmul_bf16": ["tiny_tensor", "matmul_bf16_4096"],
    "matmul_fp32": ["tiny_tensor", "matmul_fp32_4096_no_tf32"],
    "matmul_fp16": ["tiny_tensor", "matmul_fp16_4096"],
    "matmul_all_dtypes": ["tiny_tensor", "matmul_bf16_4096", "matmul_fp32_4096_no_tf32",
                          "matmul_fp16_4096", "clear_cublas_workspaces"],
    "matmul_second_thread": ["tiny_tensor", "matmul_bf16_4096", "matmul_bf16_in_new_thread",
                             "clear_cublas_workspaces"],
    "linear_bias_bf16": ["tiny_tensor", "linear_bias_bf16_3d"],
    "linear_nobias_bf16": ["tiny_tensor", "linear_nobias_bf16_3d"],
    "matmul_then_linear_bias_bf16": ["tiny_tensor", "matmul_bf16_4096", "linear_bias_bf16_3d",
                                     "clear_cublas_workspaces"],
    "linear_bias_fp32": ["tiny_tensor", "linear_bias_fp32_3d"],
    "linear_nobias_fp32": ["tiny_tensor", "linear_nobias_fp32_3d"],
    "linear_backward_bf16": ["tiny_tensor", "linear_fwd_bf16_for_backward", "backward",
                             "clear_cublas_workspaces"],
    "linear_backward_fp32": ["tiny_tensor", "linear_fwd_fp32_for_backward", "backward",
                             "clear_cublas_workspaces"],
    "linear_bias_backward_bf16": ["tiny_tensor", "linear_bias_fwd_bf16_for_backward", "backward",
                                  "clear_cublas_workspaces"],
    "sdpa_bf16": ["tiny_tensor", "sdpa_bf16_forward", "backward"],
    "layer_norm": ["tiny_tensor", "layer_norm_fp32", "layer_norm_bf16"],
    "cross_entropy": ["tiny_tensor", "cross_entropy_fp32"],
    "conv_fp32": ["tiny_tensor", "conv3x3_fp32_forward", "conv3x3_fp32_forward_for_backward",
                  "backward"],
    "llm_training_like": ["tiny_tensor", "matmul_bf16_4096", "linear_bias_bf16_3d",
                          "linear_fwd_bf16_for_backward", "backward", "sdpa_bf16_forward",
                          "backward", "layer_norm_bf16", "cross_entropy_fp32",
                          "clear_cublas_workspaces"],
}


def run_probe_chain(name):
    """Child: one chain in this fresh process; prints one JSON line."""
    nvml = Nvml()
    baseline = nvml.used()
    import torch
    steps = _probe_steps()
    state, rows = {}, []
    for step in PROBE_CHAINS[name]:
        steps[step](state)
        torch.cuda.synchronize()
        gc.collect()
        torch.cuda.empty_cache()
        time.sleep(0.05)
        rows.append({"step": step, "nvml_used_delta": nvml.used() - baseline,
                     "torch_reserved": torch.cuda.memory_reserved(),
                     "torch_allocated": torch.cuda.memory_allocated()})
    out = {"chain": name, "baseline_used": baseline, "steps": rows,
           "threads": threading.active_count(),
           "tf32_matmul": torch.backends.cuda.matmul.allow_tf32,
           "cudnn_tf32": torch.backends.cudnn.allow_tf32}
    emit(out)
    return EXIT_OK


def add_increments(chain):
    prev = {"nvml_used_delta": 0, "torch_reserved": 0, "torch_allocated": 0}
    for row in chain["steps"]:
        row["inc_nvml"] = row["nvml_used_delta"] - prev["nvml_used_delta"]
        row["inc_reserved"] = row["torch_reserved"] - prev["torch_reserved"]
        row["inc_allocated"] = row["torch_allocated"] - prev["torch_allocated"]
        row["inc_outside_torch"] = row["inc_nvml"] - row["inc_reserved"]
        prev = row


def run_probes(args):
    results = []
    for name in PROBE_CHAINS:
        cmd = [sys.executable, os.path.abspath(__file__), "--probe-chain", name]
        proc = subprocess.run(cmd, capture_output=True, text=True, timeout=300)
        line = next((l for l in proc.stdout.splitlines() if l.startswith(RESULT_PREFIX)), None)
        if line is None:
            results.append({"chain": name, "error": proc.stderr[-2000:]})
            log(f"probe {name}: failed rc={proc.returncode}")
            continue
        chain = json.loads(line[len(RESULT_PREFIX):])
        add_increments(chain)
        results.append(chain)
        log(f"probe {name}: " + ", ".join(
            f"{r['step']} +{r['inc_nvml']}/{r['inc_reserved']}" for r in chain["steps"]))
    nvml = Nvml()
    import torch
    doc = {"runtime": {"gpu_total_bytes": nvml.total(), "driver": nvml.driver(),
                       "torch": torch.__version__, "cuda": torch.version.cuda,
                       "CUDA_MODULE_LOADING": os.environ.get("CUDA_MODULE_LOADING"),
                       "CUBLAS_WORKSPACE_CONFIG": os.environ.get("CUBLAS_WORKSPACE_CONFIG")},
           "note": "bytes; each chain a fresh process; values after empty_cache(); inc_* = "
                   "increment over the previous step of the chain; inc_outside_torch = "
                   "inc_nvml - inc_reserved",
           "chains": results}
    text = json.dumps(doc, indent=1)
    if args.out:
        with open(args.out, "w") as f:
            f.write(text + "\n")
    else:
        print(text)
    return EXIT_OK


# ----------------------------------------------------------------------------
# Command line
# ----------------------------------------------------------------------------

def parse_args(argv=None):
    p = argparse.ArgumentParser(
        description="Measure peak GPU memory of PyTorch workloads (headroom calibration).",
        epilog="See the module docstring for the modes and the output format.")
    mode = p.add_mutually_exclusive_group(required=True)
    mode.add_argument("--case-json", help="one case as JSON (mode a)")
    mode.add_argument("--case-file", help="JSONL file of cases; use with --index (mode a)")
    mode.add_argument("--batch", help="JSONL file of cases, calibration methodology (mode b)")
    mode.add_argument("--probe-overheads", action="store_true", help="fixed runtime costs (mode d)")
    mode.add_argument("--check-cases", metavar="FILE",
                      help="read every case of a JSONL file and build its config; no torch, no GPU")
    mode.add_argument("--group-file", help=argparse.SUPPRESS)   # child of --batch
    mode.add_argument("--probe-chain", help=argparse.SUPPRESS)  # child of --probe-overheads
    p.add_argument("--index", type=int, default=0, help="line of --case-file (0-based)")
    p.add_argument("--out", help="output JSONL (--batch) or JSON (--probe-overheads)")
    p.add_argument("--nvml", action="store_true", help="poll NVML for driver_peak")
    p.add_argument("--snapshot", action="store_true", help="record allocator history (mode c)")
    p.add_argument("--snapshot-md", default="snapshots.md", help="markdown summary, appended")
    p.add_argument("--snapshot-dir", default="/tmp/headroom-snapshots", help="where pickles go")
    p.add_argument("--group-timeout-s", type=float, default=None, help="--batch: per build")
    p.add_argument("--deadline-s", type=float, default=None,
                   help="--batch: skip builds that would start after this many seconds")
    p.add_argument("--one-process", action="store_true",
                   help="--batch: every build in this one process, one after another (the model "
                        "dropped between builds), instead of a fresh process per build")
    p.add_argument("--device", default="cuda", help=argparse.SUPPRESS)
    p.add_argument("--tiny", action="store_true", help=argparse.SUPPRESS)  # CPU self-test
    args = p.parse_args(argv)
    if args.batch and not args.out:
        p.error("--batch needs --out")
    return args


def check_cases(path):
    """`--check-cases FILE`: read every case of FILE as a run would and build
    its model's config (transformers, no torch, no GPU): what the collector
    sends and the harness cannot read fails here, before any GPU time. One
    line per case (`ok`, `unsupported` as a run would record it, `FAILED`);
    exit 1 when any case fails."""
    try:
        import transformers  # noqa: F401
    except ImportError:
        log("--check-cases needs transformers (pip install transformers): the configs are built")
        return EXIT_ERROR
    failed = 0
    with open(path) as f:
        sent = [json.loads(line) for line in f if line.strip() and not line.startswith("#")]
    for raw in sent:
        name = raw.get("case") if isinstance(raw, dict) else None
        try:
            case = read_case(raw)
            spec = build_spec(case)
            if spec["model"] in VISION_PRESETS:
                built = VISION_PRESETS[spec["model"]][0]
            else:
                config, cls_name, _ = hf_config(spec)
                built = f"{cls_name}({type(config).__name__})"
            print(f"ok {name}: {built}, {spec['dtype']}, head {spec['head']}")
        except Unsupported as exc:
            # What a run would record as unsupported: a refusal, not a failure.
            print(f"unsupported {name}: {exc}")
        except Exception as exc:  # noqa: BLE001 - every failure is reported, by case
            failed += 1
            print(f"FAILED {name}: {type(exc).__name__}: {exc}")
    print(f"{len(sent) - failed} of {len(sent)} cases read, {failed} failed")
    return EXIT_ERROR if failed else EXIT_OK


def main(argv=None):
    args = parse_args(argv)
    if args.check_cases:
        return check_cases(args.check_cases)
    if args.probe_overheads:
        return run_probes(args)
    if args.probe_chain:
        return run_probe_chain(args.probe_chain)
    if args.batch:
        return run_batch(args)
    if args.group_file:
        return run_group(load_cases(args.group_file), args)
    if args.case_json:
        case = read_case(json.loads(args.case_json))
    else:
        case = load_cases(args.case_file)[args.index]
    return run_single(case, args)


if __name__ == "__main__":
    sys.exit(main())
