//! The documentation's relative links resolve: every `[text](target)` in
//! README.md and docs/ that is no URL names a file of the repository, and
//! its `#anchor`, if any, a heading of that file (as GitHub makes anchors:
//! lower case, punctuation dropped, spaces as hyphens, `-1` for a repeat).

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

fn root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

/// README.md and every Markdown file under docs/.
fn pages() -> Vec<PathBuf> {
    fn walk(dir: &Path, out: &mut Vec<PathBuf>) {
        for entry in std::fs::read_dir(dir).unwrap() {
            let path = entry.unwrap().path();
            if path.is_dir() {
                walk(&path, out);
            } else if path.extension().is_some_and(|e| e == "md") {
                out.push(path);
            }
        }
    }
    let mut pages = vec![root().join("README.md")];
    walk(&root().join("docs"), &mut pages);
    pages.sort();
    pages
}

fn slug(heading: &str) -> String {
    heading
        .trim()
        .to_lowercase()
        .chars()
        .filter(|c| c.is_alphanumeric() || *c == '_' || *c == '-' || *c == ' ')
        .map(|c| if c == ' ' { '-' } else { c })
        .collect()
}

/// The lines of `text` outside fenced code blocks.
fn prose(text: &str) -> Vec<&str> {
    let mut fenced = false;
    text.lines()
        .filter(|l| {
            if l.starts_with("```") {
                fenced = !fenced;
                return false;
            }
            !fenced
        })
        .collect()
}

fn anchors(text: &str) -> BTreeSet<String> {
    let mut seen: BTreeMap<String, usize> = BTreeMap::new();
    let mut out = BTreeSet::new();
    for line in prose(text) {
        let hashes = line.chars().take_while(|c| *c == '#').count();
        if (1..=6).contains(&hashes) && line[hashes..].starts_with(' ') {
            let s = slug(&line[hashes + 1..]);
            let n = seen.entry(s.clone()).or_default();
            out.insert(if *n == 0 { s } else { format!("{s}-{n}") });
            *n += 1;
        }
    }
    out
}

/// The targets of the links in `text`'s prose: `](target)`.
fn links(text: &str) -> Vec<String> {
    let mut out = Vec::new();
    for line in prose(text) {
        let mut rest = line;
        while let Some(at) = rest.find("](") {
            let after = &rest[at + 2..];
            let Some(end) = after.find(')') else { break };
            out.push(after[..end].to_string());
            rest = &after[end..];
        }
    }
    out
}

#[test]
fn every_relative_link_of_the_docs_resolves() {
    let pages = pages();
    assert!(pages.len() > 5, "README.md and the docs pages: {pages:?}");
    let mut broken = Vec::new();
    let mut checked = 0;
    for page in &pages {
        let text = std::fs::read_to_string(page).unwrap();
        for target in links(&text) {
            if target.contains("://") || target.starts_with("mailto:") {
                continue;
            }
            let (path, anchor) = target.split_once('#').unwrap_or((&target, ""));
            let dest = if path.is_empty() { page.clone() } else { page.parent().unwrap().join(path) };
            checked += 1;
            if !dest.exists() {
                broken.push(format!("{}: {target}: no such file", page.display()));
                continue;
            }
            if anchor.is_empty() || dest.extension().is_none_or(|e| e != "md") {
                continue;
            }
            let dest_text = std::fs::read_to_string(&dest).unwrap();
            if !anchors(&dest_text).contains(anchor) {
                broken.push(format!("{}: {target}: no heading #{anchor} in {}", page.display(), dest.display()));
            }
        }
    }
    assert!(checked > 50, "links checked: {checked}");
    assert!(broken.is_empty(), "broken links:\n{}", broken.join("\n"));
}

#[test]
fn the_readme_is_a_front_door() {
    let lines = std::fs::read_to_string(root().join("README.md")).unwrap().lines().count();
    assert!(lines < 250, "README.md has {lines} lines; the reference belongs in docs/");
}
