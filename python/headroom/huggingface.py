"""Specs from live Hugging Face objects: ``spec_from(model, ...)``.

Reads what a training or generation script already holds: the model (its
``config`` and its parameters' dtype; a model on the meta device works, so
nothing is allocated), ``TrainingArguments``, a peft ``LoraConfig`` (or the
model's own adapters when it is a ``PeftModel``), a ``BitsAndBytesConfig``
and a ``GenerationConfig``. Each becomes the dict its library's
``to_dict()`` writes, which the core reads as the framework's own arguments
(``docs/spec.md``, "The job as its framework writes it"). torch,
transformers and peft are imported only when an object of theirs is given.

What the model cannot describe is refused with a ``SpecError`` naming it:
a model class whose head is not modelled, a peft method other than LoRA, an
argument object of another kind.
"""

from __future__ import annotations

import json
from typing import Any, Mapping, Optional

from ._headroom import SpecError

#: Parameter dtypes as the spec names them.
_DTYPES = {"float32": "fp32", "float16": "fp16", "bfloat16": "bf16"}

#: The ESMFold release the preset `esmfold-v1` models (facebook/esmfold_v1):
#: its ESM-2 stem's shapes and its folding trunk's.
_ESMFOLD_V1_STEM = {"hidden_size": 2560, "num_hidden_layers": 36, "num_attention_heads": 40}
_ESMFOLD_V1_TRUNK = {"num_blocks": 48, "sequence_state_dim": 1024, "pairwise_state_dim": 128}


def _to_dict(obj: Any, what: str) -> dict[str, Any]:
    """``obj.to_dict()`` (or a dict as it is), made JSON-clean: sets become
    sorted lists, enums their values."""
    if isinstance(obj, Mapping):
        value = dict(obj)
    elif hasattr(obj, "to_dict"):
        value = obj.to_dict()
    else:
        raise SpecError(
            f"{what}: a {type(obj).__name__} cannot be described; allowed: the library's config object or its to_dict()"
        )
    return json.loads(json.dumps(value, default=_json_default))


def _json_default(value: Any) -> Any:
    if isinstance(value, (set, frozenset)):
        return sorted(value)
    if hasattr(value, "value"):  # an Enum such as peft's PeftType
        return value.value
    if type(value).__name__ == "dtype":  # a torch.dtype left in a config
        return str(value).removeprefix("torch.")
    raise TypeError(f"{type(value).__name__} is not JSON")


def _unwrap_peft(model: Any) -> tuple[Any, Optional[Any]]:
    """A ``PeftModel``'s base model and its active adapter's config; any other
    model as it is, with no adapter."""
    peft_configs = getattr(model, "peft_config", None)
    if isinstance(peft_configs, Mapping) and hasattr(model, "get_base_model"):
        active = getattr(model, "active_adapter", "default")
        if isinstance(active, (list, tuple)):
            if len(active) != 1:
                raise SpecError(
                    f"model: {len(active)} active adapters cannot be described; allowed: one LoRA adapter"
                )
            active = active[0]
        return model.get_base_model(), peft_configs[active]
    return model, None


def _parameter_dtype(model: Any) -> Optional[str]:
    """The dtype of the model's floating-point parameters, as the spec names it
    (``None`` when it has none, or they are quantized)."""
    parameters = getattr(model, "parameters", None)
    if parameters is None:
        return None
    for p in parameters():
        if p.dtype.is_floating_point:
            name = str(p.dtype).removeprefix("torch.")
            if name not in _DTYPES:
                raise SpecError(
                    f"model: parameters of dtype {name} cannot be described; allowed: float32, float16, bfloat16"
                )
            return _DTYPES[name]
    return None


def _head(model: Any, config: Mapping[str, Any]) -> dict[str, Any]:
    """The workload keys the model's class decides: its head and, for a base
    model without one, what inference returns."""
    cls = type(model).__name__
    family = config.get("model_type", "")
    if cls.endswith("ForSequenceClassification"):
        return {"head": "sequence_classification", "num_labels": config.get("num_labels", 2)}
    if cls.endswith("ForTokenClassification"):
        return {"head": "token_classification", "num_labels": config.get("num_labels", 2)}
    if family == "esm":
        if cls == "EsmModel":
            return {}
        raise SpecError(
            f"model: {cls} cannot be described; allowed: EsmModel (ESM-2 without head), "
            "EsmForSequenceClassification, EsmForTokenClassification, EsmForProteinFolding"
        )
    if family == "bert":
        if cls == "BertForMaskedLM":
            return {}
        if cls == "BertModel":
            return {"logits": "none"}
        raise SpecError(
            f"model: {cls} cannot be described; allowed: BertForMaskedLM, BertModel, "
            "BertForSequenceClassification, BertForTokenClassification"
        )
    if cls.endswith("ForCausalLM") or cls.endswith("LMHeadModel"):
        return {}
    if cls.endswith("Model") and not cls.startswith("PreTrained"):
        return {"logits": "none"}
    raise SpecError(
        f"model: {cls} cannot be described; allowed: a causal LM (*ForCausalLM), a base model, "
        "or a sequence or token classifier"
    )


def _esmfold_model(config: Mapping[str, Any]) -> str:
    """The preset of an ``EsmForProteinFolding`` config: ``esmfold-v1`` when its
    shapes are the released model's, else refused naming the first that differs."""
    trunk = (config.get("esmfold_config") or {}).get("trunk") or {}
    shapes = [(key, config.get(key), expected) for key, expected in _ESMFOLD_V1_STEM.items()]
    shapes += [
        (f"esmfold_config.trunk.{key}", trunk.get(key), expected)
        for key, expected in _ESMFOLD_V1_TRUNK.items()
    ]
    for key, value, expected in shapes:
        if value != expected:
            raise SpecError(
                f"model: an ESMFold with {key} = {value} cannot be described; "
                f"allowed: facebook/esmfold_v1's shapes ({key} = {expected})"
            )
    return "esmfold-v1"


def _esmfold_workload(model: Any, config: Mapping[str, Any]) -> dict[str, Any]:
    """An ``EsmForProteinFolding``'s knobs: its ESM-2 stem's dtype (fp16 after
    the model's own ``esm.half()``), its trunk's chunk size (``set_chunk_size``)
    and the recycles ``forward`` runs by default (the trunk's ``max_recycles``)."""
    trunk = (config.get("esmfold_config") or {}).get("trunk") or {}
    esmfold: dict[str, Any] = {}
    if model is not None:
        stem = _parameter_dtype(model.esm)
        if stem is not None:
            esmfold["stem_dtype"] = stem
        esmfold["chunk_size"] = getattr(model.trunk, "chunk_size", None)
    elif "fp16_esm" in (config.get("esmfold_config") or {}):
        esmfold["stem_dtype"] = "fp16" if config["esmfold_config"]["fp16_esm"] else "fp32"
    if "max_recycles" in trunk:
        esmfold["num_recycles"] = trunk["max_recycles"]
    return {"esmfold": esmfold}


def _model_and_workload(model: Any) -> tuple[Any, dict[str, Any], Optional[Any], Optional[dict]]:
    """The spec's ``model``, the workload keys the model decides, its LoRA
    adapter (a ``PeftModel``'s) and its quantization config (a loaded
    quantized model's)."""
    if isinstance(model, str):
        return model, {}, None, None
    model, adapter = _unwrap_peft(model)
    config_obj = getattr(model, "config", None)
    if config_obj is None and hasattr(model, "to_dict") and hasattr(model, "model_type"):
        config_obj, model = model, None  # a bare PretrainedConfig
    if config_obj is None:
        raise SpecError(
            f"model: a {type(model).__name__} cannot be described; allowed: a transformers model "
            "(its config is read), a PretrainedConfig, or a preset or Hub id"
        )
    config = _to_dict(config_obj, "model.config")
    quantization = config.pop("quantization_config", None)
    workload: dict[str, Any] = {}
    if config.get("is_folding_model"):
        return _esmfold_model(config), _esmfold_workload(model, config), adapter, quantization
    if model is not None:
        dtype = _parameter_dtype(model)
        if dtype is not None and quantization is None:
            workload["dtype"] = dtype
        workload.update(_head(model, config))
    return {"hf_config": config}, workload, adapter, quantization


def spec_from(
    model: Any,
    *,
    seq_len: int,
    batch: Optional[int] = None,
    args: Any = None,
    peft_config: Any = None,
    quantization_config: Any = None,
    generation_config: Any = None,
    mode: Optional[str] = None,
) -> dict[str, Any]:
    """The spec of a job, read from the objects its script holds.

    - ``model``: a transformers model (on any device, the meta device
      included), a ``PeftModel`` (its active LoRA adapter is read), a
      ``PretrainedConfig``, or a preset or Hub id string.
    - ``seq_len``: tokens (or residues) per sequence; ``batch``: sequences per
      step (with ``args``, its ``per_device_train_batch_size`` is the batch,
      and a ``batch`` given too must agree).
    - ``args``: ``TrainingArguments`` (framework ``hf_trainer``, training).
    - ``peft_config``: a peft ``LoraConfig``.
    - ``quantization_config``: a ``BitsAndBytesConfig`` (else a quantized
      model's own is read from its config).
    - ``generation_config``: a ``GenerationConfig`` (framework
      ``hf_generate``, inference with a KV cache).
    - ``mode``: ``"training"`` or ``"inference"``; by default training with
      ``args`` or an adapter, else inference.

    Returns the spec as a dict; :func:`headroom.estimate` takes it. Raises
    :class:`SpecError` naming what cannot be described.
    """
    spec_model, workload, adapter, quantization = _model_and_workload(model)
    if args is not None and generation_config is not None:
        raise SpecError(
            "args: TrainingArguments and a GenerationConfig together cannot be described; "
            "allowed: one job, training (args) or generation (generation_config)"
        )
    if peft_config is not None and adapter is not None:
        raise SpecError(
            "peft_config: the model already carries a LoRA adapter; allowed: one of the two"
        )
    adapter = peft_config if peft_config is not None else adapter
    if args is not None:
        if not (isinstance(args, Mapping) or type(args).__name__.endswith("TrainingArguments")):
            raise SpecError(
                f"args: a {type(args).__name__} cannot be described; allowed: transformers "
                "TrainingArguments (or its to_dict())"
            )
        workload["framework"] = "hf_trainer"
        workload["training_args"] = _to_dict(args, "args")
    elif generation_config is not None:
        workload["framework"] = "hf_generate"
        workload["generation_config"] = _to_dict(generation_config, "generation_config")
    else:
        workload["framework"] = "torch"
    if mode is None:
        training = args is not None or (adapter is not None and generation_config is None)
        mode = "training" if training else "inference"
    if mode not in ("training", "inference"):
        raise SpecError(f"mode: {mode!r} is not a mode; allowed: \"training\", \"inference\"")
    workload["mode"] = mode
    workload["seq_len"] = seq_len
    if batch is not None:
        workload["batch"] = batch
    elif args is None:
        raise SpecError("batch: missing; allowed: sequences per step (an integer)")
    if adapter is not None:
        lora = _to_dict(adapter, "peft_config")
        peft_type = lora.pop("peft_type", "LORA")
        if str(peft_type).upper() != "LORA":
            raise SpecError(
                f"peft_config: a {peft_type} adapter cannot be described; allowed: LoRA (LoraConfig)"
            )
        workload["lora_config"] = lora
    quantization = quantization_config if quantization_config is not None else quantization
    if quantization is not None:
        # The weights' storage is the quantization's (int4, int8), not the
        # dtype the model was built in.
        workload.pop("dtype", None)
        workload["quantization_config"] = _to_dict(quantization, "quantization_config")
    return {"model": spec_model, "workload": workload}


__all__ = ["spec_from"]
