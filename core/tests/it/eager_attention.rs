//! Eager attention's `torch.matmul` operands, pinned to the H200 trace of
//! BERT-base fp32 inference, batch 16, 512 tokens, eager attention
//! (`measurements/h200-bert-eager/trace-segments-eager.jsonl`, events 15
//! to 19): the query and the key, both transposed views of their
//! projections, are copied (24 MiB each) before the 192 MiB scores, and
//! the key's copy is freed first.

use crate::common;

use common::{events_in_mib, MIB};
use headroom_core::arch::Dtype;
use headroom_core::workload::{Attention, Mode};
use headroom_core::{RuntimeProfile, Workload};

#[test]
fn a_strided_query_and_key_are_copied_around_the_scores() {
    let workload = Workload {
        mode: Mode::Inference,
        batch: 16,
        seq_len: 512,
        attention: Attention::Eager,
        dtype: Dtype::Fp32,
        ..Workload::default()
    };
    let mut runtime = RuntimeProfile::h200();
    runtime.process_ran_backward = false;
    let events = events_in_mib("bert-base-uncased", &workload, &runtime, MIB + 1);
    let scores = events
        .iter()
        .position(|&e| e == (true, 192))
        .expect("the first layer's scores");
    assert_eq!(
        events[scores - 2..scores + 3],
        [
            (true, 24),
            (true, 24),
            (true, 192),
            (false, 24),
            (false, 24)
        ]
    );
}

/// Gemma 2's eager attention caps its scores, `tanh(scores / 50) * 50`
/// between the scaling and the mask (transformers 5.17
/// `modeling_gemma2.eager_attention_forward`), and autograd keeps the
/// `tanh` output: training without checkpointing holds one more
/// score-sized bf16 tensor per layer at the peak, exactly (42 layers x
/// batch 2 x 16 heads x 2,048^2 x 2 bytes). SDPA ignores the cap.
#[test]
fn gemma2_eager_training_keeps_each_layers_capped_scores() {
    let allocated = |attention: &str, cap: bool| {
        let json = format!(
            r#"{{"model": "gemma-2-9b", "workload": {{"mode": "training", "batch": 2, "seq_len": 2048, "attention": "{attention}", "training": {{"precision": "amp_bf16", "lora": {{"rank": 16}}}}}}}}"#
        );
        let mut spec = headroom_core::readers::Spec::from_json(&json).unwrap();
        let headroom_core::arch::Architecture::Decoder(d) = &mut spec.model.arch else {
            panic!("gemma-2-9b is a decoder")
        };
        assert!(d.attn_logit_softcapping, "the preset caps its scores");
        d.attn_logit_softcapping = cap;
        headroom_core::estimate(&spec.model.arch, &spec.workload, &spec.runtime)
            .unwrap()
            .allocated_peak
            .0
    };
    let scores = 2 * 16 * 2048 * 2048 * 2;
    assert_eq!(
        allocated("eager", true) - allocated("eager", false),
        42 * scores
    );
    assert_eq!(allocated("sdpa", true), allocated("sdpa", false));
}

/// Under autocast a Llama-style eager attention multiplies in bf16 what
/// the fp32 rotary embedding left in fp32: the H200 trace of Llama-3.2-1B
/// eager amp bf16 training, batch 4, 1,024 tokens
/// (`measurements/padding/eager-train-none.events.txt`, lines 21 to 37:
/// the same with a padded batch): the repeated keys (fp32, 32 MiB) and
/// values (bf16, 16 MiB), autocast's bf16 casts of the query and the keys
/// and the query's operand copy (16 MiB each), bf16 scores (256 MiB),
/// scaled (256), plus the fp32 mask (512), the fp32 softmax (512), then a
/// bf16 copy of the probabilities for `probs @ V` (256, kept for backward)
/// and a bf16 output (16).
#[test]
fn autocast_casts_fp32_queries_keys_and_probabilities_for_the_products() {
    let mut workload = Workload {
        mode: Mode::Training,
        batch: 4,
        seq_len: 1024,
        attention: Attention::Eager,
        ..Workload::default()
    };
    workload.training.precision = headroom_core::workload::Precision::AmpBf16;
    let runtime = RuntimeProfile::h200();
    let events = events_in_mib("llama-3.2-1b", &workload, &runtime, 16 * MIB);
    let scores = events
        .iter()
        .position(|&e| e == (true, 256))
        .expect("the first layer's scores");
    assert_eq!(
        events[scores - 5..scores + 10],
        [
            (true, 32),
            (true, 16),
            (true, 16),
            (true, 16),
            (true, 16),
            (true, 256),
            (false, 16),
            (true, 256),
            (false, 256),
            (true, 512),
            (false, 256),
            (true, 512),
            (false, 512),
            (true, 256),
            (true, 16),
        ]
    );
}

/// GPT-2's block keeps its attention output (`attn_output`) to the end
/// and frees the first norm's output only after the residual add, and the
/// second norm's only after the MLP's add: the H200 trace of GPT-2 fp16
/// generation, batch 32, 512 tokens
/// (`measurements/generation-search/trace-segments-gpt2.jsonl.gz`, the
/// first layer of the prefill, events of at least 1 MiB, in MiB).
#[test]
fn gpt2_blocks_free_their_locals_as_the_trace_shows() {
    let mut workload = Workload {
        mode: Mode::Inference,
        batch: 32,
        seq_len: 512,
        dtype: Dtype::Fp16,
        ..Workload::default()
    };
    workload.inference.new_tokens = 2;
    // A fresh process: the first matmul creates cuBLAS's workspaces (32
    // and 1 MiB).
    let mut runtime = RuntimeProfile::h200();
    runtime.process_ran_backward = false;
    let events = events_in_mib("gpt2", &workload, &runtime, MIB);
    let c_attn = events
        .iter()
        .position(|&e| e == (true, 72))
        .expect("the first layer's fused projection");
    let trace = common::trace::<u64>("gpt2_fp16_generation_b32_s512_first_layer");
    assert_eq!(events[c_attn - 1..c_attn - 1 + trace.len()], trace[..]);
}

/// Gemma 2 alternates global and sliding-window layers, and eager
/// attention builds a mask for each kind: the causal one (its (1, 1, s, s)
/// boolean, the additive mask, the boolean freed), then the window's
/// through `and_masks` (two booleans combined, the causal boolean, a second
/// combination, the additive mask). The H200 trace of Gemma-2-9B eager
/// LoRA, bf16, checkpointing, batch 4, 2,048 tokens
/// (`measurements/h200-generalization/trace-segments-30.jsonl.gz`, events
/// 3 to 14; 4 MiB booleans, 32 MiB masks).
#[test]
fn gemma2_builds_a_causal_and_a_sliding_window_mask() {
    let mut workload = Workload {
        mode: Mode::Training,
        batch: 4,
        seq_len: 2048,
        attention: Attention::Eager,
        ..Workload::default()
    };
    workload.training.precision = headroom_core::workload::Precision::Bf16;
    workload.training.grad_checkpointing = true;
    workload.training.lora = Some(headroom_core::workload::Lora {
        rank: 16,
        alpha: None,
        target_modules: Vec::new(),
        dropout: None,
    });
    let mut runtime = RuntimeProfile::h200();
    runtime.process_ran_backward = false;
    let events = events_in_mib("gemma-2-9b", &workload, &runtime, MIB + 1);
    let first_mask = events
        .iter()
        .position(|&e| e == (true, 32))
        .expect("the causal mask");
    assert_eq!(
        events[first_mask - 1..first_mask + 11],
        [
            (true, 4),
            (true, 32),
            (false, 4),
            (true, 4),
            (true, 4),
            (false, 4),
            (true, 4),
            (true, 4),
            (false, 4),
            (false, 4),
            (true, 32),
            (false, 4),
        ]
    );
}

/// The backward of a checkpointed Llama-3.2-1B eager attention layer as
/// the H200 trace of amp bf16 training, batch 2, 2,048 tokens, runs it
/// (`measurements/h200-generalization/trace-segments-28.jsonl.gz`, the
/// last layer's backward, events 1,806 to 1,828 and 1,865 to 1,871 of
/// those above 1 MiB, in MiB; the replay's order matches the trace's
/// through event 5,700, the first step's backward):
/// - `probs @ V`: the value's 16 MiB gradient before the probabilities'
///   512 MiB one (`bmm` computes `mat2`'s first);
/// - the softmax: its 1 GiB gradient, then a 1 GiB `grad * output`
///   temporary freed at once, then the incoming gradient and the saved
///   output;
/// - `v_proj`: the values' view copies their contiguous 4 MiB gradient
///   before the projection's backward.
#[test]
fn checkpointed_eager_attention_backward_follows_the_trace() {
    let json = r#"{"model": "llama-3.2-1b", "workload": {"mode": "training", "batch": 2,
        "seq_len": 2048, "attention": "eager", "training": {"precision": "amp_bf16",
        "grad_checkpointing": true}}, "runtime": {"process_ran_backward": false}}"#;
    let events: Vec<(bool, u64)> = common::spec_events_above_one_mib(json)
        .into_iter()
        .map(|(alloc, size)| (alloc, size / MIB))
        .collect();
    let attention =
        common::trace::<u64>("llama_3_2_1b_eager_amp_bf16_ckpt_b2_s2048_attention_backward");
    assert_eq!(events[1806..1829], attention[..]);
    let values = common::trace::<u64>("llama_3_2_1b_eager_amp_bf16_ckpt_b2_s2048_v_proj_backward");
    assert_eq!(events[1865..1872], values[..]);
}

/// In training `bmm` saves the copy `torch.matmul` made of a strided
/// operand, not the view it copied: GPT-2's queries are views of the fused
/// `c_attn` output, so with `use_cache=True` (the keys and values then come
/// out of the cache's `cat`) each layer's 18 MiB `c_attn` output is freed
/// in forward and only the 6 MiB query copy stays for backward. Measured
/// on the H200 (`measurements/h200-generalization/measured-2.jsonl`,
/// GPT-2 eager fp32 AdamW, batch 4, 512 tokens): allocated peak
/// 6,328,101,888 bytes; the replay's is within 0.5% (it kept all twelve
/// `c_attn` outputs before, 160 MB over).
#[test]
fn eager_products_save_the_copies_of_strided_operands() {
    let json = r#"{"model": "gpt2", "workload": {"mode": "training", "batch": 4,
        "seq_len": 512, "attention": "eager", "training": {"precision": "fp32",
        "use_cache": true}}, "runtime": {"process_ran_backward": false}}"#;
    let spec = headroom_core::readers::Spec::from_json(json).unwrap();
    let allocated = headroom_core::estimate(&spec.model.arch, &spec.workload, &spec.runtime)
        .unwrap()
        .allocated_peak
        .0 as f64;
    let measured = 6_328_101_888.0;
    assert!(
        (allocated / measured - 1.0).abs() < 0.005,
        "allocated {allocated} against {measured}"
    );
}

/// The backward of peft's `result + lora_B(lora_A(x)) * scaling` (a bf16
/// base output plus an fp32 delta, then cast back): the sum hands the
/// delta its gradient as is and the base output a bf16 cast, then the
/// scaling allocates its own. The H200 trace of Gemma-2-9B eager LoRA,
/// bf16, checkpointing, batch 4, 2,048 tokens
/// (`measurements/h200-generalization/trace-segments-30.jsonl.gz`, first
/// job, events 5,739 to 5,750 of those above 1 MiB: the last layer's
/// `v_proj`; the replay's order matches the trace's through event 5,788).
#[test]
fn lora_sum_backward_passes_the_delta_its_gradient() {
    let json = r#"{"model": "gemma-2-9b", "workload": {"mode": "training", "batch": 4,
        "seq_len": 2048, "attention": "eager", "training": {"precision": "bf16",
        "grad_checkpointing": true, "lora": {"rank": 16}}},
        "runtime": {"process_ran_backward": false}}"#;
    let events: Vec<(bool, u64)> = common::spec_events_above_one_mib(json)
        .into_iter()
        .map(|(alloc, size)| (alloc, size / MIB))
        .collect();
    let v_proj = common::trace::<u64>("gemma_2_9b_eager_lora_bf16_ckpt_b4_s2048_v_proj_backward");
    assert_eq!(events[5739..5751], v_proj[..]);
}

/// Eager attention's output `transpose(1, 2)`: its gradient is reshaped
/// for `bmm`, a copy above batch 1 (trace 28, batch 2: a 16 MiB block at
/// event 1,806 before the value's gradient) and a view at batch 1 (trace
/// 30's second job, batch 1: none at event 5,599). Counted over a
/// training job: one copy per layer and step in forward, and at batch 2
/// one more in backward.
#[test]
fn the_output_transpose_gradient_is_copied_only_above_batch_one() {
    let copies = |batch: u32| {
        let mut workload = Workload {
            mode: Mode::Training,
            batch,
            seq_len: 1024,
            attention: Attention::Eager,
            ..Workload::default()
        };
        workload.training.precision = headroom_core::workload::Precision::AmpBf16;
        common::named_events("llama-3.2-1b", &workload, &RuntimeProfile::h200(), 1)
            .into_iter()
            .filter(|&(alloc, _, name)| alloc && name == "attention output transpose")
            .count()
    };
    let forward = 16 * 2;
    assert_eq!(copies(1), forward);
    assert_eq!(copies(2), 2 * forward);
}
