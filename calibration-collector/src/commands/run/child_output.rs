//! The one reader of a child's output, for a point on one GPU and for a
//! torchrun job alike: its stdout and stderr line by line, echoed on request,
//! its result lines picked out, the last of its other lines kept.

use serde_json::Value;
use std::collections::BTreeMap;
use std::io::{BufRead, BufReader, Read};
use std::process::Child;
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::Instant;

/// Tells a result line: the object it carries and its slot (the rank of a
/// torchrun job; 0 for one process), or `None` for any other line.
pub type ResultLine = fn(&str) -> Option<(u64, Value)>;

/// What a child printed.
#[derive(Debug, Default)]
pub struct Lines {
    /// The last result object of each slot, with when it was read, in slot
    /// order.
    pub results: BTreeMap<u64, (Value, Instant)>,
    /// The last of the other lines, oldest first.
    pub tail: Vec<String>,
}

/// Threads reading a child's stdout and stderr into one [`Lines`].
pub struct Reader {
    sink: Arc<Mutex<Lines>>,
    threads: Vec<JoinHandle<()>>,
}

impl Reader {
    /// Starts reading the child's piped stdout and stderr. Every line is
    /// echoed (`  | LINE` on stderr) when `echo`; a line that `result`
    /// recognises replaces the result of its slot; any other line joins the
    /// tail, of which the last `keep` lines are kept.
    pub fn start(child: &mut Child, echo: bool, result: ResultLine, keep: usize) -> Reader {
        let sink = Arc::new(Mutex::new(Lines::default()));
        let streams = [
            Box::new(child.stdout.take().expect("piped")) as Box<dyn Read + Send>,
            Box::new(child.stderr.take().expect("piped")),
        ];
        let threads = streams
            .into_iter()
            .map(|stream| {
                let sink = sink.clone();
                std::thread::spawn(move || {
                    for line in BufReader::new(stream)
                        .lines()
                        .map_while(std::io::Result::ok)
                    {
                        if echo {
                            eprintln!("  | {line}");
                        }
                        let mut out = sink.lock().expect("not poisoned");
                        if let Some((slot, v)) = result(&line) {
                            out.results.insert(slot, (v, Instant::now()));
                            continue;
                        }
                        out.tail.push(line);
                        if out.tail.len() > keep {
                            out.tail.remove(0);
                        }
                    }
                })
            })
            .collect();
        Reader { sink, threads }
    }

    /// Waits for both streams to end (the child has exited) and returns what
    /// they carried.
    pub fn finish(self) -> Lines {
        for t in self.threads {
            let _ = t.join();
        }
        std::mem::take(&mut *self.sink.lock().expect("not poisoned"))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::process::{Command, Stdio};

    fn slot_of_line(line: &str) -> Option<(u64, Value)> {
        let (slot, json) = line.strip_prefix("R")?.split_once(' ')?;
        Some((slot.parse().ok()?, serde_json::from_str(json).ok()?))
    }

    #[test]
    fn keeps_each_slots_last_result_and_the_last_other_lines() {
        let mut child = Command::new("sh")
            .args([
                "-c",
                "echo a; echo 'R0 1'; echo b >&2; echo 'R1 2'; echo c; echo 'R0 3'",
            ])
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        let reader = Reader::start(&mut child, false, slot_of_line, 2);
        child.wait().unwrap();
        let lines = reader.finish();
        let results: Vec<_> = lines.results.values().map(|(v, _)| v.clone()).collect();
        assert_eq!(results, [serde_json::json!(3), serde_json::json!(2)]);
        assert_eq!(lines.tail.len(), 2);
        assert!(!lines.tail.contains(&"R0 1".to_string()));
    }
}
