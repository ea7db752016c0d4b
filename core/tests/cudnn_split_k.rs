//! The blocks cuDNN's backward kernels take are the H200 sweeps'
//! (`measurements/h200-cudnn/`): in `channels_last`, the weight-gradient
//! blocks of 3x3/1 convolutions (their split-K partial sums, nothing
//! else) to the byte; in NCHW, both kernels' blocks of every shape the
//! shape sweep measured to the byte, and at batches it did not measure
//! the call's copies plus the smaller measured batch's partial sums.

use headroom_core::families::cnn::{
    backward_workspace, measured_nchw_backward, split_k_bytes, ConvCall,
};
use headroom_core::RuntimeProfile;
use serde_json::Value;

const SWEEPS: [&str; 3] = [
    "wgrad_sweep.jsonl",
    "wgrad_sweep_fp16.jsonl",
    "wgrad_shapes_sweep.jsonl",
];

/// Every 3x3/1 convolution row of the sweeps with its call.
fn rows() -> Vec<(Value, ConvCall)> {
    all_rows()
        .into_iter()
        .filter(|(_, c)| c.k == 3 && c.in_hw == c.out_hw)
        .collect()
}

/// Every convolution row of the sweeps with its call.
fn all_rows() -> Vec<(Value, ConvCall)> {
    let dir = concat!(env!("CARGO_MANIFEST_DIR"), "/../measurements/h200-cudnn/");
    let mut out = Vec::new();
    for file in SWEEPS {
        let text = std::fs::read_to_string(format!("{dir}{file}")).expect(file);
        for line in text.lines() {
            let row: Value = serde_json::from_str(line).expect("a JSON line");
            let Some(batch) = row["batch"].as_u64() else {
                continue; // the header line
            };
            let field = |a: &str, b: &str| row[a].as_u64().or(row[b].as_u64()).expect(a);
            let dtype = row["dtype"].as_str().expect("dtype");
            let call = ConvCall {
                cin: field("cin", "c"),
                cout: field("cout", "c"),
                k: field("k", "k"),
                groups: 1,
                in_hw: field("hw", "hw"),
                out_hw: field("out_hw", "hw"),
                batch,
                dsize: if dtype == "float32" { 4 } else { 2 },
                fp16: dtype == "float16",
                channels_last: row["channels_last"].as_bool().expect("layout"),
            };
            out.push((row, call));
        }
    }
    out
}

/// In `channels_last` a 3x3/1 weight-gradient block holds nothing but the
/// split-K partial sums, which are what the same shape's NCHW block holds
/// beyond its copies, less 16 B: every such row of the shape sweep, to the
/// byte.
#[test]
fn every_channels_last_3x3_block_of_the_shape_sweep_is_measured() {
    let runtime = RuntimeProfile::h200();
    let mut checked = 0;
    for (row, call) in rows()
        .into_iter()
        .filter(|(row, c)| c.channels_last && row.get("weight_requested").is_some())
    {
        let requested = row["weight_requested"].as_u64().expect("requested");
        assert_eq!(backward_workspace(&runtime, &call), [0, requested], "{row}");
        checked += 1;
    }
    assert_eq!(
        checked, 288,
        "channels_last 3x3/1 rows of wgrad_shapes_sweep.jsonl"
    );
}

/// In NCHW every backward block of the shape sweep (every convolution
/// shape after ResNet's stem, batches 32 to 256) is the sweep's request to
/// the byte, data gradient and weight gradient, from the table of
/// measured NCHW blocks.
#[test]
fn every_nchw_backward_block_of_the_shape_sweep_is_measured() {
    let runtime = RuntimeProfile::h200();
    let mut checked = 0;
    for (row, call) in all_rows()
        .into_iter()
        .filter(|(row, c)| !c.channels_last && row.get("weight_requested").is_some())
    {
        let requested = ["data_requested", "weight_requested"]
            .map(|phase| row[phase].as_u64().expect("requested"));
        assert_eq!(backward_workspace(&runtime, &call), requested, "{row}");
        assert_eq!(measured_nchw_backward(&call), Some(requested), "{row}");
        checked += 1;
    }
    assert_eq!(checked, 2016, "NCHW rows of wgrad_shapes_sweep.jsonl");
}

/// At batches the shape sweep did not measure (the earlier sweeps' 8, 16,
/// 160, 192, 384 and 512 on 224-pixel maps, and 96 below), a block is the
/// call's own copies plus what the nearest smaller measured batch kept
/// beyond its copies. The earlier sweeps recorded blocks, not requests:
/// a block may be up to 1 MiB over its request (a cached block's unsplit
/// remainder). How well that carries to unmeasured batches, counted: of
/// their weight-gradient blocks, at least 80% within 1 MiB in each layout
/// (90 of 108 in each; the misses are batches 8 and 16, and 384 and 512).
#[test]
fn unmeasured_batches_take_their_copies_and_the_smaller_batch_partials() {
    let runtime = RuntimeProfile::h200();
    for channels_last in [false, true] {
        let (mut near, mut all) = (0, 0);
        for (row, call) in all_rows().into_iter().filter(|(row, c)| {
            c.channels_last == channels_last && row.get("weight_requested").is_none()
        }) {
            if [32, 64, 128, 256].contains(&call.batch) {
                continue;
            }
            let measured = row["weight"].as_u64().expect("weight");
            let modelled = backward_workspace(&runtime, &call)[1];
            all += 1;
            near += u32::from(measured.abs_diff(modelled.div_ceil(512) * 512) <= 1 << 20);
        }
        assert!(all >= 60, "{all} rows");
        assert!(near * 5 >= all * 4, "{near} of {all} within 1 MiB");
    }

    // A 1x1/1 convolution, 512 -> 2048 channels on 14x14 maps (ResNet-50's
    // layer4 at 448 px), bf16: at batch 64 both kernels copy the input and
    // the output gradient, the data-gradient kernel asks 16 B more, the
    // weight-gradient kernel 1,769,867 B more (its partial sums). Batch 96
    // takes batch 64's choice with its own copies.
    let call = ConvCall {
        cin: 512,
        cout: 2048,
        k: 1,
        groups: 1,
        in_hw: 14,
        out_hw: 14,
        batch: 96,
        dsize: 2,
        fp16: false,
        channels_last: false,
    };
    let copies = 96 * (512 + 2048) * 14 * 14 * 2;
    assert_eq!(
        measured_nchw_backward(&call),
        Some([copies + 16, copies + 1_769_867])
    );
}

/// The sweeps' 1x1 and strided shapes, and a shape the sweeps did not
/// measure, keep the rules (no table block).
#[test]
fn other_shapes_have_no_table_block() {
    let others: Vec<_> = all_rows()
        .into_iter()
        .filter(|(_, c)| c.k != 3 || c.in_hw != c.out_hw)
        .collect();
    assert!(others.len() > 2000, "{} rows", others.len());
    for (row, call) in others {
        assert_eq!(split_k_bytes(&call), None, "{row}");
    }
    let call = ConvCall {
        cin: 96,
        cout: 96,
        k: 3,
        groups: 1,
        in_hw: 28,
        out_hw: 28,
        batch: 64,
        dsize: 2,
        fp16: false,
        channels_last: false,
    };
    assert_eq!(split_k_bytes(&call), None);
    assert_eq!(measured_nchw_backward(&call), None);
}
