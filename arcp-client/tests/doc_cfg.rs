//! Every feature-gated public item says, on docs.rs, which feature it needs.
//!
//! docs.rs builds with every feature and `--cfg docsrs`; an item marked
//! `#[cfg_attr(docsrs, doc(cfg(feature = "..")))]` shows the feature it
//! needs. This test reads the crate's sources and fails for a public item
//! that is gated without that mark, either directly (a `#[cfg(feature)]` on
//! the item) or through its module (every public item at the top of a file
//! of a gated module).

use std::collections::BTreeMap;
use std::fs;
use std::path::{Path, PathBuf};

const ITEM_KINDS: &[&str] = &[
    "async fn", "fn", "use", "struct", "enum", "mod", "trait", "type", "const", "static",
];

/// `pub <kind>` with nothing between `pub` and the kind (so not
/// `pub(crate)`), and the line's indentation.
fn public_item(line: &str) -> Option<usize> {
    let indent = line.len() - line.trim_start().len();
    let rest = line.trim_start().strip_prefix("pub ")?;
    ITEM_KINDS
        .iter()
        .any(|k| {
            rest.strip_prefix(k)
                .is_some_and(|r| r.starts_with(' ') || r.starts_with('{'))
        })
        .then_some(indent)
}

/// The feature expression of a `#[cfg(..)]` line that names a feature.
fn cfg_feature(line: &str) -> Option<&str> {
    let inner = line.trim().strip_prefix("#[cfg(")?.strip_suffix(")]")?;
    inner.contains("feature").then_some(inner)
}

/// The attribute and doc-comment lines right above line `at`.
fn attribute_block(lines: &[&str], at: usize) -> Vec<String> {
    lines[..at]
        .iter()
        .rev()
        .take_while(|l| {
            let t = l.trim_start();
            t.starts_with("#[") || t.starts_with("///")
        })
        .map(|l| l.trim().to_owned())
        .collect()
}

fn doc_cfg(expr: &str) -> String {
    format!("#[cfg_attr(docsrs, doc(cfg({expr})))]")
}

fn rust_files(dir: &Path, out: &mut Vec<PathBuf>) {
    for entry in fs::read_dir(dir).expect("readable source directory") {
        let path = entry.expect("directory entry").path();
        if path.is_dir() {
            rust_files(&path, out);
        } else if path.extension().is_some_and(|e| e == "rs") {
            out.push(path);
        }
    }
}

/// Where the module `name` declared in `file` lives: `name.rs` and/or
/// `name/` next to a `lib.rs`/`mod.rs`, or under `file`'s own directory.
fn module_paths(file: &Path, name: &str) -> Vec<PathBuf> {
    let dir = file.parent().expect("a file in a directory");
    let stem = file.file_stem().and_then(|s| s.to_str()).unwrap_or("");
    let base = if stem == "lib" || stem == "mod" {
        dir.to_path_buf()
    } else {
        dir.join(stem)
    };
    vec![base.join(format!("{name}.rs")), base.join(name)]
}

/// Gated modules: the files (and directories) of every `mod` declared under
/// a `#[cfg(feature ..)]`, with the feature expression.
fn gated_modules(files: &[(PathBuf, String)]) -> Vec<(PathBuf, String)> {
    let mut out = Vec::new();
    for (path, text) in files {
        let lines: Vec<&str> = text.lines().collect();
        for (i, line) in lines.iter().enumerate() {
            let t = line.trim();
            let decl = t
                .strip_prefix("pub mod ")
                .or_else(|| t.strip_prefix("pub(crate) mod "))
                .or_else(|| t.strip_prefix("mod "));
            let Some(name) = decl.and_then(|d| d.strip_suffix(';')) else {
                continue;
            };
            for attr in attribute_block(&lines, i) {
                if let Some(expr) = cfg_feature(&attr) {
                    for p in module_paths(path, name) {
                        out.push((p, expr.to_owned()));
                    }
                }
            }
        }
    }
    out
}

/// Every public item gated by a feature that lacks its docs.rs mark, as
/// `file:line: item (needs mark)`, and how many gated items were checked.
fn unmarked(src: &Path) -> (Vec<String>, usize) {
    let mut paths = Vec::new();
    rust_files(src, &mut paths);
    paths.sort();
    let files: Vec<(PathBuf, String)> = paths
        .into_iter()
        .map(|p| {
            let text = fs::read_to_string(&p).expect("readable source file");
            (p, text)
        })
        .collect();
    let gated = gated_modules(&files);
    let mut missing = Vec::new();
    let mut checked = 0;
    for (path, text) in &files {
        let module_features: Vec<&str> = gated
            .iter()
            .filter(|(g, _)| path == g || path.starts_with(g))
            .map(|(_, e)| e.as_str())
            .collect();
        let lines: Vec<&str> = text.lines().collect();
        for (i, line) in lines.iter().enumerate() {
            let Some(indent) = public_item(line) else {
                continue;
            };
            let block = attribute_block(&lines, i);
            let mut needed: Vec<&str> = block.iter().filter_map(|a| cfg_feature(a)).collect();
            if indent == 0 {
                needed.extend(&module_features);
            }
            for expr in needed {
                checked += 1;
                if !block.contains(&doc_cfg(expr)) {
                    missing.push(format!(
                        "{}:{}: `{}` needs {}",
                        path.display(),
                        i + 1,
                        line.trim(),
                        doc_cfg(expr)
                    ));
                }
            }
        }
    }
    (missing, checked)
}

#[test]
fn every_feature_gated_public_item_is_marked_for_docs_rs() {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let (missing, checked) = unmarked(&src);
    assert!(missing.is_empty(), "unmarked:\n{}", missing.join("\n"));
    // The scan sees the gated items there are (http, sqlite, postgres).
    assert!(checked >= 10, "only {checked} gated items found");
}

#[test]
fn the_scan_finds_an_unmarked_item() {
    let dir = tempfile::tempdir().expect("temp dir");
    let src = dir.path();
    fs::write(
        src.join("lib.rs"),
        "#[cfg(feature = \"x\")]\nmod gated;\n\
         #[cfg(feature = \"y\")]\n#[cfg_attr(docsrs, doc(cfg(feature = \"y\")))]\npub use a::B;\n\
         #[cfg(feature = \"z\")]\npub fn f() {}\n",
    )
    .unwrap();
    fs::write(
        src.join("gated.rs"),
        "/// Marked.\n#[derive(Debug)]\n#[cfg_attr(docsrs, doc(cfg(feature = \"x\")))]\npub struct A;\n\
         pub struct B;\nimpl B {\n    pub fn method(&self) {}\n}\npub(crate) struct C;\n",
    )
    .unwrap();
    let (missing, checked) = unmarked(src);
    let mut by_item: BTreeMap<String, usize> = BTreeMap::new();
    for m in &missing {
        let item = m.split('`').nth(1).unwrap_or_default().to_owned();
        *by_item.entry(item).or_default() += 1;
    }
    assert_eq!(checked, 4, "{missing:?}");
    assert_eq!(
        by_item.keys().map(String::as_str).collect::<Vec<_>>(),
        ["pub fn f() {}", "pub struct B;"],
        "{missing:?}"
    );
}
