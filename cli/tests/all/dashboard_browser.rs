//! The dashboard in a real browser: Debian's headless `chromium`, driven
//! over the DevTools protocol on a pipe (`--remote-debugging-pipe`: JSON
//! messages ended by a NUL byte on descriptors 3 and 4). Skipped loudly
//! where `chromium` is missing; a failure under
//! `TROUPE_REQUIRE_CHROMIUM=1` (CI).
//!
//! One scenario, as a person would go through it: log in with the URL
//! `troupe dashboard` printed; see the run waiting on the runs page; open
//! its page in a second tab and see the approval; click Allow and see the
//! run finish live in that tab and on the runs page without a reload; find
//! the model's `<script>` as text; open the waterfall and check the spans'
//! order and nesting; see a request without the CSRF token and a browser
//! without the cookie refused; use the runs page 375 px wide. Screenshots of
//! each page land in `$CARGO_TARGET_TMPDIR/dashboard/`.

use std::io::{Read, Write};
use std::os::fd::{AsRawFd, OwnedFd};
use std::os::unix::process::CommandExt;
use std::path::PathBuf;
use std::process::{Child, Stdio};
use std::sync::mpsc::{Receiver, RecvTimeoutError};
use std::time::{Duration, Instant};

use serde_json::{Value, json};
use troupe_scripted::{Script, ScriptedServer, text, tool_call};
use troupe_test_support::{Need, require};

use crate::daemon::Daemon;
use crate::dashboard::login_url;
use crate::support::{COMMAND_LIMIT, Env};

/// A headless Chromium and the pipe to its DevTools.
struct Chromium {
    child: Child,
    commands: std::fs::File,
    messages: Receiver<Value>,
    next_id: u64,
    _profile: tempfile::TempDir,
}

/// One tab, attached with its own DevTools session.
struct Tab {
    session: String,
}

fn pipe() -> (OwnedFd, OwnedFd) {
    let (reader, writer) = std::io::pipe().unwrap();
    (reader.into(), writer.into())
}

impl Chromium {
    fn launch() -> Chromium {
        let profile = tempfile::tempdir().unwrap();
        let (their_commands, our_commands) = pipe();
        let (our_messages, their_messages) = pipe();
        let (read_fd, write_fd) = (their_commands.as_raw_fd(), their_messages.as_raw_fd());
        let mut command = std::process::Command::new("chromium");
        command
            .args([
                "--headless",
                "--no-sandbox",
                "--disable-gpu",
                "--disable-dev-shm-usage",
                "--no-first-run",
                "--remote-debugging-pipe",
                "--window-size=1280,900",
            ])
            .arg(format!("--user-data-dir={}", profile.path().display()))
            .arg("about:blank")
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null());
        // SAFETY: only fcntl and dup2 run between fork and exec, both
        // async-signal-safe; the pipe ends are moved above 9 first so that
        // placing one on 3 or 4 cannot overwrite the other.
        unsafe {
            command.pre_exec(move || {
                let high_read = libc::fcntl(read_fd, libc::F_DUPFD, 10);
                let high_write = libc::fcntl(write_fd, libc::F_DUPFD, 10);
                if high_read < 0
                    || high_write < 0
                    || libc::dup2(high_read, 3) < 0
                    || libc::dup2(high_write, 4) < 0
                {
                    return Err(std::io::Error::last_os_error());
                }
                Ok(())
            });
        }
        let child = command.spawn().expect("chromium starts");
        drop((their_commands, their_messages));
        let (sender, messages) = std::sync::mpsc::channel();
        let mut reader = std::fs::File::from(our_messages);
        std::thread::spawn(move || {
            let mut pending = Vec::new();
            let mut buffer = [0u8; 64 * 1024];
            while let Ok(read) = reader.read(&mut buffer) {
                if read == 0 {
                    return;
                }
                pending.extend_from_slice(&buffer[..read]);
                while let Some(end) = pending.iter().position(|byte| *byte == 0) {
                    let message: Vec<u8> = pending.drain(..=end).collect();
                    if let Ok(value) = serde_json::from_slice(&message[..end])
                        && sender.send(value).is_err()
                    {
                        return;
                    }
                }
            }
        });
        Chromium {
            child,
            commands: std::fs::File::from(our_commands),
            messages,
            next_id: 1,
            _profile: profile,
        }
    }

    /// Sends a command (to a tab's session when given) and waits at most
    /// `limit` for its answer: the result, or the error message.
    fn call_within(
        &mut self,
        session: Option<&str>,
        method: &str,
        params: Value,
        limit: Duration,
    ) -> Result<Value, String> {
        let id = self.next_id;
        self.next_id += 1;
        let mut message = json!({ "id": id, "method": method, "params": params });
        if let Some(session) = session {
            message["sessionId"] = json!(session);
        }
        let mut bytes = serde_json::to_vec(&message).unwrap();
        bytes.push(0);
        self.commands.write_all(&bytes).unwrap();
        let deadline = Instant::now() + limit;
        loop {
            let left = deadline.saturating_duration_since(Instant::now());
            match self.messages.recv_timeout(left) {
                Ok(answer) if answer["id"] == json!(id) => {
                    return match answer.get("error") {
                        Some(error) => Err(error.to_string()),
                        None => Ok(answer["result"].clone()),
                    };
                }
                Ok(_) => {}
                Err(RecvTimeoutError::Timeout) => {
                    return Err(format!("{method}: no answer in time"));
                }
                Err(RecvTimeoutError::Disconnected) => panic!("chromium went away"),
            }
        }
    }

    fn call(&mut self, session: Option<&str>, method: &str, params: Value) -> Value {
        self.call_within(session, method, params, COMMAND_LIMIT)
            .unwrap_or_else(|err| panic!("{method}: {err}"))
    }

    /// A new tab (in `context` when given) showing `url`.
    fn open(&mut self, url: &str, context: Option<&str>) -> Tab {
        let mut params = json!({ "url": url });
        if let Some(context) = context {
            params["browserContextId"] = json!(context);
        }
        let target = self.call(None, "Target.createTarget", params);
        let attached = self.call(
            None,
            "Target.attachToTarget",
            json!({ "targetId": target["targetId"], "flatten": true }),
        );
        Tab {
            session: attached["sessionId"].as_str().unwrap().to_string(),
        }
    }

    fn navigate(&mut self, tab: &Tab, url: &str) {
        self.call(Some(&tab.session), "Page.navigate", json!({ "url": url }));
    }

    /// The value of `expression` in the tab (awaited when a promise).
    fn eval(&mut self, tab: &Tab, expression: &str) -> Result<Value, String> {
        self.eval_within(tab, expression, COMMAND_LIMIT)
    }

    fn eval_within(
        &mut self,
        tab: &Tab,
        expression: &str,
        limit: Duration,
    ) -> Result<Value, String> {
        let result = self.call_within(
            Some(&tab.session),
            "Runtime.evaluate",
            json!({ "expression": expression, "returnByValue": true, "awaitPromise": true }),
            limit,
        )?;
        if let Some(details) = result.get("exceptionDetails") {
            return Err(details.to_string());
        }
        Ok(result["result"]["value"].clone())
    }

    /// Waits until `condition` (a JavaScript expression) holds in the tab:
    /// checked at once and again on every change of the page's DOM, across
    /// navigations, for at most [`COMMAND_LIMIT`].
    fn wait_for(&mut self, tab: &Tab, condition: &str) {
        let watcher = format!(
            "new Promise(resolve => {{ const check = () => {{ try {{ if ({condition}) {{ resolve(true); return true; }} }} catch (e) {{}} return false; }}; \
             if (check()) return; new MutationObserver(() => check()).observe(document, \
             {{ subtree: true, childList: true, characterData: true, attributes: true }}); }})"
        );
        let deadline = Instant::now() + COMMAND_LIMIT;
        let mut last = String::new();
        while Instant::now() < deadline {
            let left = deadline.saturating_duration_since(Instant::now());
            match self.eval_within(tab, &watcher, left) {
                Ok(Value::Bool(true)) => return,
                Ok(other) => last = other.to_string(),
                // The page navigated away under the watcher: watch the new one.
                Err(err) => last = err,
            }
        }
        let body = self
            .eval(tab, "document.documentElement.outerHTML")
            .unwrap_or_default();
        panic!("{condition} did not come true: {last}\n{body}");
    }

    /// Saves a screenshot of the tab as `name`.png.
    fn screenshot(&mut self, tab: &Tab, name: &str) {
        let shot = self.call(
            Some(&tab.session),
            "Page.captureScreenshot",
            json!({ "format": "png", "captureBeyondViewport": true }),
        );
        let data = shot["data"].as_str().unwrap();
        let bytes = base64::Engine::decode(&base64::engine::general_purpose::STANDARD, data)
            .expect("a screenshot is base64");
        let dir = screenshots_dir();
        std::fs::create_dir_all(&dir).unwrap();
        std::fs::write(dir.join(format!("{name}.png")), bytes).unwrap();
    }
}

impl Drop for Chromium {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// The waterfall's rows once the run's spans (with `agents` `invoke_agent`
/// spans, a `chat` and an `execute_tool`) are in the store: `[span id,
/// parent id, depth, name]` each. Spans reach the store shortly after a run
/// ends, so the page is loaded again until they are there.
fn waterfall_rows(browser: &mut Chromium, tab: &Tab, url: &str, agents: usize) -> Vec<Value> {
    let rows_js = "Array.from(document.querySelectorAll('tr[data-span]')).map(r => \
                   [r.dataset.span, r.dataset.parent || null, Number(r.dataset.depth), \
                    r.querySelector('td.name').firstChild.textContent])";
    let deadline = Instant::now() + COMMAND_LIMIT;
    loop {
        browser.navigate(tab, url);
        browser.wait_for(tab, "document.querySelector('table.waterfall') !== null");
        let rows = browser.eval(tab, rows_js).unwrap();
        let rows = rows.as_array().unwrap().clone();
        let count = |prefix: &str| {
            rows.iter()
                .filter(|row| row[3].as_str().unwrap().starts_with(prefix))
                .count()
        };
        if count("invoke_agent") >= agents && count("chat") > 0 && count("execute_tool") > 0 {
            return rows;
        }
        assert!(Instant::now() < deadline, "spans never arrived: {rows:?}");
    }
}

/// Where the screenshots go.
fn screenshots_dir() -> PathBuf {
    PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("dashboard")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_browser_logs_in_answers_an_approval_and_watches_the_run_finish() {
    if !require(Need::Chromium) {
        return;
    }
    let script = Script::new()
        .then(tool_call(
            "write_file",
            json!({"path": "notes.txt", "content": "approved\n"}),
        ))
        .then(text("<script>alert(1)</script> all done"));
    let server = ScriptedServer::start(script).await.unwrap();
    let env = Env::new();
    let daemon = Daemon::start(&env, &server);
    let (run_id, session_id) = daemon
        .submit(json!({"prompt": "write the notes", "cwd": env.root(), "interactive": true}))
        .await;
    daemon
        .events(&run_id, None, |events| {
            events
                .iter()
                .any(|(_, e)| e["type"] == "approval_requested")
        })
        .await;
    let url = login_url(&env);
    let base = format!("http://{}", daemon.addr);
    let row = format!("tr[data-run=\"{run_id}\"]");

    let mut browser = Chromium::launch();
    let runs = browser.open("about:blank", None);
    browser.navigate(&runs, &url);
    // Logged in: the runs page lists the run, waiting.
    browser.wait_for(
        &runs,
        &format!("document.querySelector('{row} [data-status=\"running\"]') !== null"),
    );
    assert_eq!(
        browser.eval(&runs, "window.location.hash").unwrap(),
        json!(""),
        "the code left the address bar"
    );
    browser
        .eval(&runs, "window.stillTheSamePage = true")
        .unwrap();
    browser.screenshot(&runs, "runs");

    // The run's page, in a second tab with the same cookie, shows the
    // approval; Allow lets the run finish, live.
    let run = browser.open(&format!("{base}/runs/{run_id}"), None);
    browser.wait_for(
        &run,
        "document.querySelector('form[data-approval] button[value=\"allow\"]') !== null \
         && document.querySelector('#live[sse-connect]') !== null",
    );
    browser.screenshot(&run, "run-approval");
    // A request without the CSRF token is refused, even from the page.
    let refused = browser
        .eval(
            &run,
            &format!("fetch('/runs/{run_id}/cancel', {{ method: 'POST' }}).then(r => r.status)"),
        )
        .unwrap();
    assert_eq!(refused, json!(403));
    browser
        .eval(
            &run,
            "document.querySelector('form[data-approval] button[value=\"allow\"]').click()",
        )
        .unwrap();
    browser.wait_for(
        &run,
        "document.querySelector('#lanes .entry.finished') !== null",
    );
    let hostile = browser
        .eval(
            &run,
            "[document.querySelectorAll('#lanes script').length, \
              document.querySelector('#lanes').textContent.includes('<script>alert(1)</script>')]",
        )
        .unwrap();
    assert_eq!(hostile, json!([0, true]), "the model's script is text");
    browser.screenshot(&run, "run-finished");
    // The runs page saw it finish without a reload.
    browser.wait_for(
        &runs,
        &format!("document.querySelector('{row} [data-status=\"finished\"]') !== null"),
    );
    assert_eq!(
        browser.eval(&runs, "window.stillTheSamePage").unwrap(),
        json!(true)
    );
    assert_eq!(
        std::fs::read_to_string(env.root().join("notes.txt")).unwrap(),
        "approved\n"
    );

    // The waterfall: the run's spans in start order, children under their
    // parents. Spans reach the store shortly after the run ends.
    let rows = waterfall_rows(
        &mut browser,
        &run,
        &format!("{base}/runs/{run_id}/spans"),
        1,
    );
    browser.screenshot(&run, "spans");
    assert!(
        rows[0][3].as_str().unwrap().starts_with("invoke_agent"),
        "{rows:?}"
    );
    for (index, row) in rows.iter().enumerate() {
        let Some(parent) = row[1].as_str() else {
            continue;
        };
        let Some(parent_at) = rows.iter().position(|other| other[0] == json!(parent)) else {
            continue;
        };
        assert!(
            parent_at < index,
            "a parent comes before its child: {rows:?}"
        );
        assert_eq!(
            row[2].as_u64().unwrap(),
            rows[parent_at][2].as_u64().unwrap() + 1
        );
    }

    // The sessions, the session's conversation and the costs.
    for (path, ready, name) in [
        ("/sessions".to_string(), "table.sessions", "sessions"),
        (
            format!("/sessions/{session_id}"),
            "article.message",
            "session",
        ),
        ("/costs".to_string(), "svg.chart rect", "costs"),
    ] {
        browser.navigate(&run, &format!("{base}{path}"));
        browser.wait_for(&run, &format!("document.querySelector('{ready}') !== null"));
        browser.screenshot(&run, name);
    }
    assert_eq!(
        browser
            .eval(
                &run,
                "document.querySelectorAll('article.message script').length"
            )
            .unwrap(),
        json!(0)
    );

    // 375 px wide: nothing sticks out of the page.
    browser.call(
        Some(&runs.session),
        "Emulation.setDeviceMetricsOverride",
        json!({ "width": 375, "height": 800, "deviceScaleFactor": 1, "mobile": true }),
    );
    browser.navigate(&runs, &format!("{base}/"));
    browser.wait_for(&runs, &format!("document.querySelector('{row}') !== null"));
    let width = browser
        .eval(&runs, "document.documentElement.scrollWidth")
        .unwrap();
    assert!(width.as_u64().unwrap() <= 375, "{width}");
    browser.screenshot(&runs, "runs-375px");

    // A browser without the cookie gets the page that says what to run.
    let context = browser.call(None, "Target.createBrowserContext", json!({}));
    let stranger = browser.open(
        &format!("{base}/runs/{run_id}"),
        context["browserContextId"].as_str(),
    );
    browser.wait_for(
        &stranger,
        "document.body !== null && document.body.textContent.includes('troupe dashboard')",
    );
    assert_eq!(
        browser
            .eval(&stranger, "document.querySelector('#lanes') === null")
            .unwrap(),
        json!(true)
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn three_forks_update_side_by_side() {
    if !require(Need::Chromium) {
        return;
    }
    let fork = |name: &str| {
        (
            "agent",
            json!({"description": name, "prompt": format!("look at {name}"), "fork": true}),
        )
    };
    let mut script = Script::new().then(troupe_scripted::tool_calls([
        fork("alpha"),
        fork("beta"),
        fork("gamma"),
    ]));
    // Two forks answer late enough for the page to be watching; the third
    // not before it is cancelled.
    for (name, delay) in [("alpha", 1500), ("beta", 1500), ("gamma", 60_000)] {
        script = script.then(
            troupe_scripted::Turn::new(text("fork says hello"))
                .when(troupe_scripted::Matcher::last_user_contains(format!(
                    "look at {name}"
                )))
                .with_delay(Duration::from_millis(delay)),
        );
    }
    let script = script.then(text("merged"));
    let server = ScriptedServer::start(script).await.unwrap();
    let env = Env::new();
    let daemon = Daemon::start(&env, &server);
    let url = login_url(&env);
    let mut browser = Chromium::launch();
    let tab = browser.open("about:blank", None);
    browser.navigate(&tab, &url);
    browser.wait_for(&tab, "document.querySelector('tbody#runs') !== null");
    let (run_id, _) = daemon
        .submit(json!({"prompt": "split it", "cwd": env.root(), "mode": "bypass"}))
        .await;
    browser.navigate(&tab, &format!("http://{}/runs/{run_id}", daemon.addr));
    browser.wait_for(&tab, "document.querySelector('#sink') !== null");
    let forks = "Array.from(document.querySelectorAll('#lanes section.lane')).filter(l => l.dataset.lane.startsWith('main/'))";
    let answered =
        "(l => l.querySelector('.text') !== null && l.textContent.includes('fork says hello'))";
    browser.wait_for(
        &tab,
        &format!("{forks}.length === 3 && {forks}.filter({answered}).length === 2"),
    );
    // Cancel the fork still waiting, with its button on the page, once the
    // other two have ended (so that no update replaces the button under the
    // click).
    let agent = |name: &str| {
        format!(
            "Array.from(document.querySelectorAll('section.agents li')).find(li => li.textContent.includes('look at {name}'))"
        )
    };
    browser.wait_for(
        &tab,
        &format!(
            "[{}, {}].every(li => li && li.querySelector('[data-status=\"finished\"]') !== null)",
            agent("alpha"),
            agent("beta")
        ),
    );
    let cancel = format!("{}.querySelector('form button').click()", agent("gamma"));
    browser.eval(&tab, &cancel).unwrap();
    browser.wait_for(
        &tab,
        &format!("{forks}.some(l => l.textContent.includes('ended: cancelled') && !{answered}(l))"),
    );
    // Side by side: the three lanes share a row, in three columns.
    let boxes = browser
        .eval(
            &tab,
            &format!("{forks}.map(l => {{ const r = l.getBoundingClientRect(); return [Math.round(r.top), Math.round(r.left)]; }})"),
        )
        .unwrap();
    let boxes = boxes.as_array().unwrap();
    assert!(
        boxes.iter().all(|b| b[0] == boxes[0][0]),
        "one row: {boxes:?}"
    );
    let mut lefts: Vec<i64> = boxes.iter().map(|b| b[1].as_i64().unwrap()).collect();
    lefts.dedup();
    assert_eq!(lefts.len(), 3, "three columns: {boxes:?}");
    browser.wait_for(
        &tab,
        "document.querySelector('#lanes .entry.finished') !== null",
    );
    browser.screenshot(&tab, "run-forks");
    daemon.events(&run_id, None, |_| false).await;
    // Each fork's spans sit under the `execute_tool agent` span that
    // started it.
    let url = format!("http://{}/runs/{run_id}/spans", daemon.addr);
    let rows = waterfall_rows(&mut browser, &tab, &url, 4);
    let name_of = |id: &Value| {
        rows.iter()
            .find(|row| &row[0] == id)
            .map(|row| row[3].as_str().unwrap().to_string())
    };
    let forks: Vec<&Value> = rows
        .iter()
        .filter(|row| row[3].as_str().unwrap().starts_with("invoke_agent main/"))
        .collect();
    assert_eq!(forks.len(), 3, "{rows:?}");
    for fork in forks {
        let parent = name_of(&fork[1]).unwrap_or_default();
        assert!(
            parent.starts_with("execute_tool agent"),
            "{fork:?} under {parent:?}"
        );
    }
    browser.screenshot(&tab, "spans-forks");
}
