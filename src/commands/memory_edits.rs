//! `mragent memory facts | correct | history | undo`: facts with their validity, and single
//! edits with their audit log (edits from the command line are logged as `cli`).

use super::Outcome;
use super::output::outln;
use super::own::{open_store, recorded_embedder, service};
use crate::service::{FactQuery, ListedFact, select_facts};
use crate::settings::{OwnSettings, ProjectPaths};
use crate::store::Edit;

/// Who the command line's edits are logged as.
const ACTOR: &str = "cli";

/// `memory facts`: no model needed.
pub(super) async fn facts(
    paths: &ProjectPaths,
    query: &FactQuery,
    json: bool,
) -> anyhow::Result<Outcome> {
    let store = open_store(paths)?;
    if let Some(user) = &query.user
        && store.list_of(Some(user))?.is_empty()
    {
        return Err(crate::service::ServiceError::UnknownUser(user.clone()).into());
    }
    if let Some(conversation) = &query.conversation {
        recorded_embedder(paths, conversation)?;
    }
    let rows = store.facts(query.user.as_deref(), query.conversation.as_deref())?;
    let listed = select_facts(rows, query);
    if json {
        outln!("{}", serde_json::to_string_pretty(&listed)?)?;
        return Ok(Outcome::Success);
    }
    for ListedFact { fact, current } in &listed {
        let from = fact.valid_from.as_deref().map_or("?", |time| &time[..time.len().min(10)]);
        let state = match (&fact.valid_to, current) {
            (Some(to), false) => format!("earlier value, {from} to {}", &to[..to.len().min(10)]),
            _ => format!("since {from}"),
        };
        let corrected = if fact.value != fact.extracted {
            format!(" (corrected from {:?})", fact.extracted)
        } else {
            String::new()
        };
        outln!(
            "{:>5}  {} / {}: {}{corrected}  [{state}; {} {}]",
            fact.id,
            fact.person,
            fact.aspect,
            fact.value,
            fact.conversation,
            fact.session
        )?;
    }
    if listed.is_empty() {
        outln!("no facts")?;
    }
    Ok(Outcome::Success)
}

/// `memory correct`: no model needed.
pub(super) async fn correct(
    paths: &ProjectPaths,
    fact: i64,
    value: &str,
    json: bool,
) -> anyhow::Result<Outcome> {
    let store = open_store(paths)?;
    let value = value.trim();
    if value.is_empty() {
        anyhow::bail!("the new value is empty");
    }
    let limit = crate::names::MAX_MESSAGE_CHARS;
    if value.chars().count() > limit {
        anyhow::bail!("the new value is over {limit} characters");
    }
    let edit = {
        let _lock = store.lock_conversation(&store.fact(fact)?.conversation)?;
        store.correct_fact(fact, value, ACTOR)?
    };
    if json {
        outln!("{}", serde_json::to_string_pretty(&edit)?)?;
    } else {
        outln!("{}", render_edit(&edit))?;
    }
    Ok(Outcome::Success)
}

/// `memory history`.
pub(super) fn history(
    paths: &ProjectPaths,
    user: Option<&str>,
    conversation: Option<&str>,
    json: bool,
) -> anyhow::Result<Outcome> {
    let edits = open_store(paths)?.history(user, conversation)?;
    if json {
        outln!("{}", serde_json::to_string_pretty(&edits)?)?;
        return Ok(Outcome::Success);
    }
    for edit in &edits {
        outln!("{}", render_edit(edit))?;
    }
    if edits.is_empty() {
        outln!("no edits")?;
    }
    Ok(Outcome::Success)
}

/// `memory undo`: an undone forget rebuilds its session, which needs the model; any other
/// undo (a correction's) is a store edit alone, and needs no API key.
pub(super) async fn undo(own: &OwnSettings, edit: i64, json: bool) -> anyhow::Result<Outcome> {
    let store = open_store(&own.paths)?;
    let undone = store.edit(edit)?;
    if undone.kind != crate::store::FORGET_MESSAGE {
        let undo = {
            let _lock = store.lock_conversation(&undone.conversation)?;
            store.undo(edit, ACTOR)?
        };
        let report = crate::service::UndoReport { undo, rebuilt: None };
        if json {
            outln!("{}", serde_json::to_string_pretty(&report)?)?;
        } else {
            outln!("{}", render_edit(&report.undo))?;
        }
        return Ok(Outcome::Success);
    }
    let conversation = undone.conversation;
    let spec = recorded_embedder(&own.paths, &conversation)?;
    own.models.require_key()?;
    let service = service(own, &spec).await?;
    let report = service.undo(edit, ACTOR).await?;
    if json {
        outln!("{}", serde_json::to_string_pretty(&report)?)?;
    } else {
        outln!("{}", render_edit(&report.undo))?;
        if let Some(rebuilt) = &report.rebuilt {
            outln!("{rebuilt}")?;
        }
    }
    let complete = report.rebuilt.as_ref().is_none_or(|rebuilt| rebuilt.is_complete());
    Ok(if complete { Outcome::Success } else { Outcome::Partial })
}

/// One line of the audit log.
fn render_edit(edit: &Edit) -> String {
    let mut undone = edit.undone_by.map(|by| format!(" (undone by edit {by})")).unwrap_or_default();
    if let Some(lapse) = edit.lapsed_by {
        undone.push_str(&format!(" (lapsed: edit {lapse})"));
    }
    if let Some(why) = edit.after.as_ref().and_then(|after| after["lapsed"].as_str()) {
        undone.push_str(&format!(" (lapsed: {why})"));
    }
    let show = |value: &Option<serde_json::Value>| {
        value.as_ref().map_or("-".to_string(), |value| match &value["value"] {
            serde_json::Value::String(text) => format!("{text:?}"),
            _ => {
                value["text"].as_str().map_or_else(|| value.to_string(), |text| format!("{text:?}"))
            }
        })
    };
    format!(
        "edit {} at {} by {}: {} {} in {}: {} -> {}{undone}",
        edit.id,
        edit.at.get(..19).unwrap_or(&edit.at),
        edit.actor,
        edit.kind,
        edit.target,
        edit.conversation,
        show(&edit.before),
        show(&edit.after)
    )
}
