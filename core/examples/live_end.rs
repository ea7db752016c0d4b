//! Lists what is live after the last allocation of a run (leak hunting).
use headroom_core::readers::Spec;
use headroom_core::trace::Replay;
fn main() {
    let spec = Spec::from_json(&std::fs::read_to_string(std::env::args().nth(1).unwrap()).unwrap())
        .unwrap();
    let mut first = Replay::new(spec.runtime.allocator, None);
    headroom_core::families::replay(&spec.model.arch, &spec.workload, &spec.runtime, &mut first)
        .unwrap();
    let mut second = Replay::new(spec.runtime.allocator, None);
    second.inspect_at(first.allocations());
    headroom_core::families::replay(&spec.model.arch, &spec.workload, &spec.runtime, &mut second)
        .unwrap();
    for (op, c, bytes) in second.inspected().iter().filter(|x| x.2 > 1 << 20) {
        println!(
            "{:>8.1} MiB {:20} step {:?} layer {:?} {}",
            *bytes as f64 / 1048576.0,
            c.key(),
            op.step,
            op.layer,
            op.name
        );
    }
}
