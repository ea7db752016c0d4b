//! "Fits" is decided from the likely range's high end: a card the table
//! says fits holds the high end of the estimate made on it.
#![allow(clippy::field_reassign_with_default)]

use headroom_core::estimate::{estimate_with, EstimateOptions};
use headroom_core::gpus::CATALOG;
use headroom_core::search::{decision_capacity, gpu_fit, is_measured_card};
use headroom_core::uncertainty::likely_range;
use headroom_core::workload::{Mode, Precision};
use headroom_core::{presets, RuntimeProfile, Workload};

#[test]
fn a_card_that_fits_holds_the_likely_range_of_the_estimate_on_it() {
    let runtime = RuntimeProfile::h200();
    let jobs: &[(&str, Mode, u32, u32)] = &[
        ("llama-3.1-8b", Mode::Inference, 8, 8192),
        ("llama-3.2-1b", Mode::Training, 8, 2048),
        ("resnet-50", Mode::Training, 128, 224),
    ];
    let mut fits_somewhere = 0;
    for &(id, mode, batch, length) in jobs {
        let arch = presets::find(id).unwrap().arch;
        let mut w = Workload::default();
        w.mode = mode;
        w.batch = batch;
        w = w.with_length(arch.is_vision(), length);
        w.training.precision = Precision::AmpBf16;
        for gpu in CATALOG {
            let row = gpu_fit(gpu, &arch, &w, &runtime, 0).unwrap();
            let on_card = estimate_with(
                &arch,
                &w,
                &runtime,
                EstimateOptions {
                    capacity: Some(decision_capacity(gpu, &arch, &w, &runtime, 0)),
                    ..EstimateOptions::default()
                },
            )
            .unwrap();
            assert_eq!(row.fits, on_card.fits, "{id} on {}", gpu.name);
            if row.fits {
                fits_somewhere += 1;
                let range = likely_range(
                    &arch,
                    &w,
                    on_card.driver_peak,
                    on_card.outside_allocator,
                    is_measured_card(gpu),
                );
                assert!(
                    range.high.0 <= gpu.usable_bytes,
                    "{id} on {}: high end {} above {}",
                    gpu.name,
                    range.high,
                    gpu.usable_bytes
                );
            }
        }
    }
    assert!(fits_somewhere > 10);
}

#[test]
fn a_margin_and_an_unmeasured_card_leave_less_room() {
    let arch = presets::find("llama-3.1-8b").unwrap().arch;
    let runtime = RuntimeProfile::h200();
    let w = Workload::default();
    let h200 = headroom_core::gpus::find("h200").unwrap();
    let plain = decision_capacity(h200, &arch, &w, &runtime, 0);
    assert!(plain < h200.usable_bytes);
    assert!(decision_capacity(h200, &arch, &w, &runtime, 10) < plain);
    // An unmeasured card of the H200's size leaves less room still.
    let unmeasured = headroom_core::gpus::Gpu {
        id: "other",
        ..*h200
    };
    assert!(!is_measured_card(&unmeasured));
    assert!(decision_capacity(&unmeasured, &arch, &w, &runtime, 0) < plain);
}

/// A CNN in `channels_last` has its own band: its blocks are its tensors
/// (no layout copies), and its measured errors are another population
/// than NCHW's; an NCHW job keeps the `cnn` band, an LLM its family's.
#[test]
fn channels_last_cnns_have_their_own_band() {
    use headroom_core::uncertainty::{band_family, band_for};
    use headroom_core::workload::MemoryFormat;
    let resnet = presets::find("resnet-50").unwrap().arch;
    let mut w = Workload::default();
    w.mode = Mode::Training;
    w.batch = 64;
    w.image_size = Some(224);
    let nchw = band_for(&resnet, &w);
    assert_eq!((band_family(&resnet, &w), nchw.family), ("cnn", "cnn"));
    w.memory_format = MemoryFormat::ChannelsLast;
    let cl = band_for(&resnet, &w);
    assert_eq!(cl.family, "cnn_channels_last");
    assert!(cl.cases > 0, "measured channels_last jobs");
    assert!(
        cl.highest - cl.lowest < nchw.highest - nchw.lowest,
        "{cl:?} narrower than {nchw:?}"
    );
    // Transformers ignore the memory format.
    let llama = presets::find("llama-3.2-1b").unwrap().arch;
    assert_eq!(band_family(&llama, &w), "decoder");
}
