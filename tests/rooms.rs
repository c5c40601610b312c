//! Small rooms, checked: no Rust file over `MAX_FILE` lines and no
//! function over `MAX_FN` lines, in `src/`, `tests/` and every crate of
//! the workspace. The rooms still too big are listed below with the size
//! they have: they may shrink, never grow, and a room that fits is taken
//! off the list (the test says so). The lists end empty.

use std::path::{Path, PathBuf};

const MAX_FILE: usize = 800;
const MAX_FN: usize = 150;

/// Files over `MAX_FILE` lines, with their length today.
const BIG_FILES: &[(&str, usize)] = &[];

/// Functions over `MAX_FN` lines: file, name, length today.
const BIG_FNS: &[(&str, &str, usize)] = &[];

fn rust_files(dir: &Path, out: &mut Vec<PathBuf>) {
    let Ok(rd) = std::fs::read_dir(dir) else {
        return;
    };
    for e in rd {
        let p = e.unwrap().path();
        if p.is_dir() {
            if p.file_name().is_some_and(|n| n != "target") {
                rust_files(&p, out);
            }
        } else if p.extension().is_some_and(|x| x == "rs") {
            out.push(p);
        }
    }
}

/// Every Rust file of the workspace, relative to its root.
fn sources() -> Vec<(String, String)> {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let mut files = Vec::new();
    for d in ["src", "tests", "crates"] {
        rust_files(&root.join(d), &mut files);
    }
    files.sort();
    files
        .into_iter()
        .map(|p| {
            let rel = p.strip_prefix(root).unwrap().to_string_lossy().into_owned();
            (rel, std::fs::read_to_string(&p).unwrap())
        })
        .collect()
}

/// The functions of `text` (written as rustfmt writes them: the closing
/// brace at the indentation of `fn`), with their lengths in lines.
fn functions(text: &str) -> Vec<(String, usize)> {
    let lines: Vec<&str> = text.lines().collect();
    let mut out = Vec::new();
    for (i, l) in lines.iter().enumerate() {
        let body = l.trim_start();
        let indent = &l[..l.len() - body.len()];
        let mut words = body.split_whitespace().peekable();
        let mut head = Vec::new();
        while let Some(w) = words.peek() {
            if *w == "pub"
                || w.starts_with("pub(")
                || ["async", "unsafe", "const", "extern", "\"C\""].contains(w)
            {
                head.push(words.next().unwrap());
            } else {
                break;
            }
        }
        if words.next() != Some("fn") {
            continue;
        }
        let Some(name) = words.next() else { continue };
        let name: String = name
            .chars()
            .take_while(|c| c.is_alphanumeric() || *c == '_')
            .collect();
        // A declaration without a body (in a trait).
        let end = lines[i..]
            .iter()
            .position(|l| l.trim_end().ends_with('{') || l.trim_end().ends_with(';'));
        if end.is_some_and(|e| lines[i + e].trim_end().ends_with(';')) {
            continue;
        }
        let close = format!("{indent}}}");
        if let Some(n) = lines[i + 1..].iter().position(|l| l.starts_with(&close)) {
            out.push((name, n + 2));
        }
    }
    out
}

#[test]
fn no_file_is_too_big() {
    let mut wrong = Vec::new();
    let sources = sources();
    for (file, _) in BIG_FILES {
        if !sources.iter().any(|(f, _)| f == file) {
            wrong.push(format!("{file} is gone: take it off BIG_FILES"));
        }
    }
    for (file, text) in sources {
        let n = text.lines().count();
        match BIG_FILES.iter().find(|(f, _)| *f == file) {
            Some((_, _)) if n <= MAX_FILE => {
                wrong.push(format!("{file} has {n} lines now: take it off BIG_FILES"))
            }
            Some((_, was)) if n > *was => wrong.push(format!(
                "{file} grew from {was} to {n} lines: it is over {MAX_FILE} already, split it"
            )),
            None if n > MAX_FILE => wrong.push(format!(
                "{file} has {n} lines, more than {MAX_FILE}: split it by concern"
            )),
            _ => {}
        }
    }
    assert!(wrong.is_empty(), "{}", wrong.join("\n"));
}

#[test]
fn no_function_is_too_long() {
    let mut wrong = Vec::new();
    let sources = sources();
    for (file, name, _) in BIG_FNS {
        if !sources.iter().any(|(f, _)| f == file) {
            wrong.push(format!("{file} (fn {name}) is gone: take it off BIG_FNS"));
        }
    }
    for (file, text) in sources {
        // The longest of the functions of each name (a file has several
        // `call`s, one per translator).
        let mut longest = std::collections::BTreeMap::new();
        for (name, n) in functions(&text) {
            let m = longest.entry(name).or_insert(0);
            *m = n.max(*m);
        }
        for (name, n) in longest {
            match BIG_FNS.iter().find(|(f, g, _)| *f == file && *g == name) {
                Some(_) if n <= MAX_FN => wrong.push(format!(
                    "{file}: fn {name} has {n} lines now: take it off BIG_FNS"
                )),
                Some((_, _, was)) if n > *was => wrong.push(format!(
                    "{file}: fn {name} grew from {was} to {n} lines: split it"
                )),
                None if n > MAX_FN => wrong.push(format!(
                    "{file}: fn {name} has {n} lines, more than {MAX_FN}: split it"
                )),
                _ => {}
            }
        }
    }
    assert!(wrong.is_empty(), "{}", wrong.join("\n"));
}

#[test]
fn the_reader_measures_functions() {
    let text = "fn a() {\n    x();\n}\n\nimpl T {\n    pub(crate) async fn b(\n        y: u8,\n    ) -> u8 {\n        if y {\n        }\n        y\n    }\n    fn c(&self);\n}\n";
    assert_eq!(
        functions(text),
        vec![("a".to_string(), 3), ("b".to_string(), 7)]
    );
}
