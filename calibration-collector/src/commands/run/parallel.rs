//! `run --nproc N` and `run --cases FILE`: training jobs on several GPUs of
//! this node, each case one `torchrun --standalone` job of the several-GPU
//! harness (`python/headroom_parallel.py`). Every rank measures its own GPU
//! (NVML) and prints a `HEADROOM_RESULT` line; each becomes one measurement
//! line (`measured.rank`, `measured.world_size`, the driver, reserved and
//! allocated peaks) with the core's per-rank prediction beside it, and
//! `measured.capacity_bytes`: what the rank could use, NVML's total less what
//! was in use on its GPU before the job started (read by the collector
//! through NVML, which holds no CUDA context).

use super::torchrun::{self, JobOutput};
use super::{
    append_line, collector_exe, default_out, fresh_process_prediction, install_ctrl_c, open_out,
    RunArgs, RunOutcome,
};
use crate::cases::{read_records, Status};
use crate::error::{CollectorError, Result};
use crate::gpu::Gpu;
use crate::stats::relative_error;
use headroom_core::parallel::{Strategy, MAX_WORLD_SIZE};
use headroom_core::readers::{parse_model, parse_workload};
use serde_json::{json, Map, Value};
use std::path::Path;
use std::sync::atomic::Ordering;
use std::time::Duration;

/// The presets the several-GPU harness builds.
pub const HARNESS_MODELS: [&str; 2] = ["llama-3.2-1b", "llama-3.1-8b"];
/// The strategies the several-GPU harness runs.
pub const HARNESS_STRATEGIES: [Strategy; 3] = [Strategy::Ddp, Strategy::Fsdp2, Strategy::Zero1];

/// One several-GPU case, before it runs.
#[derive(Clone, Debug)]
pub struct ParallelPoint {
    /// Case name (each rank's line gets `_rank<R>`).
    pub case: String,
    /// Preset id.
    pub model: String,
    /// Ranks (GPUs).
    pub world_size: u32,
    /// The case object the harness gets (`workload.parallel.world_size` set).
    pub case_json: Value,
    /// The core's per-rank prediction, or why there is none.
    pub predicted: Value,
}

/// True when `run` goes through torchrun.
pub fn wanted(args: &RunArgs) -> bool {
    args.cases.is_some() || args.nproc.is_some()
}

/// The cases to run, with their predictions; no GPU touched.
pub fn plan(args: &RunArgs) -> Result<Vec<ParallelPoint>> {
    let nproc = args
        .nproc
        .as_deref()
        .map(|t| crate::parallel_args::parse_count("--nproc", t, MAX_WORLD_SIZE))
        .transpose()?;
    if args.cmd.is_some() {
        return Err(CollectorError::input(
            "--cmd: runs your job as given, on one GPU; with --nproc/--cases the collector runs its several-GPU harness (launch torchrun inside --cmd for your own job)",
        ));
    }
    if args.device != 0 {
        return Err(CollectorError::input(format!(
            "--device: {} does not apply to several GPUs: ranks use GPUs 0 to N-1 of CUDA_VISIBLE_DEVICES; allowed: set CUDA_VISIBLE_DEVICES to choose them",
            args.device
        )));
    }
    let mut raw: Vec<(String, Value)> = Vec::new();
    match &args.cases {
        Some(path) => {
            if args.model.is_some() || args.workload.is_some() || args.spec.is_some() {
                return Err(CollectorError::input(
                    "--cases: give either --cases or --model/--workload/--spec, not both",
                ));
            }
            for r in read_records(path)? {
                let name = r
                    .value
                    .get("case")
                    .and_then(Value::as_str)
                    .unwrap_or("")
                    .to_string();
                if name.is_empty() {
                    return Err(CollectorError::input(format!(
                        "{}: `case` is missing; allowed: a case name (a measurement case per line)",
                        r.origin
                    )));
                }
                let mut case = Map::new();
                for key in ["case", "model", "workload"] {
                    if let Some(v) = r.value.get(key) {
                        case.insert(key.into(), v.clone());
                    }
                }
                raw.push((format!("{} (case {name})", r.origin), Value::Object(case)));
            }
        }
        None => {
            // The sweep of --model/--workload/--seq-lens/--batches.
            for p in super::plan(args)?.points {
                raw.push((
                    format!("--workload (case {})", p.case),
                    json!({"case": p.case, "model": p.model, "workload": p.workload}),
                ));
            }
        }
    }
    if raw.is_empty() {
        return Err(CollectorError::input(
            "--cases: the file has no case; allowed: measurement cases, one per line",
        ));
    }
    raw.into_iter()
        .map(|(origin, case)| point(&origin, case, nproc))
        .collect()
}

fn point(origin: &str, mut case: Value, nproc: Option<u32>) -> Result<ParallelPoint> {
    let bad = |msg: String| CollectorError::input(format!("{origin}: {msg}"));
    let model = parse_model(case.get("model")).map_err(|e| bad(e.to_string()))?;
    if !HARNESS_MODELS.contains(&model.id.as_str()) {
        return Err(bad(format!(
            "`model`: the several-GPU harness builds {}, not `{}`; allowed: one of those presets",
            HARNESS_MODELS.join(", "),
            model.id
        )));
    }
    let mut name = case
        .get("case")
        .and_then(Value::as_str)
        .unwrap_or("")
        .to_string();
    let obj = case.as_object_mut().expect("an object");
    let workload = obj.entry("workload").or_insert_with(|| json!({}));
    let Some(w) = workload.as_object_mut() else {
        return Err(bad(
            "`workload` is not an object; allowed: the `workload` object of a measurement case"
                .into(),
        ));
    };
    let parallel = w.entry("parallel").or_insert_with(|| json!({}));
    let Some(par) = parallel.as_object_mut() else {
        return Err(bad(
            "`workload.parallel` is not an object; allowed: {strategy, world_size, ...}".into(),
        ));
    };
    if let Some(n) = nproc {
        let before = par.get("world_size").and_then(Value::as_u64);
        par.insert("world_size".into(), json!(n));
        if before.is_some_and(|b| b != u64::from(n)) {
            name = format!("{name}_x{n}");
        }
    }
    case["case"] = json!(name);
    let parsed = parse_workload(case.get("workload")).map_err(|e| bad(e.to_string()))?;
    if !HARNESS_STRATEGIES.contains(&parsed.parallel.strategy) {
        return Err(bad(format!(
            "`workload.parallel.strategy` is `{}`; the several-GPU harness trains with ddp, fsdp2 or zero1; allowed: \"ddp\", \"fsdp2\" or \"zero1\"",
            parsed.parallel.strategy.key()
        )));
    }
    let predicted = fresh_process_prediction(&model.arch, &parsed, None);
    Ok(ParallelPoint {
        case: name,
        model: model.id,
        world_size: parsed.parallel.world_size,
        case_json: case,
        predicted,
    })
}

/// The torchrun job of one case, and how to show it.
pub fn command_for(
    args: &RunArgs,
    p: &ParallelPoint,
    harness: &Path,
) -> (std::process::Command, String) {
    torchrun::command(
        &args.torchrun,
        p.world_size,
        harness,
        &["--case-json".into(), p.case_json.to_string()],
    )
}

fn gb(v: &Value) -> Option<f64> {
    v.as_u64().map(|b| b as f64 / 1e9)
}

/// What `--dry-run` prints: each case's per-rank prediction and command.
pub fn render_dry_run(args: &RunArgs, points: &[ParallelPoint]) -> String {
    let mut out = String::new();
    for p in points {
        let (_, shown) = command_for(args, p, Path::new("<harness>/headroom_parallel.py"));
        let pred = match gb(&p.predicted["driver_peak"]) {
            Some(g) => format!("predicted {g:.3} GB per rank"),
            None => format!(
                "no prediction ({})",
                p.predicted["skipped"].as_str().unwrap_or("")
            ),
        };
        out.push_str(&format!(
            "# {} on {} GPU(s): {pred}\n{shown}\n",
            p.case, p.world_size
        ));
    }
    out
}

/// One measurement line per rank of a finished (or stopped) job. A rank
/// that printed no result is written as out of memory when the job's output
/// says so, else as failed; when the job was interrupted, only the ranks
/// that reported are written.
pub fn rank_lines(p: &ParallelPoint, job: &JobOutput) -> Vec<(u32, Status, Value)> {
    let mut lines = Vec::new();
    let shared_runtime = job
        .results
        .iter()
        .find_map(|r| r.get("runtime").cloned())
        .unwrap_or_else(|| json!({}));
    for rank in 0..p.world_size {
        let reported = job
            .results
            .iter()
            .find(|r| torchrun::rank_of(r) == u64::from(rank));
        let mut line = match reported {
            Some(r) => r.clone(),
            None if job.interrupted => continue,
            None => json!({
                "model": p.model,
                "workload": p.case_json["workload"],
                "runtime": shared_runtime,
                "measured": {"rank": rank, "world_size": p.world_size},
            }),
        };
        let status = match reported {
            Some(r) if r["measured"]["oom"] == json!(true) => Status::Oom,
            Some(r) if r["measured"]["driver_peak"].as_u64().is_some_and(|b| b > 0) => Status::Ok,
            Some(_) => Status::Failed,
            None if job.mentions_oom() => Status::Oom,
            None => Status::Failed,
        };
        let obj = line.as_object_mut().expect("a result is an object");
        obj.insert("case".into(), json!(format!("{}_rank{rank}", p.case)));
        let measured = obj
            .entry("measured")
            .or_insert_with(|| json!({}))
            .as_object_mut()
            .expect("measured is an object");
        measured.insert(
            "status".into(),
            serde_json::to_value(status).expect("status"),
        );
        measured.insert("exit_code".into(), json!(job.exit_code));
        measured.insert(
            "process_seconds".into(),
            json!((job.seconds * 1000.0).round() / 1000.0),
        );
        if status == Status::Oom {
            if let Some(total) = shared_runtime.get("gpu_total_bytes") {
                measured.insert("capacity_bytes".into(), total.clone());
            }
        }
        if reported.is_none() {
            let why = if job.timed_out {
                "timed out".to_string()
            } else {
                let last = job.tail.last().map_or("", |l| l.trim());
                format!(
                    "rank {rank} reported no result (exit code {}): {last}",
                    job.exit_code
                        .map_or_else(|| "none".into(), |c| c.to_string())
                )
            };
            measured.insert("error".into(), json!(why));
        }
        let mut predicted = p.predicted.clone();
        if let (Status::Ok, Some(pred), Some(meas)) = (
            status,
            predicted["driver_peak"].as_u64(),
            measured.get("driver_peak").and_then(Value::as_u64),
        ) {
            let e = relative_error(pred, meas);
            predicted["error"] = json!((e * 10000.0).round() / 10000.0);
        }
        obj.insert("predicted".into(), predicted);
        obj.insert(
            "collector".into(),
            json!({
                "version": env!("CARGO_PKG_VERSION"),
                "harness": "parallel",
                "launcher": "torchrun",
                "nproc": p.world_size,
                "env": torchrun::ENV.iter().map(|(k, v)| format!("{k}={v}")).collect::<Vec<_>>(),
            }),
        );
        lines.push((rank, status, line));
    }
    lines
}

/// What each rank's GPU (ranks use CUDA devices 0 to N-1) has free for a job
/// starting now: NVML's total less what is in use; `None` where unreadable.
fn capacities(gpus: &[Gpu]) -> Vec<Option<u64>> {
    gpus.iter()
        .map(|g| {
            g.settled_used(5, Duration::from_millis(1))
                .ok()
                .map(|u| g.available(u))
        })
        .collect()
}

/// Records what each rank could use (see [`capacities`]) in its line.
pub fn set_capacities(lines: &mut [(u32, Status, Value)], capacities: &[Option<u64>]) {
    for (rank, _, line) in lines {
        if let (Some(Some(c)), Some(m)) = (
            capacities.get(*rank as usize),
            line.get_mut("measured").and_then(Value::as_object_mut),
        ) {
            m.insert("capacity_bytes".into(), json!(c));
        }
    }
}

/// Runs the cases (the flags checked by [`super::execute`]).
pub fn execute(args: &RunArgs) -> Result<(RunOutcome, Option<String>)> {
    let points = plan(args)?;
    if args.dry_run {
        return Ok((RunOutcome::default(), Some(render_dry_run(args, &points))));
    }
    // Every visible GPU, read from outside: this process never initialises CUDA.
    let (gpus, _) = Gpu::watch(&collector_exe()?, None)?;
    let count = gpus.len();
    if let Some(p) = points.iter().find(|p| p.world_size as usize > count) {
        return Err(CollectorError::input(format!(
            "--nproc: case {} runs on {} GPUs, {count} visible on this node; allowed: 1 to {count}",
            p.case, p.world_size
        )));
    }
    torchrun::check_available(&args.torchrun)?;
    let harness = torchrun::HarnessFile::write()?;
    let out_path = args.out.clone().unwrap_or_else(|| {
        let stem = points.first().map_or("parallel", |p| p.model.as_str());
        default_out(&format!("{stem}-parallel"))
    });
    let mut file = open_out(&out_path)?;
    let interrupted = install_ctrl_c();
    let mut outcome = RunOutcome {
        file: out_path.display().to_string(),
        ..RunOutcome::default()
    };
    let mut errors = Vec::new();
    for p in &points {
        if interrupted.load(Ordering::SeqCst) {
            outcome.interrupted = true;
            break;
        }
        if !args.quiet {
            eprintln!("{} on {} GPU(s)", p.case, p.world_size);
        }
        let (command, _) = command_for(args, p, &harness.0);
        let capacity = capacities(&gpus[..p.world_size as usize]);
        let job = torchrun::run_job(
            command,
            Duration::from_secs(args.timeout_s.max(1)),
            interrupted,
            args.verbose,
        )?;
        let mut lines = rank_lines(p, &job);
        set_capacities(&mut lines, &capacity);
        for (rank, status, line) in lines {
            append_line(&mut file, &out_path, &line)?;
            outcome.record(status);
            let m = &line["measured"];
            let mut note = match status {
                Status::Ok => format!(
                    "driver peak {:.3} GB, reserved {:.3} GB, allocated {:.3} GB",
                    gb(&m["driver_peak"]).unwrap_or(0.0),
                    gb(&m["reserved_peak"]).unwrap_or(0.0),
                    gb(&m["alloc_peak"]).unwrap_or(0.0)
                ),
                Status::Oom => "out of memory".to_string(),
                Status::Failed => format!("failed: {}", m["error"].as_str().unwrap_or("")),
            };
            if let Some(pred) = gb(&line["predicted"]["driver_peak"]) {
                note.push_str(&format!(", predicted {pred:.3} GB"));
                if let Some(e) = line["predicted"]["error"].as_f64() {
                    errors.push(e);
                    note.push_str(&format!(" ({:+.1}%)", e * 100.0));
                }
            }
            if !args.quiet {
                eprintln!("  rank {rank}/{}: {note}", p.world_size);
            }
        }
        if job.interrupted {
            outcome.interrupted = true;
            break;
        }
    }
    outcome.summarise(&errors);
    drop(harness);
    Ok((outcome, None))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn args() -> RunArgs {
        RunArgs {
            model: Some("llama-3.2-1b".into()),
            workload: Some(
                r#"{"mode": "training", "training": {"precision": "fp32"}, "parallel": {"strategy": "fsdp2"}}"#
                    .into(),
            ),
            seq_lens: vec![2048],
            batches: vec![4],
            nproc: Some("2".into()),
            ..RunArgs::default()
        }
    }

    #[test]
    fn a_sweep_on_two_gpus_predicts_per_rank() {
        let points = plan(&args()).unwrap();
        assert_eq!(points.len(), 1);
        assert_eq!(points[0].world_size, 2);
        assert_eq!(points[0].case_json["workload"]["parallel"]["world_size"], 2);
        assert!(points[0].predicted["driver_peak"].as_u64().unwrap() > 1 << 30);
        let shown = render_dry_run(&args(), &points);
        assert!(
            shown.contains("NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 torchrun --standalone --nproc-per-node 2 '<harness>/headroom_parallel.py' --case-json '{"),
            "{shown}"
        );
    }

    #[test]
    fn refuses_what_the_harness_cannot_run() {
        let e = plan(&RunArgs {
            workload: Some(r#"{"mode": "training"}"#.into()),
            ..args()
        })
        .unwrap_err();
        assert!(
            e.to_string()
                .contains("`workload.parallel.strategy` is `none`"),
            "{e}"
        );
        let e = plan(&RunArgs {
            model: Some("gpt2".into()),
            ..args()
        })
        .unwrap_err();
        assert!(
            e.to_string()
                .contains("`model`: the several-GPU harness builds"),
            "{e}"
        );
        let e = plan(&RunArgs {
            nproc: Some("0".into()),
            ..args()
        })
        .unwrap_err();
        assert!(
            e.to_string().starts_with("--nproc: 0 is out of range"),
            "{e}"
        );
    }

    fn result(rank: u64, peak: u64, oom: bool) -> Value {
        json!({"case": "c", "model": "llama-3.2-1b", "workload": {"mode": "inference"},
               "runtime": {"gpu": "NVIDIA H200", "gpu_total_bytes": 150109880320u64},
               "measured": {"rank": rank, "world_size": 2, "driver_peak": peak,
                            "reserved_peak": peak / 2, "alloc_peak": peak / 3, "oom": oom}})
    }

    #[test]
    fn one_line_per_rank_with_the_prediction() {
        let p = &plan(&args()).unwrap()[0];
        let job = JobOutput {
            exit_code: Some(0),
            results: vec![
                result(0, 30_000_000_000, false),
                result(1, 31_000_000_000, false),
            ],
            ..JobOutput::default()
        };
        let lines = rank_lines(p, &job);
        assert_eq!(lines.len(), 2);
        assert_eq!(lines[1].2["case"], format!("{}_rank1", p.case));
        assert_eq!(lines[1].2["measured"]["status"], "ok");
        assert!(lines[1].2["predicted"]["error"].is_number());
        // A rank that ran out of memory and one that printed nothing.
        let job = JobOutput {
            exit_code: Some(1),
            results: vec![result(0, 1, true)],
            tail: vec!["torch.OutOfMemoryError: CUDA out of memory.".into()],
            ..JobOutput::default()
        };
        let lines = rank_lines(p, &job);
        assert_eq!(lines[0].1, Status::Oom);
        assert_eq!(lines[0].2["measured"]["capacity_bytes"], 150109880320u64);
        // The collector's own reading, where it has one, replaces the total.
        let mut lines = lines;
        set_capacities(&mut lines, &[Some(149_000_000_000), None]);
        assert_eq!(lines[0].2["measured"]["capacity_bytes"], 149_000_000_000u64);
        assert_eq!(lines[1].2["measured"]["capacity_bytes"], 150109880320u64);
        assert_eq!(lines[1].1, Status::Oom);
        assert!(lines[1].2["measured"]["error"]
            .as_str()
            .unwrap()
            .contains("rank 1 reported no result"));
        // Interrupted: only the ranks that reported are kept.
        let job = JobOutput {
            results: vec![result(0, 30_000_000_000, false)],
            interrupted: true,
            ..JobOutput::default()
        };
        assert_eq!(rank_lines(p, &job).len(), 1);
    }
}
