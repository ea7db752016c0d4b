//! What the diagnostic examples share: the spec named first on the command
//! line, and a replay that has already run `--after EARLIER.json` (the job
//! after an earlier one in the same process, of the same model or another,
//! as `estimate_in_process`).
use headroom_core::readers::Spec;
use headroom_core::trace::Replay;

/// The spec of the first argument and a replay ready for its job.
pub fn spec_and_replay(args: &[String]) -> (Spec, Replay) {
    let read = |path: &str| Spec::from_json(&std::fs::read_to_string(path).unwrap()).unwrap();
    let spec = read(&args[1]);
    let mut replay = Replay::new(spec.runtime.allocator, None);
    if let Some(i) = args.iter().position(|a| a == "--after") {
        let earlier = read(&args[i + 1]);
        let jobs = [headroom_core::estimate::EarlierJob {
            arch: &earlier.model.arch,
            workload: &earlier.workload,
        }];
        headroom_core::estimate::replay_earlier_jobs(
            &jobs,
            &spec.model.arch,
            &spec.workload,
            &spec.runtime,
            Default::default(),
            &mut replay,
        )
        .unwrap();
    }
    (spec, replay)
}
