//! Reading committed fuzz inputs, for the replay tests.

use std::path::{Path, PathBuf};

/// The repository's `fuzz/` directory.
pub fn fuzz_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../../fuzz")
}

/// Every file of `fuzz/corpus/<target>` and `fuzz/regressions/<target>` (either may be
/// missing), sorted by path so that runs replay in the same order.
pub fn inputs(target: &str) -> Vec<PathBuf> {
    let mut files = Vec::new();
    for kind in ["corpus", "regressions"] {
        let dir = fuzz_dir().join(kind).join(target);
        let Ok(entries) = std::fs::read_dir(&dir) else {
            continue;
        };
        for entry in entries {
            let path = entry.expect("a readable corpus directory").path();
            if path.is_file() {
                files.push(path);
            }
        }
    }
    files.sort();
    files
}
