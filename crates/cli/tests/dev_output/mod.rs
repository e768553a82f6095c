//! What `baton dev` prints before it waits: read up to its "Press Ctrl-C" line, and the
//! first word after a prefix (an address, a path, a URL). Shared by the tests that start it.

use std::io::{BufRead, BufReader, Read};

/// Every line `out` prints up to and including the one that says the cluster is ready.
pub fn until_ready(out: impl Read) -> String {
    let mut text = String::new();
    for line in BufReader::new(out).lines() {
        let line = line.unwrap();
        text.push_str(&line);
        text.push('\n');
        if line.starts_with("Press Ctrl-C") {
            break;
        }
    }
    text
}

/// The first word after `prefix` on the (trimmed) line that starts with it.
pub fn word(text: &str, prefix: &str) -> String {
    let line = text.lines().map(str::trim).find(|l| l.starts_with(prefix)).unwrap_or_else(|| panic!("{text}"));
    line[prefix.len()..].split_whitespace().next().unwrap().to_string()
}
