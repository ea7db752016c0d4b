"""spec_from on live transformers models (built on the meta device: nothing
allocated), HeadroomCallback on a real Trainer on the CPU, check_fits.

Needs torch, transformers and peft: run in the with-torch environment
(`-m torch`, where HEADROOM_REQUIRE_TORCH=1 turns a skip into a failure).
"""

from __future__ import annotations

import types

import pytest

pytestmark = pytest.mark.torch
torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")
peft = pytest.importorskip("peft")

import headroom  # noqa: E402

SEQ_LEN = 256

# Each family: its config class, the model class a script builds, the
# shapes written by hand as a config.json would carry them, and the
# modules LoRA adapts (None: the model refuses LoRA on encoders).
FAMILIES = {
    "llama": (
        "LlamaConfig", "AutoModelForCausalLM",
        dict(hidden_size=256, intermediate_size=688, num_hidden_layers=2, num_attention_heads=4,
             num_key_value_heads=2, vocab_size=1024, max_position_embeddings=2048),
        ["q_proj", "v_proj"],
    ),
    "qwen2": (
        "Qwen2Config", "AutoModelForCausalLM",
        dict(hidden_size=256, intermediate_size=704, num_hidden_layers=2, num_attention_heads=4,
             num_key_value_heads=2, vocab_size=1024, max_position_embeddings=2048),
        ["q_proj", "k_proj", "v_proj", "o_proj"],
    ),
    "mistral": (
        "MistralConfig", "AutoModelForCausalLM",
        dict(hidden_size=256, intermediate_size=704, num_hidden_layers=2, num_attention_heads=4,
             num_key_value_heads=2, vocab_size=1024, max_position_embeddings=2048),
        ["q_proj", "v_proj"],
    ),
    "gemma2": (
        "Gemma2Config", "AutoModelForCausalLM",
        dict(hidden_size=256, intermediate_size=704, num_hidden_layers=2, num_attention_heads=4,
             num_key_value_heads=2, head_dim=64, vocab_size=1024, max_position_embeddings=2048),
        ["q_proj", "v_proj"],
    ),
    "gpt2": (
        "GPT2Config", "AutoModelForCausalLM",
        dict(n_embd=256, n_layer=2, n_head=4, vocab_size=1024, n_positions=1024,
             bos_token_id=0, eos_token_id=0),
        ["c_attn"],
    ),
    "bert": (
        "BertConfig", "BertForMaskedLM",
        dict(hidden_size=256, intermediate_size=1024, num_hidden_layers=2, num_attention_heads=4,
             vocab_size=1024, max_position_embeddings=512),
        None,
    ),
    "esm": (
        "EsmConfig", "EsmForSequenceClassification",
        dict(hidden_size=256, intermediate_size=1024, num_hidden_layers=2, num_attention_heads=4,
             vocab_size=33, max_position_embeddings=1026, position_embedding_type="rotary",
             pad_token_id=1, mask_token_id=32),
        None,
    ),
}


def build_on_meta(family: str, dtype=torch.bfloat16):
    config_class, model_class, shapes, _ = FAMILIES[family]
    config = getattr(transformers, config_class)(**shapes)
    with torch.device("meta"):
        cls = getattr(transformers, model_class)
        if model_class.startswith("Auto"):
            return cls.from_config(config, dtype=dtype)
        return cls(config).to(dtype)


def training_args(tmp_path, **kwargs):
    """TrainingArguments as on a GPU machine. Without a GPU TrainingArguments
    refuses bf16 unless told the job runs on the CPU; the flag is cleared
    after, as a GPU machine would have it."""
    args = transformers.TrainingArguments(
        output_dir=str(tmp_path), report_to="none", use_cpu=True, **kwargs
    )
    args.use_cpu = False
    return args


def hand_written(family: str, workload: dict) -> dict:
    """The same job written by hand: the config.json's shapes and the
    arguments as a spec file would carry them."""
    _, model_class, shapes, _ = FAMILIES[family]
    model = {"hf_config": {"model_type": family, **shapes}}
    return {"model": model, "workload": workload}


def same_estimate(a: dict, b: dict):
    """The two specs' estimates are one: every figure, the breakdown, the peak
    op and the likely range. (The echoed inputs may word a default
    differently: `lora_dropout: 0.0` from peft is a dropout of 0, the
    hand-written spec's none.)"""
    ea, eb = headroom.estimate(a).to_dict(), headroom.estimate(b).to_dict()
    for key in (
        "driver_peak", "reserved_peak", "allocated_peak", "outside_allocator", "breakdown",
        "params", "weight_bytes", "peak_op", "likely_range",
    ):
        assert ea[key] == eb[key], key


DECODERS = [f for f in FAMILIES if FAMILIES[f][3] is not None]
ENCODERS = [f for f in FAMILIES if FAMILIES[f][3] is None]


@pytest.mark.parametrize("family", DECODERS)
def test_a_trainer_job_with_lora_equals_the_hand_written_spec(family, tmp_path):
    model = build_on_meta(family)
    targets = FAMILIES[family][3]
    args = training_args(
        tmp_path, per_device_train_batch_size=2, bf16=True, gradient_checkpointing=True
    )
    lora = peft.LoraConfig(r=8, lora_alpha=16, target_modules=targets)
    spec = headroom.spec_from(model, seq_len=SEQ_LEN, args=args, peft_config=lora)
    expected = hand_written(
        family,
        {
            "framework": "hf_trainer", "seq_len": SEQ_LEN, "dtype": "bf16",
            "training_args": {"per_device_train_batch_size": 2, "bf16": True, "gradient_checkpointing": True},
            "lora_config": {"r": 8, "lora_alpha": 16, "target_modules": targets},
        },
    )
    same_estimate(spec, expected)
    assert headroom.estimate(spec).inputs["workload"]["training"]["lora"]["rank"] == 8


def encoder_head(family: str) -> dict:
    return {"head": "sequence_classification", "num_labels": 2} if family == "esm" else {}


@pytest.mark.parametrize("family", ["llama", "gpt2", *ENCODERS])
def test_full_fine_tuning_equals_the_hand_written_spec(family, tmp_path):
    model = build_on_meta(family, dtype=torch.float32)
    args = training_args(
        tmp_path, per_device_train_batch_size=4, optim="adamw_torch", bf16=True
    )
    spec = headroom.spec_from(model, seq_len=SEQ_LEN, args=args)
    expected = hand_written(
        family,
        {"framework": "hf_trainer", "seq_len": SEQ_LEN, "dtype": "fp32", **encoder_head(family),
         "training_args": {"per_device_train_batch_size": 4, "optim": "adamw_torch", "bf16": True}},
    )
    same_estimate(spec, expected)
    assert headroom.estimate(spec).inputs["workload"]["training"]["precision"] == "amp_bf16"


@pytest.mark.parametrize("family", ENCODERS)
def test_lora_on_an_encoder_is_refused_as_the_core_refuses_it(family, tmp_path):
    args = training_args(tmp_path, per_device_train_batch_size=4, bf16=True)
    lora = peft.LoraConfig(r=8, lora_alpha=16, target_modules=["query", "value"])
    spec = headroom.spec_from(build_on_meta(family), seq_len=SEQ_LEN, args=args, peft_config=lora)
    with pytest.raises(headroom.SpecError, match=r"^`workload.training.lora`: LoRA on encoders is not modelled"):
        headroom.estimate(spec)


def test_a_peft_model_carries_its_adapter(tmp_path):
    model = build_on_meta("llama")
    lora = peft.LoraConfig(r=4, lora_alpha=8, target_modules=["q_proj", "v_proj"])
    wrapped = peft.get_peft_model(model, lora)
    args = training_args(tmp_path, per_device_train_batch_size=2, bf16=True)
    from_wrapped = headroom.spec_from(wrapped, seq_len=SEQ_LEN, args=args)
    from_config = headroom.spec_from(build_on_meta("llama"), seq_len=SEQ_LEN, args=args, peft_config=lora)
    same_estimate(from_wrapped, from_config)


def test_generation_equals_the_hand_written_spec():
    model = build_on_meta("llama")
    generation = transformers.GenerationConfig(max_new_tokens=32, do_sample=False)
    spec = headroom.spec_from(model, seq_len=SEQ_LEN, batch=2, generation_config=generation)
    assert spec["workload"]["framework"] == "hf_generate" and spec["workload"]["mode"] == "inference"
    expected = hand_written(
        "llama",
        {"framework": "hf_generate", "seq_len": SEQ_LEN, "batch": 2, "dtype": "bf16",
         "generation_config": {"max_new_tokens": 32}},
    )
    same_estimate(spec, expected)


def test_quantization_config_becomes_the_weights_storage():
    model = build_on_meta("llama")
    bnb = transformers.BitsAndBytesConfig(load_in_4bit=True, bnb_4bit_compute_dtype=torch.bfloat16)
    spec = headroom.spec_from(model, seq_len=SEQ_LEN, batch=1, quantization_config=bnb)
    assert spec["workload"]["quantization_config"]["load_in_4bit"] is True
    est = headroom.estimate(spec)
    assert est.inputs["workload"]["dtype"] == "int4"
    # Quantized jobs are measured, a population of their own.
    assert est.likely_range.family == "quantized"
    assert est.likely_range.cases >= 4
    assert est.likely_range.unmeasured is None


def test_esmfold_on_meta_is_the_preset():
    config = transformers.EsmConfig(
        vocab_size=33, hidden_size=2560, num_hidden_layers=36, num_attention_heads=40,
        intermediate_size=10240, max_position_embeddings=1026, position_embedding_type="rotary",
        emb_layer_norm_before=False, token_dropout=True, is_folding_model=True,
        esmfold_config={"trunk": {"num_blocks": 48}},
    )
    with torch.device("meta"):
        model = transformers.EsmForProteinFolding(config)
    model.trunk.set_chunk_size(64)
    spec = headroom.spec_from(model, seq_len=SEQ_LEN, batch=1)
    expected = {
        "model": "esmfold-v1",
        "workload": {"framework": "torch", "mode": "inference", "batch": 1, "seq_len": SEQ_LEN,
                     "esmfold": {"stem_dtype": "fp16", "chunk_size": 64, "num_recycles": 4}},
    }
    same_estimate(spec, expected)


def test_what_cannot_be_described_is_refused_by_name(tmp_path):
    model = build_on_meta("llama")
    with pytest.raises(headroom.SpecError, match=r"^peft_config: a PREFIX_TUNING adapter cannot be described"):
        headroom.spec_from(model, seq_len=8, batch=1,
                           peft_config=peft.PrefixTuningConfig(num_virtual_tokens=4, task_type="CAUSAL_LM"))
    with pytest.raises(headroom.SpecError, match=r"^model: LlamaForQuestionAnswering cannot be described"):
        with torch.device("meta"):
            qa = transformers.LlamaForQuestionAnswering(model.config)
        headroom.spec_from(qa, seq_len=8, batch=1)
    with pytest.raises(headroom.SpecError, match=r"^args: a dict_items cannot be described|^args: a"):
        headroom.spec_from(model, seq_len=8, args=object())
    small_fold = transformers.EsmConfig(
        vocab_size=33, hidden_size=2560, num_hidden_layers=36, num_attention_heads=40,
        is_folding_model=True, esmfold_config={"trunk": {"num_blocks": 4}},
    )
    with pytest.raises(headroom.SpecError, match=r"^model: an ESMFold with esmfold_config.trunk.num_blocks = 4"):
        headroom.spec_from(small_fold, seq_len=8, batch=1)
    with pytest.raises(headroom.SpecError, match=r"^batch: missing"):
        headroom.spec_from(model, seq_len=8)
    with pytest.raises(headroom.SpecError, match="torch_compile"):
        args = training_args(tmp_path, torch_compile=True)
        headroom.estimate(headroom.spec_from(model, seq_len=8, args=args))


# The Trainer tests run a real (tiny) model on the CPU: the callback decides
# on a catalog card, before the first step allocates anything on it.


def tiny_trainer(tmp_path, vocab_size: int, batch: int, callback):
    config = transformers.LlamaConfig(
        hidden_size=64, intermediate_size=128, num_hidden_layers=2, num_attention_heads=2,
        num_key_value_heads=2, vocab_size=vocab_size, max_position_embeddings=64,
    )
    model = transformers.LlamaForCausalLM(config)
    ids = torch.randint(0, vocab_size, (16,))
    dataset = [{"input_ids": ids, "labels": ids} for _ in range(batch)]
    args = transformers.TrainingArguments(
        output_dir=str(tmp_path), report_to="none", per_device_train_batch_size=batch,
        max_steps=1, save_strategy="no", logging_strategy="no", dataloader_pin_memory=False,
    )
    return transformers.Trainer(model=model, args=args, train_dataset=dataset, callbacks=[callback])


def test_the_callback_stops_a_trainer_that_cannot_fit_before_it_allocates(tmp_path):
    # A 256k vocabulary at batch 8 and 8k tokens: fp32 logits of 67 GB.
    callback = headroom.HeadroomCallback(seq_len=8192, gpu="rtx-3060-12gb")
    trainer = tiny_trainer(tmp_path, vocab_size=256_000, batch=8, callback=callback)
    with pytest.raises(headroom.DoesNotFit) as stopped:
        trainer.train()
    assert trainer.state.global_step == 0
    error = stopped.value
    assert "does not fit on NVIDIA GeForce RTX 3060 12GB" in str(error)
    assert error.advice is not None and error.advice.gpu.id == "rtx-3060-12gb"
    assert error.advice.suggestions, "the advice says what would make it fit"
    assert str(error).endswith(str(error.advice))
    assert error.estimate.likely_range.high > headroom.find_gpu("rtx-3060-12gb").usable_bytes


def test_the_callback_lets_a_job_that_fits_run(tmp_path):
    callback = headroom.HeadroomCallback(seq_len=16, gpu="h200")
    trainer = tiny_trainer(tmp_path, vocab_size=128, batch=2, callback=callback)
    trainer.train()
    assert trainer.state.global_step == 1
    assert callback.check is not None and callback.check.fits


def test_the_callback_can_warn_instead(tmp_path):
    callback = headroom.HeadroomCallback(seq_len=8192, gpu="rtx-3060-12gb", action="warn")
    trainer = tiny_trainer(tmp_path, vocab_size=256_000, batch=1, callback=callback)
    with pytest.warns(headroom.DoesNotFitWarning, match="does not fit"):
        callback.on_train_begin(trainer.args, trainer.state, trainer.control, model=trainer.model)
    assert not callback.check.fits


def test_check_fits_on_a_live_device_uses_its_free_memory(monkeypatch):
    gib = 1 << 30
    props = types.SimpleNamespace(name="NVIDIA GeForce RTX 4090", total_memory=24 * gib)
    monkeypatch.setattr(torch.cuda, "get_device_properties", lambda device: props)
    monkeypatch.setattr(torch.cuda, "mem_get_info", lambda device: (20 * gib, 24 * gib))
    monkeypatch.setattr(torch.cuda, "memory_reserved", lambda device: 2 * gib)
    spec = "examples/llama-8b-generate.json"  # about 19.8 GB at the range's top
    check = headroom.check_fits(spec, device=0, action="return")
    context = next(s.bytes for s in check.estimate.breakdown if s.component == "cuda_context")
    assert check.capacity_bytes == 22 * gib + context
    assert check.fits
    monkeypatch.setattr(torch.cuda, "mem_get_info", lambda device: (10 * gib, 24 * gib))
    with pytest.raises(headroom.DoesNotFit) as stopped:
        headroom.check_fits(spec, device=0)
    assert stopped.value.advice.gpu.id == "rtx-4090"
