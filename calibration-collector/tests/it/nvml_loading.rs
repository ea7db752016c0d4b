//! NVML's loading without a GPU: an absent library is "no driver" (exit
//! code 2) with one message naming the library.

use crate::common;

use calibration_collector::error::EXIT_NO_GPU;
use calibration_collector::gpu;
use calibration_collector::nvml::{Nvml, NvmlError, LIBRARY_NAMES};
use common::skip;

#[test]
fn an_absent_nvml_is_no_driver_and_names_the_library() {
    let e = Nvml::load_from(&["libnvidia-ml-absent.so.1"]).unwrap_err();
    assert!(matches!(e, NvmlError::NotFound { .. }), "{e:?}");
    let e = gpu::nvml_error(e);
    assert_eq!(e.exit_code(), EXIT_NO_GPU);
    let text = e.to_string();
    assert!(
        text.starts_with("NVML could not be loaded (tried libnvidia-ml-absent.so.1: "),
        "{text}"
    );
    assert_eq!(text.lines().count(), 1, "{text}");
}

#[test]
fn nvml_is_looked_for_under_its_usual_names() {
    match Nvml::load() {
        Ok(_) => skip("this machine has NVML: its absence is not checked"),
        Err(e) => {
            let NvmlError::NotFound { tried, .. } = &e else {
                panic!("NVML is there but failed: {e}");
            };
            assert_eq!(tried, &LIBRARY_NAMES.map(String::from));
            assert!(e.to_string().contains("libnvidia-ml.so.1"), "{e}");
        }
    }
}
