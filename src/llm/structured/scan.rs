//! Finding JSON inside model text: code fences, balanced spans, and the lenient parse (strict
//! JSON first, then JSON5 through the `json5` crate).
//!
//! Why `json5` (1.x): it is the most used JSON5 crate, maintained (a rewritten 1.x series in
//! 2025), has a hand-written parser with no dependencies beyond serde, and deserializes straight
//! into `serde_json::Value`. `serde_json5` is a fork of its 0.4 pest grammar and `json-five`
//! focuses on round-tripping, which we do not need.

use serde_json::Value;

/// Candidates examined per reply at most (a reply full of brackets stays cheap).
const MAX_CANDIDATES: usize = 16;

/// Strict JSON, else JSON5 (trailing commas, single quotes, unquoted keys, comments, `+1`,
/// hex numbers).
pub(super) fn parse_lenient(text: &str) -> Option<Value> {
    let text = text.trim();
    if text.is_empty() {
        return None;
    }
    serde_json::from_str(text).ok().or_else(|| json5::from_str::<Value>(text).ok())
}

/// Every JSON value in `text`, in order and without duplicates: the bodies of code fences
/// (each read whole or searched for spans), else the whole text, else every top-level balanced
/// `{…}`/`[…]` span that parses leniently. Empty if there is none.
pub(super) fn candidates(text: &str) -> Vec<Value> {
    let mut found = Vec::new();
    for body in fenced_blocks(text) {
        match parse_lenient(body) {
            Some(value) => push_unique(&mut found, value),
            None => spans(body, &mut found),
        }
    }
    if found.is_empty() {
        match parse_lenient(text) {
            Some(value) => push_unique(&mut found, value),
            None => spans(text, &mut found),
        }
    }
    found
}

fn push_unique(found: &mut Vec<Value>, value: Value) {
    if found.len() < MAX_CANDIDATES && !found.contains(&value) {
        found.push(value);
    }
}

/// The top-level balanced spans of `text` that parse, skipping over each one found.
fn spans(text: &str, found: &mut Vec<Value>) {
    let mut search_from = 0;
    while found.len() < MAX_CANDIDATES
        && let Some(offset) = text[search_from..].find(['{', '['])
    {
        let start = search_from + offset;
        match balanced_end(&text[start..]).and_then(|end| {
            parse_lenient(&text[start..start + end]).map(|value| (value, start + end))
        }) {
            Some((value, end)) => {
                push_unique(found, value);
                search_from = end;
            }
            None => search_from = start + 1,
        }
    }
}

/// The insides of the ```` ``` ```` fences, in order (an info string such as `json` on the
/// opening line is skipped); an unclosed last fence runs to the end.
fn fenced_blocks(text: &str) -> Vec<&str> {
    let mut blocks = Vec::new();
    let mut rest = text;
    while let Some(open) = rest.find("```") {
        let after = &rest[open + 3..];
        let body_start = after.find('\n').map_or(after.len(), |newline| newline + 1);
        let body = &after[body_start..];
        match body.find("```") {
            Some(close) => {
                blocks.push(&body[..close]);
                rest = &body[close + 3..];
            }
            None => {
                blocks.push(body);
                break;
            }
        }
    }
    blocks
}

/// Length of the balanced `{…}`/`[…]` starting at `text[0]`, counting brackets outside
/// strings (double- or single-quoted, with backslash escapes) and comments (`//`, `/* */`)
/// only; `None` if it never closes.
pub fn balanced_end(text: &str) -> Option<usize> {
    let bytes = text.as_bytes();
    let mut depth = 0usize;
    let mut quote: Option<u8> = None;
    let mut escaped = false;
    let mut index = 0;
    while index < bytes.len() {
        let byte = bytes[index];
        if let Some(open) = quote {
            match byte {
                _ if escaped => escaped = false,
                b'\\' => escaped = true,
                _ if byte == open => quote = None,
                _ => {}
            }
            index += 1;
            continue;
        }
        match byte {
            b'"' | b'\'' => quote = Some(byte),
            b'/' if bytes.get(index + 1) == Some(&b'/') => {
                index = text[index..].find('\n').map_or(bytes.len(), |newline| index + newline);
                continue;
            }
            b'/' if bytes.get(index + 1) == Some(&b'*') => {
                index = text[index + 2..].find("*/").map_or(bytes.len(), |close| index + close + 4);
                continue;
            }
            b'{' | b'[' => depth += 1,
            b'}' | b']' => {
                depth = depth.checked_sub(1)?;
                if depth == 0 {
                    return Some(index + 1);
                }
            }
            _ => {}
        }
        index += 1;
    }
    None
}
