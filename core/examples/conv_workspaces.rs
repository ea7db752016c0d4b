//! Compares measured per-convolution cuDNN workspaces with the model's:
//! `cargo run --example conv_workspaces -- measurements/h200-cudnn/conv_workspaces*.jsonl`.
//! One line per hooked convolution call: case, phase, conv, shape, measured
//! and modelled bytes (backward: the larger of the two kernels' blocks,
//! since a hook sees only the larger), and the difference in MiB.
//!
//! Rows of the shape sweeps (`wgrad_shapes_sweep.jsonl`,
//! `forward_shapes_sweep.jsonl`: one convolution call per row) are compared
//! phase by phase, requested bytes against the model's block, and counted:
//! per kernel, stride, layout, precision and phase, how many rows the model
//! gets within 1 MiB, and how many it under-estimates by more.
use headroom_core::families::cnn::{backward_workspace, forward_workspace, ConvCall};
use headroom_core::RuntimeProfile;

fn mib(bytes: i64) -> f64 {
    bytes as f64 / (1u64 << 20) as f64
}

/// `(kernel, stride, channels_last, dtype, phase)` -> (rows, within 1 MiB, under by more).
type SweepCounts = std::collections::BTreeMap<(u64, u64, bool, String, &'static str), [u32; 3]>;

/// One row of a shape sweep: each phase it measured, requested bytes
/// against the model's block.
fn sweep_row(rt: &RuntimeProfile, v: &serde_json::Value, counts: &mut SweepCounts) {
    let n = |key: &str| v[key].as_u64().unwrap();
    let dtype = v["dtype"].as_str().unwrap().to_string();
    let call = ConvCall {
        cin: n("cin"),
        cout: n("cout"),
        k: n("k"),
        groups: 1,
        in_hw: n("hw"),
        out_hw: n("out_hw"),
        batch: n("batch"),
        dsize: if dtype == "float32" { 4 } else { 2 },
        fp16: dtype == "float16",
        channels_last: v["channels_last"].as_bool().unwrap(),
    };
    let [data, weight] = backward_workspace(rt, &call);
    for (phase, modelled) in [
        ("forward", forward_workspace(rt, &call)),
        ("data", data),
        ("weight", weight),
    ] {
        let Some(measured) = v.get(format!("{phase}_requested")).and_then(|m| m.as_i64()) else {
            continue;
        };
        let diff = modelled as i64 - measured;
        let key = (
            call.k,
            n("stride"),
            call.channels_last,
            dtype.clone(),
            phase,
        );
        let count = counts.entry(key).or_default();
        count[0] += 1;
        count[1] += u32::from(diff.abs() <= 1 << 20);
        count[2] += u32::from(diff < -(1 << 20));
        println!(
            "{phase} k{}/{} {}->{} {}px b{} {dtype} cl={}: measured {:.2} model {:.2} diff {:+.2} MiB",
            call.k,
            n("stride"),
            call.cin,
            call.cout,
            call.in_hw,
            call.batch,
            call.channels_last,
            mib(measured),
            mib(modelled as i64),
            mib(diff)
        );
    }
}

fn main() {
    let rt = RuntimeProfile::h200();
    let mut counts = SweepCounts::new();
    for path in std::env::args().skip(1) {
        for line in std::fs::read_to_string(&path).unwrap().lines() {
            let v: serde_json::Value = serde_json::from_str(line).unwrap();
            if v.get("cin").is_some() {
                sweep_row(&rt, &v, &mut counts);
                continue;
            }
            let Some(convs) = v.get("convs").and_then(|c| c.as_array()) else {
                continue;
            };
            let case = v["case"].as_str().unwrap_or("?");
            for c in convs {
                let shape: Vec<u64> = c["input_shape"]
                    .as_array()
                    .unwrap()
                    .iter()
                    .map(|x| x.as_u64().unwrap())
                    .collect();
                let k = c["kernel"][0].as_u64().unwrap();
                let stride = c["stride"][0].as_u64().unwrap();
                let backward = c["phase"] == "backward";
                // A backward hook sees the output gradient's shape.
                let hw = shape.get(2).copied().unwrap_or(0);
                let (in_hw, out_hw) = if backward {
                    (hw * stride, hw)
                } else {
                    (hw, (hw + 2 * (k / 2) - k) / stride + 1)
                };
                let dsize = if c["dtype"].as_str().unwrap_or("").contains("float32")
                    && !case.contains("amp")
                {
                    4
                } else {
                    2
                };
                let call = ConvCall {
                    cin: c["c_in"].as_u64().unwrap(),
                    cout: c["c_out"].as_u64().unwrap(),
                    k,
                    groups: 1,
                    in_hw,
                    out_hw,
                    batch: shape[0],
                    dsize,
                    fp16: false,
                    channels_last: case.ends_with("_cl"),
                };
                let measured = c["workspace"].as_i64().unwrap();
                let modelled = if backward {
                    backward_workspace(&rt, &call)
                        .into_iter()
                        .max()
                        .unwrap_or(0)
                } else {
                    forward_workspace(&rt, &call)
                } as i64;
                println!(
                    "{case} {} {} k{k}/{stride} {}->{} {in_hw}px b{} d{dsize}: measured {:.2} model {:.2} diff {:+.2} MiB",
                    c["phase"].as_str().unwrap_or("?"),
                    c["conv"].as_str().unwrap_or("?"),
                    call.cin,
                    call.cout,
                    call.batch,
                    mib(measured),
                    mib(modelled),
                    mib(modelled - measured)
                );
            }
        }
    }
    for ((k, stride, channels_last, dtype, phase), [rows, close, under]) in counts {
        println!(
            "k{k}/{stride} cl={channels_last} {dtype} {phase}: {rows} rows, {close} within 1 MiB, {under} under by more"
        );
    }
}
