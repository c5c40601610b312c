//! The layers, checked: every `crate::`, `super::` and `self::` path in
//! `src/` is read, and a module may only name modules of lower layers
//! (docs/architecture.md draws them). Inside each top-level module, its
//! modules must not name each other in a loop. A new module has to be
//! given its layer here.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

/// The main crate's top-level modules, lowest layer first; a module may
/// name modules of the layers before its own, and none of its own layer.
/// Every layer below them is a crate of its own under `crates/` (cargo
/// keeps those pointing one way), re-exported by `src/lib.rs`.
const LAYERS: &[&[&str]] = &[
    // The processes: a brick, a mount.
    &["brickd", "mount", "nfsd"],
    &["cli"],
];

fn layer_of(module: &str) -> Option<usize> {
    LAYERS.iter().position(|l| l.contains(&module))
}

/// A file's module path: `src/a/b.rs` and `src/a/b/mod.rs` are `a::b`.
fn module_of(src: &Path, file: &Path) -> Vec<String> {
    let rel = file.strip_prefix(src).unwrap().with_extension("");
    let mut segs: Vec<String> = rel
        .iter()
        .map(|s| s.to_string_lossy().into_owned())
        .collect();
    if matches!(
        segs.last().map(String::as_str),
        Some("mod" | "lib" | "main")
    ) {
        segs.pop();
    }
    segs
}

fn rust_files(dir: &Path, out: &mut Vec<PathBuf>) {
    for e in std::fs::read_dir(dir).unwrap() {
        let p = e.unwrap().path();
        if p.is_dir() {
            rust_files(&p, out);
        } else if p.extension().is_some_and(|x| x == "rs") {
            out.push(p);
        }
    }
}

/// The text without `//` comments (doc comments name paths in prose).
fn code_of(text: &str) -> String {
    text.lines()
        .map(|l| l.find("//").map_or(l, |i| &l[..i]))
        .collect::<Vec<_>>()
        .join("\n")
}

fn ident_at(b: &[u8], mut i: usize) -> (String, usize) {
    let s = i;
    while i < b.len() && (b[i].is_ascii_alphanumeric() || b[i] == b'_') {
        i += 1;
    }
    (String::from_utf8_lossy(&b[s..i]).into_owned(), i)
}

/// The paths of a `use` tree or a path expression starting at `i` (just
/// after a `::`), each prefixed with `base`: `a::{b, c::d}` gives
/// `base::a::b` and `base::a::c::d`.
fn paths_at(b: &[u8], mut i: usize, base: Vec<String>, out: &mut Vec<Vec<String>>) -> usize {
    let mut path = base;
    loop {
        if b.get(i) == Some(&b'{') {
            i += 1;
            loop {
                while i < b.len() && (b[i].is_ascii_whitespace() || b[i] == b',') {
                    i += 1;
                }
                if i >= b.len() || b[i] == b'}' {
                    return i + 1;
                }
                let before = i;
                i = paths_at(b, i, path.clone(), out);
                // Skip `as x` and anything else up to the next item.
                while i < b.len() && b[i] != b',' && b[i] != b'}' {
                    i += 1;
                }
                if i == before {
                    i += 1;
                }
            }
        }
        let (id, next) = ident_at(b, i);
        if id.is_empty() {
            out.push(path);
            return i;
        }
        path.push(id);
        i = next;
        if b[i..].starts_with(b"::") {
            i += 2;
        } else {
            out.push(path);
            return i;
        }
    }
}

/// Every module path a file names, resolved from its module `here`.
fn named_paths(code: &str, here: &[String]) -> Vec<Vec<String>> {
    let b = code.as_bytes();
    let mut out = Vec::new();
    let mut i = 0;
    while i < b.len() {
        let boundary =
            i == 0 || !(b[i - 1].is_ascii_alphanumeric() || b[i - 1] == b'_' || b[i - 1] == b':');
        if !boundary || !(b[i].is_ascii_alphabetic()) {
            i += 1;
            continue;
        }
        let (id, mut j) = ident_at(b, i);
        let mut base: Vec<String> = match id.as_str() {
            "crate" => Vec::new(),
            "super" | "self" => here.to_vec(),
            _ => {
                i = j;
                continue;
            }
        };
        if id == "super" {
            base.pop();
        }
        while b[j..].starts_with(b"::super") {
            base.pop();
            j += "::super".len();
        }
        if !b[j..].starts_with(b"::") {
            i = j;
            continue;
        }
        i = paths_at(b, j + 2, base, &mut out);
    }
    out
}

/// Strongly connected groups of more than one node.
fn loops(edges: &BTreeMap<String, BTreeSet<String>>) -> Vec<Vec<String>> {
    let nodes: BTreeSet<&String> = edges.keys().chain(edges.values().flatten()).collect();
    let reach = |from: &String| {
        let mut seen = BTreeSet::new();
        let mut todo = vec![from.clone()];
        while let Some(n) = todo.pop() {
            for m in edges.get(&n).into_iter().flatten() {
                if seen.insert(m.clone()) {
                    todo.push(m.clone());
                }
            }
        }
        seen
    };
    let reaches: BTreeMap<&String, BTreeSet<String>> =
        nodes.iter().map(|n| (*n, reach(n))).collect();
    let mut out: Vec<Vec<String>> = Vec::new();
    for n in &nodes {
        let group: Vec<String> = nodes
            .iter()
            .filter(|m| reaches[*n].contains(**m) && reaches[*m].contains(*n))
            .map(|m| (*m).clone())
            .collect();
        if group.len() > 1 && !out.contains(&group) {
            out.push(group);
        }
    }
    out
}

struct Edges {
    /// (from, to) → the files that make it.
    top: BTreeMap<(String, String), BTreeSet<String>>,
    /// Per top-level module: its modules and whom they name.
    inner: BTreeMap<String, BTreeMap<String, BTreeSet<String>>>,
}

/// The crates under `crates/`: their sources.
fn crate_sources() -> Vec<PathBuf> {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("crates");
    let mut out: Vec<PathBuf> = std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().path().join("src"))
        .filter(|p| p.is_dir())
        .collect();
    out.sort();
    out
}

fn edges() -> Edges {
    edges_in(&Path::new(env!("CARGO_MANIFEST_DIR")).join("src"))
}

fn edges_in(src: &Path) -> Edges {
    let src = src.to_path_buf();
    let mut files = Vec::new();
    rust_files(&src, &mut files);
    let modules: Vec<Vec<String>> = files.iter().map(|f| module_of(&src, f)).collect();
    let mut e = Edges {
        top: BTreeMap::new(),
        inner: BTreeMap::new(),
    };
    for (file, here) in files.iter().zip(&modules) {
        if here.is_empty() || here[0] == "bin" {
            continue;
        }
        let code = code_of(&std::fs::read_to_string(file).unwrap());
        let name = file.strip_prefix(&src).unwrap().display().to_string();
        for p in named_paths(&code, here) {
            let Some(top) = p.first() else { continue };
            if !modules.iter().any(|m| m.first() == Some(top)) {
                continue;
            }
            if *top != here[0] {
                e.top
                    .entry((here[0].clone(), top.clone()))
                    .or_default()
                    .insert(name.clone());
            } else if here.len() > 1 && p.len() > 1 && p[1] != here[1] {
                let kid = &p[1];
                if modules
                    .iter()
                    .any(|m| m.len() > 1 && m[0] == *top && m[1] == *kid)
                {
                    e.inner
                        .entry(top.clone())
                        .or_default()
                        .entry(here[1].clone())
                        .or_default()
                        .insert(kid.clone());
                }
            }
        }
    }
    e
}

#[test]
fn every_module_has_a_layer() {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let mut files = Vec::new();
    rust_files(&src, &mut files);
    let mut missing: BTreeSet<String> = BTreeSet::new();
    for f in &files {
        let m = module_of(&src, f);
        if let Some(top) = m.first().filter(|t| *t != "bin") {
            if layer_of(top).is_none() {
                missing.insert(top.clone());
            }
        }
    }
    assert!(
        missing.is_empty(),
        "give these modules a layer in tests/layers.rs: {missing:?}"
    );
}

#[test]
fn modules_name_only_lower_layers() {
    let mut wrong = Vec::new();
    for ((from, to), files) in &edges().top {
        let (Some(a), Some(b)) = (layer_of(from), layer_of(to)) else {
            continue;
        };
        if b >= a {
            wrong.push(format!(
                "{from} (layer {a}) names {to} (layer {b}) in {files:?}"
            ));
        }
    }
    assert!(
        wrong.is_empty(),
        "imports that go up or sideways:\n{}",
        wrong.join("\n")
    );
}

#[test]
fn no_module_loops_inside_a_module() {
    let mut found = Vec::new();
    for (top, edges) in &edges().inner {
        for group in loops(edges) {
            let detail: Vec<String> = group
                .iter()
                .map(|m| {
                    let to: Vec<&String> = edges[m].iter().filter(|t| group.contains(t)).collect();
                    format!("{m} → {to:?}")
                })
                .collect();
            found.push(format!("{top}: {}", detail.join(", ")));
        }
    }
    assert!(
        found.is_empty(),
        "modules that name each other in a loop:\n{}",
        found.join("\n")
    );
}

/// Inside each crate below the main one, its modules do not name each
/// other in a loop either.
#[test]
fn no_module_loops_inside_the_layer_crates() {
    let mut found = Vec::new();
    for src in crate_sources() {
        let e = edges_in(&src);
        let mut top: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
        for (from, to) in e.top.keys() {
            top.entry(from.clone()).or_default().insert(to.clone());
        }
        for group in loops(&top) {
            found.push(format!("{}: {group:?}", src.display()));
        }
        for (m, inner) in &e.inner {
            for group in loops(inner) {
                found.push(format!("{}: {m}: {group:?}", src.display()));
            }
        }
    }
    assert!(
        found.is_empty(),
        "modules that name each other in a loop:\n{}",
        found.join("\n")
    );
}

#[test]
fn the_reader_sees_nested_use_trees() {
    let here = vec!["a".to_string(), "b".to_string()];
    let got = named_paths(
        "use crate::{x::{y, z as w}, v};\nuse super::c::d;\nlet q = self::e::f(); use super::super::g;",
        &here,
    );
    let s: Vec<String> = got.iter().map(|p| p.join("::")).collect();
    assert_eq!(s, ["x::y", "x::z", "v", "a::c::d", "a::b::e::f", "g"]);
}

/// A loop the checker must find: it is not a test that cannot fail.
#[test]
fn the_checker_finds_a_loop() {
    let mut e: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
    e.entry("a".into()).or_default().insert("b".into());
    e.entry("b".into()).or_default().insert("c".into());
    e.entry("c".into()).or_default().insert("a".into());
    e.entry("d".into()).or_default().insert("a".into());
    assert_eq!(
        loops(&e),
        vec![vec!["a".to_string(), "b".into(), "c".into()]]
    );
}
