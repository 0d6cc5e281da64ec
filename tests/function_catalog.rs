//! docs/functions.md against the catalog: its table (one row per SQL function
//! of the extension: volatility, parallel safety, strictness, `EXECUTE` for
//! PUBLIC) and the labels in parentheses after each function heading. Both
//! are read from the page and compared with `pg_proc` after `CREATE
//! EXTENSION`; no function list is written down here.

mod common;

use common::Cluster;
use std::collections::{BTreeMap, BTreeSet};

/// One function as the catalog has it.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Labels {
    /// VOLATILE, STABLE or IMMUTABLE.
    volatility: String,
    /// SAFE, RESTRICTED or UNSAFE.
    parallel: String,
    strict: bool,
    public_execute: bool,
}

impl Labels {
    /// The heading's parentheses: the volatility, STRICT if strict, and the
    /// parallel safety, in that order.
    fn heading(&self) -> String {
        let strict = if self.strict { ", STRICT" } else { "" };
        format!("{}{strict}, PARALLEL {}", self.volatility, self.parallel)
    }
}

const TABLE_HEADER: &str = "| function | volatility | parallel | strict | `EXECUTE` for PUBLIC |";

/// Every function that belongs to the extension (through pg_depend) in the
/// extension's schema, by its `regprocedure` text. A build with the `pg_test`
/// feature also installs the `#[pg_test]` functions, in the schema `tests`;
/// those are left out, and any other function outside the extension's schema
/// fails the test.
fn catalog(c: &Cluster) -> BTreeMap<String, Labels> {
    let elsewhere: Vec<String> = c
        .connect()
        .query(
            "SELECT p.oid::regprocedure::text
             FROM pg_proc p
             JOIN pg_depend d ON d.classid = 'pg_proc'::regclass AND d.objid = p.oid AND d.deptype = 'e'
                              AND d.refclassid = 'pg_extension'::regclass
             JOIN pg_extension e ON e.oid = d.refobjid
             WHERE e.extname = 'snowflake_id' AND p.pronamespace <> e.extnamespace
               AND p.pronamespace::regnamespace::text <> 'tests'",
            &[],
        )
        .unwrap()
        .iter()
        .map(|r| r.get(0))
        .collect();
    assert!(elsewhere.is_empty(), "functions of the extension outside its schema: {elsewhere:?}");
    let rows = c
        .connect()
        .query(
            "SELECT p.oid::regprocedure::text,
                    CASE p.provolatile WHEN 'v' THEN 'VOLATILE' WHEN 's' THEN 'STABLE' WHEN 'i' THEN 'IMMUTABLE' END,
                    CASE p.proparallel WHEN 's' THEN 'SAFE' WHEN 'r' THEN 'RESTRICTED' WHEN 'u' THEN 'UNSAFE' END,
                    p.proisstrict,
                    EXISTS (SELECT FROM aclexplode(coalesce(p.proacl, acldefault('f', p.proowner))) a
                            WHERE a.grantee = 0 AND a.privilege_type = 'EXECUTE')
             FROM pg_proc p
             JOIN pg_depend d ON d.classid = 'pg_proc'::regclass AND d.objid = p.oid AND d.deptype = 'e'
                              AND d.refclassid = 'pg_extension'::regclass
             JOIN pg_extension e ON e.oid = d.refobjid
             WHERE e.extname = 'snowflake_id' AND p.pronamespace = e.extnamespace",
            &[],
        )
        .unwrap();
    rows.iter()
        .map(|r| {
            let labels =
                Labels { volatility: r.get(1), parallel: r.get(2), strict: r.get(3), public_execute: r.get(4) };
            (r.get(0), labels)
        })
        .collect()
}

/// The server's `regprocedure` text for a signature written as
/// `name(type, type)`, or None if no such function exists.
fn resolve(c: &Cluster, signature: &str) -> Option<String> {
    c.connect()
        .query_one("SELECT to_regprocedure($1)::text", &[&signature])
        .unwrap_or_else(|e| panic!("resolving {signature}: {e}"))
        .get(0)
}

/// The page docs/functions.md.
fn functions_section() -> String {
    std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/docs/functions.md")).unwrap()
}

fn yes_no(cell: &str, what: &str, row: &str) -> bool {
    match cell {
        "yes" => true,
        "no" => false,
        _ => panic!("{what} is neither yes nor no in README row: {row}"),
    }
}

/// The table's rows, in order: (signature as written, labels).
fn readme_table(section: &str) -> Vec<(String, Labels)> {
    let mut lines = section.lines().skip_while(|l| l.trim() != TABLE_HEADER);
    assert!(lines.next().is_some(), "the Functions section has a table headed {TABLE_HEADER}");
    assert!(lines.next().is_some_and(|l| l.starts_with("|---")), "the table's header is followed by its rule");
    lines
        .take_while(|l| l.starts_with('|'))
        .map(|row| {
            let cells: Vec<&str> = row.trim().trim_matches('|').split('|').map(str::trim).collect();
            assert_eq!(cells.len(), 5, "README row with five cells: {row}");
            let signature = cells[0].strip_prefix('`').and_then(|s| s.strip_suffix('`'));
            let signature = signature.unwrap_or_else(|| panic!("README row's function in backticks: {row}"));
            let labels = Labels {
                volatility: cells[1].to_string(),
                parallel: cells[2].to_string(),
                strict: yes_no(cells[3], "strict", row),
                public_execute: yes_no(cells[4], "EXECUTE for PUBLIC", row),
            };
            (signature.to_string(), labels)
        })
        .collect()
}

/// Splits at the commas outside parentheses.
fn split_top_level(args: &str) -> Vec<&str> {
    let (mut depth, mut start, mut parts) = (0, 0, Vec::new());
    for (i, ch) in args.char_indices() {
        match ch {
            '(' => depth += 1,
            ')' => depth -= 1,
            ',' if depth == 0 => {
                parts.push(&args[start..i]);
                start = i + 1;
            }
            _ => {}
        }
    }
    parts.push(&args[start..]);
    parts.into_iter().map(str::trim).filter(|p| !p.is_empty()).collect()
}

/// The function headings: (the heading line, its signature as
/// `name(type, type)`, the text in its label parentheses). A heading writes
/// each argument as `name type [DEFAULT value]`.
fn readme_headings(section: &str) -> Vec<(String, String, String)> {
    section
        .lines()
        .filter(|l| l.starts_with("## `"))
        .map(|line| {
            let rest = &line["## `".len()..];
            let close = rest.find('`').unwrap_or_else(|| panic!("closing backtick in {line}"));
            let (code, after) = (&rest[..close], rest[close + 1..].trim());
            let labels = after.strip_prefix('(').and_then(|s| s.strip_suffix(')'));
            let labels = labels.unwrap_or_else(|| panic!("labels in parentheses after the signature: {line}"));
            let open = code.find('(').unwrap_or_else(|| panic!("an argument list in {line}"));
            let close = code.rfind(')').unwrap_or_else(|| panic!("an argument list in {line}"));
            let types: Vec<String> = split_top_level(&code[open + 1..close])
                .into_iter()
                .map(|arg| {
                    let upper = arg.to_ascii_uppercase();
                    let arg = upper.find(" DEFAULT ").map_or(arg, |i| &arg[..i]).trim();
                    let (_name, ty) = arg.split_once(' ').unwrap_or_else(|| panic!("`name type` in {arg:?}: {line}"));
                    ty.trim().to_string()
                })
                .collect();
            (line.to_string(), format!("{}({})", code[..open].trim(), types.join(", ")), labels.to_string())
        })
        .collect()
}

#[test]
fn the_functions_page_table_and_headings_match_the_catalog() {
    let c = Cluster::new("catalog", &[]);
    c.start();
    c.connect().batch_execute("CREATE EXTENSION snowflake_id").unwrap();
    let catalog = catalog(&c);
    assert!(!catalog.is_empty(), "the extension has functions");

    let section = functions_section();
    let table = readme_table(&section);
    assert_eq!(
        table.len(),
        catalog.len(),
        "the README table has one row per function of the extension: {:?} against {:?}",
        table.iter().map(|t| &t.0).collect::<Vec<_>>(),
        catalog.keys().collect::<Vec<_>>()
    );
    let mut seen = BTreeSet::new();
    let mut problems = Vec::new();
    for (signature, labels) in &table {
        let Some(key) = resolve(&c, signature) else {
            problems.push(format!("README table lists {signature}, which the extension does not have"));
            continue;
        };
        if !seen.insert(key.clone()) {
            problems.push(format!("README table lists {key} twice"));
        }
        match catalog.get(&key) {
            None => problems.push(format!("README table lists {key}, which is not the extension's")),
            Some(want) if want != labels => {
                problems.push(format!("README table row {signature}: {labels:?}, the catalog has {want:?}"))
            }
            Some(_) => {}
        }
    }
    for key in catalog.keys().filter(|k| !seen.contains(*k)) {
        problems.push(format!("README table lacks {key}"));
    }

    let headings = readme_headings(&section);
    assert!(!headings.is_empty(), "the Functions section has function headings");
    for (line, signature, labels) in &headings {
        match resolve(&c, signature).and_then(|key| catalog.get(&key).map(|want| (key, want))) {
            None => problems.push(format!("heading names no function of the extension ({signature}): {line}")),
            Some((key, want)) if want.heading() != *labels => {
                problems.push(format!("heading of {key} says ({labels}), the catalog: ({}): {line}", want.heading()))
            }
            Some(_) => {}
        }
    }
    assert!(problems.is_empty(), "docs/functions.md disagrees with the catalog:\n{}", problems.join("\n"));
    eprintln!("{} functions in the table, {} headings, all as the catalog has them", table.len(), headings.len());
}
