//! `mragent memory facts | correct | history | undo`: facts with their validity, and single
//! edits with their audit log (edits from the command line are logged as `cli`).

use super::Outcome;
use super::output::outln;
use super::own::{open_store, operator, recorded_embedder, service, store_service};
use crate::service::EditEntry;
use crate::service::ops;
use crate::service::{FactQuery, LOCAL_EMBEDDER, ListedFact, Scope};
use crate::settings::{OwnSettings, ProjectPaths};

/// `memory facts`: no model needed. A conversation named is checked to exist (and its facts
/// against its embedder).
pub(super) async fn facts(
    paths: &ProjectPaths,
    scope: Scope,
    query: FactQuery,
    json: bool,
) -> anyhow::Result<()> {
    let conversation = match &scope {
        Scope::Conversation(id) => Some(id),
        Scope::User(_) => query.conversation.as_ref(),
    };
    let spec = match conversation {
        Some(id) => recorded_embedder(paths, id)?,
        None => LOCAL_EMBEDDER.to_string(),
    };
    let listed = ops::facts::run(&store_service(paths, &spec)?, &operator(), scope, query).await?;
    let listed = listed.facts;
    if json {
        outln!("{}", serde_json::to_string_pretty(&listed)?)?;
        return Ok(());
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
    Ok(())
}

/// One edit (a correction's row in the audit log).
pub(super) fn print_edit(edit: &EditEntry, json: bool) -> anyhow::Result<()> {
    if json {
        outln!("{}", serde_json::to_string_pretty(edit)?)
    } else {
        outln!("{}", render_edit(edit))
    }
}

/// `memory history`.
pub(super) fn history(edits: &[EditEntry], json: bool) -> anyhow::Result<()> {
    if json {
        outln!("{}", serde_json::to_string_pretty(&edits)?)?;
        return Ok(());
    }
    for edit in edits {
        outln!("{}", render_edit(edit))?;
    }
    if edits.is_empty() {
        outln!("no edits")?;
    }
    Ok(())
}

/// `memory undo`: an undone forget rebuilds its session, which needs the model (and the
/// conversation's embedder); any other undo (a correction's) is a store edit alone, and needs
/// no API key.
pub(super) async fn undo(own: &OwnSettings, edit: i64, json: bool) -> anyhow::Result<Outcome> {
    let undone = open_store(&own.paths)?.edit(edit)?;
    let service = if undone.kind == crate::store::FORGET_MESSAGE {
        let spec = recorded_embedder(&own.paths, &undone.conversation)?;
        own.models.require_key()?;
        service(own, &spec).await?
    } else {
        store_service(&own.paths, LOCAL_EMBEDDER)?
    };
    let report = ops::undo::run(&service, &operator(), edit).await?;
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
fn render_edit(edit: &EditEntry) -> String {
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
