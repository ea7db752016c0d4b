//! NVML, the NVIDIA Management Library, loaded at run time like the CUDA
//! driver (`libnvidia-ml.so.1`, which ships with the driver): a GPU's
//! device-wide memory reading and its compute processes, read from outside.
//! NVML opens no CUDA context, so a collector that polls through it holds
//! nothing on the card while a job runs there.
//!
//! Only the few functions the collector needs are bound. The parts that turn
//! what NVML fills in into figures (process records, UUIDs, return codes) are
//! plain functions, tested without a GPU.

use std::ffi::{c_char, c_uint, c_void, CStr, CString};
use std::fmt;

/// The names NVML is loaded under, in order.
pub const LIBRARY_NAMES: [&str; 2] = ["libnvidia-ml.so.1", "libnvidia-ml.so"];

/// `NVML_SUCCESS`.
pub const SUCCESS: u32 = 0;
/// `NVML_ERROR_INSUFFICIENT_SIZE`: a buffer was too small; the count says how many.
pub const ERROR_INSUFFICIENT_SIZE: u32 = 7;
/// `NVML_VALUE_NOT_AVAILABLE` as an unsigned long long (a process's memory
/// where the driver does not account it per process, e.g. in some containers).
pub const VALUE_NOT_AVAILABLE: u64 = u64::MAX;

/// The name of an NVML return code (`nvml.h`'s `nvmlReturn_t`).
pub fn return_name(code: u32) -> &'static str {
    match code {
        0 => "NVML_SUCCESS",
        1 => "NVML_ERROR_UNINITIALIZED",
        2 => "NVML_ERROR_INVALID_ARGUMENT",
        3 => "NVML_ERROR_NOT_SUPPORTED",
        4 => "NVML_ERROR_NO_PERMISSION",
        5 => "NVML_ERROR_ALREADY_INITIALIZED",
        6 => "NVML_ERROR_NOT_FOUND",
        7 => "NVML_ERROR_INSUFFICIENT_SIZE",
        8 => "NVML_ERROR_INSUFFICIENT_POWER",
        9 => "NVML_ERROR_DRIVER_NOT_LOADED",
        10 => "NVML_ERROR_TIMEOUT",
        11 => "NVML_ERROR_IRQ_ISSUE",
        12 => "NVML_ERROR_LIBRARY_NOT_FOUND",
        13 => "NVML_ERROR_FUNCTION_NOT_FOUND",
        14 => "NVML_ERROR_CORRUPTED_INFOROM",
        15 => "NVML_ERROR_GPU_IS_LOST",
        16 => "NVML_ERROR_RESET_REQUIRED",
        17 => "NVML_ERROR_OPERATING_SYSTEM",
        18 => "NVML_ERROR_LIB_RM_VERSION_MISMATCH",
        19 => "NVML_ERROR_IN_USE",
        20 => "NVML_ERROR_MEMORY",
        21 => "NVML_ERROR_NO_DATA",
        22 => "NVML_ERROR_VGPU_ECC_NOT_SUPPORTED",
        23 => "NVML_ERROR_INSUFFICIENT_RESOURCES",
        24 => "NVML_ERROR_FREQ_NOT_SUPPORTED",
        25 => "NVML_ERROR_ARGUMENT_VERSION_MISMATCH",
        26 => "NVML_ERROR_DEPRECATED",
        999 => "NVML_ERROR_UNKNOWN",
        _ => "an NVML return code this collector does not know",
    }
}

/// What went wrong with NVML.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum NvmlError {
    /// The library could not be loaded under any of its names.
    NotFound {
        /// The names tried, in order.
        tried: Vec<String>,
        /// What the dynamic loader said for the first name.
        reason: String,
    },
    /// The library lacks a function the collector needs (a driver too old).
    MissingFunction(&'static str),
    /// A call returned an error code.
    Call {
        /// The NVML function.
        function: &'static str,
        /// Its return code.
        code: u32,
        /// NVML's own text for the code, or the code's name.
        message: String,
    },
}

impl NvmlError {
    /// True when the driver is missing or not usable rather than a call
    /// failing on a working one: the library is absent, too old, or finds
    /// no driver loaded.
    pub fn no_driver(&self) -> bool {
        match self {
            NvmlError::NotFound { .. } | NvmlError::MissingFunction(_) => true,
            NvmlError::Call { code, .. } => matches!(*code, 9 | 12 | 18),
        }
    }
}

impl fmt::Display for NvmlError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            NvmlError::NotFound { tried, reason } => write!(
                f,
                "NVML could not be loaded (tried {}: {reason}); `probe` and `run` read the GPU's memory through it, and it ships with the NVIDIA driver: put the driver's libraries on the library path",
                tried.join(", ")
            ),
            NvmlError::MissingFunction(name) => write!(
                f,
                "NVML has no {name} (a driver older than the collector supports); update the NVIDIA driver"
            ),
            NvmlError::Call {
                function,
                code,
                message,
            } => write!(f, "{function} failed: {message} ({}, code {code})", return_name(*code)),
        }
    }
}

impl std::error::Error for NvmlError {}

/// `nvmlMemory_t`: what `nvmlDeviceGetMemoryInfo` fills in.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct RawMemory {
    /// Installed memory less what the driver keeps back (ECC, firmware).
    pub total: u64,
    /// Unallocated memory.
    pub free: u64,
    /// Allocated memory, the driver's own reservation included.
    pub used: u64,
}

/// One reading of a GPU's memory, bytes, device-wide (every process counted).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct MemoryReading {
    /// NVML's total (on an H200: 150,754,820,096).
    pub total: u64,
    /// Unallocated: what a new process could take, its own CUDA context included.
    pub free: u64,
    /// Allocated: the driver's reservation (644,939,776 B on an idle H200)
    /// and every process's memory.
    pub used: u64,
}

impl MemoryReading {
    /// The reading from what NVML filled in; `None` when it does not add up
    /// (`used` above `total`), which a working driver never reports.
    pub fn from_raw(raw: RawMemory) -> Option<MemoryReading> {
        (raw.used <= raw.total).then_some(MemoryReading {
            total: raw.total,
            free: raw.free,
            used: raw.used,
        })
    }

    /// What a job started when `used` was in use could have: the total less
    /// what the driver and every other process held.
    pub fn available_after(total: u64, used: u64) -> u64 {
        total.saturating_sub(used)
    }
}

/// One compute process on a GPU.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ProcessInfo {
    /// Process id (in the driver's PID namespace: the host's, in a container).
    pub pid: u32,
    /// Its device memory, where the driver accounts it.
    pub used_bytes: Option<u64>,
}

/// The layout of the process records a listing function fills in.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ProcessLayout {
    /// `nvmlProcessInfo_v1_t`: pid (u32), usedGpuMemory (u64): 16 bytes.
    V1,
    /// `nvmlProcessInfo_v2_t` (also `_t` of the `_v3` function): v1 plus
    /// gpuInstanceId and computeInstanceId (u32 each): 24 bytes.
    V2,
}

impl ProcessLayout {
    /// Bytes per record.
    pub fn stride(self) -> usize {
        match self {
            ProcessLayout::V1 => 16,
            ProcessLayout::V2 => 24,
        }
    }
}

/// The first `count` records of a filled buffer (native byte order; pid at
/// offset 0, usedGpuMemory at offset 8 in both layouts).
pub fn parse_processes(buf: &[u8], count: usize, layout: ProcessLayout) -> Vec<ProcessInfo> {
    buf.chunks_exact(layout.stride())
        .take(count)
        .map(|r| {
            let pid = u32::from_ne_bytes(r[0..4].try_into().expect("4 bytes"));
            let used = u64::from_ne_bytes(r[8..16].try_into().expect("8 bytes"));
            ProcessInfo {
                pid,
                used_bytes: (used != VALUE_NOT_AVAILABLE).then_some(used),
            }
        })
        .collect()
}

/// A GPU's UUID as NVML names it (`GPU-` or `MIG-` and the 16 bytes as
/// 8-4-4-4-12 lowercase hex), from the bytes `cuDeviceGetUuid` returns.
pub fn uuid_string(prefix: &str, bytes: &[u8; 16]) -> String {
    let hex = |r: std::ops::Range<usize>| -> String {
        bytes[r].iter().map(|b| format!("{b:02x}")).collect()
    };
    format!(
        "{prefix}-{}-{}-{}-{}-{}",
        hex(0..4),
        hex(4..6),
        hex(6..8),
        hex(8..10),
        hex(10..16)
    )
}

type RawDevice = *mut c_void;
type VoidFn = unsafe extern "C" fn() -> c_uint;
type ErrorStringFn = unsafe extern "C" fn(c_uint) -> *const c_char;
type HandleByStringFn = unsafe extern "C" fn(*const c_char, *mut RawDevice) -> c_uint;
type MemoryFn = unsafe extern "C" fn(RawDevice, *mut RawMemory) -> c_uint;
type ProcessesFn = unsafe extern "C" fn(RawDevice, *mut c_uint, *mut c_void) -> c_uint;

/// A device handle. NVML is thread-safe and a handle stays valid while the
/// library is initialised, so it may cross threads with its [`Nvml`].
#[derive(Clone, Copy, Debug)]
pub struct Device(RawDevice);

// SAFETY: an opaque handle NVML documents as usable from any thread.
unsafe impl Send for Device {}
// SAFETY: as above; NVML serialises what needs it.
unsafe impl Sync for Device {}

/// A loaded and initialised NVML; shut down when dropped.
pub struct Nvml {
    shutdown: VoidFn,
    error_string: Option<ErrorStringFn>,
    by_uuid: HandleByStringFn,
    by_pci_bus_id: Option<(&'static str, HandleByStringFn)>,
    memory: MemoryFn,
    processes: Option<(&'static str, ProcessesFn, ProcessLayout)>,
    /// Keeps the functions above mapped; dropped after `nvmlShutdown`.
    _lib: libloading::Library,
}

impl fmt::Debug for Nvml {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Nvml").finish_non_exhaustive()
    }
}

/// Copies a function pointer out of the library (valid while it stays loaded).
///
/// # Safety
/// `T` must be the function's true signature.
unsafe fn symbol<T: Copy>(lib: &libloading::Library, name: &str) -> Option<T> {
    lib.get::<T>(name).ok().map(|s| *s)
}

/// The error of a call, with NVML's own text for the code where it has one.
fn call_error(error_string: Option<ErrorStringFn>, function: &'static str, code: u32) -> NvmlError {
    let message = error_string
        // SAFETY: nvmlErrorString returns a static string for any code.
        .map(|f| unsafe { f(code) })
        .filter(|p| !p.is_null())
        // SAFETY: non-null, NUL-terminated, static.
        .map(|p| unsafe { CStr::from_ptr(p) }.to_string_lossy().into_owned())
        .unwrap_or_else(|| return_name(code).to_string());
    NvmlError::Call {
        function,
        code,
        message,
    }
}

impl Nvml {
    /// Loads NVML under its usual names and initialises it.
    pub fn load() -> Result<Nvml, NvmlError> {
        Nvml::load_from(&LIBRARY_NAMES)
    }

    /// Loads NVML from the first of `names` that loads, and initialises it.
    pub fn load_from(names: &[&str]) -> Result<Nvml, NvmlError> {
        let mut first_reason = None;
        for name in names {
            // SAFETY: loading NVML runs only its own initialisers.
            match unsafe { libloading::Library::new(*name) } {
                Ok(lib) => return Nvml::bind(lib),
                Err(e) => {
                    // libloading's text is "dlopen failed"; the loader's own
                    // (which names the file) is its source.
                    first_reason.get_or_insert_with(|| {
                        std::error::Error::source(&e)
                            .map_or_else(|| e.to_string(), |s| s.to_string())
                    });
                }
            }
        }
        Err(NvmlError::NotFound {
            tried: names.iter().map(|n| n.to_string()).collect(),
            reason: first_reason.unwrap_or_else(|| "no name given".into()),
        })
    }

    fn bind(lib: libloading::Library) -> Result<Nvml, NvmlError> {
        // SAFETY: every signature below is nvml.h's for that name.
        unsafe {
            let need = |name: &'static str| NvmlError::MissingFunction(name);
            let (init_name, init) = match symbol::<VoidFn>(&lib, "nvmlInit_v2") {
                Some(f) => ("nvmlInit_v2", f),
                None => (
                    "nvmlInit",
                    symbol::<VoidFn>(&lib, "nvmlInit").ok_or(need("nvmlInit_v2"))?,
                ),
            };
            let shutdown = symbol::<VoidFn>(&lib, "nvmlShutdown").ok_or(need("nvmlShutdown"))?;
            let error_string = symbol::<ErrorStringFn>(&lib, "nvmlErrorString");
            let by_uuid = symbol::<HandleByStringFn>(&lib, "nvmlDeviceGetHandleByUUID")
                .ok_or(need("nvmlDeviceGetHandleByUUID"))?;
            let by_pci_bus_id = [
                "nvmlDeviceGetHandleByPciBusId_v2",
                "nvmlDeviceGetHandleByPciBusId",
            ]
            .into_iter()
            .find_map(|n| symbol::<HandleByStringFn>(&lib, n).map(|f| (n, f)));
            let memory = symbol::<MemoryFn>(&lib, "nvmlDeviceGetMemoryInfo")
                .ok_or(need("nvmlDeviceGetMemoryInfo"))?;
            let processes = [
                ("nvmlDeviceGetComputeRunningProcesses_v3", ProcessLayout::V2),
                ("nvmlDeviceGetComputeRunningProcesses_v2", ProcessLayout::V2),
                ("nvmlDeviceGetComputeRunningProcesses", ProcessLayout::V1),
            ]
            .into_iter()
            .find_map(|(n, layout)| symbol::<ProcessesFn>(&lib, n).map(|f| (n, f, layout)));
            let code = init();
            if code != SUCCESS {
                return Err(call_error(error_string, init_name, code));
            }
            Ok(Nvml {
                shutdown,
                error_string,
                by_uuid,
                by_pci_bus_id,
                memory,
                processes,
                _lib: lib,
            })
        }
    }

    fn error(&self, function: &'static str, code: u32) -> NvmlError {
        call_error(self.error_string, function, code)
    }

    fn check(&self, function: &'static str, code: u32) -> Result<(), NvmlError> {
        if code == SUCCESS {
            Ok(())
        } else {
            Err(self.error(function, code))
        }
    }

    fn by_string(
        &self,
        function: &'static str,
        f: HandleByStringFn,
        text: &str,
    ) -> Result<Device, NvmlError> {
        let c = CString::new(text).map_err(|_| NvmlError::Call {
            function,
            code: 2,
            message: format!("{text:?} holds a NUL byte"),
        })?;
        let mut raw: RawDevice = std::ptr::null_mut();
        // SAFETY: a NUL-terminated string and a handle to fill in.
        let code = unsafe { f(c.as_ptr(), &mut raw) };
        self.check(function, code)?;
        Ok(Device(raw))
    }

    /// The device with this UUID (`GPU-…` or `MIG-…`).
    pub fn device_by_uuid(&self, uuid: &str) -> Result<Device, NvmlError> {
        self.by_string("nvmlDeviceGetHandleByUUID", self.by_uuid, uuid)
    }

    /// The device at this PCI bus id (`0000:3b:00.0`).
    pub fn device_by_pci_bus_id(&self, bus_id: &str) -> Result<Device, NvmlError> {
        let (name, f) = self.by_pci_bus_id.ok_or(NvmlError::MissingFunction(
            "nvmlDeviceGetHandleByPciBusId_v2",
        ))?;
        self.by_string(name, f, bus_id)
    }

    /// The device's memory now (`nvmlDeviceGetMemoryInfo`).
    pub fn memory(&self, device: Device) -> Result<MemoryReading, NvmlError> {
        let mut raw = RawMemory::default();
        // SAFETY: a handle from this library and a struct of nvml.h's layout.
        let code = unsafe { (self.memory)(device.0, &mut raw) };
        self.check("nvmlDeviceGetMemoryInfo", code)?;
        MemoryReading::from_raw(raw).ok_or_else(|| NvmlError::Call {
            function: "nvmlDeviceGetMemoryInfo",
            code: 999,
            message: format!("used {} above total {}", raw.used, raw.total),
        })
    }

    /// The compute processes on the device (those holding a CUDA context).
    pub fn compute_processes(&self, device: Device) -> Result<Vec<ProcessInfo>, NvmlError> {
        let (name, f, layout) = self.processes.ok_or(NvmlError::MissingFunction(
            "nvmlDeviceGetComputeRunningProcesses",
        ))?;
        let mut room: c_uint = 16;
        for _ in 0..4 {
            // u64 words: aligned for the records' u64 field.
            let mut buf = vec![0u64; room as usize * layout.stride() / 8];
            let mut count = room;
            // SAFETY: `count` records of `layout` fit in `buf`.
            let code = unsafe { f(device.0, &mut count, buf.as_mut_ptr().cast()) };
            if code == ERROR_INSUFFICIENT_SIZE {
                room = count.max(room) + 16;
                continue;
            }
            self.check(name, code)?;
            let bytes: Vec<u8> = buf.iter().flat_map(|w| w.to_ne_bytes()).collect();
            return Ok(parse_processes(&bytes, count as usize, layout));
        }
        Err(self.error(name, ERROR_INSUFFICIENT_SIZE))
    }
}

impl Drop for Nvml {
    fn drop(&mut self) {
        // SAFETY: initialised in `bind`; the library is still loaded.
        unsafe {
            (self.shutdown)();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn record(layout: ProcessLayout, pid: u32, used: u64) -> Vec<u8> {
        let mut r = vec![0u8; layout.stride()];
        r[0..4].copy_from_slice(&pid.to_ne_bytes());
        r[8..16].copy_from_slice(&used.to_ne_bytes());
        if layout == ProcessLayout::V2 {
            r[16..20].copy_from_slice(&0xffff_ffffu32.to_ne_bytes());
            r[20..24].copy_from_slice(&0xffff_ffffu32.to_ne_bytes());
        }
        r
    }

    #[test]
    fn process_records_of_both_layouts() {
        for layout in [ProcessLayout::V1, ProcessLayout::V2] {
            let mut buf = record(layout, 4242, 543_162_368);
            buf.extend(record(layout, 7, VALUE_NOT_AVAILABLE));
            // Room for more than NVML filled: only `count` records count.
            buf.extend(record(layout, 99, 1));
            let got = parse_processes(&buf, 2, layout);
            assert_eq!(
                got,
                [
                    ProcessInfo {
                        pid: 4242,
                        used_bytes: Some(543_162_368)
                    },
                    ProcessInfo {
                        pid: 7,
                        used_bytes: None
                    },
                ],
                "{layout:?}"
            );
            assert!(parse_processes(&buf, 0, layout).is_empty());
            // A count beyond the buffer reads what is there, no further.
            assert_eq!(parse_processes(&buf, 10, layout).len(), 3);
        }
    }

    #[test]
    fn uuids_as_nvml_names_them() {
        let bytes = [
            0x3b, 0x1f, 0x0e, 0x2a, 0x9c, 0x41, 0x7d, 0x05, 0xa1, 0x00, 0xde, 0xad, 0xbe, 0xef,
            0x01, 0x23,
        ];
        assert_eq!(
            uuid_string("GPU", &bytes),
            "GPU-3b1f0e2a-9c41-7d05-a100-deadbeef0123"
        );
        assert_eq!(uuid_string("MIG", &[0; 16]).len(), 40);
    }

    #[test]
    fn memory_readings_and_what_a_job_could_have() {
        // An idle H200 (driver 580.159.04): NVML counts the driver's
        // reservation as used; total less it is what CUDA calls the total.
        let idle = MemoryReading::from_raw(RawMemory {
            total: 150_754_820_096,
            free: 150_109_880_320,
            used: 644_939_776,
        })
        .unwrap();
        assert_eq!(
            MemoryReading::available_after(idle.total, idle.used),
            150_109_880_320
        );
        // A 518 MiB context of another process is not the job's.
        assert_eq!(
            MemoryReading::available_after(idle.total, idle.used + (518 << 20)),
            150_109_880_320 - (518 << 20)
        );
        assert_eq!(MemoryReading::available_after(1, 2), 0);
        assert_eq!(
            MemoryReading::from_raw(RawMemory {
                total: 1,
                free: 0,
                used: 2
            }),
            None
        );
    }

    #[test]
    fn return_codes_and_messages() {
        assert_eq!(return_name(7), "NVML_ERROR_INSUFFICIENT_SIZE");
        assert_eq!(return_name(9), "NVML_ERROR_DRIVER_NOT_LOADED");
        assert!(return_name(12345).contains("does not know"));
        let e = NvmlError::Call {
            function: "nvmlInit_v2",
            code: 9,
            message: "Driver Not Loaded".into(),
        };
        assert_eq!(
            e.to_string(),
            "nvmlInit_v2 failed: Driver Not Loaded (NVML_ERROR_DRIVER_NOT_LOADED, code 9)"
        );
        assert!(e.no_driver());
        let e = NvmlError::Call {
            function: "nvmlDeviceGetMemoryInfo",
            code: 15,
            message: "GPU is lost".into(),
        };
        assert!(!e.no_driver());
    }

    #[test]
    fn an_absent_library_is_named() {
        let e = Nvml::load_from(&["libnvidia-ml-absent.so.1", "/nonexistent/libnvidia-ml.so"])
            .unwrap_err();
        let NvmlError::NotFound { tried, reason } = &e else {
            panic!("{e:?}");
        };
        assert_eq!(tried.len(), 2);
        assert!(reason.contains("libnvidia-ml-absent.so.1"), "{reason}");
        let text = e.to_string();
        assert!(
            text.starts_with(
                "NVML could not be loaded (tried libnvidia-ml-absent.so.1, /nonexistent/libnvidia-ml.so: "
            ),
            "{text}"
        );
        assert!(text.contains("ships with the NVIDIA driver"), "{text}");
        assert!(e.no_driver());
    }
}
