//! Everything that talks to the GPU: the driver check and device facts
//! through cudarc's driver API (loaded at run time; queries that create no
//! CUDA context), the device-wide memory poller through NVML ([`crate::nvml`],
//! also loaded at run time, also without a context), and the overhead
//! probe's child side, the one place that opens a context, in a child
//! process of its own. `run` reads its GPU with [`Gpu::watch`]: the device
//! facts come from a child process and the collector never initialises CUDA,
//! so it holds nothing on the card and a job measured under it has the
//! memory it would have alone. The rest of the crate never touches the GPU,
//! so `estimate`, `check`, `fit` and `upload` run on machines without it.

use crate::error::{CollectorError, Result};
use crate::nvml::{self, MemoryReading, Nvml, NvmlError};
use cudarc::driver::{result, sys};
use std::io::{BufRead, Write};
use std::path::Path;
use std::process::{Command, Stdio};
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
    /// Device memory, bytes (`cuDeviceTotalMem`: NVML's total less the
    /// driver's reservation; what an idle card gives a job).
    pub total_bytes: u64,
    /// Free device memory, bytes, when the GPU was opened (NVML; the
    /// collector holds none of it).
    pub free_bytes: u64,
    /// Compute capability, e.g. `9.0`.
    pub compute_capability: String,
    /// The GPU's UUID as NVML names it (`GPU-…`, or `MIG-…` for an instance).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub uuid: Option<String>,
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

/// The error of an NVML step: a missing or unusable library is "no driver"
/// (exit code 2), a failing call on a working one a GPU failure (exit 3).
pub fn nvml_error(e: NvmlError) -> CollectorError {
    if e.no_driver() {
        CollectorError::NoGpu(e.to_string())
    } else {
        CollectorError::Gpu(e.to_string())
    }
}

/// The UUID bytes of a CUDA device: `cuDeviceGetUuid_v2` (a MIG instance's
/// own UUID) where the driver has it, else `cuDeviceGetUuid`.
fn cuda_uuid(dev: sys::CUdevice) -> Result<[u8; 16]> {
    let mut uuid = std::mem::MaybeUninit::<sys::CUuuid>::zeroed();
    // SAFETY: looks a name up in the loaded driver; calls write one CUuuid.
    let code = unsafe {
        let has_v2 = sys::culib()
            .get::<unsafe extern "C" fn()>("cuDeviceGetUuid_v2")
            .is_ok();
        if has_v2 {
            sys::cuDeviceGetUuid_v2(uuid.as_mut_ptr(), dev)
        } else {
            sys::cuDeviceGetUuid(uuid.as_mut_ptr(), dev)
        }
    };
    code.result().map_err(gpu_err("cuDeviceGetUuid"))?;
    // SAFETY: written by the successful call above.
    let uuid = unsafe { uuid.assume_init() };
    Ok(uuid.bytes.map(|b| b as u8))
}

/// The PCI bus id of a CUDA device (`0000:3b:00.0`).
fn cuda_pci_bus_id(dev: sys::CUdevice) -> Option<String> {
    let mut buf = [0 as std::ffi::c_char; 32];
    // SAFETY: writes a NUL-terminated string of at most `len` bytes.
    let code = unsafe { sys::cuDeviceGetPCIBusId(buf.as_mut_ptr(), buf.len() as i32, dev) };
    if code != sys::CUresult::CUDA_SUCCESS {
        return None;
    }
    let bytes: Vec<u8> = buf
        .iter()
        .take_while(|&&c| c != 0)
        .map(|&c| c as u8)
        .collect();
    String::from_utf8(bytes).ok().filter(|s| !s.is_empty())
}

/// NVML's handle of CUDA device `ordinal` (this process's numbering, after
/// CUDA_VISIBLE_DEVICES), found by its UUID, else its PCI bus id.
fn nvml_device(
    nvml: &Nvml,
    ordinal: usize,
    dev: sys::CUdevice,
) -> Result<(nvml::Device, Option<String>)> {
    let bytes = cuda_uuid(dev)?;
    let mut tried = Vec::new();
    for prefix in ["GPU", "MIG"] {
        let id = nvml::uuid_string(prefix, &bytes);
        match nvml.device_by_uuid(&id) {
            Ok(d) => return Ok((d, Some(id))),
            Err(e) => tried.push(format!("{id}: {e}")),
        }
    }
    if let Some(bus) = cuda_pci_bus_id(dev) {
        match nvml.device_by_pci_bus_id(&bus) {
            Ok(d) => return Ok((d, None)),
            Err(e) => tried.push(format!("{bus}: {e}")),
        }
    }
    Err(CollectorError::Gpu(format!(
        "NVML has no device matching CUDA device {ordinal} ({})",
        tried.join("; ")
    )))
}

/// One GPU, read from outside through NVML: device facts from the CUDA
/// driver and device-wide memory readings from NVML. Opened with
/// [`Gpu::watch`], the facts come from a child process and this process
/// never initialises CUDA, so it holds nothing on the card and a job
/// measured under it has exactly the memory it would have alone.
pub struct Gpu {
    nvml: Arc<Nvml>,
    device: nvml::Device,
    /// NVML's total memory of the device.
    nvml_total: u64,
    /// Facts read when the GPU was opened.
    pub info: DeviceInfo,
}

impl Gpu {
    /// Opens the GPUs the way `run` needs: without initialising CUDA in
    /// this process (every process that calls `cuInit` holds a few MiB of
    /// the card: 3.25 MiB on an H200). The device facts and driver versions
    /// come from a child, `collector probe --list --json [--device N]`, which
    /// has exited when this returns; NVML then finds each GPU by its UUID.
    /// `ordinal`: that GPU only; `None`: every visible GPU, in CUDA's order.
    /// Without libcuda: the no-driver error (exit code 2) at once.
    pub fn watch(collector: &Path, ordinal: Option<usize>) -> Result<(Vec<Gpu>, DriverVersions)> {
        if !driver_present() {
            return Err(CollectorError::NoGpu(NO_DRIVER.into()));
        }
        let mut cmd = Command::new(collector);
        cmd.args(["probe", "--list", "--json"]);
        if let Some(d) = ordinal {
            cmd.args(["--device", &d.to_string()]);
        }
        let out = cmd.stdin(Stdio::null()).output().map_err(|e| {
            CollectorError::Gpu(format!(
                "could not start `{} probe --list` to read the GPUs: {e}",
                collector.display()
            ))
        })?;
        let listing = listing_from_child(out.status.code(), &out.stdout, &out.stderr)?;
        let nvml = Arc::new(Nvml::load().map_err(nvml_error)?);
        let gpus = listing
            .devices
            .into_iter()
            .map(|info| Gpu::from_listing(nvml.clone(), info))
            .collect::<Result<Vec<_>>>()?;
        Ok((gpus, listing.driver))
    }

    fn from_listing(nvml: Arc<Nvml>, info: DeviceInfo) -> Result<Gpu> {
        let Some(uuid) = info.uuid.as_deref() else {
            return Err(CollectorError::Gpu(format!(
                "GPU {} ({}): its UUID is unknown, so NVML cannot find it",
                info.ordinal, info.name
            )));
        };
        let device = nvml.device_by_uuid(uuid).map_err(nvml_error)?;
        let reading = nvml.memory(device).map_err(nvml_error)?;
        Ok(Gpu {
            nvml,
            device,
            nvml_total: reading.total,
            info: DeviceInfo {
                free_bytes: reading.free,
                ..info
            },
        })
    }

    /// Opens GPU `ordinal` in this process (after [`init`], which costs the
    /// process its share of the card): its facts, and its NVML handle.
    pub fn open(ordinal: usize) -> Result<Gpu> {
        let count = result::device::get_count().map_err(gpu_err("cuDeviceGetCount"))? as usize;
        if ordinal >= count {
            return Err(CollectorError::input(format!(
                "--device: {ordinal} is out of range; allowed: 0 to {} ({count} GPU(s) visible)",
                count - 1
            )));
        }
        let dev = result::device::get(ordinal as i32).map_err(gpu_err("cuDeviceGet"))?;
        let name = result::device::get_name(dev).map_err(gpu_err("cuDeviceGetName"))?;
        use sys::CUdevice_attribute::{
            CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR as MAJOR,
            CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR as MINOR,
        };
        // SAFETY: `dev` comes from cuDeviceGet; none of these needs a context.
        let (total, major, minor) = unsafe {
            (
                result::device::total_mem(dev).map_err(gpu_err("cuDeviceTotalMem"))?,
                result::device::get_attribute(dev, MAJOR)
                    .map_err(gpu_err("reading the compute capability"))?,
                result::device::get_attribute(dev, MINOR)
                    .map_err(gpu_err("reading the compute capability"))?,
            )
        };
        let nvml = Arc::new(Nvml::load().map_err(nvml_error)?);
        let (device, uuid) = nvml_device(&nvml, ordinal, dev)?;
        let reading = nvml.memory(device).map_err(nvml_error)?;
        Ok(Gpu {
            nvml,
            device,
            nvml_total: reading.total,
            info: DeviceInfo {
                ordinal,
                name,
                total_bytes: total as u64,
                free_bytes: reading.free,
                compute_capability: format!("{major}.{minor}"),
                uuid,
            },
        })
    }

    /// The device's memory now (NVML), every process counted.
    pub fn reading(&self) -> Result<MemoryReading> {
        self.nvml.memory(self.device).map_err(nvml_error)
    }

    /// Device-wide used bytes now (NVML's `used`: the driver's reservation
    /// and every process's memory).
    pub fn used(&self) -> Result<u64> {
        Ok(self.reading()?.used)
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

    /// What a job started while `used_before` bytes were in use could have:
    /// NVML's total less what the driver and every other process held. On
    /// an idle card this is [`DeviceInfo::total_bytes`].
    pub fn available(&self, used_before: u64) -> u64 {
        MemoryReading::available_after(self.nvml_total, used_before)
    }

    /// The processes holding a CUDA context on this GPU, as NVML lists them.
    pub fn compute_processes(&self) -> Result<Vec<nvml::ProcessInfo>> {
        self.nvml.compute_processes(self.device).map_err(nvml_error)
    }

    /// Starts polling used bytes from a background thread every `interval`.
    pub fn start_poller(&self, interval: Duration) -> Poller {
        let stop = Arc::new(AtomicBool::new(false));
        let nvml = self.nvml.clone();
        let device = self.device;
        let flag = stop.clone();
        let handle = std::thread::spawn(move || poll_loop(&nvml, device, &flag, interval));
        Poller { stop, handle }
    }
}

/// What `probe --list --json` says, as far as [`Gpu::watch`] reads it.
#[derive(Clone, Debug, serde::Deserialize, PartialEq)]
pub struct Listing {
    /// Driver versions.
    pub driver: DriverVersions,
    /// The GPUs (their `overheads`, absent with `--list`, are ignored).
    pub devices: Vec<DeviceInfo>,
}

/// The listing a `probe --list --json` child printed, or its error with the
/// child's exit code kept (2: no driver or GPU; 1: bad input, such as a
/// `--device` out of range; else a GPU failure).
pub fn listing_from_child(code: Option<i32>, stdout: &[u8], stderr: &[u8]) -> Result<Listing> {
    if code == Some(0) {
        return serde_json::from_slice(stdout).map_err(|e| {
            CollectorError::Gpu(format!(
                "`probe --list --json` printed what is not a listing: {e}"
            ))
        });
    }
    let text = String::from_utf8_lossy(stderr);
    let message = text
        .lines()
        .rev()
        .find_map(|l| l.strip_prefix("error: "))
        .map_or_else(
            || {
                format!(
                    "`probe --list` to read the GPUs failed (exit {code:?}): {}",
                    text.trim()
                )
            },
            str::to_string,
        );
    Err(match code {
        Some(crate::error::EXIT_NO_GPU) => CollectorError::NoGpu(message),
        Some(crate::error::EXIT_INPUT) => CollectorError::Input(message),
        _ => CollectorError::Gpu(message),
    })
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

fn poll_loop(
    nvml: &Nvml,
    device: nvml::Device,
    stop: &AtomicBool,
    interval: Duration,
) -> PollStats {
    let mut stats = PollStats::default();
    let start = Instant::now();
    stats.start = Some(start);
    loop {
        let last = stop.load(Ordering::SeqCst);
        match nvml.memory(device) {
            Ok(reading) => {
                let used = reading.used;
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
    fn a_listing_child_is_read_and_its_errors_keep_their_exit_codes() {
        let stdout = br#"{"collector_version": "0.1.0",
            "driver": {"driver": "580.159.04", "cuda_driver_api": "13.0"},
            "devices": [{"ordinal": 0, "name": "NVIDIA H200", "total_bytes": 150109880320,
                         "free_bytes": 150109880320, "compute_capability": "9.0",
                         "uuid": "GPU-3b1f0e2a-9c41-7d05-a100-deadbeef0123", "overheads": null}]}"#;
        let l = listing_from_child(Some(0), stdout, b"").unwrap();
        assert_eq!(l.driver.cuda_driver_api.as_deref(), Some("13.0"));
        assert_eq!(
            l.devices[0].uuid.as_deref(),
            Some("GPU-3b1f0e2a-9c41-7d05-a100-deadbeef0123")
        );
        let e = listing_from_child(
            Some(1),
            b"",
            b"error: --device: 3 is out of range; allowed: 0 to 0 (1 GPU(s) visible)\n",
        )
        .unwrap_err();
        assert_eq!(e.exit_code(), crate::error::EXIT_INPUT);
        assert_eq!(
            e.to_string(),
            "--device: 3 is out of range; allowed: 0 to 0 (1 GPU(s) visible)"
        );
        let e = listing_from_child(Some(2), b"", b"error: no CUDA GPU is visible\n").unwrap_err();
        assert_eq!(e.exit_code(), crate::error::EXIT_NO_GPU);
        let e = listing_from_child(None, b"", b"Segmentation fault").unwrap_err();
        assert_eq!(e.exit_code(), crate::error::EXIT_GPU);
        assert!(e.to_string().contains("Segmentation fault"), "{e}");
        assert!(listing_from_child(Some(0), b"{", b"").is_err());
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
