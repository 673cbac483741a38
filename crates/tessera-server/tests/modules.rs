//! The server's modules import each other in one direction: no file
//! reaches, through `crate::`/`super::` paths, a file that reaches it back
//! (a folder's files may use its `mod.rs`); every top-level module imports
//! only the modules `docs/ARCHITECTURE.md` lists below it; the layer model
//! and the lower modules are leaves. Read from the sources
//! (`support/module_graph.rs`, shared with tessera-source's twin), so a new
//! circle or an import up the list fails here.

#![allow(clippy::unwrap_used)] // a failed unwrap is a failed test

mod support {
    pub mod module_graph;
}

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

use support::module_graph::{
    any_circle, assert_documented_order, assert_no_file_circle, circle_through, file_imports,
    listed_order, rust_files, top_level, upward_imports, without_parents,
};

fn src() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("src")
}

#[test]
fn no_file_imports_one_that_imports_it_back() {
    assert_no_file_circle(&src(), 40);
}

#[test]
fn modules_import_only_the_modules_listed_below_them() {
    assert_documented_order(&src(), "### tessera-server's modules");
}

#[test]
fn the_layer_model_and_the_lower_modules_are_leaves() {
    let modules = top_level(&file_imports(&src()));
    let allowed: &[(&str, &[&str])] = &[
        ("model", &["metatile", "dimension"]),
        ("dimension", &[]),
        ("metatile", &[]),
        ("metrics", &[]),
        ("config", &["suggest"]),
        ("suggest", &[]),
        ("locks", &[]),
        ("encode_pool", &[]),
        ("throttle", &[]),
    ];
    for (module, may) in allowed {
        let uses = &modules[*module];
        let extra: Vec<&String> = uses.iter().filter(|d| !may.contains(&d.as_str())).collect();
        assert!(extra.is_empty(), "{module} imports {extra:?}");
    }
    // Only the composition root, the HTTP edge and the serving process
    // (which swaps it whole on a reload) hold the whole service.
    for (module, deps) in &modules {
        if deps.contains("service") {
            assert!(
                module == "http" || module == "serve",
                "{module} imports the service"
            );
        }
    }
}

#[test]
fn the_checker_finds_circles_in_files_and_imports_up_the_order() {
    let dir = tempfile::tempdir().unwrap();
    let write = |name: &str, text: &str| {
        let path = dir.path().join(name);
        std::fs::create_dir_all(path.parent().unwrap()).unwrap();
        std::fs::write(path, text).unwrap();
    };
    write("lib.rs", "mod a;\nmod b;\npub use a::Thing;\n");
    write("a/mod.rs", "mod x;\nmod y;\npub struct Thing;\n");
    // Siblings in one folder importing each other: a circle of files that
    // the top-level graph cannot see.
    write(
        "a/x.rs",
        "use super::y::f;\n// use crate::b; is a comment\n",
    );
    write(
        "a/y.rs",
        "pub fn f() { super::x::g(); let s = \"crate::b\"; }\n",
    );
    write(
        "b.rs",
        "use crate::{Thing, a::{self, x}};\n#[cfg(test)]\nmod tests { use crate::c; }\n",
    );
    let files = file_imports(dir.path());
    assert_eq!(files["a/x"], BTreeSet::from(["a/y".to_string()]));
    assert_eq!(
        files["b"],
        BTreeSet::from(["a".to_string(), "a/x".to_string()]),
        "a name the root re-exports is its module; comments, strings and tests are not read"
    );
    let flat = without_parents(&files);
    assert_eq!(circle_through("a/x", &flat).unwrap(), ["a/x", "a/y", "a/x"]);
    let top = top_level(&files);
    assert_eq!(top["b"], BTreeSet::from(["a".to_string()]));
    let order = vec!["a".to_string(), "b".to_string()];
    assert_eq!(
        upward_imports(&top, &order),
        [("b".to_string(), "a".to_string())]
    );
    let doc =
        "## x\n\n### mods\n\n| module | owns |\n|---|---|\n| `b` | B |\n| `a` | A |\n\n## y\n";
    assert_eq!(listed_order(doc, "### mods"), ["b", "a"]);
    let unused: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
    assert!(any_circle(&unused).is_none());
}

#[test]
fn handlers_take_the_parts_they_use_not_the_whole_service() {
    let files = rust_files(&src().join("http"));
    assert!(files.len() > 10);
    for path in files {
        let text = std::fs::read_to_string(&path).unwrap();
        assert!(
            !text.contains("State<AppState>")
                && !text.contains("impl std::ops::Deref for AppState"),
            "{} takes the whole service; take a substate of http::state",
            path.display()
        );
    }
}
