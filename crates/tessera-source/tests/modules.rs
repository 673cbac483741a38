//! The source crate's modules import each other in one direction, as the
//! server's do: no file reaches a file that reaches it back (a folder's
//! files may use its `mod.rs`), and every top-level module imports only
//! the modules `docs/ARCHITECTURE.md` lists below it. The graph is read
//! from the sources by the server's checker (`module_graph.rs`, whose own
//! test lives in tessera-server).

#![allow(clippy::unwrap_used)] // a failed unwrap is a failed test

#[path = "../../tessera-server/tests/support/module_graph.rs"]
mod module_graph;

use std::path::Path;

use module_graph::{assert_documented_order, assert_no_file_circle};

#[test]
fn files_import_down_the_order_the_architecture_lists() {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    assert_no_file_circle(&src, 30);
    assert_documented_order(&src, "### tessera-source's modules");
}
