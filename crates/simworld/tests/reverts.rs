//! Every patch in `crates/simworld/reverts/` still applies to this tree: each undoes a fix so
//! that anyone can check the simulator finds the bug again (its README), and one that no
//! longer applies says nothing. One patch rotted unseen once (`elastic-below-minimum`, after
//! `place_smaller` changed).

use std::path::Path;
use std::process::Command;

#[test]
fn every_reverted_fix_still_applies() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("../..");
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("reverts");
    let mut patches: Vec<_> = std::fs::read_dir(&dir)
        .expect("the reverts directory")
        .map(|e| e.expect("an entry").path())
        .filter(|p| p.extension().is_some_and(|x| x == "patch"))
        .collect();
    patches.sort();
    assert!(patches.len() >= 10, "only {} patches in {}", patches.len(), dir.display());
    let mut stale = Vec::new();
    for patch in &patches {
        // `git apply --check` works in any directory, a checkout or not.
        let out = Command::new("git")
            .arg("apply")
            .arg("--check")
            .arg(patch)
            .current_dir(&root)
            .output()
            .expect("git must be installed to check the reverted fixes");
        if !out.status.success() {
            stale.push(format!("{}: {}", patch.display(), String::from_utf8_lossy(&out.stderr).trim()));
        }
    }
    assert!(stale.is_empty(), "patches that no longer apply (remake them against this tree):\n{}", stale.join("\n"));
}
