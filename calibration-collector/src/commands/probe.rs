//! `headroom probe`: the visible GPUs, and on each the CUDA
//! context overhead and the overhead of first cuBLAS use, measured from
//! outside a child process the way `run` measures a job.

use crate::commands::run::torchrun;
use crate::error::{CollectorError, Result};
use crate::gpu::{self, DeviceInfo, DriverVersions, Gpu, PROBE_PREFIX};
use indicatif::{ProgressBar, ProgressStyle};
use serde_json::Value;
use std::fmt::Write as _;
use std::io::{BufRead, BufReader, Write};
use std::path::Path;
use std::process::{Command, Stdio};
use std::sync::atomic::AtomicBool;
use std::sync::mpsc;
use std::time::Duration;

/// Options of `probe` (its command-line flags).
#[derive(Clone, Debug, Default, clap::Args)]
pub struct ProbeArgs {
    /// Only this GPU (CUDA ordinal); default: every visible GPU.
    #[arg(long)]
    pub device: Option<usize>,
    /// List the GPUs only; measure nothing.
    #[arg(long = "list")]
    pub list_only: bool,
    /// Print JSON (what `fit --probe` reads).
    #[arg(long)]
    pub json: bool,
    /// Also measure NCCL's memory: one rank alone, then N ranks on this node
    /// (`torchrun --standalone --nproc-per-node N`, the several-GPU harness's
    /// `--nccl-only` mode); `fit --probe` records it in the profile.
    #[arg(long, value_name = "N")]
    pub world_size: Option<String>,
    /// The torchrun to launch (`--world-size`).
    #[arg(long, default_value = "torchrun")]
    pub torchrun: String,
}

/// Overheads measured on one GPU, bytes.
#[derive(Clone, Debug, Default, serde::Serialize, serde::Deserialize, PartialEq)]
pub struct Overheads {
    /// A fresh process's CUDA context (primary context, lazy module loading).
    pub context_bytes: u64,
    /// `cublasCreate`: the handle and what loading cuBLAS maps.
    pub cublas_handle_bytes: Option<u64>,
    /// The first matmul beyond the handle: lazily loaded GEMM kernels
    /// (its operands and the workspace the probe set are not counted).
    pub cublas_first_matmul_bytes: Option<u64>,
    /// Handle plus first-matmul kernels: the core's `cublas_library_bytes`.
    pub cublas_library_bytes: Option<u64>,
    /// cuBLAS workspace torch allocates per handle on this card (inside its
    /// allocator): `CublasHandlePool.cpp`'s default for the compute capability.
    pub cublas_workspace_bytes: u64,
    /// Why a figure is missing, if one is.
    pub note: Option<String>,
}

/// One GPU in the report.
#[derive(Clone, Debug, serde::Serialize, serde::Deserialize, PartialEq)]
pub struct DeviceProbe {
    /// Device facts.
    #[serde(flatten)]
    pub info: DeviceInfo,
    /// Measured overheads (absent with `--list`).
    pub overheads: Option<Overheads>,
}

/// What `probe --json` prints (and `fit --probe` reads).
#[derive(Clone, Debug, serde::Serialize, serde::Deserialize, PartialEq)]
pub struct ProbeReport {
    /// Collector version.
    pub collector_version: String,
    /// Driver versions.
    pub driver: DriverVersions,
    /// Every probed GPU.
    pub devices: Vec<DeviceProbe>,
    /// NCCL's memory per rank (`probe --world-size N`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub nccl: Option<NcclProbe>,
}

/// NCCL's memory outside torch's allocator, measured by the several-GPU
/// harness (`--nccl-only`): the GPU's used memory grown over
/// `init_process_group` and a first 4 KiB all-reduce, minus torch's
/// reserved growth, on each rank.
#[derive(Clone, Debug, serde::Serialize, serde::Deserialize, PartialEq)]
pub struct NcclProbe {
    /// Ranks of the second job (the first runs one rank alone).
    pub world_size: u32,
    /// One rank alone: the communicator, its buffers and kernels; the core's
    /// `nccl_communicator_bytes`.
    pub communicator_bytes: u64,
    /// Per peer a rank connects to: (the highest rank's bytes at
    /// `world_size` - `communicator_bytes`) / min(world_size - 1, 2); the
    /// core's `nccl_peer_bytes`. Absent when `world_size` is 1.
    pub peer_bytes: Option<u64>,
    /// `nccl_bytes` of each rank at `world_size`.
    pub rank_bytes: Vec<u64>,
    /// NCCL's version as torch reports it.
    pub nccl_version: Option<String>,
    /// True when NVLink multicast was on (the probe turns it off).
    pub nvls: bool,
}

/// The NCCL figures from the one-rank job's and the N-rank job's result
/// lines (`HEADROOM_RESULT` of the harness's `--nccl-only` mode).
pub fn nccl_from_results(alone: &[Value], ranks: &[Value], world_size: u32) -> Result<NcclProbe> {
    let bytes = |v: &Value, what: &str| -> Result<u64> {
        v.get("measured")
            .and_then(|m| m.get("nccl_bytes"))
            .and_then(Value::as_i64)
            .map(|b| b.max(0) as u64)
            .ok_or_else(|| {
                CollectorError::Gpu(format!(
                    "{what}: a rank's result has no `measured.nccl_bytes`"
                ))
            })
    };
    let check = |results: &[Value], n: u32| -> Result<()> {
        if results.len() != n as usize {
            return Err(CollectorError::Gpu(format!(
                "the {n}-rank NCCL job reported {} of its {n} rank(s)",
                results.len()
            )));
        }
        Ok(())
    };
    check(alone, 1)?;
    check(ranks, world_size)?;
    let communicator_bytes = bytes(&alone[0], "one rank")?;
    let rank_bytes = ranks
        .iter()
        .map(|r| bytes(r, "several ranks"))
        .collect::<Result<Vec<_>>>()?;
    let peers = u64::from(world_size.saturating_sub(1).min(2));
    let peer_bytes = (peers > 0).then(|| {
        rank_bytes
            .iter()
            .max()
            .copied()
            .unwrap_or(0)
            .saturating_sub(communicator_bytes)
            / peers
    });
    let runtime = ranks
        .first()
        .or(alone.first())
        .and_then(|r| r.get("runtime"));
    Ok(NcclProbe {
        world_size,
        communicator_bytes,
        peer_bytes,
        rank_bytes,
        nccl_version: runtime
            .and_then(|r| r.get("nccl"))
            .and_then(Value::as_str)
            .map(str::to_string),
        nvls: runtime
            .and_then(|r| r.get("nccl_nvls"))
            .and_then(Value::as_bool)
            .unwrap_or(false),
    })
}

/// Runs the harness's `--nccl-only` mode on `nproc` ranks.
fn nccl_job(torchrun: &str, harness: &Path, nproc: u32) -> Result<Vec<Value>> {
    let (command, shown) = torchrun::command(torchrun, nproc, harness, &["--nccl-only".into()]);
    let never = AtomicBool::new(false);
    let out = torchrun::run_job(command, Duration::from_secs(300), &never, false)?;
    if out.results.len() != nproc as usize {
        let last = out
            .tail
            .iter()
            .rev()
            .take(6)
            .rev()
            .cloned()
            .collect::<Vec<_>>();
        return Err(CollectorError::Gpu(format!(
            "the NCCL probe on {nproc} rank(s) failed (exit {}; `{shown}`): {}",
            out.exit_code
                .map_or_else(|| "by a signal".to_string(), |c| c.to_string()),
            last.join(" / ")
        )));
    }
    Ok(out.results)
}

/// `probe --world-size N`: one rank alone, then N ranks.
fn measure_nccl(torchrun: &str, world_size: u32, spinner: &ProgressBar) -> Result<NcclProbe> {
    torchrun::check_available(torchrun)?;
    let harness = torchrun::HarnessFile::write()?;
    spinner.set_message("NCCL: one rank".to_string());
    let alone = nccl_job(torchrun, &harness.0, 1)?;
    let ranks = if world_size == 1 {
        alone.clone()
    } else {
        spinner.set_message(format!("NCCL: {world_size} ranks"));
        nccl_job(torchrun, &harness.0, world_size)?
    };
    nccl_from_results(&alone, &ranks, world_size)
}

/// torch's default cuBLAS workspace per handle for a compute capability
/// (`CublasHandlePool.cpp`: `:4096:8` on Hopper and newer, else `:4096:2:16:8`).
pub fn torch_cublas_workspace_bytes(compute_capability: &str) -> u64 {
    let major: u32 = compute_capability
        .split('.')
        .next()
        .and_then(|m| m.parse().ok())
        .unwrap_or(0);
    if major >= 9 {
        4096 * 1024 * 8
    } else {
        4096 * 1024 * 2 + 16 * 1024 * 8
    }
}

/// Runs `probe`.
pub fn run(args: &ProbeArgs) -> Result<ProbeReport> {
    let world_size = args
        .world_size
        .as_deref()
        .map(|t| {
            crate::parallel_args::parse_count(
                "--world-size",
                t,
                headroom_core::parallel::MAX_WORLD_SIZE,
            )
        })
        .transpose()?;
    let count = gpu::init()?;
    if let Some(n) = world_size.filter(|&n| n as usize > count) {
        return Err(CollectorError::input(format!(
            "--world-size: {n} ranks need {n} GPUs of this node, {count} visible; allowed: 1 to {count}"
        )));
    }
    let ordinals: Vec<usize> = match args.device {
        Some(d) if d >= count => {
            return Err(CollectorError::input(format!(
                "--device: {d} is out of range; allowed: 0 to {} ({count} GPU(s) visible)",
                count - 1
            )))
        }
        Some(d) => vec![d],
        None => (0..count).collect(),
    };
    let spinner = if args.json || args.list_only {
        ProgressBar::hidden()
    } else {
        let pb = ProgressBar::new_spinner();
        pb.set_style(
            ProgressStyle::with_template("{spinner} {msg} [{elapsed}]").expect("template"),
        );
        pb.enable_steady_tick(Duration::from_millis(100));
        pb
    };
    let mut devices = Vec::new();
    for ordinal in ordinals {
        let gpu = Gpu::open(ordinal)?;
        let overheads = if args.list_only {
            None
        } else {
            spinner.set_message(format!(
                "GPU {ordinal} ({}): measuring overheads",
                gpu.info.name
            ));
            Some(measure_overheads(&gpu, &spinner)?)
        };
        devices.push(DeviceProbe {
            info: gpu.info.clone(),
            overheads,
        });
    }
    let nccl = match world_size {
        Some(n) if !args.list_only => Some(measure_nccl(&args.torchrun, n, &spinner)?),
        _ => None,
    };
    spinner.finish_and_clear();
    Ok(ProbeReport {
        collector_version: env!("CARGO_PKG_VERSION").into(),
        driver: gpu::driver_versions(),
        devices,
        nccl,
    })
}

fn measure_overheads(gpu: &Gpu, spinner: &ProgressBar) -> Result<Overheads> {
    let workspace = torch_cublas_workspace_bytes(&gpu.info.compute_capability);
    let exe = std::env::current_exe().map_err(|e| CollectorError::io("(current executable)", e))?;
    let settle = || -> Result<u64> {
        std::thread::sleep(Duration::from_millis(50));
        gpu.settled_used(5, Duration::from_millis(2))
    };
    let baseline = settle()?;
    let mut child = Command::new(exe)
        .args([
            "probe-child",
            "--device",
            &gpu.info.ordinal.to_string(),
            "--workspace-bytes",
            &workspace.to_string(),
        ])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .map_err(|e| {
            CollectorError::Gpu(format!("could not start the probe's child process: {e}"))
        })?;
    let stdout = child.stdout.take().expect("piped");
    let mut stdin = child.stdin.take().expect("piped");
    let (tx, rx) = mpsc::channel();
    std::thread::spawn(move || {
        for line in BufReader::new(stdout)
            .lines()
            .map_while(std::io::Result::ok)
        {
            if tx.send(line).is_err() {
                break;
            }
        }
    });
    let mut stages: Vec<(String, u64)> = Vec::new();
    loop {
        let line = match rx.recv_timeout(Duration::from_secs(120)) {
            Ok(line) => line,
            Err(mpsc::RecvTimeoutError::Disconnected) => break,
            Err(mpsc::RecvTimeoutError::Timeout) => {
                let _ = child.kill();
                return Err(CollectorError::Gpu(
                    "the probe's child process hung for 120 s".into(),
                ));
            }
        };
        let Some(rest) = line.strip_prefix(PROBE_PREFIX) else {
            continue;
        };
        let mut parts = rest.split_whitespace();
        let stage = parts.next().unwrap_or("").to_string();
        let own: u64 = parts.next().and_then(|s| s.parse().ok()).unwrap_or(0);
        spinner.set_message(format!("GPU {}: {stage}", gpu.info.ordinal));
        let used = settle()?;
        stages.push((stage, used.saturating_sub(baseline).saturating_sub(own)));
        // Let the child go on; it may already have exited.
        let _ = stdin.write_all(b"\n").and_then(|_| stdin.flush());
    }
    drop(stdin);
    let output = child
        .wait_with_output()
        .map_err(|e| CollectorError::Gpu(format!("waiting for the probe's child: {e}")))?;
    if !output.status.success() {
        return Err(CollectorError::Gpu(format!(
            "the probe's child process failed ({}): {}",
            output.status,
            String::from_utf8_lossy(&output.stderr).trim()
        )));
    }
    Ok(overheads_from_stages(&stages, workspace))
}

/// Turns the child's stage readings (bytes above the baseline, the child's
/// own allocations already subtracted) into overheads.
pub fn overheads_from_stages(stages: &[(String, u64)], workspace: u64) -> Overheads {
    let get = |name: &str| stages.iter().find(|(s, _)| s == name).map(|&(_, b)| b);
    let context = get("context").unwrap_or(0);
    let handle = get("cublas_handle");
    let matmul = get("first_matmul");
    let note = if get("cublas_missing").is_some() {
        Some("libcublas could not be loaded (add a CUDA 12/13 lib folder to LD_LIBRARY_PATH); cuBLAS figures missing".to_string())
    } else if matmul.is_none() {
        Some("the probe stopped before the first matmul".to_string())
    } else {
        None
    };
    Overheads {
        context_bytes: context,
        cublas_handle_bytes: handle.map(|h| h.saturating_sub(context)),
        cublas_first_matmul_bytes: match (handle, matmul) {
            (Some(h), Some(m)) => Some(m.saturating_sub(h)),
            _ => None,
        },
        cublas_library_bytes: matmul.map(|m| m.saturating_sub(context)),
        cublas_workspace_bytes: workspace,
        note,
    }
}

fn mb(bytes: u64) -> String {
    format!("{:>10.1} MB", bytes as f64 / 1e6)
}

/// The readable report.
pub fn render(report: &ProbeReport) -> String {
    let mut out = String::new();
    let _ = writeln!(
        out,
        "driver {} (CUDA {})",
        report.driver.driver.as_deref().unwrap_or("unknown"),
        report
            .driver
            .cuda_driver_api
            .as_deref()
            .unwrap_or("unknown")
    );
    for d in &report.devices {
        let i = &d.info;
        let _ = writeln!(
            out,
            "GPU {}  {}  compute {}  total {:.2} GB  free {:.2} GB",
            i.ordinal,
            i.name,
            i.compute_capability,
            i.total_bytes as f64 / 1e9,
            i.free_bytes as f64 / 1e9
        );
        if let Some(o) = &d.overheads {
            let opt = |v: Option<u64>| v.map_or_else(|| format!("{:>13}", "n/a"), mb);
            let _ = writeln!(
                out,
                "  CUDA context                  {}",
                mb(o.context_bytes)
            );
            let _ = writeln!(
                out,
                "  cuBLAS handle                 {}",
                opt(o.cublas_handle_bytes)
            );
            let _ = writeln!(
                out,
                "  cuBLAS first-matmul kernels   {}",
                opt(o.cublas_first_matmul_bytes)
            );
            let _ = writeln!(
                out,
                "  cuBLAS library (both)         {}",
                opt(o.cublas_library_bytes)
            );
            let _ = writeln!(
                out,
                "  cuBLAS workspace (in torch)   {}",
                mb(o.cublas_workspace_bytes)
            );
            if let Some(note) = &o.note {
                let _ = writeln!(out, "  note: {note}");
            }
        }
    }
    if let Some(n) = &report.nccl {
        let _ = writeln!(
            out,
            "NCCL {} (NVLink multicast {}), per rank, outside torch's allocator",
            n.nccl_version.as_deref().unwrap_or("(version unknown)"),
            if n.nvls { "on" } else { "off" }
        );
        let _ = writeln!(
            out,
            "  communicator (one rank)       {}",
            mb(n.communicator_bytes)
        );
        if let Some(p) = n.peer_bytes {
            let _ = writeln!(out, "  per peer                      {}", mb(p));
        }
        let ranks: Vec<String> = n
            .rank_bytes
            .iter()
            .map(|b| format!("{:.1}", *b as f64 / 1e6))
            .collect();
        let _ = writeln!(
            out,
            "  {} rank(s), MB each            {}",
            n.world_size,
            ranks.join(", ")
        );
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn stages_become_overheads() {
        let stages = vec![
            ("context".to_string(), 500 << 20),
            ("cublas_handle".to_string(), 540 << 20),
            ("first_matmul".to_string(), 660 << 20),
        ];
        let o = overheads_from_stages(&stages, 32 << 20);
        assert_eq!(o.context_bytes, 500 << 20);
        assert_eq!(o.cublas_handle_bytes, Some(40 << 20));
        assert_eq!(o.cublas_first_matmul_bytes, Some(120 << 20));
        assert_eq!(o.cublas_library_bytes, Some(160 << 20));
        assert!(o.note.is_none());
        let o = overheads_from_stages(&[("context".into(), 1), ("cublas_missing".into(), 0)], 0);
        assert!(o.note.unwrap().contains("libcublas"));
    }

    #[test]
    fn nccl_figures_from_one_rank_and_several() {
        let line = |rank: u64, bytes: u64| {
            serde_json::json!({"measured": {"rank": rank, "nccl_bytes": bytes},
                               "runtime": {"nccl": "2.28.9", "nccl_nvls": false}})
        };
        let n = nccl_from_results(
            &[line(0, 585 << 20)],
            &[
                line(0, 880 << 20),
                line(1, 885 << 20),
                line(2, 870 << 20),
                line(3, 860 << 20),
            ],
            4,
        )
        .unwrap();
        assert_eq!(n.communicator_bytes, 585 << 20);
        // The highest rank, over two peers (a ring from three ranks on).
        assert_eq!(n.peer_bytes, Some(150 << 20));
        assert_eq!(n.nccl_version.as_deref(), Some("2.28.9"));
        let two = nccl_from_results(&[line(0, 100)], &[line(0, 400), line(1, 300)], 2).unwrap();
        assert_eq!(two.peer_bytes, Some(300));
        let e = nccl_from_results(&[line(0, 100)], &[line(0, 400)], 2).unwrap_err();
        assert!(e.to_string().contains("reported 1 of its 2"), "{e}");
        assert_eq!(e.exit_code(), crate::error::EXIT_GPU);
        let text = render(&ProbeReport {
            collector_version: "0".into(),
            driver: DriverVersions::default(),
            devices: Vec::new(),
            nccl: Some(two),
        });
        assert!(text.contains("per peer"), "{text}");
    }

    #[test]
    fn torch_workspace_by_compute_capability() {
        assert_eq!(torch_cublas_workspace_bytes("9.0"), 32 << 20);
        assert_eq!(
            torch_cublas_workspace_bytes("8.6"),
            8 * 1024 * 1024 + 128 * 1024
        );
    }
}
