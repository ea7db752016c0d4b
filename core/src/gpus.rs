//! The GPU catalog: memory a process can actually use on each card.
//!
//! Three figures per card:
//! - `total_bytes`: the memory on the board, the marketing capacity in
//!   binary units (a "24 GB" card has 24 GiB = 25,769,803,776 B).
//! - `nvml_total_bytes`: what NVML / `nvidia-smi` reports as total. The
//!   driver already keeps some memory out of it (ECC, firmware): the H200's
//!   141 GiB board shows 143,771 MiB.
//! - `usable_bytes`: what a CUDA process can allocate: NVML's total minus
//!   what NVML counts as used (`nvidia-smi -q` "Reserved") before any process
//!   touches the GPU. That is exactly the total that `cudaMemGetInfo`,
//!   `cuDeviceTotalMem` and `torch.cuda.get_device_properties().total_memory`
//!   report, and the "total capacity" in PyTorch's out-of-memory messages —
//!   checked on the calibration H200 (driver 580.159.04): NVML total
//!   150,754,820,096 B, reserved 644,939,776 B, `cuMemGetInfo` total
//!   150,109,880,320 B = the difference.
//!
//! So for the other cards the usable figure comes, in order of preference,
//! from a public `cudaMemGetInfo`-style figure (a CUDA `deviceQuery`, a
//! PyTorch device-properties print or out-of-memory message, which rounds
//! to 0.01 GiB, i.e. within ±5 MiB), or else from NVML's total less the
//! H200's measured reservation ratio. [`source`] says which, and where.
//! These figures move by a few hundred MiB with the driver and with ECC.

/// A GPU model.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[cfg_attr(feature = "serde", derive(serde::Serialize))]
pub struct Gpu {
    /// Stable id for URLs, e.g. `h200`.
    pub id: &'static str,
    /// The chip's architecture: CUDA's compute capability (`sm80` Ampere
    /// A100, `sm86` Ampere consumer and A10, `sm89` Ada, `sm90` Hopper,
    /// `sm100` Blackwell data-centre, `sm120` Blackwell consumer, `sm75`
    /// Turing) or AMD's `gfx942` (CDNA 3). What depends on it is in
    /// docs/spec.md ("What depends on the card").
    pub architecture: &'static str,
    /// Marketing name.
    pub name: &'static str,
    /// Memory on the board, bytes (the marketing capacity, in GiB).
    pub total_bytes: u64,
    /// Total as NVML / `nvidia-smi` reports it (for the MI300X, `rocm-smi`'s
    /// VRAM total), bytes.
    pub nvml_total_bytes: u64,
    /// Memory a CUDA process can allocate: NVML's total minus what the
    /// driver keeps before any process starts (= `cudaMemGetInfo`'s total).
    pub usable_bytes: u64,
}

/// H200 total as NVML reports it (`measurements/public/`, runtime_overheads).
pub const H200_TOTAL_BYTES: u64 = 150_754_820_096;
/// H200 memory NVML counts as used before any process (`driver_reserved_before_process`).
pub const H200_DRIVER_RESERVED_BYTES: u64 = 644_939_776;

const MIB: u64 = 1 << 20;
const GIB: u64 = 1 << 30;

/// `x.xx GiB` as PyTorch prints it (`hundredths` = x.xx * 100), to the nearest MiB.
const fn gib_2dp(hundredths: u64) -> u64 {
    (hundredths * 1024 + 50) / 100 * MIB
}

/// NVML total less the H200's measured share kept by the driver before any process.
const fn less_h200_reservation(nvml_total: u64) -> u64 {
    let kept = (nvml_total as u128 * H200_DRIVER_RESERVED_BYTES as u128
        + H200_TOTAL_BYTES as u128 / 2)
        / H200_TOTAL_BYTES as u128;
    nvml_total - kept as u64
}

/// Whether the bytes `gpu`'s processes hold outside PyTorch's allocator
/// (the CUDA context, cuBLAS's handle and workspaces, the kernels loaded)
/// were measured, so that an estimate for it needs no allowance for them:
/// the H200 (the runtime's defaults come from it) and the H100 80GB, which
/// gives the same figures (`measurements/h100/README.md`: `probe` reads the
/// same context and cuBLAS bytes; seven framework jobs peaked at the same
/// allocated and reserved bytes, the driver-level peak within 2 MiB).
pub fn overheads_measured(gpu: &Gpu) -> bool {
    matches!(gpu.id, "h200" | "h100-80gb")
}

/// The catalog.
pub const CATALOG: &[Gpu] = &[
    Gpu {
        id: "rtx-3060-12gb",
        architecture: "sm86",
        name: "NVIDIA GeForce RTX 3060 12GB",
        total_bytes: 12 * GIB,
        nvml_total_bytes: 12_288 * MIB,
        usable_bytes: gib_2dp(1175),
    },
    Gpu {
        id: "rtx-3090",
        architecture: "sm86",
        name: "NVIDIA GeForce RTX 3090",
        total_bytes: 24 * GIB,
        nvml_total_bytes: 24_576 * MIB,
        usable_bytes: 24_268 * MIB,
    },
    Gpu {
        id: "rtx-4090",
        architecture: "sm89",
        name: "NVIDIA GeForce RTX 4090",
        total_bytes: 24 * GIB,
        nvml_total_bytes: 24_564 * MIB,
        usable_bytes: gib_2dp(2364),
    },
    Gpu {
        id: "rtx-5090",
        architecture: "sm120",
        name: "NVIDIA GeForce RTX 5090",
        total_bytes: 32 * GIB,
        nvml_total_bytes: 32_607 * MIB,
        usable_bytes: gib_2dp(3136),
    },
    Gpu {
        id: "rtx-6000-ada",
        architecture: "sm89",
        name: "NVIDIA RTX 6000 Ada Generation",
        total_bytes: 48 * GIB,
        nvml_total_bytes: 46_068 * MIB,
        usable_bytes: gib_2dp(4443),
    },
    Gpu {
        id: "l4",
        architecture: "sm89",
        name: "NVIDIA L4",
        total_bytes: 24 * GIB,
        nvml_total_bytes: 23_034 * MIB,
        usable_bytes: gib_2dp(2203),
    },
    Gpu {
        id: "l40s",
        architecture: "sm89",
        name: "NVIDIA L40S",
        total_bytes: 48 * GIB,
        nvml_total_bytes: 46_068 * MIB,
        usable_bytes: gib_2dp(4442),
    },
    Gpu {
        id: "t4",
        architecture: "sm75",
        name: "NVIDIA T4",
        total_bytes: 16 * GIB,
        nvml_total_bytes: 15_360 * MIB,
        usable_bytes: gib_2dp(1456),
    },
    Gpu {
        id: "a10",
        architecture: "sm86",
        name: "NVIDIA A10",
        total_bytes: 24 * GIB,
        nvml_total_bytes: 23_028 * MIB,
        usable_bytes: less_h200_reservation(23_028 * MIB),
    },
    Gpu {
        id: "a100-40gb",
        architecture: "sm80",
        name: "NVIDIA A100 40GB",
        total_bytes: 40 * GIB,
        nvml_total_bytes: 40_960 * MIB,
        usable_bytes: 42_298_834_944,
    },
    Gpu {
        id: "a100-80gb",
        architecture: "sm80",
        name: "NVIDIA A100 80GB",
        total_bytes: 80 * GIB,
        nvml_total_bytes: 81_920 * MIB,
        usable_bytes: gib_2dp(7925),
    },
    Gpu {
        id: "h100-80gb",
        architecture: "sm90",
        name: "NVIDIA H100 80GB (SXM)",
        total_bytes: 80 * GIB,
        nvml_total_bytes: 81_559 * MIB,
        usable_bytes: gib_2dp(7911),
    },
    Gpu {
        id: "h200",
        architecture: "sm90",
        name: "NVIDIA H200 141GB",
        total_bytes: 141 * GIB,
        nvml_total_bytes: H200_TOTAL_BYTES,
        usable_bytes: H200_TOTAL_BYTES - H200_DRIVER_RESERVED_BYTES,
    },
    Gpu {
        id: "b200",
        architecture: "sm100",
        name: "NVIDIA B200 180GB",
        total_bytes: 180 * GIB,
        nvml_total_bytes: 183_359 * MIB,
        usable_bytes: gib_2dp(17835),
    },
    Gpu {
        id: "mi300x",
        architecture: "gfx942",
        name: "AMD Instinct MI300X",
        total_bytes: 192 * GIB,
        nvml_total_bytes: 205_822_885_888,
        usable_bytes: 205_822_885_888 - 299_687_936,
    },
];

/// Where a card's `usable_bytes` (and NVML total) come from: starts with
/// `measured:`, `reported` (a public figure, named) or `derived:`. Apart
/// from [`CATALOG`], so that the page, which shows none of them, carries
/// none.
pub fn source(id: &str) -> Option<&'static str> {
    Some(match id {
        "rtx-3060-12gb" => "reported: PyTorch OOM message \"11.75 GiB total capacity\" (smy20011/dreambooth-gui#78); nvidia-smi 12288MiB (geerlingguy/raspberry-pi-pcie-devices#790, driver 580.95.05)",
        "rtx-3090" => "reported: torch.cuda.get_device_properties total_memory=24268MB (Hugging Face transformers docs, DeepSpeed/debugging guide); NVML total 24576 MB (develsoftware/GMinerRelease#936)",
        "rtx-4090" => "reported: PyTorch OOM message \"total capacity of 23.64 GiB\" (3DTopia/Phidias-Diffusion#8, ali-vilab/VGen#104); nvidia-smi 24564MiB (RLinf/RLinf#255, driver 550.163.01)",
        "rtx-5090" => "reported: PyTorch OOM message \"total capacity of 31.36 GiB\" (TrajectoryCrafter/TrajectoryCrafter#20; 31.37 in Wan-Video/Wan2.1#465); nvidia-smi 32607MiB (noonghunna/club-3090#617, driver 595.71.05)",
        "rtx-6000-ada" => "reported, ECC on: PyTorch OOM message \"total capacity of 44.43 GiB\" with nvidia-smi 46068MiB (DINGYANB/MTVCrafter#21); with ECC off the card shows about 3 GiB more",
        "l4" => "reported: PyTorch OOM message \"total capacity of 22.03 GiB\" (ArcInstitute/evo2#190); nvidia-smi 23034MiB (modal-labs/modal-client#2797)",
        "l40s" => "reported: PyTorch OOM message \"total capacity of 44.42 GiB\" on 8x L40S (stepfun-ai/Step-Video-T2V#8); nvidia-smi 46068MiB (modal-labs/modal-client#2797)",
        "t4" => "reported: PyTorch OOM message \"total capacity of 14.56 GiB\" (Zheng-Chong/CatVTON#133, AlphaGPU/leetgpu-challenges#52; Colab's driver shows 14.75 GiB); nvidia-smi 15360MiB (modal-labs/modal-client#2797)",
        "a10" => "derived: nvidia-smi 23028MiB (modal-labs/modal-client#2797) less the measured H200's driver reservation ratio (0.43%); no public cudaMemGetInfo figure found, cards of this size usually lose 300-600 MiB",
        "a100-40gb" => "reported: CUDA deviceQuery \"40339 MBytes (42298834944 bytes)\" on A100-SXM4-40GB, driver 535 (bottlerocket-os/bottlerocket#3873); nvidia-smi 40960MiB (modal-labs/modal-client#2797)",
        "a100-80gb" => "reported: PyTorch OOM message \"total capacity of 79.25 GiB\" (HiDream-ai/VAREdit#6, levihsu/OOTDiffusion#235); nvidia-smi 81920MiB (modal-labs/modal-client#2797)",
        "h100-80gb" => "reported: PyTorch OOM message \"total capacity of 79.11 GiB\" (vllm-project/vllm#27508); nvidia-smi 81559MiB on H100 80GB HBM3 (modal-labs/modal-client#2797, huggingface/text-embeddings-inference#350)",
        "h200" => "measured: NVML total 150,754,820,096 B minus 644,939,776 B used before any process (measurements/public/h200-public.jsonl); cuMemGetInfo total 150,109,880,320 B on the same card and driver",
        "b200" => "reported: cudaDeviceProp totalGlobalMem 178.35 GiB (printed as GB) (pytorch/ao#4002); nvidia-smi 183359MiB (NVIDIA/TensorRT-LLM#10278, driver 580.95.05); board 180 GB as sold in HGX/DGX B200 (192 GB on the chip)",
        "mi300x" => "reported: rocm-smi --showmeminfo vram \"VRAM Total Memory (B): 205822885888\" with 299,687,936 B used before any process, as captured in public rocm-smi outputs on GitHub (ROCm has no NVML; HIP's total is the VRAM total)",
        _ => return None,
    })
}

/// Finds a GPU by id.
pub fn find(id: &str) -> Option<&'static Gpu> {
    CATALOG.iter().find(|g| g.id == id)
}

/// Finds a GPU by the name a person types: its id, or any spelling that
/// leaves one card (`h100`, `H100 80GB`, `NVIDIA GeForce RTX 4090`,
/// `4090`): case, spaces, underscores and the words "nvidia" and "geforce"
/// do not count, and a name that is the start of one id, or one of its
/// dash-separated parts, names it. Otherwise the ids it could mean (none
/// when it names no card).
pub fn find_by_name(name: &str) -> Result<&'static Gpu, alloc::vec::Vec<&'static str>> {
    if let Some(gpu) = find(name) {
        return Ok(gpu);
    }
    let lower = name.to_ascii_lowercase();
    let words: alloc::vec::Vec<&str> = lower
        .split([' ', '_', '-'])
        .filter(|w| !w.is_empty() && *w != "nvidia" && *w != "geforce")
        .collect();
    let wanted = words.join("-");
    if wanted.is_empty() {
        return Err(alloc::vec::Vec::new());
    }
    if let Some(gpu) = find(&wanted) {
        return Ok(gpu);
    }
    let matches: alloc::vec::Vec<&'static Gpu> = CATALOG
        .iter()
        .filter(|g| g.id.starts_with(&wanted) || g.id.split('-').any(|part| part == wanted))
        .collect();
    match matches.as_slice() {
        [one] => Ok(one),
        many => Err(many.iter().map(|g| g.id).collect()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_card_is_found_by_the_names_people_type() {
        for (name, id) in [
            ("h100", "h100-80gb"),
            ("H100 80GB", "h100-80gb"),
            ("NVIDIA GeForce RTX 4090", "rtx-4090"),
            ("4090", "rtx-4090"),
            ("rtx_5090", "rtx-5090"),
            ("H200", "h200"),
            ("mi300x", "mi300x"),
        ] {
            assert_eq!(find_by_name(name).map(|g| g.id), Ok(id), "{name}");
        }
        assert_eq!(
            find_by_name("a100").unwrap_err(),
            ["a100-40gb", "a100-80gb"]
        );
        assert!(find_by_name("v100").unwrap_err().is_empty());
        assert!(find_by_name("nvidia").unwrap_err().is_empty());
    }

    #[test]
    fn every_entry_is_consistent_and_sourced() {
        let mut ids = alloc::vec::Vec::new();
        for g in CATALOG {
            let source = source(g.id).unwrap_or_default();
            assert!(
                ["measured:", "reported", "derived:"]
                    .iter()
                    .any(|p| source.starts_with(p)),
                "{}: source must say measured/reported/derived",
                g.id
            );
            assert!(g.usable_bytes <= g.nvml_total_bytes, "{}", g.id);
            assert!(g.nvml_total_bytes <= g.total_bytes, "{}", g.id);
            assert!(
                g.usable_bytes > g.total_bytes / 10 * 9,
                "{}: implausible usable",
                g.id
            );
            assert!(!ids.contains(&g.id), "duplicate {}", g.id);
            assert!(
                ["sm75", "sm80", "sm86", "sm89", "sm90", "sm100", "sm120", "gfx942"]
                    .contains(&g.architecture),
                "{}: architecture {}",
                g.id,
                g.architecture
            );
            // Measured overheads are Hopper's alone so far.
            assert!(
                !overheads_measured(g) || g.architecture == "sm90",
                "{}",
                g.id
            );
            ids.push(g.id);
            assert_eq!(find(g.id), Some(g));
        }
        assert_eq!(CATALOG.len(), 15);
        assert_eq!(find("nope"), None);
    }

    #[test]
    fn h200_is_the_measured_card() {
        let h = find("h200").unwrap();
        assert_eq!(h.usable_bytes, 150_109_880_320);
        assert_eq!(h.nvml_total_bytes, 150_754_820_096);
        assert_eq!(h.total_bytes, 151_397_597_184);
    }

    #[test]
    fn conversions() {
        assert_eq!(find("rtx-3090").unwrap().total_bytes, 25_769_803_776);
        assert_eq!(gib_2dp(2364), 24_207 * MIB);
        assert_eq!(
            less_h200_reservation(H200_TOTAL_BYTES),
            H200_TOTAL_BYTES - H200_DRIVER_RESERVED_BYTES
        );
        let a10 = find("a10").unwrap();
        let kept = a10.nvml_total_bytes - a10.usable_bytes;
        assert!((95 * MIB..105 * MIB).contains(&kept), "{kept}");
    }
}
