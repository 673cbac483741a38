//! The server's modules import each other in one direction: no module
//! reaches, through `crate::` paths, a module that reaches it back, and the
//! layer model is a leaf. Read from the sources (`use crate::` lines and
//! `crate::` paths outside comments), so a new circle fails here.

#![allow(clippy::unwrap_used)] // a failed unwrap is a failed test

use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;

/// Top-level module → the top-level modules its code names.
fn imports() -> BTreeMap<String, BTreeSet<String>> {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let mut modules: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
    for path in rust_files(&src) {
        let relative = path.strip_prefix(&src).unwrap();
        let top = relative
            .components()
            .next()
            .unwrap()
            .as_os_str()
            .to_string_lossy()
            .trim_end_matches(".rs")
            .to_string();
        if top == "lib" {
            continue;
        }
        let text = std::fs::read_to_string(&path).unwrap();
        let deps = modules.entry(top.clone()).or_default();
        let mut in_group = false;
        for line in text.lines() {
            let code = line.trim_start();
            if code.starts_with("//") {
                continue;
            }
            // `use crate::{a, b::c}` spread over lines.
            if let Some(group) = code.strip_prefix("use crate::{") {
                in_group = !group.contains("};");
                names_in_group(group, deps);
                continue;
            }
            if in_group {
                names_in_group(code, deps);
                in_group = !code.contains("};");
                continue;
            }
            let mut rest = code;
            while let Some(at) = rest.find("crate::") {
                rest = &rest[at + "crate::".len()..];
                let name: String = rest
                    .chars()
                    .take_while(|c| c.is_ascii_lowercase() || *c == '_' || c.is_ascii_digit())
                    .collect();
                if !name.is_empty() {
                    deps.insert(name);
                }
            }
        }
        deps.remove(&top);
    }
    let known: BTreeSet<String> = modules.keys().cloned().collect();
    for deps in modules.values_mut() {
        deps.retain(|d| known.contains(d));
    }
    modules
}

/// Every `.rs` file below `dir`.
fn rust_files(dir: &Path) -> Vec<std::path::PathBuf> {
    let mut found = Vec::new();
    let mut todo = vec![dir.to_path_buf()];
    while let Some(path) = todo.pop() {
        if path.is_dir() {
            todo.extend(std::fs::read_dir(&path).unwrap().map(|e| e.unwrap().path()));
        } else if path.extension().is_some_and(|e| e == "rs") {
            found.push(path);
        }
    }
    found
}

/// The first path segment of each item of a `use crate::{...}` group line.
fn names_in_group(text: &str, deps: &mut BTreeSet<String>) {
    let mut depth = 0;
    let mut at_item = true;
    let mut word = String::new();
    for c in text.chars() {
        match c {
            '{' => {
                depth += 1;
                at_item = depth == 0;
            }
            '}' => depth -= 1,
            ',' if depth == 0 => at_item = true,
            c if at_item && (c.is_ascii_alphanumeric() || c == '_') => word.push(c),
            _ => {
                if at_item && !word.is_empty() && !c.is_whitespace() {
                    deps.insert(std::mem::take(&mut word));
                    at_item = false;
                }
            }
        }
    }
    if at_item && !word.is_empty() {
        deps.insert(word);
    }
}

/// A path from `from` back to itself, if any.
fn circle_through(from: &str, modules: &BTreeMap<String, BTreeSet<String>>) -> Option<Vec<String>> {
    let mut stack = vec![vec![from.to_string()]];
    let mut seen = BTreeSet::new();
    while let Some(path) = stack.pop() {
        let last = path.last().unwrap();
        for next in &modules[last] {
            if next == from {
                let mut circle = path.clone();
                circle.push(from.to_string());
                return Some(circle);
            }
            if seen.insert(next.clone()) {
                let mut longer = path.clone();
                longer.push(next.clone());
                stack.push(longer);
            }
        }
    }
    None
}

#[test]
fn no_module_imports_one_that_imports_it_back() {
    let modules = imports();
    assert!(modules.len() > 10, "modules found: {modules:?}");
    for name in modules.keys() {
        if let Some(circle) = circle_through(name, &modules) {
            panic!("import circle: {}", circle.join(" -> "));
        }
    }
}

#[test]
fn the_layer_model_and_the_lower_modules_are_leaves() {
    let modules = imports();
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
fn the_checker_finds_a_circle() {
    let mut modules = BTreeMap::new();
    modules.insert("a".to_string(), BTreeSet::from(["b".to_string()]));
    modules.insert("b".to_string(), BTreeSet::from(["a".to_string()]));
    assert_eq!(circle_through("a", &modules).unwrap(), ["a", "b", "a"]);
    let mut deps = BTreeSet::new();
    names_in_group("config::{self, Config}, model::Layer, render};", &mut deps);
    assert_eq!(
        deps,
        BTreeSet::from(["config".into(), "model".into(), "render".into()])
    );
}

#[test]
fn handlers_take_the_parts_they_use_not_the_whole_service() {
    let files = rust_files(&Path::new(env!("CARGO_MANIFEST_DIR")).join("src/http"));
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
