//! The invariants of ARCHITECTURE.md that the source itself can show, checked on the source
//! tree: no import cycle between modules, only `llm` speaks HTTP to models, `memory` never calls
//! a model, prompts are loaded only by `prompts.rs`, result files are rewritten only by
//! `agent::resume`, only `snapshot` assembles a conversation ready to answer, there is one
//! stage sequence (`ingest/pipeline.rs`), and no file or function in `src/` is overlong.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use petgraph::algo::is_cyclic_directed;
use petgraph::graph::DiGraph;

/// Every `.rs` file under `src/`, in path order, as its path there and its whole text.
fn source_files() -> Vec<(PathBuf, String)> {
    fn walk(dir: &Path, out: &mut Vec<PathBuf>) {
        let mut entries: Vec<PathBuf> =
            std::fs::read_dir(dir).unwrap().map(|entry| entry.unwrap().path()).collect();
        entries.sort();
        for path in entries {
            if path.is_dir() {
                walk(&path, out);
            } else if path.extension().is_some_and(|ext| ext == "rs") {
                out.push(path);
            }
        }
    }
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let mut files = Vec::new();
    walk(&root, &mut files);
    files
        .into_iter()
        .map(|path| {
            let text = std::fs::read_to_string(&path).unwrap();
            (path.strip_prefix(&root).unwrap().to_path_buf(), text)
        })
        .collect()
}

/// Every `.rs` file under `src/`, with its text minus comment lines and unit-test modules.
fn sources() -> Vec<(PathBuf, String)> {
    source_files()
        .into_iter()
        .map(|(path, text)| {
            let text = text.split("#[cfg(test)]\nmod tests").next().unwrap_or_default();
            let code: Vec<&str> =
                text.lines().filter(|line| !line.trim_start().starts_with("//")).collect();
            (path, code.join("\n"))
        })
        .filter(|(path, _)| !path.ends_with("tests.rs"))
        .collect()
}

/// Module path of a source file: `agent/retrieve/mod.rs` → `["agent", "retrieve"]`.
fn module_of(path: &Path) -> Vec<String> {
    let mut parts: Vec<String> =
        path.with_extension("").iter().map(|part| part.to_string_lossy().into_owned()).collect();
    if parts.last().is_some_and(|last| last == "mod") {
        parts.pop();
    }
    parts
}

/// A module node at depth two (`agent::retrieve`, `llm::openai`, or a top-level file).
fn node_of(parts: &[String]) -> String {
    parts.iter().take(2).cloned().collect::<Vec<_>>().join("::")
}

/// The modules a file refers to through `crate::a::b` and `super::b` paths.
fn references(path: &Path, code: &str) -> Vec<String> {
    let ident = |text: &str| -> String {
        text.chars().take_while(|c| c.is_ascii_alphanumeric() || *c == '_').collect()
    };
    let is_module = |name: &str| name.chars().next().is_some_and(|c| c.is_ascii_lowercase());
    let mut found = Vec::new();
    for (index, _) in code.match_indices("crate::") {
        let rest = &code[index + "crate::".len()..];
        let first = ident(rest);
        let after = &rest[first.len()..];
        let second = after.strip_prefix("::").map(ident).unwrap_or_default();
        if is_module(&second) {
            found.push(format!("{first}::{second}"));
        } else {
            found.push(first);
        }
    }
    let own = module_of(path);
    let parent: Vec<String> = own[..own.len().saturating_sub(1)].to_vec();
    for (index, _) in code.match_indices("super::") {
        let name = ident(&code[index + "super::".len()..]);
        if is_module(&name) && name != "super" {
            let mut target = parent.clone();
            target.push(name);
            found.push(node_of(&target));
        }
    }
    found
}

/// Every type name in `src/` has one meaning: no struct, enum, trait or type alias is defined
/// twice, except the names that mean the same thing wherever they are: each module's `Error`,
/// each tool's `Args`, and `Message` (a conversation's message, and its OpenAPI schema).
#[test]
fn no_type_name_is_defined_twice_with_two_meanings() {
    let same_meaning = ["Error", "Args", "Message"];
    // Items at the top of a file, and types in a file's inline modules (not associated types).
    let definition = regex::Regex::new(
        r"(?m)^(?:(?:pub(?:\([^)]*\))? )?(?:struct|enum|trait|type)|    (?:pub(?:\([^)]*\))? )?(?:struct|enum|trait)) ([A-Z]\w*)",
    )
    .unwrap();
    let mut defined: BTreeMap<String, Vec<String>> = BTreeMap::new();
    for (path, text) in source_files() {
        for found in definition.captures_iter(&text) {
            defined.entry(found[1].to_string()).or_default().push(path.display().to_string());
        }
    }
    let twice: Vec<_> = defined
        .iter()
        .filter(|(name, places)| places.len() > 1 && !same_meaning.contains(&name.as_str()))
        .collect();
    assert!(twice.is_empty(), "type names defined more than once: {twice:?}");
}

/// The crate version is real: the changelog's first entry is the version every build reports.
#[test]
fn the_changelog_starts_with_the_crate_version() {
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("CHANGELOG.md");
    let text = std::fs::read_to_string(path).unwrap();
    let first = text.lines().find_map(|line| line.strip_prefix("## ")).unwrap_or_default();
    let version = first.split_whitespace().next().unwrap_or_default();
    assert_eq!(version, env!("CARGO_PKG_VERSION"), "CHANGELOG.md's first entry: {first:?}");
}

#[test]
fn no_import_cycle_between_modules() {
    let mut graph = DiGraph::<String, ()>::new();
    let mut nodes = BTreeMap::new();
    let mut node = |name: &str, graph: &mut DiGraph<String, ()>| {
        *nodes.entry(name.to_string()).or_insert_with(|| graph.add_node(name.to_string()))
    };
    let mut edges = Vec::new();
    for (path, code) in sources() {
        let from = node_of(&module_of(&path));
        if from == "lib" || from == "main" {
            continue;
        }
        for to in references(&path, &code) {
            let related = to == from
                || from.starts_with(&format!("{to}::"))
                || to.starts_with(&format!("{from}::"))
                || Some(to.as_str()) == from.split("::").next();
            if !related {
                let (a, b) = (node(&from, &mut graph), node(&to, &mut graph));
                graph.update_edge(a, b, ());
                edges.push(format!("{from} -> {to}"));
            }
        }
    }
    assert!(edges.len() > 50, "the scan found the module references ({} edges)", edges.len());
    if is_cyclic_directed(&graph) {
        let cycle = petgraph::algo::kosaraju_scc(&graph)
            .into_iter()
            .filter(|component| component.len() > 1)
            .map(|component| component.iter().map(|&n| graph[n].clone()).collect::<Vec<_>>())
            .collect::<Vec<_>>();
        panic!("import cycles between modules: {cycle:?}");
    }
}

#[test]
fn only_llm_speaks_http_to_models() {
    for (path, code) in sources() {
        if path.starts_with("llm") {
            continue;
        }
        for needle in ["reqwest", "async_openai", "hyper::"] {
            assert!(!code.contains(needle), "{} uses {needle}", path.display());
        }
    }
}

#[test]
fn memory_never_calls_a_model() {
    for (path, code) in sources() {
        if path.starts_with("memory") {
            for needle in ["crate::llm", "ChatModel", "Embedder", "crate::agent", "tokio::"] {
                assert!(!code.contains(needle), "{} mentions {needle}", path.display());
            }
        }
    }
}

#[test]
fn prompts_are_loaded_only_by_prompts_rs() {
    for (path, code) in sources() {
        if path != Path::new("prompts.rs") {
            assert!(!code.contains("prompts/"), "{} reads a prompt file itself", path.display());
        }
    }
}

#[test]
fn result_files_are_rewritten_only_by_resume() {
    let mut writers = 0;
    for (path, code) in sources() {
        for line in code.lines() {
            if line.contains("write_atomic(") || line.contains(".truncate(true)") {
                writers += 1;
                if path != Path::new("agent/resume.rs") {
                    assert!(
                        !line.contains("result"),
                        "{} rewrites a result file: {line}",
                        path.display()
                    );
                }
            }
        }
    }
    assert!(writers > 5, "the scan found the file writers ({writers})");
}

/// Whether `code` calls `name` as a function or a constructor (`name(`), not defines it
/// (`fn name(`).
fn calls(code: &str, name: &str) -> bool {
    code.match_indices(&format!("{name}(")).any(|(index, _)| {
        let before = code[..index].trim_end();
        let boundary =
            code[..index].chars().last().is_none_or(|c| !c.is_alphanumeric() && c != '_');
        boundary && !before.ends_with("fn")
    })
}

/// Whether `code` writes a `Snapshot { … }` struct literal (not its definition, an impl or a
/// return type).
fn constructs_snapshot(code: &str) -> bool {
    code.match_indices("Snapshot {").any(|(index, _)| {
        let before = code[..index].trim_end();
        let word_start = code[..index].chars().last().is_none_or(|c| !c.is_alphanumeric());
        word_start
            && !before.ends_with("struct")
            && !before.ends_with("impl")
            && !before.ends_with("for")
            && !before.ends_with("->")
    })
}

#[test]
fn only_snapshot_assembles_a_ready_memory() {
    let mut assemblies = 0;
    for (path, code) in sources() {
        let in_snapshot = path.starts_with("snapshot");
        // The memory graph of a snapshot comes from `ingest` (the graph of the memory a
        // build returns, which `Snapshot::from_built` takes) or from `snapshot` itself.
        let graph_builders =
            in_snapshot || path.starts_with("ingest") || path.starts_with("memory");
        let found = [
            ("writes a Snapshot literal", constructs_snapshot(&code)),
            ("adds Snapshot constructors", code.contains("impl Snapshot")),
            (
                "makes a MemgasMemory",
                ["MemgasMemory::ready", "MemgasMemory::lazy", "MemgasMemory::new"]
                    .iter()
                    .any(|name| calls(&code, name)),
            ),
            ("reads a build back", calls(&code, "load_memory") && !path.starts_with("ingest")),
            ("builds a memory graph", calls(&code, "build_graph") && !graph_builders),
        ];
        for (what, present) in found {
            if in_snapshot {
                assemblies += usize::from(present);
            } else {
                assert!(
                    !present,
                    "{} {what}: only `snapshot` assembles a ready memory",
                    path.display()
                );
            }
        }
    }
    assert!(assemblies >= 4, "the scan found the snapshot's own assembly ({assemblies})");
}

#[test]
fn one_stage_sequence() {
    // What running each stage takes, whichever path names it.
    let stages: [(&str, &[&str]); 3] = [
        ("rewrite", &["RewriteSalvage", "rewrite::render_prompt"]),
        ("keywords", &["KeywordSalvage", "keywords::render_prompt"]),
        ("embeddings", &["UnitTexts::of(", "embed_texts("]),
    ];
    let mut sequences = Vec::new();
    for (path, code) in sources() {
        let run: Vec<&str> = stages
            .iter()
            .filter(|(_, marks)| marks.iter().any(|mark| code.contains(mark)))
            .map(|(stage, _)| *stage)
            .collect();
        if run.len() > 1 {
            sequences.push(format!("{} ({})", path.display(), run.join(", ")));
        }
    }
    assert_eq!(
        sequences,
        ["ingest/pipeline.rs (rewrite, keywords, embeddings)"],
        "only ingest/pipeline.rs runs the stages one after the other"
    );
}

#[test]
fn retrieval_never_imports_tune_and_text_is_a_leaf() {
    let mut seen = (0, 0);
    for (path, code) in sources() {
        let module = module_of(&path);
        let room = module.first().map(String::as_str).unwrap_or_default();
        let refs = references(&path, &code);
        if room == "retrieval" {
            seen.0 += 1;
            let tune: Vec<&String> =
                refs.iter().filter(|to| to.split("::").next() == Some("tune")).collect();
            assert!(
                tune.is_empty(),
                "{} imports {tune:?}: `retrieval` never imports `tune`",
                path.display()
            );
        }
        if room == "text" {
            seen.1 += 1;
            let outside: Vec<&String> =
                refs.iter().filter(|to| to.split("::").next() != Some("text")).collect();
            assert!(
                outside.is_empty(),
                "{} imports {outside:?}: `text` imports nothing from the crate",
                path.display()
            );
        }
    }
    assert!(seen.0 > 10 && seen.1 >= 3, "the scan found retrieval's and text's files ({seen:?})");
}

#[test]
fn the_environment_is_read_only_in_settings() {
    let mut readers = Vec::new();
    for (path, code) in sources() {
        if path.starts_with("settings") {
            continue;
        }
        for needle in ["env::var(", "env::var_os(", "env::vars(", "env::vars_os("] {
            if code.contains(needle) {
                readers.push(format!("{} ({needle})", path.display()));
            }
        }
    }
    assert!(readers.is_empty(), "the environment is read outside `settings`: {readers:?}");
}

#[test]
fn only_the_store_s_db_schema_and_opening_name_a_backend_type() {
    // The rows are read and written through `store::db` (`Conn`, `params!`); SQLite's migration
    // runner (`schema`), the opening (`store/mod.rs`) and the error type (`store/error.rs`) name
    // rusqlite, and
    // PostgreSQL's migration runner (`schema_pg`) goes through `db` too. The tape
    // (`llm::tape::store`) is a SQLite file of its own, not the store.
    let allowed = [
        "store/db/",
        "store/schema.rs",
        "store/mod.rs",
        "store/error.rs",
        "store/tests/",
        "llm/tape/store.rs",
    ];
    let allowed_tests = ["llm/tape/tests.rs"];
    let mut seen = 0;
    for (path, code) in sources() {
        let shown = path.display().to_string();
        if allowed.iter().chain(&allowed_tests).any(|prefix| shown.starts_with(prefix)) {
            seen += 1;
            continue;
        }
        for needle in ["rusqlite", "postgres::", "tokio_postgres", "r2d2"] {
            assert!(!code.contains(needle), "{shown} names {needle}: go through `store::db`");
        }
    }
    assert!(seen >= 5, "the allowed files exist ({seen})");
}

/// Longest file under `src/`, in lines.
const MAX_FILE_LINES: usize = 500;
/// Longest function under `src/`, in lines from its `fn` line to its closing brace.
const MAX_FUNCTION_LINES: usize = 80;

/// The indentation and name of a line that starts a function (`    pub(crate) async fn name`):
/// indentation, then optionally `pub` or `pub(…)`, `const`, `async` and `unsafe`, each followed
/// by spaces, then `fn`, spaces and the name (as issue 40's scanner reads them).
fn function_start(line: &str) -> Option<(&str, String)> {
    /// `text` after `word` and the spaces that must follow it.
    fn after_word<'a>(text: &'a str, word: &str) -> Option<&'a str> {
        let rest = text.strip_prefix(word)?;
        let spaced = rest.trim_start();
        (spaced.len() < rest.len()).then_some(spaced)
    }
    let mut rest = line.trim_start();
    let indent = &line[..line.len() - rest.len()];
    if let Some(after) = rest.strip_prefix("pub") {
        let after = match after.strip_prefix('(') {
            Some(inside) => &inside[inside.find(')')? + 1..],
            None => after,
        };
        rest = after_word(after, "")?;
    }
    for word in ["const", "async", "unsafe"] {
        rest = after_word(rest, word).unwrap_or(rest);
    }
    let name: String =
        after_word(rest, "fn")?.chars().take_while(|c| c.is_alphanumeric() || *c == '_').collect();
    (!name.is_empty()).then_some((indent, name))
}

/// The functions of `text` over `max` lines, as `(line, name, lines)`. A function runs from its
/// `fn` line to the first later line that is its indentation and `}` alone, both counted (issue
/// 40's count); a line declaring one without a body (`fn name(…);`)
/// starts none. Functions in `#[cfg(test)]` code count too.
fn long_functions(text: &str, max: usize) -> Vec<(usize, String, usize)> {
    let lines: Vec<&str> = text.split('\n').collect();
    let mut found = Vec::new();
    for (at, line) in lines.iter().enumerate() {
        let Some((indent, name)) = function_start(line) else { continue };
        if line.trim_end().ends_with(';') {
            continue;
        }
        let closing = format!("{indent}}}");
        if let Some(end) = lines[at + 1..].iter().position(|later| *later == closing) {
            let length = end + 2;
            if length > max {
                found.push((at + 1, name, length));
            }
        }
    }
    found
}

/// What in the file at `path` (under `src/`) with `text` is too long: the file itself, and each
/// function over [`MAX_FUNCTION_LINES`].
fn overlong(path: &Path, text: &str) -> Vec<String> {
    let mut found = Vec::new();
    let lines = text.lines().count();
    if lines > MAX_FILE_LINES {
        found.push(format!("{}: {lines} lines", path.display()));
    }
    for (line, name, length) in long_functions(text, MAX_FUNCTION_LINES) {
        found.push(format!("{}:{line} fn {name}: {length} lines", path.display()));
    }
    found
}

#[test]
fn no_file_over_500_lines_and_no_function_over_80_in_src() {
    // The count itself, on small texts: the limits are inclusive.
    let file = Path::new("f.rs");
    let function = |indent: &str, head: &str, lines: usize| {
        let body = format!("{indent}    step();\n").repeat(lines - 2);
        format!("{indent}{head} {{\n{body}{indent}}}\n")
    };
    assert!(overlong(file, &"\n".repeat(500)).is_empty());
    assert_eq!(overlong(file, &"\n".repeat(501)), ["f.rs: 501 lines"]);
    assert!(overlong(file, &function("", "fn f()", 80)).is_empty());
    assert_eq!(overlong(file, &function("", "fn f()", 81)), ["f.rs:1 fn f: 81 lines"]);
    let method = function("    ", "pub(crate) async unsafe fn run(&self)", 81);
    let in_impl = format!("impl S {{\n    fn declared(&self);\n{method}}}\n");
    assert_eq!(overlong(file, &in_impl), ["f.rs:3 fn run: 81 lines"]);
    assert!(function_start("    pub(in crate::store) const fn id() {").is_some());
    assert!(function_start("let fnord = 1;").is_none() && function_start("pubfn x()").is_none());

    let files = source_files();
    assert!(files.len() > 100, "the scan found the source files ({})", files.len());
    let found: Vec<String> = files
        .iter()
        .flat_map(|(path, text)| overlong(&Path::new("src").join(path), text))
        .collect();
    assert!(
        found.is_empty(),
        "over {MAX_FILE_LINES} lines per file or {MAX_FUNCTION_LINES} per function in src/: split \
         them by job:\n{}",
        found.join("\n")
    );
}

/// The doors stay thin over the operations (issue 40): no store type derives the OpenAPI
/// document's trait (replies are the service's types), no door keeps code it does not use, the
/// HTTP door parses no field itself, and the add's `wait` branch (a queued build) is named only
/// inside the service.
#[test]
fn the_doors_stay_thin_over_the_operations() {
    let mut found = Vec::new();
    for (path, text) in source_files() {
        let shown = Path::new("src").join(&path);
        let in_dir = |dir: &str| path.starts_with(dir);
        if in_dir("store") && text.contains("utoipa") {
            found.push(format!("{}: the store names utoipa", shown.display()));
        }
        if (in_dir("serve") || in_dir("service")) && text.contains("allow(dead_code)") {
            found.push(format!("{}: allow(dead_code) in a door", shown.display()));
        }
        if in_dir("serve") && text.contains("fn parse(map") {
            found.push(format!("{}: a field parser in the HTTP door", shown.display()));
        }
        if !in_dir("service") && text.contains("add_queued") {
            found.push(format!("{}: the queued add outside the service", shown.display()));
        }
    }
    assert!(found.is_empty(), "{found:#?}");
}

/// The recorded run is one room (issue 39): its layout, tapes, lock, manifest, archive and
/// `verify`'s checks live in `src/recorded`, which names no command (the replays it needs come
/// through `recorded::verify::Replayer`); a command reaches a run's files only through
/// `recorded`'s types, never by spelling `record/`, `.calls.sqlite` or `.manifest.json`.
#[test]
fn the_recorded_run_is_one_room_that_names_no_command() {
    let mut found = Vec::new();
    for (path, text) in source_files() {
        let shown = Path::new("src").join(&path);
        if path.starts_with("recorded") && text.contains("crate::commands") {
            found.push(format!("{}: the recorded room names a command", shown.display()));
        }
        if path.starts_with("commands") {
            for spelled in [
                "\"record\"",
                ".calls.sqlite\"",
                ".judge.sqlite\"",
                ".manifest.json\"",
                ".compare.json\"",
            ] {
                if text.contains(spelled) {
                    found.push(format!("{}: spells a run's path {spelled}", shown.display()));
                }
            }
        }
    }
    assert!(
        Path::new(env!("CARGO_MANIFEST_DIR")).join("src/commands/verify.rs").is_file()
            && !Path::new(env!("CARGO_MANIFEST_DIR")).join("src/commands/verify").exists(),
        "verify's checks belong in src/recorded/verify"
    );
    assert!(found.is_empty(), "{found:#?}");
}
