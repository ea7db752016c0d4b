//! Encoders with a classification head (`workload.head`): the parameters
//! transformers' `...ForSequenceClassification` and
//! `...ForTokenClassification` build, what their heads keep alive, and
//! ESM's Python GELU in backward. Pinned to the H200 runs of batch 26
//! (`measurements/h200-generalization/measured-26.jsonl` and the traces
//! `trace-segments-26*.jsonl.gz`).

use crate::common;

use common::{named_events, MIB};
use headroom_core::workload::{Head, Mode, Precision};
use headroom_core::{estimate, presets, RuntimeProfile, Workload};

fn training(head: Head, labels: Option<u32>, precision: Precision) -> Workload {
    let mut w = Workload {
        mode: Mode::Training,
        batch: 4,
        seq_len: 1024,
        head,
        num_labels: labels,
        ..Workload::default()
    };
    w.training.precision = precision;
    w
}

fn fresh() -> RuntimeProfile {
    let mut runtime = RuntimeProfile::h200();
    runtime.process_ran_backward = false;
    runtime
}

/// Parameter counts as the harness's models reported them on the H200
/// (`measured-26.jsonl`): BERT's pooler and classifier, or its token
/// classifier without a pooler; ESM's classification head (dense and
/// projection) or token classifier on `EsmModel` without a pooler.
#[test]
fn heads_have_the_parameters_transformers_builds() {
    let cases = [
        (
            "bert-base-uncased",
            Head::SequenceClassification,
            None,
            109_483_778,
        ),
        (
            "bert-base-uncased",
            Head::TokenClassification,
            Some(9),
            108_898_569,
        ),
        ("bert-base-uncased", Head::Lm, None, 109_514_298),
        (
            "esm2-t33-650m",
            Head::SequenceClassification,
            None,
            651_043_223,
        ),
        (
            "esm2-t33-650m",
            Head::SequenceClassification,
            Some(1),
            651_041_942,
        ),
        (
            "esm2-t33-650m",
            Head::TokenClassification,
            Some(3),
            649_404_824,
        ),
    ];
    for (id, head, labels, params) in cases {
        let arch = presets::find(id).unwrap().arch;
        let w = training(head, labels, Precision::AmpBf16);
        let e = estimate(&arch, &w, &fresh()).unwrap();
        assert_eq!(e.params, params, "{id} {head:?} {labels:?}");
    }
}

/// A classifier's logits are (batch x labels) or (tokens x labels), not
/// the vocabulary's: BERT fine-tuned for classification peaks far below
/// its masked-LM pre-training.
#[test]
fn a_classifier_needs_no_vocabulary_sized_logits() {
    let arch = presets::find("bert-base-uncased").unwrap().arch;
    let peak = |head, labels| {
        let w = training(head, labels, Precision::AmpBf16);
        estimate(&arch, &w, &fresh()).unwrap().allocated_peak.0
    };
    let mlm = peak(Head::Lm, None);
    let sequence = peak(Head::SequenceClassification, None);
    let tokens = peak(Head::TokenClassification, Some(9));
    // b4 L1024: the MLM head's bf16 logits alone are 4 x 1024 x 30522 x 2 B.
    assert!(
        mlm > sequence + 4 * 1024 * 30_522 * 2,
        "{mlm} vs {sequence}"
    );
    assert!(
        tokens.abs_diff(sequence) < 64 * MIB,
        "{tokens} vs {sequence}"
    );
}

/// `hidden_states[:, 0]` is a view: without autocast the pooler's linear
/// saves it, so the whole fp32 sequence output (4 x 1024 x 768 x 4 B =
/// 12 MiB) lives until backward reaches the pooler; under autocast the
/// linear saves its (4 x 768) bf16 cast, and the sequence output goes when
/// the model's forward returns, after the loss. (The fp32 case of batch 26,
/// after the amp one in the same process, is within 0.3%; the amp cases
/// within 0.2%.)
#[test]
fn the_first_token_view_keeps_the_sequence_output_without_autocast() {
    let output = 4 * 1024 * 768 * 4;
    for (precision, freed_at) in [
        (Precision::Fp32, "sequence classifier: dense"),
        (Precision::AmpBf16, "loss: nll"),
    ] {
        let w = training(Head::SequenceClassification, None, precision);
        let events = named_events("bert-base-uncased", &w, &fresh(), output);
        let first_free = events
            .iter()
            .find(|&&(alloc, size, name)| {
                !alloc
                    && size == output
                    && (name.starts_with("loss") || name.starts_with("sequence classifier"))
            })
            .unwrap_or_else(|| panic!("{precision:?}: the sequence output is never freed"));
        assert_eq!(first_free.2, freed_at, "{precision:?}");
    }
}

/// ESM's GELU is `x * 0.5 * (1.0 + torch.erf(x / sqrt(2)))`, op by op, and
/// `erf`'s backward formula, `2.0 / sqrt(M_PI) * exp(-(self.pow(2))) *
/// grad`, keeps its four C++ temporaries until the gradient exists. The
/// H200 trace of ESM-2 650M fp32 training b4 L1024 in a fresh process
/// (`trace-segments-26.jsonl.gz`, events 1,613 to 1,623 of the last
/// layer's backward): five 80 MiB allocations, then the four temporaries,
/// the incoming gradient and the saved input freed; `1.0 + erf` hands its
/// gradient back as is. With them the replay reaches the trace's
/// allocated peak within 9 KB and its reserved peak exactly (it was
/// 160 MiB under in both).
#[test]
fn erf_backward_keeps_its_temporaries_until_the_gradient_exists() {
    let mut w = training(Head::SequenceClassification, Some(1), Precision::Fp32);
    w.training.optimizer_state_resident = false;
    let events = named_events("esm2-t33-650m", &w, &fresh(), 2 * MIB);
    // The first step's backward starts after its loss.
    let backward = events
        .iter()
        .position(|e| e.2.starts_with("loss"))
        .expect("the first loss");
    let erf: Vec<(bool, u64)> = events[backward..]
        .iter()
        .skip_while(|e| e.2 != "gelu: erf")
        .take_while(|e| e.2 == "gelu: erf")
        .map(|&(alloc, size, _)| (alloc, size / MIB))
        .collect();
    let mut expected = vec![(true, 80); 5];
    expected.extend([(false, 80); 6]);
    assert_eq!(erf, expected);
    assert!(
        !events[backward..]
            .iter()
            .take_while(|e| e.2 != "gelu: erf")
            .any(|e| e.2 == "gelu: 1 + erf"),
        "`1.0 + erf` allocates nothing in backward"
    );
    let arch = presets::find("esm2-t33-650m").unwrap().arch;
    let e = estimate(&arch, &w, &fresh()).unwrap();
    assert!(
        (25_303_992_000..=25_304_002_048).contains(&e.allocated_peak.0),
        "allocated {} (traced 25,304,002,048)",
        e.allocated_peak
    );
    assert_eq!(e.reserved_peak.0, 25_987_907_584, "traced reserved peak");
}

/// A decoder's sequence classifier (a reward model with one label) has
/// `score` (hidden x labels, no bias) instead of `lm_head`: Llama-3.2-1B
/// ties its head to the embedding, so it gains 2,048 parameters; Mixtral's
/// own 32,000-row head goes. Without vocabulary-sized logits its training
/// peak falls by more than the causal LM's fp32 logits and log-softmax.
#[test]
fn a_decoder_classifier_replaces_the_lm_head_with_score() {
    let params = |id: &str, head| {
        let arch = presets::find(id).unwrap().arch;
        let w = training(head, Some(1), Precision::AmpBf16);
        let w = Workload {
            num_labels: (head != Head::Lm).then_some(1),
            ..w
        };
        estimate(&arch, &w, &fresh()).unwrap()
    };
    let lm = params("llama-3.2-1b", Head::Lm);
    let reward = params("llama-3.2-1b", Head::SequenceClassification);
    assert_eq!(reward.params, lm.params + 2_048);
    // b4 L1024: fp32 logits and their log-softmax, 4 x 1024 x 128,256 x 4 B each.
    let logits = 4 * 1024 * 128_256 * 4;
    assert!(
        reward.allocated_peak.0 + 2 * logits < lm.allocated_peak.0,
        "{} vs {}",
        reward.allocated_peak.0,
        lm.allocated_peak.0
    );
    let mixtral_lm = params("mixtral-8x7b", Head::Lm).params;
    let mixtral_reward = params("mixtral-8x7b", Head::SequenceClassification).params;
    assert_eq!(mixtral_lm - mixtral_reward, 32_000 * 4_096 - 4_096);
}

/// `*ForSequenceClassification.forward` runs `score` over every position
/// whatever the caller keeps, so a forward's `logits` ("last" or "all")
/// changes nothing for a classifier, and the classifier's forward peaks
/// below the causal LM's with all logits.
#[test]
fn a_decoder_classifier_scores_every_position_in_a_forward() {
    let arch = presets::find("llama-3.2-1b").unwrap().arch;
    let forward = |head, logits| {
        let mut w = Workload {
            mode: Mode::Inference,
            batch: 8,
            seq_len: 2048,
            head,
            ..Workload::default()
        };
        w.inference.kind = headroom_core::workload::InferenceKind::Forward;
        w.inference.logits = logits;
        estimate(&arch, &w, &fresh()).unwrap().allocated_peak.0
    };
    use headroom_core::workload::Logits;
    let last = forward(Head::SequenceClassification, Logits::Last);
    assert_eq!(last, forward(Head::SequenceClassification, Logits::All));
    assert!(last < forward(Head::Lm, Logits::All));
}

fn reward_model_events(lora: bool) -> Vec<(bool, u64, &'static str)> {
    let mut w = training(Head::SequenceClassification, Some(1), Precision::AmpBf16);
    w.batch = 8;
    w.seq_len = 2048;
    w.training.optimizer_state_resident = false;
    if lora {
        w.num_labels = None;
        w.training.precision = Precision::Bf16;
        w.training.grad_checkpointing = true;
        w.training.lora = Some(headroom_core::workload::Lora {
            rank: 16,
            alpha: Some(32.0),
            target_modules: vec!["q_proj".into(), "v_proj".into()],
            dropout: None,
        });
    }
    named_events("llama-3.2-1b", &w, &fresh(), 2 * MIB)
}

/// HF's RMSNorm in backward, as the H200 trace of Llama-3.2-1B trained as
/// a reward model shows it (amp bf16, b8 L2048, fresh process;
/// `trace-segments-27.jsonl.gz`, events 989 to 1,008, the final norm):
/// `weight * x` gives `x`'s gradient, then the weight's through a 128 MiB
/// product and a 132 MiB reduction buffer; `x * rsqrt(...)` computes the
/// broadcast factor's gradient first as a 128 MiB product held while `x`'s
/// is made; the mean's expanded gradient; `pow`'s two temporaries and its
/// result. With them the replay reaches the trace's allocated peak within
/// 18 KB (it was 105 MB under).
#[test]
fn rms_norm_backward_takes_the_traced_temporaries() {
    let events = reward_model_events(false);
    let loss = events
        .iter()
        .position(|e| e.2.starts_with("loss"))
        .expect("the first loss");
    let norm: Vec<(bool, u64)> = events[loss..]
        .iter()
        .skip_while(|e| e.2 != "final norm")
        .take_while(|e| e.2 == "final norm")
        .map(|&(alloc, size, _)| (alloc, size / MIB))
        .collect();
    let (a, f) = (true, false);
    assert_eq!(
        norm,
        [
            (a, 128),
            (a, 128),
            (a, 132),
            (f, 132),
            (f, 128),
            (f, 128),
            (f, 128),
            (a, 128),
            (a, 128),
            (f, 128),
            (f, 128),
            (a, 128),
            (a, 128),
            (a, 128),
            (a, 128),
            (f, 128),
            (f, 128),
            (f, 128),
            (f, 128),
            (f, 128),
        ]
    );
}

/// peft's LoRA forward rebinds `x` to its fp32 cast, a local until the
/// forward returns: in a checkpointed forward, which saves nothing, the
/// 128 MiB cast lives through `lora_B`, the scaling, the sum and its cast
/// back (`trace-segments-27b.jsonl.gz`, events 11 to 21, layer 0's
/// `q_proj`). It had been freed after `lora_A`; since, the checkpointed
/// LoRA jobs of the generalization set moved from up to 1.4% off to
/// within 0.1%.
#[test]
fn a_lora_input_cast_lives_until_the_forward_returns() {
    let events = reward_model_events(true);
    let q_proj = events
        .iter()
        .position(|e| e.0 && e.2 == "attention: q_proj")
        .expect("the first q_proj");
    let lora: Vec<(bool, u64)> = events[q_proj..q_proj + 11]
        .iter()
        .map(|&(alloc, size, _)| (alloc, size / MIB))
        .collect();
    let (a, f) = (true, false);
    assert_eq!(
        lora,
        [
            (a, 64),
            (a, 128),
            (a, 128),
            (a, 128),
            (f, 128),
            (a, 128),
            (f, 128),
            (f, 64),
            (a, 64),
            (f, 128),
            (f, 128),
        ]
    );
}
