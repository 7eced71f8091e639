#!/usr/bin/env python3
"""Checks of scripts/real_server.sh: for each pass (plain, structured), every command ended
within the time limit with an expected exit code, mragent's token totals equal the server's
own counters, and every failure is counted and visible. Prints the figures; exit 1 on any
failed check.

Usage: real_server_check.py WORK_DIR TIME_LIMIT_S BUILD_SECONDS PASS...
"""

import glob
import json
import os
import re
import sys

TOKENS_LINE = re.compile(r"^tokens: (\d+) prompt \+ (\d+) completion")
ENDPOINT_LINE = re.compile(
    r"^endpoint (\S+): (\d+) requests \((\d+) failed, (\d+) hedges\), (\d+) prompt \+ (\d+) completion tokens"
)
TRACE_EVENT = re.compile(r"^\s+[\d.]+s\s+(rejected|fallback) ")
HEADLINE = re.compile(r"(\d+) empty sessions skipped, (\d+) failed units")


def read(path, default=""):
    try:
        with open(path, encoding="utf-8") as handle:
            return handle.read()
    except OSError:
        return default


def check_pass(directory, problems):
    name = os.path.basename(directory)
    figures = {"pass": name, "seconds": int(read(f"{directory}/seconds", "0") or 0)}
    codes = {cmd: read(f"{directory}/{cmd}.code").strip() for cmd in ("build", "run", "eval", "trace")}
    figures["exit_codes"] = codes
    # 0: all done; 2: something left for a rerun (failed units, pending questions): both are
    # outcomes to count, not crashes. 124: the time limit.
    answered_any = bool(glob.glob(f"{directory}/result/locomo/*_result_*_real.jsonl"))
    for cmd, code in codes.items():
        allowed = {"0", "2"} if cmd in ("build", "run") else {"0"}
        if not answered_any and cmd == "eval":
            # Nothing answered (every question pending): eval must say there is nothing to score.
            allowed = {"1"} if "no result files match" in read(f"{directory}/eval.err") else set()
        if not answered_any and cmd == "trace":
            allowed = {"missing"}
        if code not in allowed:
            problems.append(f"{name}: {cmd} exited {code or 'never'} (see {directory}/{cmd}.err)")

    build_out = read(f"{directory}/build.out")
    build_tokens = [0, 0]
    for line in build_out.splitlines():
        if match := TOKENS_LINE.match(line):
            build_tokens = [int(match[1]), int(match[2])]
    headline = HEADLINE.search(build_out)
    empty, failed_units = (int(headline[1]), int(headline[2])) if headline else (None, None)
    failed_lines = sum(1 for line in build_out.splitlines() if line.startswith("failed: "))
    skipped_lines = sum(1 for line in build_out.splitlines() if line.startswith("skipped: "))
    if headline is None:
        problems.append(f"{name}: the build printed no summary")
    elif failed_units != failed_lines or empty != skipped_lines:
        problems.append(f"{name}: build counts ({failed_units} failed, {empty} empty) differ from its lists ({failed_lines}, {skipped_lines})")
    figures["build"] = {"tokens": build_tokens, "failed_units": failed_units, "empty_sessions": empty}

    run_tokens = [0, 0]
    endpoint = {}
    for line in read(f"{directory}/run.out").splitlines():
        if match := ENDPOINT_LINE.match(line):
            endpoint[match[1]] = {"requests": int(match[2]), "failed": int(match[3]), "hedges": int(match[4])}
            run_tokens[0] += int(match[5])
            run_tokens[1] += int(match[6])
    figures["run_endpoint"] = endpoint

    manifests = glob.glob(f"{directory}/result/locomo/*.manifest.json")
    summary = {}
    if manifests:
        manifest = json.loads(read(manifests[0]))
        summary = manifest.get("summary") or {}
        figures["manifest_status"] = manifest.get("status")
    else:
        problems.append(f"{name}: no run manifest")
    if summary:
        accounted = summary["answered"] + summary["resumed"] + summary["remaining"] + summary["pending"]
        if accounted != summary["total"]:
            problems.append(f"{name}: {summary['total']} questions but {accounted} accounted for")
        lines = []
        for path in glob.glob(f"{directory}/result/locomo/*_result_*_real.jsonl"):
            lines += [json.loads(line) for line in read(path).splitlines() if line.strip()]
        errors = sum(1 for line in lines if line.get("status") == "error")
        if errors != summary["errors"] or len(lines) != summary["answered"] + summary["resumed"]:
            problems.append(f"{name}: result lines ({len(lines)}, {errors} errors) differ from the summary")
        figures["answers"] = {key: summary.get(key) for key in ("total", "answered", "errors", "remaining", "pending", "fallbacks")}
        figures["answers"]["empty_sessions"] = len(summary.get("empty_sessions", []))
        figures["answers"]["tokens"] = [summary["usage"]["prompt_tokens"], summary["usage"]["completion_tokens"]]
        # Every fallback of the summary is a record in some trace; rejected replies (re-asked
        # with the validator's message) are counted from the traces.
        events = [match[1] for line in read(f"{directory}/trace.out").splitlines()
                  if (match := TRACE_EVENT.match(line))]
        figures["answers"]["rejected_replies_in_traces"] = events.count("rejected")
        if lines and events.count("fallback") != summary["fallbacks"]:
            problems.append(f"{name}: {summary['fallbacks']} fallbacks counted, {events.count('fallback')} in the traces")

    # Server counters after each command (older work directories only have before/after).
    snapshots = {}
    for step in ("before", "build", "run", "after"):
        text = read(f"{directory}/metrics.{step}").split()
        if len(text) == 3:
            snapshots[step] = [int(x) for x in text]
    mragent_steps = {"build": build_tokens, "run": run_tokens}
    figures["tokens"] = {}
    steps = [("build", "before", "build"), ("run", "build", "run"), ("eval+trace", "run", "after")]
    if not all(step in snapshots for step in ("build", "run")):
        steps = [("all", "before", "after")]
        mragent_steps["all"] = [build_tokens[0] + run_tokens[0], build_tokens[1] + run_tokens[1]]
    for label, start, end in steps:
        if start not in snapshots or end not in snapshots:
            problems.append(f"{name}: no server counters for {label}")
            continue
        a, b = snapshots[start], snapshots[end]
        # A reply's usage.prompt_tokens counts the tokens served from the KV cache too.
        server = [(b[0] - a[0]) + (b[1] - a[1]), b[2] - a[2]]
        ours = mragent_steps.get(label, [0, 0])
        figures["tokens"][label] = {"mragent": ours, "server": server,
                                    "server_prompt_cached": b[1] - a[1]}
        if ours != server:
            problems.append(f"{name} {label}: mragent counted {ours} (prompt, completion) tokens, the server {server}")
    return figures


def main():
    work, limit, build_seconds = sys.argv[1], int(sys.argv[2]), sys.argv[3]
    problems = []
    passes = [check_pass(f"{work}/{name}", problems) for name in sys.argv[4:]]
    if not passes:
        problems.append("no pass to check")
    total = sum(figures["seconds"] for figures in passes)
    if total > limit:
        problems.append(f"the passes took {total} s, over the limit of {limit} s")
    print(json.dumps({"llama_server_build_seconds": build_seconds, "time_limit_s": limit,
                      "passes": passes}, indent=1))
    for problem in problems:
        print(f"FAIL: {problem}")
    if problems:
        sys.exit(1)
    print("OK: every pass finished in time, token totals equal the server's, every failure counted")


if __name__ == "__main__":
    main()
