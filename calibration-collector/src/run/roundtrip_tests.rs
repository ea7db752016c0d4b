//! `run`'s written workloads read back as the same workloads.

use super::*;

#[test]
fn written_workloads_parse_back_to_the_same_workload() {
    for (model, workload) in [
        (
            "llama-3.1-8b",
            r#"{"dtype": "bf16", "inference": {"kind": "generate", "new_tokens": 16}}"#,
        ),
        (
            "llama-3.2-1b",
            r#"{"mode": "training", "training": {"precision": "amp_bf16", "steps": 2}}"#,
        ),
        (
            "esmfold-v1",
            r#"{"esmfold": {"stem_dtype": "fp16", "chunk_size": 64, "num_recycles": 4}}"#,
        ),
        ("resnet-50", r#"{"dtype": "fp32"}"#),
    ] {
        let p = plan(&RunArgs {
            model: Some(model.into()),
            workload: Some(workload.into()),
            seq_lens: vec![256],
            ..RunArgs::default()
        })
        .unwrap();
        let written = &p.points[0].workload;
        let parsed = parse_workload(Some(written)).unwrap();
        let mut again = serde_json::to_value(&parsed).unwrap();
        if model == "esmfold-v1" {
            again.as_object_mut().unwrap().remove("attention");
        }
        assert_eq!(&again, written, "{model}");
    }
}
