//! The workload's words on the page: each select's values are the core's
//! keys (`key`/`from_key`, the words of specs, measurement files and the
//! URL), and only the labels people read are the page's.

use headroom_core::arch::Dtype;
use headroom_core::parallel::{ParallelOptions, Strategy};
use headroom_core::workload::{
    Attention, InferenceKind, LoadPath, Logits, MemoryFormat, Mode, Optimizer, Precision, Workload,
};

/// A workload enum whose variants a select offers.
pub trait Choice: Copy + PartialEq + 'static {
    /// Every variant (the core's order).
    const ALL: &'static [Self];
    /// The core's key: the select's value, and the URL's.
    fn key(self) -> &'static str;
    /// The variant of a key.
    fn from_key(key: &str) -> Option<Self>;
    /// What the select shows.
    fn label(self) -> &'static str;
}

macro_rules! choice {
    ($ty:ident { $($variant:ident => $label:literal),+ $(,)? }) => {
        impl Choice for $ty {
            const ALL: &'static [$ty] = $ty::ALL;
            fn key(self) -> &'static str {
                $ty::key(self)
            }
            fn from_key(key: &str) -> Option<$ty> {
                $ty::from_key(key)
            }
            fn label(self) -> &'static str {
                match self {
                    $($ty::$variant => $label),+
                }
            }
        }
    };
}

choice!(Mode { Inference => "Inference", Training => "Training" });
choice!(Attention { Sdpa => "SDPA (fused)", Eager => "eager (materialised scores)" });
choice!(InferenceKind {
    Generate => "generate (prefill + decode, KV cache)",
    Forward => "one forward pass",
});
choice!(Logits {
    Last => "last position only",
    All => "every position",
    None => "no head (hidden states)",
});
choice!(Optimizer {
    Adamw => "AdamW",
    Sgd => "SGD",
    SgdMomentum => "SGD + momentum",
    Adafactor => "Adafactor",
    Adamw8bit => "8-bit AdamW",
    PagedAdamw8bit => "paged 8-bit AdamW",
    PagedAdamw32bit => "paged 32-bit AdamW",
});
choice!(Precision {
    AmpBf16 => "fp32 weights + bf16 autocast",
    AmpFp16 => "fp32 weights + fp16 autocast",
    Bf16 => "pure bf16",
    Fp16 => "pure fp16",
    Fp32 => "fp32",
});
choice!(MemoryFormat {
    Contiguous => "NCHW (contiguous, the default)",
    ChannelsLast => "channels_last (NHWC)",
});
choice!(LoadPath {
    Compact => "moved to the GPU (compact)",
    BuildThenCast => "built on GPU in fp32, then cast",
});
choice!(Strategy {
    None => "one GPU",
    Ddp => "DDP",
    Fsdp2 => "FSDP2",
    Zero1 => "ZeRO-1",
    Tp => "tensor parallel",
});
choice!(Dtype {
    Fp32 => "fp32",
    Fp16 => "fp16",
    Bf16 => "bf16",
    Int8 => "8-bit (bitsandbytes)",
    Int4 => "4-bit NF4 (bitsandbytes)",
    Int4Dq => "4-bit NF4, double quant (QLoRA)",
});

/// A select's options: (key, label) of each of `variants`.
pub fn options<T: Choice>(variants: &[T]) -> Vec<(&'static str, &'static str)> {
    variants.iter().map(|v| (v.key(), v.label())).collect()
}

/// The weight dtypes offered (quantised ones where the model takes them).
pub fn dtype_options(quantised: bool) -> Vec<(&'static str, &'static str)> {
    let all = [
        Dtype::Bf16,
        Dtype::Fp16,
        Dtype::Fp32,
        Dtype::Int4Dq,
        Dtype::Int4,
        Dtype::Int8,
    ];
    options(&all[..if quantised { 6 } else { 3 }])
}

/// The KV-cache select's value for "the weights' dtype" (no dtype set).
pub const KV_AUTO: &str = "auto";

/// The KV-cache dtypes offered: [`KV_AUTO`], then every dtype.
pub fn kv_dtype_options() -> Vec<(&'static str, &'static str)> {
    let mut out = vec![(KV_AUTO, "same as weights")];
    out.extend(
        [
            Dtype::Bf16,
            Dtype::Fp16,
            Dtype::Fp32,
            Dtype::Int8,
            Dtype::Int4,
        ]
        .map(|d| (d.key(), d.key())),
    );
    out
}

/// The KV-cache select's value for `dtype`.
pub fn kv_dtype_key(dtype: Option<Dtype>) -> &'static str {
    dtype.map_or(KV_AUTO, Dtype::key)
}

/// The KV-cache dtype of a select value (`None`: the weights' dtype; an
/// unknown value: nothing to change).
pub fn kv_dtype_from_key(key: &str) -> Option<Option<Dtype>> {
    if key == KV_AUTO {
        Some(None)
    } else {
        Dtype::from_key(key).map(Some)
    }
}

/// The ESMFold stem dtypes offered (fp16 is HF's default).
pub fn stem_dtype_options() -> Vec<(&'static str, &'static str)> {
    [
        (Dtype::Fp16, "fp16 (default)"),
        (Dtype::Bf16, "bf16"),
        (Dtype::Fp32, "fp32"),
    ]
    .map(|(d, label)| (d.key(), label))
    .to_vec()
}

/// The logits offered: a generation keeps the last position by default; a
/// forward pass has an LM head over every position or none.
pub fn logits_options(generation: bool) -> Vec<(&'static str, &'static str)> {
    if generation {
        options(Logits::ALL)
    } else {
        vec![
            (Logits::All.key(), "LM head over every position"),
            (Logits::None.key(), Logits::None.label()),
        ]
    }
}

/// The strategies offered for a mode: one GPU, then data parallelism
/// (DDP, ZeRO-1, FSDP2) for training, tensor parallelism for inference.
pub fn strategy_options(mode: Mode) -> Vec<(&'static str, &'static str)> {
    match mode {
        Mode::Training => options(&[
            Strategy::None,
            Strategy::Ddp,
            Strategy::Zero1,
            Strategy::Fsdp2,
        ]),
        Mode::Inference => options(&[Strategy::None, Strategy::Tp]),
    }
}

/// Switches the mode; a strategy the new mode does not take gives way to
/// one GPU (FSDP2's other options stay).
pub fn set_mode(w: &mut Workload, mode: Mode) {
    w.mode = mode;
    if w.parallel.validate(mode == Mode::Training).is_err() {
        w.parallel.strategy = Strategy::None;
        w.parallel.world_size = 1;
    }
}

/// What one estimate covers: `None` on one GPU, else e.g. "per rank, 8
/// GPUs, FSDP2".
pub fn per_rank_label(p: &ParallelOptions) -> Option<String> {
    if p.is_single() && p.world_size == 1 {
        return None;
    }
    let gpus = if p.world_size == 1 { "GPU" } else { "GPUs" };
    Some(format!(
        "per rank, {} {gpus}, {}",
        p.world_size,
        p.strategy.label()
    ))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::state::AppState;
    use headroom_core::presets;
    use headroom_core::workload::Workload;

    /// `field=key` in the page's URL, read back as the same state.
    #[track_caller]
    fn url_round_trips(s: &AppState, field: &str, key: &str) {
        let q = s.to_query();
        let (back, notes) = AppState::from_query(&q, &["h200"]);
        assert!(notes.is_empty(), "{q}: {notes:?}");
        assert_eq!(&back, s, "{q}");
        // A default value is left out of the link.
        let default = crate::defaults::workload_for(&s.model.arch);
        let set = serde_json::to_value(&s.workload).unwrap();
        let base = serde_json::to_value(&default).unwrap();
        let pointer = format!("/{}", field.replace('.', "/"));
        if set.pointer(&pointer) != base.pointer(&pointer) {
            assert!(
                q.split('&').any(|p| p == format!("{field}={key}")),
                "{q} lacks {field}={key}"
            );
        }
    }

    /// Each select lists every variant it offers by the core's key, and
    /// that key reads back as the variant.
    #[track_caller]
    fn select_round_trips<T: Choice + std::fmt::Debug>(
        options: &[(&'static str, &'static str)],
        variant: T,
    ) {
        assert!(
            options
                .iter()
                .any(|(k, l)| *k == variant.key() && !l.is_empty()),
            "{variant:?}: {options:?}"
        );
        assert_eq!(T::from_key(variant.key()), Some(variant));
    }

    fn state(id: &str, f: impl FnOnce(&mut Workload)) -> AppState {
        let mut s = AppState::for_model(presets::find(id).unwrap().model());
        f(&mut s.workload);
        s
    }

    /// Every variant of every workload enum the page sets: its key is the
    /// select's value, the URL's word, and the spec's (the core's serde
    /// form), and it round-trips through each.
    #[test]
    fn every_key_round_trips_through_the_url_and_the_selects() {
        for &m in Mode::ALL {
            select_round_trips(&options(Mode::ALL), m);
            url_round_trips(&state("llama-3.2-1b", |w| w.mode = m), "mode", m.key());
        }
        for &a in Attention::ALL {
            select_round_trips(&options(Attention::ALL), a);
            url_round_trips(
                &state("llama-3.2-1b", |w| w.attention = a),
                "attention",
                a.key(),
            );
        }
        for &k in InferenceKind::ALL {
            select_round_trips(&options(InferenceKind::ALL), k);
            url_round_trips(
                &state("llama-3.2-1b", |w| w.inference.kind = k),
                "inference.kind",
                k.key(),
            );
        }
        for &l in Logits::ALL {
            select_round_trips(&logits_options(true), l);
            if l != Logits::Last {
                select_round_trips(&logits_options(false), l);
            }
            url_round_trips(
                &state("llama-3.2-1b", |w| w.inference.logits = l),
                "inference.logits",
                l.key(),
            );
        }
        for &o in Optimizer::ALL {
            select_round_trips(&options(Optimizer::ALL), o);
            let s = state("llama-3.2-1b", |w| {
                w.mode = Mode::Training;
                w.training.optimizer = o;
            });
            url_round_trips(&s, "training.optimizer", o.key());
        }
        for &p in Precision::ALL {
            select_round_trips(&options(Precision::ALL), p);
            let s = state("llama-3.2-1b", |w| {
                w.mode = Mode::Training;
                w.training.precision = p;
            });
            url_round_trips(&s, "training.precision", p.key());
        }
        for &strategy in Strategy::ALL {
            let mode = if strategy == Strategy::Tp {
                Mode::Inference
            } else {
                Mode::Training
            };
            select_round_trips(&strategy_options(mode), strategy);
            let s = state("llama-3.2-1b", |w| {
                w.mode = mode;
                w.training.precision = Precision::Bf16;
                w.parallel.strategy = strategy;
                w.parallel.world_size = if strategy == Strategy::None { 1 } else { 8 };
            });
            url_round_trips(&s, "parallel.strategy", strategy.key());
        }
        for &f in MemoryFormat::ALL {
            select_round_trips(&options(MemoryFormat::ALL), f);
            url_round_trips(
                &state("resnet-50", |w| w.memory_format = f),
                "memory_format",
                f.key(),
            );
        }
        url_round_trips(
            &state("llama-3.2-1b", |w| w.padded = true),
            "padded",
            "true",
        );
        // A decoder whose padding is not modelled turns it off.
        let mut s = state("llama-3.2-1b", |w| w.padded = true);
        s.set_model(presets::find("qwen2.5-7b").unwrap().model());
        assert!(s.workload.padded, "kept for another decoder it applies to");
        s.set_model(presets::find("gemma-2-9b").unwrap().model());
        assert!(!s.workload.padded);
        for &l in LoadPath::ALL {
            select_round_trips(&options(LoadPath::ALL), l);
            url_round_trips(&state("llama-3.2-1b", |w| w.load = l), "load", l.key());
        }
        for &d in Dtype::ALL {
            select_round_trips(&dtype_options(true), d);
            url_round_trips(&state("llama-3.2-1b", |w| w.dtype = d), "dtype", d.key());
            if d == Dtype::Int4Dq {
                // A weights' format only: no KV cache is double-quantized.
                assert!(!kv_dtype_options().iter().any(|(k, _)| *k == d.key()));
                continue;
            }
            assert!(kv_dtype_options().iter().any(|(k, _)| *k == d.key()));
            assert_eq!(kv_dtype_from_key(kv_dtype_key(Some(d))), Some(Some(d)));
            url_round_trips(
                &state("llama-3.2-1b", |w| w.inference.kv_dtype = Some(d)),
                "inference.kv_dtype",
                d.key(),
            );
            if d.is_float() {
                select_round_trips(&dtype_options(false), d);
                select_round_trips(&stem_dtype_options(), d);
                url_round_trips(
                    &state("esmfold-v1", |w| w.esmfold.stem_dtype = d),
                    "esmfold.stem_dtype",
                    d.key(),
                );
            }
        }
        assert_eq!(kv_dtype_from_key(KV_AUTO), Some(None));
        assert_eq!(kv_dtype_from_key("fp8"), None);
        assert!(Dtype::from_key(KV_AUTO).is_none());
    }

    /// The page's keys are the spec's: "sgd" is SGD with momentum, as in
    /// measurement files, and plain SGD has a key of its own.
    #[test]
    fn the_page_and_the_spec_share_the_optimizer_keys() {
        let w = headroom_core::readers::parse_workload(Some(&serde_json::json!({
            "mode": "training",
            "training": {"optimizer": "sgd"},
        })))
        .unwrap();
        assert_eq!(w.training.optimizer, Optimizer::SgdMomentum);
        let sgd = options(Optimizer::ALL)
            .into_iter()
            .find(|(k, _)| *k == "sgd")
            .unwrap();
        assert_eq!(sgd.1, "SGD + momentum");
        assert_ne!(Optimizer::Sgd.key(), "sgd");
        let (s, _) = AppState::from_query("mode=training&training.optimizer=sgd", &[]);
        assert_eq!(s.workload.training.optimizer, Optimizer::SgdMomentum);
    }

    /// Each mode offers the strategies the core takes for it; switching
    /// the mode drops a strategy the new mode does not take.
    #[test]
    fn strategies_follow_the_mode() {
        let keys = |m| {
            strategy_options(m)
                .into_iter()
                .map(|(k, _)| k)
                .collect::<Vec<_>>()
        };
        assert_eq!(keys(Mode::Training), ["none", "ddp", "zero1", "fsdp2"]);
        assert_eq!(keys(Mode::Inference), ["none", "tp"]);
        let mut w = Workload {
            mode: Mode::Training,
            ..Workload::default()
        };
        w.parallel.strategy = Strategy::Fsdp2;
        w.parallel.world_size = 8;
        w.parallel.reshard_after_forward = false;
        set_mode(&mut w, Mode::Inference);
        assert_eq!(w.mode, Mode::Inference);
        assert_eq!(
            (w.parallel.strategy, w.parallel.world_size),
            (Strategy::None, 1)
        );
        assert!(!w.parallel.reshard_after_forward);
        w.validate().unwrap();
        w.parallel.strategy = Strategy::Tp;
        w.parallel.world_size = 4;
        set_mode(&mut w, Mode::Inference);
        assert_eq!(
            (w.parallel.strategy, w.parallel.world_size),
            (Strategy::Tp, 4)
        );
    }

    #[test]
    fn the_per_rank_label_names_the_count_and_strategy() {
        let mut p = ParallelOptions::default();
        assert_eq!(per_rank_label(&p), None);
        p.strategy = Strategy::Fsdp2;
        p.world_size = 8;
        assert_eq!(
            per_rank_label(&p).as_deref(),
            Some("per rank, 8 GPUs, FSDP2")
        );
        p.strategy = Strategy::Ddp;
        p.world_size = 1;
        assert_eq!(per_rank_label(&p).as_deref(), Some("per rank, 1 GPU, DDP"));
    }
}
