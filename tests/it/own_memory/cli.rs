//! The same through the binary: `memory add --user --tag`, `memory search --user` with
//! filters, `memory facts`, `memory correct`, `memory history`, `memory undo`, `ask --as-of`.

use std::time::Duration;

use super::{facts_server, moving_messages};
use crate::own::{add_args, run};

#[tokio::test]
async fn the_command_line_lists_facts_corrects_one_and_undoes_it() {
    let server = facts_server(Duration::ZERO).await;
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("moving.json");
    std::fs::write(&file, moving_messages().to_string()).unwrap();
    let mut args = add_args(server.base_url(), "moving", file.to_str().unwrap());
    args.extend(["--user", "carol", "--tag", "channel=chat"]);
    let (ok, stdout, stderr) = run(dir.path(), &args).await;
    assert!(ok, "{stdout}\n{stderr}");
    assert!(stdout.contains("1 replaced an older value, 0 pairs left undecided"), "{stdout}");

    let facts = ["memory", "facts", "--user", "carol", "--aspect", "home", "--history"];
    let (ok, listed, stderr) = run(dir.path(), &facts).await;
    assert!(ok, "{stderr}");
    let lines: Vec<&str> = listed.lines().collect();
    assert!(
        lines[0].contains("Carol lives in Berlin") && lines[0].contains("since 2024-03-10"),
        "{listed}"
    );
    assert!(lines[1].contains("earlier value, 2024-01-05 to 2024-03-10"), "{listed}");
    let id = lines[0].split_whitespace().next().unwrap();
    let (ok, stdout, _) =
        run(dir.path(), &["memory", "facts", "--user", "carol", "--as-of", "2024-02-01"]).await;
    assert!(
        ok && stdout.contains("Carol lives in Paris") && !stdout.contains("Berlin"),
        "{stdout}"
    );

    let (ok, stdout, stderr) =
        run(dir.path(), &["memory", "correct", "--fact", id, "Carol lives in Munich", "--json"])
            .await;
    assert!(ok, "{stderr}");
    let corrected: serde_json::Value = serde_json::from_str(&stdout).unwrap();
    assert_eq!(
        (corrected["kind"].as_str(), corrected["after"]["value"].as_str()),
        (Some("correct_fact"), Some("Carol lives in Munich")),
        "{stdout}"
    );
    let edit = corrected["id"].to_string();
    let (_, listed, _) = run(dir.path(), &facts).await;
    assert!(listed.contains("Munich (corrected from \"Carol lives in Berlin\")"), "{listed}");
    let model = crate::own::model_args(server.base_url());
    // The undo of a correction is a store edit alone: no endpoint, no API key.
    let undo = vec!["memory", "undo", edit.as_str()];
    let (ok, stdout, stderr) = run(dir.path(), &undo).await;
    assert!(ok && stdout.contains(&format!("undo {edit}")), "{stdout}\n{stderr}");
    let (_, history, _) = run(dir.path(), &["memory", "history", "--user", "carol"]).await;
    assert!(history.contains("(undone by edit") && history.lines().count() == 2, "{history}");
    let (ok, _, stderr) = run(dir.path(), &undo).await;
    assert!(!ok && stderr.contains("cannot be undone"), "{stderr}");

    let mut search = vec![
        "memory",
        "search",
        "--user",
        "carol",
        "moved",
        "--tag",
        "channel=chat",
        "--speaker",
        "carol",
    ];
    search.extend(model);
    let (ok, stdout, stderr) = run(dir.path(), &search).await;
    assert!(ok, "{stderr}");
    assert!(
        stdout.lines().all(|line| line.contains("[moving D") && line.contains("Carol:")),
        "{stdout}"
    );
    let (ok, stdout, _) = run(dir.path(), &["memory", "list", "--user", "nobody"]).await;
    assert!(ok && stdout.is_empty(), "{stdout}");
    let (ok, _, stderr) = run(dir.path(), &["memory", "facts", "--user", "nobody"]).await;
    assert!(!ok && stderr.contains("has no conversation"), "{stderr}");
}
