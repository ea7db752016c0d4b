//! Defaults that match how people run each kind of model, and the length
//! range the chart spans for it.

use headroom_core::arch::{Architecture, Dtype, EncoderKind};
use headroom_core::workload::{InferenceKind, Logits, Workload};

/// The preset the page opens with.
pub const DEFAULT_PRESET: &str = "llama-3.1-8b";

/// Points on the main curve.
pub const CURVE_POINTS: usize = 256;

/// The margin the GPU-fit table starts with, in percent, on top of the
/// likely range's high end (which already holds the measured errors).
pub const DEFAULT_MARGIN_PCT: u32 = 0;

/// Largest fragmentation margin accepted, in percent.
pub const MAX_MARGIN_PCT: u32 = 100;

/// A key that changes when the kind of model changes enough that the
/// workload and chart range should start again from that kind's defaults.
pub fn kind_key(arch: &Architecture) -> &'static str {
    match arch {
        Architecture::Decoder(_) => "decoder",
        Architecture::Encoder(e) if e.kind == EncoderKind::Bert => "bert",
        Architecture::Encoder(_) => "esm",
        Architecture::Vit(_) => "vit",
        Architecture::EsmFold(_) => "esm_fold",
        Architecture::Cnn(_) => "cnn",
    }
}

/// The workload a person most likely runs with this model (the shape of the
/// measured cases in `measurements/public/`, so their points show by default).
pub fn workload_for(arch: &Architecture) -> Workload {
    let mut w = Workload::default();
    match arch {
        Architecture::Decoder(_) => {
            w.dtype = Dtype::Bf16;
            w.seq_len = 4096;
        }
        Architecture::Encoder(e) => {
            w.dtype = Dtype::Fp32;
            w.inference.kind = InferenceKind::Forward;
            w.inference.kv_cache = false;
            match e.kind {
                EncoderKind::Bert => {
                    w.batch = 32;
                    w.seq_len = 128;
                    w.inference.logits = Logits::All;
                }
                EncoderKind::Esm => {
                    w.batch = 1;
                    w.seq_len = 1024;
                    w.inference.logits = Logits::None;
                }
            }
        }
        Architecture::EsmFold(f) => {
            w.dtype = Dtype::Fp32;
            w.seq_len = 512;
            w.esmfold.num_recycles = Some(f.max_recycles);
        }
        Architecture::Vit(_) | Architecture::Cnn(_) => {
            w.dtype = Dtype::Fp32;
            w.batch = 64;
            w.image_size = Some(224);
        }
    }
    w
}

/// The chart's default length range and axis for this model and the job's
/// `length`: `(min, max, log)`. A decoder's reaches 8 times the job's
/// length (at least 8,192 tokens), so that the job sits in the chart's
/// upper part and the axis is not set by a length 32 times the job's
/// (a training job's peak at 131,072 tokens put the 4,096-token region of
/// the default job under a 900 GB axis).
pub fn range_for(arch: &Architecture, length: u32) -> (u32, u32, bool) {
    match arch {
        Architecture::Decoder(_) => {
            let to = length
                .saturating_mul(8)
                .clamp(8_192, headroom_core::workload::MAX_SEQ_LEN as u32);
            (128.min(length.max(16)), to, true)
        }
        Architecture::Encoder(e) if e.kind == EncoderKind::Bert => {
            (16, e.max_position_embeddings.max(32), false)
        }
        Architecture::Encoder(_) => (16, 4096, false),
        Architecture::EsmFold(_) => (16, 2048, false),
        Architecture::Vit(v) => (v.patch_size.max(16), 1024, false),
        Architecture::Cnn(_) => (32, 1024, false),
    }
}

/// What the length axis measures, for labels.
pub fn length_label(arch: &Architecture) -> &'static str {
    match arch {
        Architecture::Vit(_) | Architecture::Cnn(_) => "image size (px)",
        Architecture::EsmFold(_) => "sequence length (residues)",
        Architecture::Encoder(e) if e.kind == EncoderKind::Esm => "sequence length (residues)",
        _ => "sequence length (tokens)",
    }
}

/// Which workload controls apply to a model: the page shows only these.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Applies {
    /// Inference/training switch (ESMFold runs inference only).
    pub training: bool,
    /// Attention kernel choice (transformers only).
    pub attention: bool,
    /// Generate/forward, KV cache, new tokens, KV dtype (decoders only).
    pub generation: bool,
    /// Which positions get logits.
    pub logits: bool,
    /// Gradient checkpointing and LoRA (Hugging Face transformers).
    pub hf_training: bool,
    /// ESMFold's chunk size, recycles and stem dtype.
    pub esmfold: bool,
    /// Quantised weights (int8/int4) for inference.
    pub quantised: bool,
    /// NCHW or `channels_last` (convolutional networks).
    pub memory_format: bool,
    /// Several inference batches in one process (all but ESMFold).
    pub inference_batches: bool,
    /// A padded batch (decoders without sliding windows or fused
    /// projections: the ones whose padding is modelled).
    pub padding: bool,
}

/// The controls that apply to `arch`.
pub fn applies(arch: &Architecture) -> Applies {
    let transformer = !matches!(arch, Architecture::Cnn(_));
    let decoder = matches!(arch, Architecture::Decoder(_));
    let hf = matches!(arch, Architecture::Decoder(_) | Architecture::Encoder(_));
    Applies {
        training: !matches!(arch, Architecture::EsmFold(_)),
        attention: transformer,
        generation: decoder,
        logits: hf,
        hf_training: hf,
        esmfold: matches!(arch, Architecture::EsmFold(_)),
        quantised: decoder,
        memory_format: !transformer,
        inference_batches: !matches!(arch, Architecture::EsmFold(_)),
        padding: matches!(arch, Architecture::Decoder(d) if d.sliding_window == 0 && !d.fused_projections),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use headroom_core::presets;

    #[test]
    fn every_preset_has_a_valid_default_workload_and_range() {
        for p in presets::all() {
            let w = workload_for(&p.arch);
            w.validate().unwrap_or_else(|e| panic!("{}: {e}", p.id));
            let len = w.length(p.arch.is_vision());
            let (min, max, _) = range_for(&p.arch, len);
            assert!(min >= 1 && min < max, "{}", p.id);
            assert!(
                (min..=max).contains(&len),
                "{}: {len} not in {min}..{max}",
                p.id
            );
        }
    }

    #[test]
    fn a_decoders_range_follows_the_jobs_length() {
        let llama = presets::find("llama-3.1-8b").unwrap().arch;
        assert_eq!(range_for(&llama, 4096), (128, 32_768, true));
        assert_eq!(range_for(&llama, 32_768), (128, 262_144, true));
        assert_eq!(range_for(&llama, 64), (64, 8_192, true));
        let longest = headroom_core::workload::MAX_SEQ_LEN as u32;
        let (_, top, _) = range_for(&llama, longest);
        assert_eq!(top, longest);
    }

    #[test]
    fn controls_follow_the_family() {
        let resnet = presets::find("resnet-50").unwrap().arch;
        let fold = presets::find("esmfold-v1").unwrap().arch;
        let llama = presets::find("llama-3.1-8b").unwrap().arch;
        assert!(!applies(&resnet).generation && !applies(&resnet).attention);
        assert!(applies(&resnet).memory_format && !applies(&llama).memory_format);
        assert!(applies(&fold).esmfold && !applies(&fold).training);
        assert!(applies(&llama).generation && !applies(&llama).esmfold);
        let gemma = presets::find("gemma-2-9b").unwrap().arch;
        assert!(applies(&llama).padding && !applies(&gemma).padding && !applies(&resnet).padding);
    }
}
