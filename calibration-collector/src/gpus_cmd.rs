//! `calibration-collector gpus`: which cards of the catalog run a spec, the
//! longest length and largest batch that fit each, the reservation a
//! scheduler should request, and for ESMFold the longest protein with and
//! without chunking and the chunk size that makes the spec's length fit.

use crate::cases::read_text;
use crate::error::{CollectorError, Result};
use headroom_core::search::{self, ChunkChoice};
use headroom_core::spec::Spec;
use headroom_core::{estimate, Bytes};
use std::fmt::Write as _;

/// Options of `gpus`.
#[derive(Clone, Debug)]
pub struct GpusArgs {
    /// Spec file; `None` or `-` reads stdin.
    pub spec: Option<String>,
    /// Safety margin on the reservation, in percent.
    pub margin_percent: u32,
}

fn opt(v: Option<u32>) -> String {
    v.map_or_else(|| "-".into(), |n| n.to_string())
}

/// Runs `gpus`, returning the table to print.
pub fn run(args: &GpusArgs) -> Result<String> {
    if args.margin_percent > 1000 {
        return Err(CollectorError::input(format!(
            "--margin: {} is out of range; allowed: a percentage from 0 to 1000",
            args.margin_percent
        )));
    }
    let path = args.spec.as_deref().unwrap_or("-");
    let name = if path == "-" { "(stdin)" } else { path };
    let spec = Spec::from_json(&read_text(path)?)
        .map_err(|e| CollectorError::input(format!("{name}: {e}")))?;
    let (arch, w, rt) = (&spec.model.arch, &spec.workload, &spec.runtime);
    let peak = estimate(arch, w, rt).map_err(|e| CollectorError::input(format!("{name}: {e}")))?;
    let fits =
        search::gpu_fits(arch, w, rt).map_err(|e| CollectorError::input(format!("{name}: {e}")))?;
    let reservation = search::reservation(peak.driver_peak.0, args.margin_percent);
    let length = if arch.is_vision() { "image" } else { "seq_len" };
    let mut out = String::new();
    let _ = writeln!(
        out,
        "{} at batch {}, {length} {}: driver peak {}; request {} ({}% margin)\n",
        spec.model.name,
        w.batch,
        w.length(arch.is_vision()),
        peak.driver_peak,
        Bytes(reservation),
        args.margin_percent
    );
    let esmfold = fits.iter().any(|f| f.chunk_for_length.is_some());
    let _ = write!(
        out,
        "{:30} {:>10} {:>5} {:>5} {:>11} {:>9}",
        "gpu",
        "usable",
        "fits",
        "jobs",
        format!("max {length}"),
        "max batch"
    );
    if esmfold {
        let _ = write!(
            out,
            " {:>12} {:>12} {:>14}",
            "unchunked", "chunk 4", "chunk for len"
        );
    }
    out.push('\n');
    for f in &fits {
        let _ = write!(
            out,
            "{:30} {:>10} {:>5} {:>5} {:>11} {:>9}",
            f.gpu.name,
            Bytes(f.gpu.usable_bytes).to_string(),
            if f.fits { "yes" } else { "no" },
            search::jobs_per_card(f.gpu.usable_bytes, reservation),
            opt(f.max_length),
            opt(f.max_batch)
        );
        if esmfold {
            let chunk = match f.chunk_for_length {
                Some(ChunkChoice::Unchunked) => "none needed".to_string(),
                Some(ChunkChoice::Chunk(c)) => c.to_string(),
                Some(ChunkChoice::DoesNotFit) | None => "does not fit".to_string(),
            };
            let _ = write!(
                out,
                " {:>12} {:>12} {:>14}",
                opt(f.max_length_unchunked),
                opt(f.max_length_chunked),
                chunk
            );
        }
        out.push('\n');
    }
    Ok(out)
}
