//! Everything that talks to CUDA, through cudarc's driver API loaded at run
//! time: the driver check, device facts, the device-wide memory poller and
//! the overhead probe's child side. The rest of the crate never touches CUDA,
//! so `estimate`, `check`, `fit` and `upload` run on machines without it.

use crate::error::{CollectorError, Result};
use cudarc::driver::{result, sys, CudaContext};
use std::io::{BufRead, Write};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

/// What `probe` and `run` print when there is no driver.
pub const NO_DRIVER: &str = "no NVIDIA driver found (libcuda.so could not be loaded): `probe` and `run` need an NVIDIA GPU with its driver; `estimate`, `check`, `fit` and `upload` work without one";

/// True when libcuda can be loaded. Call before any other CUDA function:
/// with dynamic loading, cudarc panics on the first call when it is absent.
pub fn driver_present() -> bool {
    // SAFETY: only tries to dlopen libcuda under its usual names.
    unsafe { sys::is_culib_present() }
}

/// Checks for the driver and a visible GPU; returns the number of GPUs.
pub fn init() -> Result<usize> {
    if !driver_present() {
        return Err(CollectorError::NoGpu(NO_DRIVER.into()));
    }
    result::init().map_err(|e| {
        CollectorError::NoGpu(format!(
            "the NVIDIA driver is installed but did not initialise ({e}); is a GPU visible (nvidia-smi, CUDA_VISIBLE_DEVICES)?"
        ))
    })?;
    let count = result::device::get_count()
        .map_err(|e| CollectorError::NoGpu(format!("could not count CUDA devices: {e}")))?;
    if count <= 0 {
        return Err(CollectorError::NoGpu(
            "no CUDA GPU is visible (check nvidia-smi and CUDA_VISIBLE_DEVICES)".into(),
        ));
    }
    Ok(count as usize)
}

fn gpu_err(what: &str) -> impl Fn(result::DriverError) -> CollectorError + '_ {
    move |e| CollectorError::Gpu(format!("{what}: {e}"))
}

/// Facts about one GPU.
#[derive(Clone, Debug, serde::Serialize, serde::Deserialize, PartialEq)]
pub struct DeviceInfo {
    /// CUDA ordinal.
    pub ordinal: usize,
    /// Marketing name, e.g. `NVIDIA H200`.
    pub name: String,
    /// Device memory, bytes (`cuDeviceTotalMem`).
    pub total_bytes: u64,
    /// Free device memory, bytes, with this process's context open.
    pub free_bytes: u64,
    /// Compute capability, e.g. `9.0`.
    pub compute_capability: String,
}

/// Versions of the driver stack.
#[derive(Clone, Debug, Default, serde::Serialize, serde::Deserialize, PartialEq)]
pub struct DriverVersions {
    /// Kernel-module version, e.g. `580.159.04` (from /proc/driver/nvidia/version).
    pub driver: Option<String>,
    /// CUDA version the driver supports, e.g. `13.0` (`cuDriverGetVersion`).
    pub cuda_driver_api: Option<String>,
}

/// Reads the driver versions (after [`init`]).
pub fn driver_versions() -> DriverVersions {
    let driver = std::fs::read_to_string("/proc/driver/nvidia/version")
        .ok()
        .and_then(|text| parse_proc_version(&text))
        .or_else(nvidia_smi_driver);
    let mut v: std::ffi::c_int = 0;
    // SAFETY: writes one int; the driver is loaded (checked by `init`).
    let ok = unsafe { sys::cuDriverGetVersion(&mut v) } == sys::CUresult::CUDA_SUCCESS;
    DriverVersions {
        driver,
        cuda_driver_api: ok.then(|| format!("{}.{}", v / 1000, (v % 1000) / 10)),
    }
}

/// The driver version as nvidia-smi reports it (where /proc has none, e.g.
/// in some containers).
fn nvidia_smi_driver() -> Option<String> {
    let out = std::process::Command::new("nvidia-smi")
        .args(["--query-gpu=driver_version", "--format=csv,noheader"])
        .output()
        .ok()?;
    let text = String::from_utf8(out.stdout).ok()?;
    let v = text.lines().next()?.trim().to_string();
    (out.status.success() && !v.is_empty() && v.chars().all(|c| c.is_ascii_digit() || c == '.'))
        .then_some(v)
}

/// The version in `/proc/driver/nvidia/version`'s first line
/// (`NVRM version: NVIDIA UNIX x86_64 Kernel Module  580.159.04  Thu ...`).
pub fn parse_proc_version(text: &str) -> Option<String> {
    let line = text.lines().next()?;
    let after = &line[line.find("Kernel Module")? + "Kernel Module".len()..];
    after
        .split_whitespace()
        .find(|w| w.contains('.') && w.chars().all(|c| c.is_ascii_digit() || c == '.'))
        .map(str::to_string)
}

/// An open context on one GPU: device facts and device-wide memory readings.
pub struct Gpu {
    ctx: Arc<CudaContext>,
    /// Facts read when the context was opened.
    pub info: DeviceInfo,
}

impl Gpu {
    /// Opens the primary context of GPU `ordinal` (after [`init`]).
    pub fn open(ordinal: usize) -> Result<Gpu> {
        let count = result::device::get_count().map_err(gpu_err("cuDeviceGetCount"))? as usize;
        if ordinal >= count {
            return Err(CollectorError::input(format!(
                "--device: {ordinal} is out of range; allowed: 0 to {} ({count} GPU(s) visible)",
                count - 1
            )));
        }
        let ctx = CudaContext::new(ordinal).map_err(gpu_err("creating a CUDA context"))?;
        let (major, minor) = ctx
            .compute_capability()
            .map_err(gpu_err("reading the compute capability"))?;
        let (free, total) = ctx.mem_get_info().map_err(gpu_err("cuMemGetInfo"))?;
        let info = DeviceInfo {
            ordinal,
            name: ctx.name().map_err(gpu_err("cuDeviceGetName"))?,
            total_bytes: ctx.total_mem().map_err(gpu_err("cuDeviceTotalMem"))? as u64,
            free_bytes: free as u64,
            compute_capability: format!("{major}.{minor}"),
        };
        let _ = total;
        Ok(Gpu { ctx, info })
    }

    /// Device-wide used bytes now (total minus free, every process counted).
    pub fn used(&self) -> Result<u64> {
        let (free, total) = self.ctx.mem_get_info().map_err(gpu_err("cuMemGetInfo"))?;
        Ok((total - free) as u64)
    }

    /// Largest of `n` readings `gap` apart: a settled reading of used bytes.
    pub fn settled_used(&self, n: usize, gap: Duration) -> Result<u64> {
        let mut best = 0;
        for i in 0..n.max(1) {
            if i > 0 {
                std::thread::sleep(gap);
            }
            best = best.max(self.used()?);
        }
        Ok(best)
    }

    /// Starts polling used bytes from a background thread every `interval`.
    pub fn start_poller(&self, interval: Duration) -> Poller {
        let stop = Arc::new(AtomicBool::new(false));
        let ctx = self.ctx.clone();
        let flag = stop.clone();
        let handle = std::thread::spawn(move || poll_loop(&ctx, &flag, interval));
        Poller { stop, handle }
    }
}

/// What a poller saw.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct PollStats {
    /// Highest device-wide used bytes.
    pub peak_used: u64,
    /// Readings taken.
    pub samples: u64,
    /// Readings per second.
    pub hz: f64,
    /// Readings that failed (the driver call returned an error).
    pub errors: u64,
    /// When polling started.
    pub start: Option<Instant>,
    /// Every change of the reading: (time since `start`, used bytes).
    pub changes: Vec<(Duration, u64)>,
}

impl PollStats {
    /// Highest reading in `[from, to]` (times since `start`), counting the
    /// reading in effect at `from`. `None` without readings there.
    pub fn peak_between(&self, from: Duration, to: Duration) -> Option<u64> {
        let at_from = self
            .changes
            .iter()
            .take_while(|(t, _)| *t <= from)
            .last()
            .map(|&(_, u)| u);
        let inside = self
            .changes
            .iter()
            .filter(|(t, _)| *t > from && *t <= to)
            .map(|&(_, u)| u)
            .max();
        at_from.into_iter().chain(inside).max()
    }

    /// [`PollStats::peak_between`] for the `seconds` before the instant `end`.
    pub fn peak_before(&self, end: Instant, seconds: f64) -> Option<u64> {
        let start = self.start?;
        let to = end.checked_duration_since(start)?;
        let from = to.checked_sub(Duration::from_secs_f64(seconds.max(0.0)))?;
        self.peak_between(from, to)
    }
}

/// A running poller; [`Poller::finish`] stops it and returns what it saw.
pub struct Poller {
    stop: Arc<AtomicBool>,
    handle: JoinHandle<PollStats>,
}

impl Poller {
    /// Stops polling (after one last reading) and returns the statistics.
    pub fn finish(self) -> PollStats {
        self.stop.store(true, Ordering::SeqCst);
        self.handle.join().unwrap_or_default()
    }
}

fn poll_loop(ctx: &CudaContext, stop: &AtomicBool, interval: Duration) -> PollStats {
    let mut stats = PollStats::default();
    if ctx.bind_to_thread().is_err() {
        stats.errors += 1;
        return stats;
    }
    let start = Instant::now();
    stats.start = Some(start);
    loop {
        let last = stop.load(Ordering::SeqCst);
        match result::mem_get_info() {
            Ok((free, total)) => {
                let used = (total - free) as u64;
                stats.peak_used = stats.peak_used.max(used);
                stats.samples += 1;
                if stats.changes.last().is_none_or(|&(_, u)| u != used) {
                    stats.changes.push((start.elapsed(), used));
                }
            }
            Err(_) => stats.errors += 1,
        }
        if last {
            break;
        }
        if !interval.is_zero() {
            std::thread::sleep(interval);
        }
    }
    let secs = start.elapsed().as_secs_f64();
    stats.hz = if secs > 0.0 {
        stats.samples as f64 / secs
    } else {
        0.0
    };
    stats
}

/// Prefix of the probe child's progress lines.
pub const PROBE_PREFIX: &str = "HEADROOM_PROBE ";

/// Edge of the square fp32 matrices of the probe's first matmul.
pub const PROBE_MATMUL_N: usize = 4096;

/// The child side of `probe`: opens a context, creates a cuBLAS handle, sets
/// a workspace and runs one matmul, stopping after each step until the parent
/// (which measures device memory from outside) answers with a line on stdin.
/// Each progress line is `HEADROOM_PROBE <stage> <bytes this child allocated itself>`.
pub fn probe_child(ordinal: usize, workspace_bytes: usize) -> Result<()> {
    init()?;
    let stdin = std::io::stdin();
    let mut lines = stdin.lock().lines();
    let mut step = |stage: &str, own: usize| -> Result<()> {
        let mut out = std::io::stdout().lock();
        writeln!(out, "{PROBE_PREFIX}{stage} {own}")
            .and_then(|_| out.flush())
            .map_err(|e| CollectorError::io("(stdout)", e))?;
        lines.next();
        Ok(())
    };
    // SAFETY: plain driver calls in order; every pointer comes from the driver
    // and is freed before return; the process exits right after.
    unsafe {
        let dev = result::device::get(ordinal as i32).map_err(gpu_err("cuDeviceGet"))?;
        let ctx = result::primary_ctx::retain(dev).map_err(gpu_err("cuDevicePrimaryCtxRetain"))?;
        result::ctx::set_current(ctx).map_err(gpu_err("cuCtxSetCurrent"))?;
        result::ctx::synchronize().map_err(gpu_err("cuCtxSynchronize"))?;
        step("context", 0)?;
        if !cudarc::cublas::sys::is_culib_present() {
            step("cublas_missing", 0)?;
            return Ok(());
        }
        let handle = cudarc::cublas::result::create_handle()
            .map_err(|e| CollectorError::Gpu(format!("cublasCreate: {e:?}")))?;
        step("cublas_handle", 0)?;
        let ws = result::malloc_sync(workspace_bytes).map_err(gpu_err("cuMemAlloc (workspace)"))?;
        cudarc::cublas::sys::cublasSetWorkspace_v2(handle, ws as *mut _, workspace_bytes);
        let n = PROBE_MATMUL_N;
        let bytes = n * n * std::mem::size_of::<f32>();
        let mut ptrs = Vec::new();
        for _ in 0..3 {
            let p = result::malloc_sync(bytes).map_err(gpu_err("cuMemAlloc (operand)"))?;
            result::memset_d8_sync(p, 0, bytes).map_err(gpu_err("cuMemsetD8"))?;
            ptrs.push(p);
        }
        let (alpha, beta) = (1.0f32, 0.0f32);
        let op = cudarc::cublas::sys::cublasOperation_t::CUBLAS_OP_N;
        cudarc::cublas::result::sgemm(
            handle,
            op,
            op,
            n as i32,
            n as i32,
            n as i32,
            &alpha,
            ptrs[0] as *const f32,
            n as i32,
            ptrs[1] as *const f32,
            n as i32,
            &beta,
            ptrs[2] as *mut f32,
            n as i32,
        )
        .map_err(|e| CollectorError::Gpu(format!("cublasSgemm: {e:?}")))?;
        result::ctx::synchronize().map_err(gpu_err("cuCtxSynchronize"))?;
        step("first_matmul", workspace_bytes + 3 * bytes)?;
        for p in ptrs {
            let _ = result::free_sync(p);
        }
        let _ = result::free_sync(ws);
        let _ = cudarc::cublas::result::destroy_handle(handle);
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn peaks_inside_a_window_count_the_reading_in_effect() {
        let ms = Duration::from_millis;
        let stats = PollStats {
            peak_used: 12,
            start: Some(Instant::now()),
            changes: vec![
                (ms(0), 1),
                (ms(100), 12),
                (ms(200), 5),
                (ms(300), 7),
                (ms(400), 2),
            ],
            ..PollStats::default()
        };
        // The build-phase spike at 100 ms is outside the case window.
        assert_eq!(stats.peak_between(ms(250), ms(450)), Some(7));
        assert_eq!(stats.peak_between(ms(210), ms(290)), Some(5));
        assert_eq!(stats.peak_between(ms(0), ms(450)), Some(12));
        let end = stats.start.unwrap() + ms(450);
        assert_eq!(stats.peak_before(end, 0.2), Some(7));
        assert_eq!(stats.peak_before(end, 10.0), None);
    }

    #[test]
    fn parses_the_proc_driver_version() {
        let text = "NVRM version: NVIDIA UNIX x86_64 Kernel Module  580.159.04  Thu Oct  2 21:19:38 UTC 2025\nGCC version:  gcc version 12.2.0\n";
        assert_eq!(parse_proc_version(text).as_deref(), Some("580.159.04"));
        let open =
            "NVRM version: NVIDIA UNIX Open Kernel Module for x86_64  570.86.15  Release Build\n";
        assert_eq!(parse_proc_version(open).as_deref(), Some("570.86.15"));
        assert_eq!(parse_proc_version("garbage"), None);
    }
}
