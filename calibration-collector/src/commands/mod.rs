//! The commands of `headroom`, one file each (`run` one directory, on one
//! GPU or several): `estimate`, `gpus` and `check` need no GPU; `probe`,
//! `run` and `calibrate` measure one; `fit` turns measurements into a
//! calibration profile and `upload` shares it.

pub mod calibrate;
pub mod check;
pub mod estimate;
pub mod fit;
pub mod gpus;
pub mod probe;
pub mod run;
pub mod upload;
