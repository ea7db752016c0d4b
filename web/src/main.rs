//! Mounts the calculator page.
fn main() {}
