//! Compares measured per-convolution cuDNN workspaces with the model's:
//! `cargo run --example conv_workspaces -- measurements/h200-cudnn/conv_workspaces*.jsonl`.
//! One line per hooked convolution call: case, phase, conv, shape, measured
//! and modelled bytes (backward: the larger of the two kernels' blocks,
//! since a hook sees only the larger), and the difference in MiB.
use headroom_core::families::cnn::{backward_workspace, forward_workspace, ConvCall};
use headroom_core::RuntimeProfile;

fn main() {
    let rt = RuntimeProfile::h200();
    let mib = |b: i64| b as f64 / (1u64 << 20) as f64;
    for path in std::env::args().skip(1) {
        for line in std::fs::read_to_string(&path).unwrap().lines() {
            let v: serde_json::Value = serde_json::from_str(line).unwrap();
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
}
