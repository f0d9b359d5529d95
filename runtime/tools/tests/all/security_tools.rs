//! Hostile cases against the tool layer (SPEC §4, §5, §15): secrets in the
//! environment, escaping process trees, signal-ignoring commands, oversize and
//! non-UTF-8 output, malformed arguments, ambiguous edits, symlink escapes
//! (also swapped in after the permission check), binary files, reads outside
//! the project.

use crate::tools_support;

use std::os::unix::fs::symlink;
use std::sync::Once;
use std::time::{Duration, Instant};

use serde_json::json;
use tools_support::{Harness, err_text, mkfifo, ok_text, read_fifo, text};
use troupe_process::{KILL_GRACE, process_is_alive};
use troupe_tools::output::MAX_OUTPUT_BYTES;

const EVENT_LIMIT: Duration = Duration::from_secs(30);
const SECRET_NAME: &str = "TROUPE_SECURITY_TEST_SECRET";

/// A value no command could print by accident.
fn secret_value() -> String {
    format!("s3cr3t-{}-{}", std::process::id(), 0x5eed_u32)
}

static SET_SECRETS: Once = Once::new();

/// Puts provider keys and a random secret into this test process's
/// environment, once, before any harness reads it.
fn with_secrets() -> Harness {
    SET_SECRETS.call_once(|| {
        // SAFETY: done once, under std's environment lock, before any test of
        // this binary reads the variables; no foreign thread calls getenv.
        unsafe {
            std::env::set_var("ANTHROPIC_API_KEY", "sk-ant-TESTKEY-anthropic");
            std::env::set_var("OPENAI_API_KEY", "sk-TESTKEY-openai");
            std::env::set_var(SECRET_NAME, secret_value());
        }
    });
    Harness::new()
}

#[tokio::test]
async fn api_keys_and_secrets_never_reach_commands() {
    let h = with_secrets();
    assert_eq!(
        std::env::var("ANTHROPIC_API_KEY").unwrap(),
        "sk-ant-TESTKEY-anthropic"
    );
    let out = ok_text(&h.call("bash", json!({"command": "env"})).await);
    assert!(!out.contains("TESTKEY"), "a provider key leaked: {out}");
    assert!(
        !out.contains("ANTHROPIC_API_KEY") && !out.contains("OPENAI_API_KEY"),
        "{out}"
    );
    assert!(
        !out.contains(&secret_value()) && !out.contains(SECRET_NAME),
        "{out}"
    );
    // Even a configuration that allowlists them does not pass provider keys.
    let h = Harness::with_env_allowlist(&["ANTHROPIC_API_KEY".into(), "OPENAI_API_KEY".into()]);
    let out = ok_text(&h.call("bash", json!({"command": "env"})).await);
    assert!(
        !out.contains("TESTKEY"),
        "an allowlisted provider key leaked: {out}"
    );
    // Background tasks get the same environment.
    let out = ok_text(
        &h.call("bash", json!({"command": "env", "run_in_background": true}))
            .await,
    );
    assert!(out.contains("task_1"));
    h.background.wait("task_1").await.unwrap();
    let out = ok_text(&h.call("task_output", json!({"id": "task_1"})).await);
    assert!(
        !out.contains("TESTKEY") && !out.contains(&secret_value()),
        "{out}"
    );
}

#[tokio::test]
async fn grandchild_dies_on_timeout() {
    let h = with_secrets();
    let fifo = h.project.join("pid.fifo");
    mkfifo(&fifo);
    let call = h.call(
        "bash",
        json!({"command": "(sleep 300 & echo $! > pid.fifo); sleep 300", "timeout_secs": 2}),
    );
    let (out, pid) = tokio::join!(call, read_fifo(&fifo, EVENT_LIMIT));
    let out = err_text(&out);
    assert!(
        out.contains("[timed out after 2 s; the command and its child processes were stopped]"),
        "{out}"
    );
    let pid: u32 = pid.parse().unwrap();
    assert!(
        !process_is_alive(pid),
        "grandchild {pid} survived the timeout"
    );
}

#[tokio::test]
async fn grandchild_dies_on_cancellation() {
    let h = with_secrets();
    let fifo = h.project.join("pid.fifo");
    mkfifo(&fifo);
    let ctx = h.ctx("call_cancel");
    let cancel = ctx.cancel.clone();
    let raw = json!({"command": "(sleep 300 & echo $! > pid.fifo); sleep 300"}).to_string();
    let call = h.call_with(&ctx, "bash", &raw);
    let trigger = async {
        let pid = read_fifo(&fifo, EVENT_LIMIT).await;
        cancel.cancel();
        pid
    };
    let (out, pid) = tokio::join!(call, trigger);
    let out = err_text(&out);
    assert!(
        out.contains("[cancelled; the command and its child processes were stopped]"),
        "{out}"
    );
    let pid: u32 = pid.parse().unwrap();
    assert!(
        !process_is_alive(pid),
        "grandchild {pid} survived the cancellation"
    );
}

#[tokio::test]
async fn dropped_call_kills_its_group() {
    let h = with_secrets();
    let fifo = h.project.join("pid.fifo");
    mkfifo(&fifo);
    let ctx = h.ctx("call_dropped");
    let raw = json!({"command": "(sleep 300 & echo $! > pid.fifo); sleep 300"}).to_string();
    let pid = {
        let call = h.call_with(&ctx, "bash", &raw);
        tokio::pin!(call);
        tokio::select! {
            _ = &mut call => panic!("the command ended early"),
            pid = read_fifo(&fifo, EVENT_LIMIT) => pid,
        }
        // The call future is dropped here, as an outer timeout would.
    };
    let pid: u32 = pid.parse().unwrap();
    let deadline = Instant::now() + EVENT_LIMIT;
    while process_is_alive(pid) {
        assert!(
            Instant::now() < deadline,
            "grandchild {pid} survived the dropped call"
        );
        tokio::task::yield_now().await;
    }
}

#[tokio::test]
async fn sigterm_ignoring_command_is_killed_after_the_grace() {
    let h = with_secrets();
    let fifo = h.project.join("pid.fifo");
    mkfifo(&fifo);
    let started = Instant::now();
    let call = h.call(
        "bash",
        json!({"command": "trap '' TERM; sleep 300 & echo $! > pid.fifo; sleep 300", "timeout_secs": 1}),
    );
    let (out, pid) = tokio::join!(call, read_fifo(&fifo, EVENT_LIMIT));
    let out = err_text(&out);
    assert!(started.elapsed() >= Duration::from_secs(1) + KILL_GRACE);
    assert!(
        out.contains("[timed out after 1 s; the command and its child processes were stopped; SIGKILL was needed after the 2 s grace]"),
        "{out}"
    );
    let pid: u32 = pid.parse().unwrap();
    assert!(!process_is_alive(pid), "TERM-ignoring child {pid} survived");
}

#[tokio::test]
async fn ten_megabytes_of_output_keep_the_tail_and_spill_everything() {
    let h = with_secrets();
    let ctx = h.ctx("call_big");
    let out = h
        .call_with(
            &ctx,
            "bash",
            &json!({"command": "seq 1 1500000"}).to_string(),
        )
        .await;
    let out = ok_text(&out);
    let spill = h.spill.join("bash-call_big.log");
    assert!(
        out.starts_with(&format!(
            "[kept lines 1498001-1500000 of 1500000; full output: {}]\n1498001\n",
            spill.display()
        )),
        "{}",
        &out[..300]
    );
    assert!(out.ends_with("1499999\n1500000\n[exit code 0]"));
    assert!(
        out.len() <= MAX_OUTPUT_BYTES,
        "result is {} bytes",
        out.len()
    );
    let spilled = std::fs::read_to_string(&spill).unwrap();
    assert!(spilled.len() > 10_000_000);
    let expected: String = (1..=1_500_000).map(|i| format!("{i}\n")).collect();
    assert!(
        spilled == expected,
        "the spill file does not hold the whole output"
    );
}

#[tokio::test]
async fn huge_single_line_is_cut_safely() {
    let h = with_secrets();
    // 300,000 bytes on one line made of 3-byte characters, no newline.
    let out = ok_text(
        &h.call(
            "bash",
            json!({"command": "for i in $(seq 1 1000); do printf '語%.0s' $(seq 1 100); done"}),
        )
        .await,
    );
    assert!(
        out.starts_with("[kept lines 1-1 of 1; full output: "),
        "{}",
        &out[..200]
    );
    assert!(
        out.contains("[line 1 is too long: only its last "),
        "{}",
        &out[..300]
    );
    assert!(out.len() <= MAX_OUTPUT_BYTES);
    let body = out.lines().nth(2).unwrap();
    assert!(body.chars().all(|c| c == '語'), "a character was cut");
    // read_file on a file made of one huge line.
    h.write("one_line.txt", "é".repeat(100_000));
    let out = ok_text(&h.call("read_file", json!({"path": "one_line.txt"})).await);
    assert!(
        out.contains(
            "[…line 1 cut at byte 16384 of 200000: continue it with offset=1 byte_offset=16384]"
        ),
        "{}",
        &out[out.len() - 300..]
    );
    assert!(out.len() <= MAX_OUTPUT_BYTES + 300);
    // The marker's byte continues the line, never splitting a character.
    let out = ok_text(
        &h.call(
            "read_file",
            json!({"path": "one_line.txt", "byte_offset": 16384}),
        )
        .await,
    );
    assert!(
        out.starts_with("1\t[…from byte 16384] éé"),
        "{}",
        &out[..100]
    );
}

#[tokio::test]
async fn non_utf8_file_and_output_are_decoded_lossily() {
    let h = with_secrets();
    h.write("latin1.txt", b"caf\xe9\nna\xefve\n");
    let out = ok_text(&h.call("read_file", json!({"path": "latin1.txt"})).await);
    assert!(out.contains("1\tcaf\u{FFFD}\n2\tna\u{FFFD}ve\n"), "{out}");
    assert!(
        out.contains("(the file is not valid UTF-8; invalid bytes are shown as \u{FFFD})"),
        "{out}"
    );
    let out = ok_text(
        &h.call(
            "bash",
            json!({"command": "printf 'bad \\377\\376 bytes\\n'"}),
        )
        .await,
    );
    assert!(out.starts_with("bad \u{FFFD}\u{FFFD} bytes\n"), "{out}");
    // edit_file keeps the other invalid bytes intact.
    ok_text(
        &h.call(
            "edit_file",
            json!({"path": "latin1.txt", "old_string": "na", "new_string": "NA"}),
        )
        .await,
    );
    assert_eq!(
        std::fs::read(h.project.join("latin1.txt")).unwrap(),
        b"caf\xe9\nNA\xefve\n"
    );
}

/// Every built-in tool with arguments that are valid, so the malformed
/// variants below differ from a good call in one way only.
fn good_arguments() -> Vec<(&'static str, serde_json::Value)> {
    vec![
        ("read_file", json!({"path": "a.txt"})),
        ("write_file", json!({"path": "a.txt", "content": "x"})),
        (
            "edit_file",
            json!({"path": "a.txt", "old_string": "x", "new_string": "y"}),
        ),
        ("glob", json!({"pattern": "*.rs"})),
        ("grep", json!({"pattern": "x"})),
        ("bash", json!({"command": "true"})),
        ("task_output", json!({"id": "task_1"})),
        ("task_list", json!({})),
        ("task_kill", json!({"id": "task_1"})),
        ("web_fetch", json!({"url": "https://example.com/"})),
        (
            "update_plan",
            json!({"plan": [{"step": "a", "status": "pending"}]}),
        ),
    ]
}

#[tokio::test]
async fn malformed_arguments_for_every_tool_are_explained() {
    let h = with_secrets();
    let names: Vec<&str> = h.registry.names().collect();
    assert_eq!(
        names.len(),
        good_arguments().len(),
        "a built-in tool lacks a case here"
    );
    for (name, good) in good_arguments() {
        assert!(
            h.registry.validate(name, &good.to_string()).is_ok(),
            "{name}"
        );

        // Not JSON at all.
        let bad = format!("{{\"oops\": {}", good.to_string().trim_start_matches('{'));
        let err = err_text(
            &h.call_with(&h.ctx("c"), name, "{\"path\": \"a.txt\",")
                .await,
        );
        assert!(
            err.starts_with(&format!("Arguments for {name} are not valid JSON")),
            "{name}: {err}"
        );
        assert!(err.contains("`{\"path\": \"a.txt\",`"), "{name}: {err}");
        let err = err_text(&h.call_with(&h.ctx("c"), name, &bad[..bad.len() - 1]).await);
        assert!(err.contains("not valid JSON"), "{name}: {err}");

        // Not an object.
        let err = err_text(&h.call_with(&h.ctx("c"), name, "[1, 2]").await);
        assert!(err.contains("is not of type \"object\""), "{name}: {err}");

        // An extra property.
        let mut extra = good.clone();
        extra["unexpected_field"] = json!(1);
        let err = err_text(&h.call_with(&h.ctx("c"), name, &extra.to_string()).await);
        assert!(err.contains("unexpected_field"), "{name}: {err}");
        assert!(
            err.contains("Additional properties are not allowed"),
            "{name}: {err}"
        );

        let object = good.as_object().unwrap();
        for field in object.keys() {
            // Each required field missing.
            let mut missing = good.clone();
            missing.as_object_mut().unwrap().remove(field);
            let err = err_text(&h.call_with(&h.ctx("c"), name, &missing.to_string()).await);
            assert!(
                err.contains(&format!("\"{field}\" is a required property")),
                "{name}: {err}"
            );
            assert!(err.contains("Expected: {"), "{name}: {err}");

            // Each field with the wrong type.
            let mut wrong = good.clone();
            wrong[field.as_str()] = json!(12345);
            let err = err_text(&h.call_with(&h.ctx("c"), name, &wrong.to_string()).await);
            let expected = if good[field.as_str()].is_array() {
                "array"
            } else {
                "string"
            };
            assert!(
                err.contains(&format!("`{field}`: 12345 is not of type \"{expected}\"")),
                "{name}: {err}"
            );
        }
    }
    // Optional fields with wrong types and out-of-range values.
    let err = err_text(
        &h.call("bash", json!({"command": "true", "timeout_secs": "10"}))
            .await,
    );
    assert!(
        err.contains("`timeout_secs`: \"10\" is not of type \"integer\""),
        "{err}"
    );
    let err = err_text(&h.call("read_file", json!({"path": "a", "offset": 0})).await);
    assert!(
        err.contains("`offset`: 0 is less than the minimum of 1"),
        "{err}"
    );
    let err = err_text(
        &h.call(
            "edit_file",
            json!({"path": "a", "old_string": "x", "new_string": "y", "replace_all": "yes"}),
        )
        .await,
    );
    assert!(
        err.contains("`replace_all`: \"yes\" is not of type \"boolean\""),
        "{err}"
    );
    let err = err_text(
        &h.call("grep", json!({"pattern": "x", "output_mode": "everything"}))
            .await,
    );
    assert!(
        err.contains("`output_mode`: \"everything\" is not one of"),
        "{err}"
    );
    let err = err_text(
        &h.call(
            "web_fetch",
            json!({"url": "https://example.com/", "max_chars": 100_001}),
        )
        .await,
    );
    assert!(
        err.contains("`max_chars`: 100001 is greater than the maximum of 100000"),
        "{err}"
    );
    let err = err_text(
        &h.call(
            "web_fetch",
            json!({"url": "https://example.com/", "start_index": -1}),
        )
        .await,
    );
    assert!(
        err.contains("`start_index`: -1 is less than the minimum of 0"),
        "{err}"
    );
    let err = err_text(&h.call_with(&h.ctx("c"), "no_such_tool", "{}").await);
    assert!(
        err.starts_with("Unknown tool `no_such_tool`. Available tools: read_file, write_file"),
        "{err}"
    );
}

#[tokio::test]
async fn ambiguous_edit_and_missing_file() {
    let h = with_secrets();
    h.write("dup.txt", "same\nother\nsame\n");
    let err = err_text(
        &h.call(
            "edit_file",
            json!({"path": "dup.txt", "old_string": "same", "new_string": "new"}),
        )
        .await,
    );
    assert_eq!(
        err,
        "old_string occurs 2 times in dup.txt (lines 1, 3); add surrounding lines to make it \
         unique, or set replace_all to true to replace every occurrence. Nothing was changed."
    );
    assert_eq!(h.read("dup.txt"), "same\nother\nsame\n");
    let err = err_text(
        &h.call(
            "edit_file",
            json!({"path": "ghost.txt", "old_string": "a", "new_string": "b"}),
        )
        .await,
    );
    assert_eq!(
        err,
        "File not found: ghost.txt. Use write_file to create it."
    );
    assert!(!h.project.join("ghost.txt").exists());
}

#[tokio::test]
async fn writes_through_symlinks_pointing_outside_are_refused() {
    let h = with_secrets();
    let target = h.outside.join("target.txt");
    std::fs::write(&target, "original").unwrap();
    symlink(&target, h.project.join("link.txt")).unwrap();
    symlink(&h.outside, h.project.join("outdir")).unwrap();

    let err = err_text(
        &h.call(
            "write_file",
            json!({"path": "link.txt", "content": "pwned"}),
        )
        .await,
    );
    assert!(err.starts_with(&format!(
        "Refused: `link.txt` resolves to {}, outside the project and the other allowed directories; writing there is never allowed.",
        target.display()
    )), "{err}");
    assert!(err.contains("symbolic link"), "{err}");
    let err = err_text(
        &h.call(
            "edit_file",
            json!({"path": "link.txt", "old_string": "original", "new_string": "pwned"}),
        )
        .await,
    );
    assert!(err.starts_with("Refused: `link.txt` resolves to"), "{err}");
    let err = err_text(
        &h.call(
            "write_file",
            json!({"path": "outdir/new.txt", "content": "pwned"}),
        )
        .await,
    );
    assert!(err.contains("writing there is never allowed"), "{err}");
    let err = err_text(
        &h.call(
            "write_file",
            json!({"path": "../outside/x.txt", "content": "pwned"}),
        )
        .await,
    );
    assert!(err.contains("writing there is never allowed"), "{err}");
    let err = err_text(
        &h.call(
            "write_file",
            json!({"path": target.to_str().unwrap(), "content": "pwned"}),
        )
        .await,
    );
    assert!(err.contains("writing there is never allowed"), "{err}");

    assert_eq!(std::fs::read_to_string(&target).unwrap(), "original");
    assert!(!h.outside.join("new.txt").exists());
    assert!(!h.outside.join("x.txt").exists());
}

#[tokio::test]
async fn file_writes_to_a_path_that_names_a_directory_are_refused() {
    let h = with_secrets();
    std::fs::create_dir_all(h.project.join("existing")).unwrap();
    h.write("existing/kept.txt", "kept");
    for path in [
        "newdir/.",
        "newdir/",
        "newdir/sub/..",
        "existing",
        "existing/",
        "existing/.",
        ".",
    ] {
        let err = err_text(
            &h.call("write_file", json!({"path": path, "content": "x"}))
                .await,
        );
        assert_eq!(
            err,
            format!(
                "Refused: `{path}` names a directory, not a file; give the path of a file. Nothing was written."
            )
        );
        let err = err_text(
            &h.call(
                "edit_file",
                json!({"path": path, "old_string": "a", "new_string": "b"}),
            )
            .await,
        );
        assert!(
            err.contains("names a directory, not a file"),
            "{path}: {err}"
        );
    }
    assert!(!h.project.join("newdir").exists());
    assert!(h.project.join("existing").is_dir());
    assert_eq!(h.read("existing/kept.txt"), "kept");
    // A file below a new directory is still created, directories and all.
    ok_text(
        &h.call(
            "write_file",
            json!({"path": "newdir/file.txt", "content": "x"}),
        )
        .await,
    );
    assert_eq!(h.read("newdir/file.txt"), "x");
}

#[tokio::test]
async fn writes_replace_a_hard_linked_file_and_leave_its_outside_name_alone() {
    use std::os::unix::fs::{MetadataExt, PermissionsExt};
    let h = with_secrets();
    let outside = h.outside.join("store.txt");
    std::fs::write(&outside, "shared original\n").unwrap();
    std::fs::set_permissions(&outside, std::fs::Permissions::from_mode(0o751)).unwrap();
    let inside = h.project.join("linked.txt");
    std::fs::hard_link(&outside, &inside).unwrap();
    assert_eq!(std::fs::metadata(&outside).unwrap().nlink(), 2);

    ok_text(
        &h.call(
            "edit_file",
            json!({"path": "linked.txt", "old_string": "original", "new_string": "edited"}),
        )
        .await,
    );
    assert_eq!(h.read("linked.txt"), "shared edited\n");
    assert_eq!(
        std::fs::read_to_string(&outside).unwrap(),
        "shared original\n"
    );
    let meta = std::fs::metadata(&inside).unwrap();
    assert_eq!(
        meta.permissions().mode() & 0o7777,
        0o751,
        "the mode is kept"
    );
    assert_eq!(meta.nlink(), 1, "the project file is a file of its own now");

    // write_file over a second hard link.
    let second = h.project.join("second.txt");
    std::fs::hard_link(&outside, &second).unwrap();
    ok_text(
        &h.call(
            "write_file",
            json!({"path": "second.txt", "content": "replaced"}),
        )
        .await,
    );
    assert_eq!(h.read("second.txt"), "replaced");
    assert_eq!(
        std::fs::read_to_string(&outside).unwrap(),
        "shared original\n"
    );
    assert_eq!(
        std::fs::metadata(&second).unwrap().permissions().mode() & 0o7777,
        0o751
    );
    // No temporary file is left next to the targets.
    let names: Vec<String> = std::fs::read_dir(&h.project)
        .unwrap()
        .map(|entry| entry.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    assert!(
        names.iter().all(|name| !name.ends_with(".tmp")),
        "{names:?}"
    );
}

#[tokio::test]
async fn symlink_swapped_in_after_the_permission_check_is_refused() {
    let h = with_secrets();
    let secret = h.outside.join("secret.txt");
    std::fs::write(&secret, "top secret").unwrap();
    for (tool, args) in [
        (
            "write_file",
            json!({"path": "data.txt", "content": "pwned"}),
        ),
        (
            "edit_file",
            json!({"path": "data.txt", "old_string": "top", "new_string": "pwned"}),
        ),
        ("read_file", json!({"path": "data.txt"})),
    ] {
        // The permission side saw a plain file inside the project...
        h.write("data.txt", "harmless");
        let seen = h.sandbox.resolve("data.txt").unwrap();
        assert!(seen.is_inside());
        let subject = h.registry.get(tool).unwrap().permission_subject(&args);
        assert!(format!("{subject:?}").contains("data.txt"));
        // ...then it became a symlink to a file outside before the tool ran.
        std::fs::remove_file(h.project.join("data.txt")).unwrap();
        symlink(&secret, h.project.join("data.txt")).unwrap();
        let out = h.call(tool, args).await;
        let err = err_text(&out);
        assert!(
            err.starts_with(&format!(
                "Refused: `data.txt` resolves to {}",
                secret.display()
            )),
            "{tool}: {err}"
        );
        assert!(
            err.contains(
                "if the link changed after the permission check, that check saw a different path"
            ),
            "{tool}: {err}"
        );
        assert!(!text(&out).contains("top secret"), "{tool} leaked the file");
        assert_eq!(
            std::fs::read_to_string(&secret).unwrap(),
            "top secret",
            "{tool} wrote outside"
        );
        std::fs::remove_file(h.project.join("data.txt")).unwrap();
    }
}

#[tokio::test]
async fn binary_files_are_refused() {
    let h = with_secrets();
    h.write("image.png", b"\x89PNG\r\n\x1a\n\0\0\0\rIHDR");
    let err = err_text(&h.call("read_file", json!({"path": "image.png"})).await);
    assert!(
        err.starts_with("image.png is a binary file (it contains NUL bytes)"),
        "{err}"
    );
    let err = err_text(
        &h.call(
            "edit_file",
            json!({"path": "image.png", "old_string": "PNG", "new_string": "GIF"}),
        )
        .await,
    );
    assert_eq!(
        err,
        "image.png is a binary file; edit_file edits text only."
    );
    let out = ok_text(&h.call("grep", json!({"pattern": "IHDR"})).await);
    assert_eq!(out, "No matches for `IHDR` in `.`.");
}

#[tokio::test]
async fn reads_outside_need_approval_of_that_call() {
    let h = with_secrets();
    let outside_file = h.outside.join("notes.txt");
    std::fs::write(&outside_file, "outside notes\n").unwrap();
    let raw = json!({"path": outside_file.to_str().unwrap()}).to_string();

    let err = err_text(&h.call_with(&h.ctx("c1"), "read_file", &raw).await);
    assert_eq!(
        err,
        format!(
            "Refused: `{0}` resolves to {0}, outside the project and the other allowed \
             directories; reading it needs a person's approval of this call or an allow \
             rule naming the path.",
            outside_file.display()
        )
    );
    let err = err_text(
        &h.call("read_file", json!({"path": "../outside/notes.txt"}))
            .await,
    );
    assert!(err.contains("needs a person's approval"), "{err}");
    let err = err_text(
        &h.call("grep", json!({"pattern": "notes", "path": "../outside"}))
            .await,
    );
    assert!(err.contains("needs a person's approval"), "{err}");
    let err = err_text(&h.call("glob", json!({"pattern": "../outside/*.txt"})).await);
    assert!(err.contains("needs a person's approval"), "{err}");

    let mut approved = h.ctx("c2");
    approved.outside_read_approved = true;
    let out = ok_text(&h.call_with(&approved, "read_file", &raw).await);
    assert_eq!(out, "1\toutside notes");
    // Approval never extends to writes.
    let write = json!({"path": outside_file.to_str().unwrap(), "content": "x"}).to_string();
    let err = err_text(&h.call_with(&approved, "write_file", &write).await);
    assert!(err.contains("writing there is never allowed"), "{err}");
}

// ------------------------------------------------------------ no survivors

/// Live (not zombie) processes whose command line is `sleep MARKER`.
fn sleeping(marker: &str) -> Vec<u32> {
    let wanted = format!("sleep\0{marker}\0");
    std::fs::read_dir("/proc")
        .unwrap()
        .flatten()
        .filter_map(|entry| entry.file_name().to_str()?.parse::<u32>().ok())
        .filter(|pid| {
            std::fs::read(format!("/proc/{pid}/cmdline"))
                .is_ok_and(|cmdline| cmdline == wanted.as_bytes())
        })
        .filter(|pid| process_is_alive(*pid))
        .collect()
}

/// Waits (bounded) until no `sleep MARKER` is alive; the survivors if some
/// are still there at the limit.
async fn survivors(marker: &str) -> Vec<u32> {
    let deadline = Instant::now() + EVENT_LIMIT;
    loop {
        let alive = sleeping(marker);
        if alive.is_empty() || Instant::now() >= deadline {
            return alive;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

/// Runs `command` (which prints `started` once its processes are up) with a
/// 2 s timeout under `containment`, and returns how it ended.
async fn run_contained(
    command: &str,
    containment: &troupe_process::process_tree::Containment,
) -> troupe_process::DriveOutcome {
    use troupe_process::{drive, spawn_shell_contained};
    let dir = tempfile::tempdir().unwrap();
    let mut shell = spawn_shell_contained(command, dir.path(), &[], containment).unwrap();
    drive(
        &mut shell,
        Some(Duration::from_secs(2)),
        &tokio_util::sync::CancellationToken::new(),
        |_| {},
    )
    .await
}

/// The containments this machine offers: always the subreaper, and cgroup
/// v2 when it is writable here.
fn containments() -> Vec<troupe_process::process_tree::Containment> {
    use troupe_process::process_tree::{Containment, detect};
    let mut out = vec![Containment::Subreaper];
    let detected = detect();
    if detected != Containment::Subreaper {
        out.push(detected);
    } else {
        // Only the subreaper is tested here: said loudly, or a failure
        // where cgroups are required.
        troupe_test_support::require(troupe_test_support::Need::Cgroups);
    }
    out
}

#[tokio::test]
async fn processes_that_left_the_group_die_on_timeout() {
    use troupe_process::Ending;
    for (i, containment) in containments().into_iter().enumerate() {
        let own_group = format!("1221.{i}1");
        let new_session = format!("1221.{i}2");
        let orphan = format!("1221.{i}3");
        let command = format!(
            "set -m; sleep {own_group} & setsid sleep {new_session} & \
             (setsid sleep {orphan} &); sleep 100"
        );
        let outcome = run_contained(&command, &containment).await;
        assert_eq!(outcome.ending, Ending::TimedOut, "{containment:?}");
        for marker in [&own_group, &new_session, &orphan] {
            assert_eq!(
                survivors(marker).await,
                Vec::<u32>::new(),
                "`sleep {marker}` survived under {containment:?}"
            );
        }
    }
}

#[tokio::test]
async fn processes_left_running_after_the_command_exits_are_stopped() {
    use troupe_process::Ending;
    for (i, containment) in containments().into_iter().enumerate() {
        let marker = format!("1222.{i}1");
        let outcome = run_contained(
            &format!("(setsid sleep {marker} &); echo started"),
            &containment,
        )
        .await;
        assert_eq!(outcome.ending, Ending::Exited, "{containment:?}");
        assert_eq!(
            survivors(&marker).await,
            Vec::<u32>::new(),
            "{containment:?}"
        );
    }
}

#[tokio::test]
async fn hostile_plans_are_refused_whole_with_the_reason() {
    let h = with_secrets();
    let step = |text: String, status: &str| json!({"step": text, "status": status});
    let flood: Vec<serde_json::Value> = (0..100_000)
        .map(|n| step(format!("step {n}"), "pending"))
        .collect();
    let err = err_text(&h.call("update_plan", json!({ "plan": flood })).await);
    assert!(
        err.contains("100000 steps; a plan holds at most 50"),
        "{err}"
    );
    let huge = "x".repeat(1 << 20);
    let err = err_text(
        &h.call("update_plan", json!({"plan": [step(huge, "pending")]}))
            .await,
    );
    assert!(
        err.contains("step 1 is longer than 500 characters"),
        "{err}"
    );
    let err = err_text(
        &h.call(
            "update_plan",
            json!({"plan": [step("ok".into(), "completed"), step("\u{1b}]52;c;aGk=\u{7}".into(), "pending")]}),
        )
        .await,
    );
    assert!(
        err.contains("step 2 holds a line break or control character"),
        "{err}"
    );
    let err = err_text(
        &h.call(
            "update_plan",
            json!({"plan": [step("a".into(), "in_progress"), step("b".into(), "in_progress")]}),
        )
        .await,
    );
    assert!(err.ends_with("The plan is unchanged."), "{err}");
    assert!(!err.contains('\n'), "{err}");
}
