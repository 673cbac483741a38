//! The source crate's modules import each other in one direction, as the
//! server's do: no file reaches a file that reaches it back (a folder's
//! files may use its `mod.rs`), and every top-level module imports only
//! the modules `docs/ARCHITECTURE.md` lists below it. The graph is read
//! from the sources by the server's checker (`module_graph.rs`, whose own
//! test lives in tessera-server).

#![allow(clippy::unwrap_used)] // a failed unwrap is a failed test

#[path = "../../tessera-server/tests/support/module_graph.rs"]
mod module_graph;

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};

use module_graph::{
    any_circle, file_imports, listed_order, top_level, upward_imports, without_parents,
};

fn src() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("src")
}

#[test]
fn no_file_imports_one_that_imports_it_back() {
    let files = without_parents(&file_imports(&src()));
    assert!(files.len() > 30, "files found: {}", files.len());
    if let Some(circle) = any_circle(&files) {
        panic!("import circle: {}", circle.join(" -> "));
    }
}

#[test]
fn modules_import_only_the_modules_listed_below_them() {
    let top = top_level(&file_imports(&src()));
    let doc = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../docs/ARCHITECTURE.md");
    let order = listed_order(
        &std::fs::read_to_string(doc).unwrap(),
        "### tessera-source's modules",
    );
    let listed: BTreeSet<&String> = order.iter().collect();
    let found: BTreeSet<&String> = top.keys().collect();
    assert_eq!(
        found, listed,
        "the modules in src/ and those docs/ARCHITECTURE.md lists differ"
    );
    let up = upward_imports(&top, &order);
    assert!(
        up.is_empty(),
        "imports up the documented order (module, what it imports): {up:?}"
    );
}
