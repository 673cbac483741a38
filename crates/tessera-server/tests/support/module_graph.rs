//! The import graph of a crate's source files, read from the sources: each
//! file's `use crate::`, `use super::` and `use self::` items (groups
//! spread over lines expanded) and `crate::`/`super::` paths in code
//! (comments and string literals left out), each resolved to the deepest
//! module file it names. Shared by the server's and the source crate's
//! `tests/modules.rs`.

#![allow(dead_code)] // each test file uses part of it

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

/// A module by its path inside the crate: `http/tiles/address`,
/// `tile_cache` (a folder's `mod.rs`), `` (the crate root).
pub type Module = String;

/// Fails when a file of the crate at `src` (at least `files` of them)
/// imports one that imports it back.
pub fn assert_no_file_circle(src: &Path, files: usize) {
    let graph = without_parents(&file_imports(src));
    assert!(graph.len() > files, "files found: {}", graph.len());
    if let Some(circle) = any_circle(&graph) {
        panic!("import circle: {}", circle.join(" -> "));
    }
}

/// Fails when the top-level modules of the crate at `src` are not those
/// the table under `heading` of `docs/ARCHITECTURE.md` (two folders up
/// from `src`'s crate) lists, each once, or when one imports a module
/// listed above it.
pub fn assert_documented_order(src: &Path, heading: &str) {
    let top = top_level(&file_imports(src));
    let doc = src.join("../../../docs/ARCHITECTURE.md");
    let order = listed_order(&std::fs::read_to_string(&doc).unwrap_or_default(), heading);
    let listed: BTreeSet<&String> = order.iter().collect();
    let found: BTreeSet<&String> = top.keys().collect();
    assert_eq!(
        found, listed,
        "the modules in src/ and those docs/ARCHITECTURE.md lists under {heading:?} differ"
    );
    assert_eq!(listed.len(), order.len(), "a module is listed twice");
    let up = upward_imports(&top, &order);
    assert!(
        up.is_empty(),
        "imports up the documented order (module, what it imports): {up:?}"
    );
}

/// Every module file of the crate at `src`, and the modules each names.
pub fn file_imports(src: &Path) -> BTreeMap<Module, BTreeSet<Module>> {
    let files = rust_files(src);
    let modules: BTreeSet<Module> = files.iter().map(|f| module_of(src, f)).collect();
    let aliases = root_aliases(src, &files);
    let mut graph = BTreeMap::new();
    for file in &files {
        let here = module_of(src, file);
        let text = std::fs::read_to_string(file).unwrap_or_default();
        // A file's tests (at its end) may reach anything.
        let text = text.split("#[cfg(test)]\nmod ").next().unwrap_or_default();
        let mut deps = BTreeSet::new();
        for path in referenced_paths(&code_only(text)) {
            let mut absolute = absolute_path(&here, &path);
            // A name the crate root re-exports stands for its module.
            if let Some(real) = absolute.first().and_then(|first| aliases.get(first))
                && !modules.contains(&absolute[0])
            {
                absolute.splice(..1, real.iter().cloned());
            }
            if let Some(target) = deepest_module(&modules, &absolute)
                && target != here
            {
                deps.insert(target);
            }
        }
        graph.insert(here, deps);
    }
    graph
}

/// The names the crate root brings in with `use` (`pub use crs::Crs;`):
/// each visible name and the path it stands for.
fn root_aliases(src: &Path, files: &[PathBuf]) -> BTreeMap<String, Vec<String>> {
    let mut aliases = BTreeMap::new();
    let Some(root) = files.iter().find(|f| module_of(src, f).is_empty()) else {
        return aliases;
    };
    let code = code_only(&std::fs::read_to_string(root).unwrap_or_default());
    let mut paths = Vec::new();
    let mut rest = code.as_str();
    while let Some(at) = find_word(rest, "use") {
        let after = &rest[at + 3..];
        let Some(end) = after.find(';') else { break };
        expand_tree(&compact(&after[..end]), &mut Vec::new(), &mut paths);
        rest = &after[end..];
    }
    for mut path in paths {
        let Some(last) = path.pop() else { continue };
        let (real, visible) = last.split_once('@').unwrap_or((&last, &last));
        let visible = visible.to_string();
        path.push(real.to_string());
        if path.first().is_some_and(|p| p == "crate" || p == "self") {
            path.remove(0);
        }
        aliases.insert(visible, path);
    }
    aliases
}

/// A `use` tree without spaces, each ` as ` written `@`.
fn compact(tree: &str) -> String {
    tree.replace(" as ", "@").split_whitespace().collect()
}

/// The graph of top-level modules (`http`, `tile_cache`, ...): the edges
/// of their files, the crate root left out.
pub fn top_level(files: &BTreeMap<Module, BTreeSet<Module>>) -> BTreeMap<Module, BTreeSet<Module>> {
    let top = |m: &str| m.split('/').next().unwrap_or_default().to_string();
    let mut graph: BTreeMap<Module, BTreeSet<Module>> = BTreeMap::new();
    for (module, deps) in files {
        if module.is_empty() {
            continue;
        }
        let from = top(module);
        let entry = graph.entry(from.clone()).or_default();
        for d in deps {
            let to = top(d);
            if !to.is_empty() && to != from {
                entry.insert(to);
            }
        }
    }
    graph
}

/// The file graph without the edges a file has to the folders it lies in
/// (a folder's `mod.rs` is its face: what it declares, its files may use)
/// and to the crate root.
pub fn without_parents(
    files: &BTreeMap<Module, BTreeSet<Module>>,
) -> BTreeMap<Module, BTreeSet<Module>> {
    files
        .iter()
        .map(|(module, deps)| {
            let kept = deps
                .iter()
                .filter(|d| !d.is_empty() && !is_inside(module, d))
                .cloned()
                .collect();
            (module.clone(), kept)
        })
        .collect()
}

/// Whether module `inner` lies inside the folder of module `outer`.
fn is_inside(inner: &str, outer: &str) -> bool {
    inner
        .strip_prefix(outer)
        .is_some_and(|rest| rest.starts_with('/'))
}

/// A path from `from` back to itself, if any.
pub fn circle_through(
    from: &str,
    graph: &BTreeMap<Module, BTreeSet<Module>>,
) -> Option<Vec<String>> {
    let mut stack = vec![vec![from.to_string()]];
    let mut seen = BTreeSet::new();
    while let Some(path) = stack.pop() {
        let last = path.last()?;
        for next in graph.get(last).into_iter().flatten() {
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

/// The first circle in `graph`, if any.
pub fn any_circle(graph: &BTreeMap<Module, BTreeSet<Module>>) -> Option<Vec<String>> {
    graph.keys().find_map(|m| circle_through(m, graph))
}

/// The modules listed, in order, in the table under `heading` of the
/// markdown `text`: the first cell of each row, without its backquotes.
pub fn listed_order(text: &str, heading: &str) -> Vec<String> {
    let mut lines = text.lines().skip_while(|l| l.trim() != heading).skip(1);
    let mut order = Vec::new();
    let mut in_table = false;
    for line in lines.by_ref() {
        let line = line.trim();
        if line.starts_with('#') {
            break;
        }
        if !line.starts_with('|') {
            if in_table {
                break;
            }
            continue;
        }
        in_table = true;
        let cell = line
            .trim_start_matches('|')
            .split('|')
            .next()
            .unwrap_or_default()
            .trim();
        let name = cell.trim_matches('`');
        if name.is_empty() || name == "module" || name.starts_with("---") {
            continue;
        }
        order.push(name.to_string());
    }
    order
}

/// Where `graph` imports against `order` (each module may import only
/// modules listed below it): `(module, what it imports above it)`.
pub fn upward_imports(
    graph: &BTreeMap<Module, BTreeSet<Module>>,
    order: &[String],
) -> Vec<(String, String)> {
    let rank = |m: &str| order.iter().position(|o| o == m);
    let mut wrong = Vec::new();
    for (module, deps) in graph {
        let Some(at) = rank(module) else { continue };
        for d in deps {
            if rank(d).is_some_and(|r| r <= at) {
                wrong.push((module.clone(), d.clone()));
            }
        }
    }
    wrong
}

/// Every `.rs` file below `dir`.
pub fn rust_files(dir: &Path) -> Vec<PathBuf> {
    let mut found = Vec::new();
    let mut todo = vec![dir.to_path_buf()];
    while let Some(path) = todo.pop() {
        if path.is_dir() {
            if let Ok(entries) = std::fs::read_dir(&path) {
                todo.extend(entries.flatten().map(|e| e.path()));
            }
        } else if path.extension().is_some_and(|e| e == "rs") {
            found.push(path);
        }
    }
    found.sort();
    found
}

/// The module a file is: its path under `src` without `.rs`; a folder's
/// `mod.rs` is the folder; `lib.rs` and `main.rs` the root.
fn module_of(src: &Path, file: &Path) -> Module {
    let relative = file.strip_prefix(src).unwrap_or(file);
    let mut parts: Vec<String> = relative
        .components()
        .map(|c| c.as_os_str().to_string_lossy().to_string())
        .collect();
    if let Some(last) = parts.pop() {
        let stem = last.trim_end_matches(".rs");
        if !(stem == "mod" || (parts.is_empty() && (stem == "lib" || stem == "main"))) {
            parts.push(stem.to_string());
        }
    }
    parts.join("/")
}

/// `text` with comments and the contents of string literals blanked out.
pub fn code_only(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    let bytes: Vec<char> = text.chars().collect();
    let mut i = 0;
    while i < bytes.len() {
        let c = bytes[i];
        let next = bytes.get(i + 1).copied();
        if c == '/' && next == Some('/') {
            while i < bytes.len() && bytes[i] != '\n' {
                i += 1;
            }
            continue;
        }
        if c == '/' && next == Some('*') {
            i += 2;
            while i + 1 < bytes.len() && !(bytes[i] == '*' && bytes[i + 1] == '/') {
                i += 1;
            }
            i += 2;
            continue;
        }
        if c == 'r' && (next == Some('"') || next == Some('#')) && !prev_is_ident(&bytes, i) {
            // A raw string: r"..." or r#"..."#.
            let mut j = i + 1;
            let mut hashes = 0;
            while bytes.get(j) == Some(&'#') {
                hashes += 1;
                j += 1;
            }
            if bytes.get(j) == Some(&'"') {
                j += 1;
                loop {
                    if j >= bytes.len() {
                        break;
                    }
                    if bytes[j] == '"' && (0..hashes).all(|k| bytes.get(j + 1 + k) == Some(&'#')) {
                        j += 1 + hashes;
                        break;
                    }
                    j += 1;
                }
                out.push_str("\"\"");
                i = j;
                continue;
            }
        }
        if c == '"' {
            let mut j = i + 1;
            while j < bytes.len() && bytes[j] != '"' {
                if bytes[j] == '\\' {
                    j += 1;
                }
                j += 1;
            }
            out.push_str("\"\"");
            i = j + 1;
            continue;
        }
        if c == '\'' {
            // A char literal ('a', '\n', '\''), not a lifetime ('a).
            let close = if next == Some('\\') { i + 3 } else { i + 2 };
            if bytes.get(close) == Some(&'\'')
                || (next == Some('\\') && bytes.get(i + 4) == Some(&'\''))
            {
                let end = if bytes.get(close) == Some(&'\'') {
                    close
                } else {
                    i + 4
                };
                out.push_str("' '");
                i = end + 1;
                continue;
            }
        }
        out.push(c);
        i += 1;
    }
    out
}

fn prev_is_ident(chars: &[char], i: usize) -> bool {
    i > 0 && (chars[i - 1].is_alphanumeric() || chars[i - 1] == '_')
}

/// Every path the code names from `crate`, `super` or `self`: `use` items
/// (groups expanded) and paths in expressions and types, each as its
/// segments (`["crate", "http", "reply", "base_url"]`).
pub fn referenced_paths(code: &str) -> Vec<Vec<String>> {
    let mut paths = Vec::new();
    // `use` declarations, to their `;`.
    let mut rest = code;
    while let Some(at) = find_word(rest, "use") {
        let after = &rest[at + 3..];
        let Some(end) = after.find(';') else { break };
        let tree = after[..end].trim();
        if tree.starts_with("crate::") || tree.starts_with("super::") || tree.starts_with("self::")
        {
            expand_tree(&compact(tree), &mut Vec::new(), &mut paths);
        }
        rest = &after[end..];
    }
    // Paths in code: `crate::a::b`, `super::a`.
    for root in ["crate::", "super::"] {
        let mut rest = code;
        while let Some(at) = rest.find(root) {
            let boundary = at == 0 || {
                let c = rest[..at].chars().next_back().unwrap_or(' ');
                !(c.is_alphanumeric() || c == '_')
            };
            let tail = &rest[at..];
            let taken: String = tail
                .chars()
                .take_while(|c| c.is_alphanumeric() || *c == '_' || *c == ':')
                .collect();
            if boundary && !taken.ends_with("::") {
                paths.push(taken.split("::").map(str::to_string).collect());
            }
            rest = &rest[at + root.len()..];
        }
    }
    paths
}

/// The start of `word` in `text` as a whole word.
fn find_word(text: &str, word: &str) -> Option<usize> {
    let mut from = 0;
    while let Some(at) = text[from..].find(word) {
        let at = from + at;
        let before = text[..at].chars().next_back().unwrap_or(' ');
        let after = text[at + word.len()..].chars().next().unwrap_or(' ');
        if !(before.is_alphanumeric() || before == '_') && after.is_whitespace() {
            return Some(at);
        }
        from = at + word.len();
    }
    None
}

/// The paths of a `use` tree (no spaces): `a::{b, c::{d, e}}`.
fn expand_tree(tree: &str, prefix: &mut Vec<String>, out: &mut Vec<Vec<String>>) {
    let (head, group) = match tree.find("::{") {
        Some(at) if tree.ends_with('}') && !tree[..at].contains('{') => {
            (&tree[..at], Some(&tree[at + 3..tree.len() - 1]))
        }
        _ => (tree, None),
    };
    let segments: Vec<String> = head
        .split("::")
        .filter(|s| !s.is_empty())
        .map(str::to_string)
        .collect();
    let depth = prefix.len();
    prefix.extend(segments);
    match group {
        None => out.push(prefix.clone()),
        Some(items) => {
            for item in split_top(items) {
                if item == "self" {
                    out.push(prefix.clone());
                } else if !item.is_empty() {
                    expand_tree(&item, prefix, out);
                }
            }
        }
    }
    prefix.truncate(depth);
}

/// The items of a group, split at its top-level commas.
fn split_top(items: &str) -> Vec<String> {
    let mut out = Vec::new();
    let mut depth = 0;
    let mut current = String::new();
    for c in items.chars() {
        match c {
            '{' => {
                depth += 1;
                current.push(c);
            }
            '}' => {
                depth -= 1;
                current.push(c);
            }
            ',' if depth == 0 => out.push(std::mem::take(&mut current)),
            _ => current.push(c),
        }
    }
    out.push(current);
    out
}

/// `path` (from `crate`, `super` or `self`, as written in module `here`)
/// as segments from the crate root.
fn absolute_path(here: &str, path: &[String]) -> Vec<String> {
    let path: Vec<String> = path
        .iter()
        .map(|s| s.split('@').next().unwrap_or(s).to_string())
        .collect();
    let mut at: Vec<String> = if here.is_empty() {
        Vec::new()
    } else {
        here.split('/').map(str::to_string).collect()
    };
    let mut segments = path.iter().peekable();
    match segments.peek().map(|s| s.as_str()) {
        Some("crate") => {
            at.clear();
            segments.next();
        }
        Some("self") => {
            segments.next();
        }
        _ => {}
    }
    while segments.peek().map(|s| s.as_str()) == Some("super") {
        at.pop();
        segments.next();
    }
    at.extend(segments.cloned());
    at
}

/// The deepest module among `modules` that `path` lies in.
fn deepest_module(modules: &BTreeSet<Module>, path: &[String]) -> Option<Module> {
    (0..=path.len())
        .rev()
        .map(|n| path[..n].join("/"))
        .find(|candidate| modules.contains(candidate))
}
