//! The web dashboard end to end over raw HTTP: the real daemon, the real
//! `troupe dashboard` client, the scripted model server.
//!
//! Covered: without the session cookie every page answers 401 with the
//! page that says to run `troupe dashboard`; the login URL carries a
//! one-time code in its fragment, exchanged once (with the daemon's own
//! `Origin`) for an `HttpOnly; SameSite=Strict; Path=/` cookie; a request
//! that changes something without the CSRF token, with another one, without
//! an `Origin` or with a foreign one is refused; every answer carries the
//! security headers; the token appears in no answer and no log line; an
//! approval answered from the dashboard reaches the run; cancelling a run
//! ends it, cancelling one fork ends that fork and the run goes on; hostile
//! prompts, model text, tool output and file names come out escaped on every
//! page; the live streams send the runs table and a run's entries; a run
//! shows its plan, and a later run of the session the plan it had; the runs
//! list shows tokens, the run page a changed file's diff, the costs page the
//! run; the files a run changed come from its checkpoints (a command's
//! removal and creation too), from its tool calls without checkpoints, and
//! from its tool calls with a note when the checkpoint store fails; pages
//! open on one run share its feed and each ends with the exact streamed
//! text.

use serde_json::json;
use troupe_scripted::{Script, ScriptedServer, text, tool_call};

use crate::daemon::{Daemon, Response, client, request};
use crate::support::Env;

/// The headers every dashboard answer must carry, with a part of their
/// value.
const SECURITY_HEADERS: [(&str, &str); 4] = [
    ("content-security-policy", "frame-ancestors 'none'"),
    ("x-content-type-options", "nosniff"),
    ("referrer-policy", "no-referrer"),
    ("x-frame-options", "DENY"),
];

/// The value of header `name` in a response head.
pub(crate) fn header<'h>(response: &'h Response, name: &str) -> Option<&'h str> {
    response.head.lines().skip(1).find_map(|line| {
        let (key, value) = line.split_once(':')?;
        key.trim()
            .eq_ignore_ascii_case(name)
            .then_some(value.trim())
    })
}

/// Asserts the security headers, and that the policy allows no inline
/// script.
pub(crate) fn assert_secured(response: &Response, what: &str) {
    for (name, part) in SECURITY_HEADERS {
        let value = header(response, name).unwrap_or_else(|| panic!("{what}: no {name}"));
        assert!(value.contains(part), "{what}: {name}: {value}");
    }
    let policy = header(response, "content-security-policy").unwrap();
    assert!(policy.contains("script-src 'self'"), "{policy}");
    assert!(!policy.contains("unsafe-inline"), "{policy}");
}

/// The one-time login URL `troupe dashboard --no-open` prints for the
/// daemon of `env`: its own line on stdout.
pub(crate) fn login_url(env: &Env) -> String {
    let output = client(env, None)
        .args(["dashboard", "--no-open"])
        .output()
        .unwrap();
    assert!(output.status.success(), "{output:?}");
    let stdout = String::from_utf8(output.stdout).unwrap();
    let lines: Vec<&str> = stdout.lines().collect();
    assert_eq!(lines.len(), 1, "{stdout}");
    lines[0].to_string()
}

/// A browser's session with the dashboard.
pub(crate) struct Browser {
    host: String,
    addr: std::net::SocketAddr,
    cookie: String,
    csrf: String,
    /// Every answer seen, head and body, for the check that the token
    /// never appears.
    seen: std::cell::RefCell<Vec<String>>,
}

impl Browser {
    /// Logs in the way the login script does.
    async fn log_in(env: &Env, daemon: &Daemon) -> Browser {
        let url = login_url(env);
        let origin = format!("http://{}", daemon.addr);
        assert!(url.starts_with(&format!("{origin}/#login=")), "{url}");
        assert!(!url.contains('?'), "{url}");
        assert!(
            !url.contains(&daemon.token),
            "the URL holds a code, not the token"
        );
        let code = url.rsplit_once("#login=").unwrap().1;
        let host = daemon.addr.to_string();
        let body = json!({ "code": code }).to_string();
        let login = request(
            daemon.addr,
            "POST",
            "/login",
            &[
                ("Host", &host),
                ("Origin", &origin),
                ("Content-Type", "application/json"),
            ],
            body.as_bytes(),
        )
        .await;
        assert_eq!(login.status, 204, "{}", login.text());
        assert_secured(&login, "login");
        let set_cookie = header(&login, "set-cookie").unwrap().to_string();
        let attributes: Vec<&str> = set_cookie.split(';').map(str::trim).collect();
        for wanted in ["HttpOnly", "SameSite=Strict", "Path=/"] {
            assert!(attributes.contains(&wanted), "{set_cookie}");
        }
        let cookie = attributes[0].to_string();
        assert!(cookie.starts_with("troupe_dashboard="), "{cookie}");

        // The code is spent.
        let again = request(
            daemon.addr,
            "POST",
            "/login",
            &[("Host", &host), ("Origin", &origin)],
            body.as_bytes(),
        )
        .await;
        assert_eq!(again.status, 401, "{}", again.text());
        assert!(header(&again, "set-cookie").is_none());

        let mut browser = Browser {
            host,
            addr: daemon.addr,
            cookie,
            csrf: String::new(),
            seen: Default::default(),
        };
        let runs = browser.get("/").await;
        assert_eq!(runs.status, 200, "{}", runs.text());
        browser.csrf = csrf_of(&runs.text());
        browser
    }

    fn note(&self, response: &Response) {
        self.seen
            .borrow_mut()
            .push(format!("{}\n{}", response.head, response.text()));
    }

    /// A page, with the cookie.
    pub(crate) async fn get(&self, path: &str) -> Response {
        let response = request(
            self.addr,
            "GET",
            path,
            &[("Host", &self.host), ("Cookie", &self.cookie)],
            b"",
        )
        .await;
        assert_secured(&response, path);
        self.note(&response);
        response
    }

    /// A form post as htmx sends it: the cookie, the daemon's `Origin`, the
    /// CSRF token.
    pub(crate) async fn post(&self, path: &str, form: &str) -> Response {
        let origin = format!("http://{}", self.host);
        let response = request(
            self.addr,
            "POST",
            path,
            &[
                ("Host", &self.host),
                ("Cookie", &self.cookie),
                ("Origin", &origin),
                ("X-CSRF-Token", &self.csrf),
                ("Content-Type", "application/x-www-form-urlencoded"),
            ],
            form.as_bytes(),
        )
        .await;
        assert_secured(&response, path);
        self.note(&response);
        response
    }
}

/// The CSRF token a page hands htmx (`hx-headers` on its body).
fn csrf_of(page: &str) -> String {
    let marker = "X-CSRF-Token&quot;:&quot;";
    let start = page
        .find(marker)
        .unwrap_or_else(|| panic!("no CSRF token: {page}"))
        + marker.len();
    let end = page[start..].find("&quot;").unwrap() + start;
    page[start..end].to_string()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn only_a_logged_in_browser_gets_pages_and_only_its_own_page_changes_anything() {
    let script = Script::new()
        .then(tool_call(
            "write_file",
            json!({"path": "notes.txt", "content": "x\n"}),
        ))
        .then(text("written"));
    let server = ScriptedServer::start(script).await.unwrap();
    let env = Env::new();
    let daemon = Daemon::start(&env, &server);
    let host = daemon.addr.to_string();
    let origin = format!("http://{host}");

    // No cookie: every page is the 401 page that says what to run.
    for path in [
        "/",
        "/sessions",
        "/costs",
        "/runs/x",
        "/runs/x/spans",
        "/live/runs",
    ] {
        let refused = request(daemon.addr, "GET", path, &[("Host", &host)], b"").await;
        assert_eq!(refused.status, 401, "{path}");
        assert!(
            refused.text().contains("troupe dashboard"),
            "{}",
            refused.text()
        );
        assert!(refused.text().contains("src=\"/assets/login.js\""));
        assert_secured(&refused, path);
    }
    // A foreign Host is refused before anything else.
    let rebound = request(daemon.addr, "GET", "/", &[("Host", "evil.example")], b"").await;
    assert_eq!(rebound.status, 403);
    assert_secured(&rebound, "foreign host");
    // The assets need no session and are served with their types.
    for (asset, kind) in [
        ("/assets/htmx.min.js", "text/javascript"),
        ("/assets/htmx-ext-sse.min.js", "text/javascript"),
        ("/assets/login.js", "text/javascript"),
        ("/assets/dashboard.js", "text/javascript"),
        ("/assets/dashboard.css", "text/css"),
    ] {
        let served = request(daemon.addr, "GET", asset, &[("Host", &host)], b"").await;
        assert_eq!(served.status, 200, "{asset}");
        assert!(header(&served, "content-type").unwrap().starts_with(kind));
        assert_secured(&served, asset);
    }
    let icon = request(daemon.addr, "GET", "/favicon.ico", &[("Host", &host)], b"").await;
    assert_eq!(icon.status, 204);
    assert_secured(&icon, "favicon");
    // Login codes need the token; logins need the daemon's Origin.
    let no_token = request(daemon.addr, "POST", "/login/codes", &[("Host", &host)], b"").await;
    assert_eq!(no_token.status, 401);
    let code = login_url(&env)
        .rsplit_once("#login=")
        .unwrap()
        .1
        .to_string();
    let body = json!({ "code": code }).to_string();
    for headers in [
        vec![("Host", host.as_str())],
        vec![("Host", host.as_str()), ("Origin", "http://evil.example")],
    ] {
        let login = request(daemon.addr, "POST", "/login", &headers, body.as_bytes()).await;
        assert_eq!(login.status, 403, "{headers:?}");
        assert!(header(&login, "set-cookie").is_none());
    }
    let wrong = request(
        daemon.addr,
        "POST",
        "/login",
        &[("Host", &host), ("Origin", &origin)],
        br#"{"code":"0000"}"#,
    )
    .await;
    assert_eq!(wrong.status, 401);
    // A huge login is refused on its length alone, before its body is read.
    let huge = format!(
        "POST /login HTTP/1.0\r\nHost: {host}\r\nOrigin: {origin}\r\nContent-Length: 65536\r\n\r\n"
    );
    assert_eq!(status_of(daemon.addr, &huge).await, 413);
    // A forged cookie is no session.
    let forged = request(
        daemon.addr,
        "GET",
        "/",
        &[
            ("Host", &host),
            ("Cookie", &format!("troupe_dashboard={}", daemon.token)),
        ],
        b"",
    )
    .await;
    assert_eq!(forged.status, 401);

    let browser = Browser::log_in(&env, &daemon).await;
    let (run_id, _) = daemon
        .submit(json!({"prompt": "write", "cwd": env.root(), "interactive": true}))
        .await;
    let asked = daemon
        .events(&run_id, None, |events| {
            events
                .iter()
                .any(|(_, e)| e["type"] == "approval_requested")
        })
        .await;
    let approval_id = asked.last().unwrap().1["approval_id"]
        .as_str()
        .unwrap()
        .to_string();
    let path = format!("/runs/{run_id}/approvals/{approval_id}");

    // A state change without the token, with another one, without an
    // Origin or with a foreign one is refused, and the run still waits.
    let cookie = browser.cookie.clone();
    let refusals: Vec<Vec<(&str, &str)>> = vec![
        vec![("Host", &host), ("Cookie", &cookie), ("Origin", &origin)],
        vec![
            ("Host", &host),
            ("Cookie", &cookie),
            ("Origin", &origin),
            ("X-CSRF-Token", "0"),
        ],
        vec![
            ("Host", &host),
            ("Cookie", &cookie),
            ("X-CSRF-Token", &browser.csrf),
        ],
        vec![
            ("Host", &host),
            ("Cookie", &cookie),
            ("Origin", "http://evil.example"),
            ("X-CSRF-Token", &browser.csrf),
        ],
        vec![
            ("Host", &host),
            ("Origin", &origin),
            ("X-CSRF-Token", &browser.csrf),
        ],
    ];
    for headers in &refusals {
        let mut headers = headers.clone();
        headers.push(("Content-Type", "application/x-www-form-urlencoded"));
        let refused = request(daemon.addr, "POST", &path, &headers, b"outcome=allow").await;
        assert!(
            refused.status == 403 || refused.status == 401,
            "{headers:?}: {}",
            refused.status
        );
        assert_secured(&refused, "refused post");
    }
    let page = browser.get(&format!("/runs/{run_id}")).await;
    assert!(
        page.text()
            .contains(&format!("data-approval=\"{approval_id}\""))
    );

    // The page's own request goes through: the run goes on and finishes.
    let answered = browser.post(&path, "outcome=allow").await;
    assert_eq!(answered.status, 200, "{}", answered.text());
    assert!(
        answered.text().contains("Answered: allow"),
        "{}",
        answered.text()
    );
    let rest = daemon.events(&run_id, None, |_| false).await;
    assert!(
        rest.iter()
            .any(|(_, e)| e["type"] == "approval_resolved" && e["outcome"] == "allow")
    );
    assert_eq!(rest.last().unwrap().1["status"], "finished");
    assert_eq!(
        std::fs::read_to_string(env.root().join("notes.txt")).unwrap(),
        "x\n"
    );
    let runs = browser.get("/?status=finished").await.text();
    let row = runs
        .split(&format!("data-run=\"{run_id}\""))
        .nth(1)
        .and_then(|rest| rest.split("</tr>").next())
        .unwrap_or_else(|| panic!("the finished run is listed: {runs}"));
    let numbers: Vec<u64> = row
        .split("<td class=\"num\">")
        .skip(1)
        .filter_map(|cell| cell.split('<').next()?.parse().ok())
        .collect();
    assert_eq!(numbers.len(), 2, "agents and tokens: {row}");
    assert_eq!(numbers[0], 1, "one agent: {row}");
    assert!(numbers[1] > 0, "the tokens it used: {row}");
    let run_page = browser.get(&format!("/runs/{run_id}")).await;
    let shown = run_page.text();
    assert!(
        shown.contains("<code>notes.txt</code>"),
        "the changed file is listed"
    );
    assert!(
        shown.contains("<span class=\"add\">+x</span>"),
        "with the diff its call made: {shown}"
    );
    assert!(!run_page.text().contains("data-approval="));
    for path in ["/sessions", &format!("/runs/{run_id}/spans")] {
        assert_eq!(browser.get(path).await.status, 200, "{path}");
    }
    // Odd paths and queries get a clear answer, under the same headers.
    for (path, status) in [
        ("/?page=18446744073709551615", 200),
        ("/sessions?page=18446744073709551615&q=%00", 200),
        ("/?page=-1", 400),
        ("/costs?days=-5", 200),
        ("/costs?days=99999999999", 200),
        ("/runs/..%2F..%2Fetc", 404),
        ("/sessions/%00", 404),
        (&format!("/runs/{run_id}/live?from=0"), 200),
    ] {
        let answer = if path.contains("/live") {
            let head = format!(
                "GET {path} HTTP/1.0\r\nHost: {}\r\nCookie: {}\r\n\r\n",
                browser.host, browser.cookie
            );
            status_of(browser.addr, &head).await
        } else {
            browser.get(path).await.status
        };
        assert_eq!(answer, status, "{path}");
    }
    // The costs page counts the run's tokens, per run, agent and model.
    let costs = browser.get("/costs?days=1").await.text();
    assert!(
        costs.contains(&format!("href=\"/runs/{run_id}\"")),
        "{costs}"
    );
    assert!(costs.contains("<svg class=\"chart\""), "{costs}");

    // The token is in no answer and no line the daemon logged.
    for seen in browser.seen.borrow().iter() {
        assert!(!seen.contains(&daemon.token), "{seen}");
    }
    let token = daemon.token.clone();
    let (_, log) = daemon.stop(libc::SIGTERM);
    assert!(!log.contains(&token), "{log}");
    assert!(!log.contains(&code), "{log}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn runs_and_agents_are_cancelled_from_the_dashboard() {
    let script = Script::new()
        .then(tool_call("bash", json!({"command": "sleep 30"})))
        .then(text("never"));
    let server = ScriptedServer::start(script).await.unwrap();
    let env = Env::new();
    let daemon = Daemon::start(&env, &server);
    let browser = Browser::log_in(&env, &daemon).await;
    let (run_id, _) = daemon
        .submit(json!({"prompt": "wait", "cwd": env.root(), "interactive": true}))
        .await;
    daemon
        .events(&run_id, None, |events| {
            events
                .iter()
                .any(|(_, e)| e["type"] == "approval_requested")
        })
        .await;
    let page = browser.get(&format!("/runs/{run_id}")).await;
    assert!(page.text().contains("Cancel run"), "{}", page.text());
    // An agent the run does not have is refused; the main agent is the run.
    let unknown = browser
        .post(
            &format!("/runs/{run_id}/agents/cancel"),
            "path=main%2Fnobody",
        )
        .await;
    assert_eq!(unknown.status, 404, "{}", unknown.text());
    let cancelled = browser.post(&format!("/runs/{run_id}/cancel"), "").await;
    assert_eq!(cancelled.status, 200, "{}", cancelled.text());
    let events = daemon.events(&run_id, None, |_| false).await;
    assert_eq!(events.last().unwrap().1["status"], "cancelled");
    let again = browser.post(&format!("/runs/{run_id}/cancel"), "").await;
    assert_ne!(again.status, 200);
}

/// Strings an attacker would put wherever text is shown.
fn hostile(label: &str) -> String {
    format!(
        "{label} <script>alert(1)</script> <a href=\"javascript:alert(2)\">x</a> \
         [link](javascript:alert(3)) <img src=x onerror=alert(4)> \u{1b}[31mred\u{1b}]0;title\u{7}"
    )
}

/// Asserts a page shows `label`'s hostile string as text only.
fn assert_inert(page: &str, what: &str) {
    for bad in [
        "<script>alert",
        "<a href=\"javascript",
        "<img src=x",
        "\u{1b}",
        "\u{7}",
    ] {
        if let Some(at) = page.to_ascii_lowercase().find(bad) {
            let around = &page[at.saturating_sub(200)..(at + 200).min(page.len())];
            panic!("{what} holds {bad:?}: {around:?}");
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn hostile_text_is_shown_as_text_on_every_page() {
    let long_line = "A".repeat(1024 * 1024);
    let file_name = "<script>alert(5)</script>.txt";
    let script = Script::new()
        .then(tool_call("read_file", json!({ "path": file_name })))
        .then(tool_call(
            "write_file",
            json!({ "path": "evil\u{1b}[2J<b>.txt", "content": hostile("content") }),
        ))
        .then(text(format!("{}\n\n{long_line}", hostile("model"))));
    let server = ScriptedServer::start(script).await.unwrap();
    let env = Env::new();
    let daemon = Daemon::start(&env, &server);
    let browser = Browser::log_in(&env, &daemon).await;
    let (run_id, session_id) = daemon
        .submit(json!({"prompt": hostile("prompt"), "cwd": env.root(), "mode": "bypass"}))
        .await;
    let events = daemon.events(&run_id, None, |_| false).await;
    assert_eq!(events.last().unwrap().1["status"], "finished", "{events:?}");

    let run_page = browser.get(&format!("/runs/{run_id}")).await.text();
    assert!(run_page.contains("&lt;script&gt;alert(1)&lt;/script&gt;"));
    assert!(
        run_page.contains("alert(5)"),
        "{}",
        &run_page[..run_page.len().min(20_000)]
    );
    assert!(
        run_page.contains(&long_line),
        "the 1 MB line is shown whole"
    );
    for (path, page) in [
        ("/".to_string(), browser.get("/").await.text()),
        (format!("/runs/{run_id}"), run_page.clone()),
        (
            format!("/runs/{run_id}/spans"),
            browser.get(&format!("/runs/{run_id}/spans")).await.text(),
        ),
        (
            "/sessions".into(),
            browser.get("/sessions?q=prompt").await.text(),
        ),
        ("/costs".into(), browser.get("/costs").await.text()),
        (
            format!("/sessions/{session_id}"),
            browser.get(&format!("/sessions/{session_id}")).await.text(),
        ),
    ] {
        assert_inert(&page, &path);
    }
    let session_page = browser.get(&format!("/sessions/{session_id}")).await.text();
    assert!(session_page.contains(&format!("troupe resume {session_id}")));
    assert!(session_page.contains("&lt;script&gt;alert(1)&lt;/script&gt;"));
}

/// The status of the answer to a raw request `head` (only the status line
/// is read: a live stream stays open).
async fn status_of(addr: std::net::SocketAddr, head: &str) -> u16 {
    use tokio::io::{AsyncBufReadExt, AsyncWriteExt};
    let mut stream = tokio::net::TcpStream::connect(addr).await.unwrap();
    stream.write_all(head.as_bytes()).await.unwrap();
    let mut status = String::new();
    tokio::time::timeout(
        crate::support::COMMAND_LIMIT,
        tokio::io::BufReader::new(stream).read_line(&mut status),
    )
    .await
    .expect("an answer in time")
    .unwrap();
    status
        .split_whitespace()
        .nth(1)
        .unwrap_or_else(|| panic!("no status line: {status:?}"))
        .parse()
        .unwrap()
}

/// The events a live stream sends first, read until `enough` says so.
pub(crate) async fn live_events(
    browser: &Browser,
    path: &str,
    enough: impl Fn(&[(String, String)]) -> bool,
) -> Vec<(String, String)> {
    use tokio::io::{AsyncBufReadExt, AsyncWriteExt};
    let mut stream = tokio::net::TcpStream::connect(browser.addr).await.unwrap();
    let head = format!(
        "GET {path} HTTP/1.0\r\nHost: {}\r\nCookie: {}\r\n\r\n",
        browser.host, browser.cookie
    );
    stream.write_all(head.as_bytes()).await.unwrap();
    let mut lines = tokio::io::BufReader::new(stream).lines();
    let mut events = Vec::new();
    let mut name = String::new();
    let mut data = String::new();
    loop {
        let line = tokio::time::timeout(crate::support::COMMAND_LIMIT, lines.next_line())
            .await
            .expect("a live event in time")
            .unwrap()
            .expect("the stream stays open");
        if let Some(rest) = line.strip_prefix("event:") {
            name = rest.trim().to_string();
        } else if let Some(rest) = line.strip_prefix("data:") {
            if !data.is_empty() {
                data.push('\n');
            }
            data.push_str(rest.strip_prefix(' ').unwrap_or(rest));
        } else if line.is_empty() && !name.is_empty() {
            events.push((std::mem::take(&mut name), std::mem::take(&mut data)));
            if enough(&events) {
                return events;
            }
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_live_streams_send_the_runs_table_and_a_runs_events() {
    let script = Script::new()
        .then(tool_call(
            "write_file",
            json!({"path": "a.txt", "content": "a\n"}),
        ))
        .then(text("<b>live</b> text"));
    let server = ScriptedServer::start(script).await.unwrap();
    let env = Env::new();
    let daemon = Daemon::start(&env, &server);
    let browser = Browser::log_in(&env, &daemon).await;
    let (run_id, _) = daemon
        .submit(json!({"prompt": "write", "cwd": env.root(), "interactive": true}))
        .await;
    let table = live_events(&browser, "/live/runs?page=0", |events| {
        events.iter().any(|(_, data)| data.contains(&run_id))
    })
    .await;
    assert_eq!(table[0].0, "runs");
    let asked = daemon
        .events(&run_id, None, |events| {
            events
                .iter()
                .any(|(_, e)| e["type"] == "approval_requested")
        })
        .await;
    let (seq, request) = asked.last().unwrap();
    let approval_id = request["approval_id"].as_str().unwrap().to_string();
    let live_path = format!("/runs/{run_id}/live?from={}", seq + 1);
    let answer = async {
        browser
            .post(
                &format!("/runs/{run_id}/approvals/{approval_id}"),
                "outcome=allow",
            )
            .await
    };
    let follow = live_events(&browser, &live_path, |events| {
        events
            .iter()
            .any(|(name, data)| name == "entry" && data.contains("class=\"entry finished\""))
    });
    let (answered, live) = tokio::join!(answer, follow);
    assert_eq!(answered.status, 200);
    assert!(
        live.iter()
            .any(|(name, data)| name == "state" && !data.contains("data-approval="))
    );
    let text: String = live
        .iter()
        .filter(|(name, _)| name == "entry")
        .map(|(_, data)| data.as_str())
        .collect();
    assert!(text.contains("class=\"text\""), "{live:?}");
    assert!(text.contains("&lt;b") && !text.contains("<b>"), "{live:?}");
}

/// The text of a live stream's text pieces, joined, unescaped.
fn streamed_text(events: &[(String, String)]) -> String {
    let mut text = String::new();
    for (_, data) in events.iter().filter(|(name, _)| name == "entry") {
        for piece in data
            .split("<span class=\"text\" data-agent=\"main\">")
            .skip(1)
        {
            let end = piece.find("</span>").unwrap();
            text.push_str(&piece[..end]);
        }
    }
    text.replace("&lt;", "<")
        .replace("&gt;", ">")
        .replace("&quot;", "\"")
        .replace("&amp;", "&")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pages_open_on_one_run_share_its_feed_and_each_ends_with_the_exact_text() {
    let words: String = (0..400).map(|n| format!("w{n} <&> ")).collect();
    let script = Script::new()
        .then(tool_call(
            "write_file",
            json!({"path": "a.txt", "content": "a\n"}),
        ))
        .then(text(words.clone()).with_chunk_chars(3));
    let server = ScriptedServer::start(script).await.unwrap();
    let env = Env::new();
    let daemon = Daemon::start(&env, &server);
    let browser = Browser::log_in(&env, &daemon).await;
    let (run_id, _) = daemon
        .submit(json!({"prompt": "write", "cwd": env.root(), "interactive": true}))
        .await;
    let asked = daemon
        .events(&run_id, None, |events| {
            events
                .iter()
                .any(|(_, e)| e["type"] == "approval_requested")
        })
        .await;
    let (seq, request) = asked.last().unwrap();
    let approval_id = request["approval_id"].as_str().unwrap().to_string();
    let finished = |events: &[(String, String)]| {
        events
            .iter()
            .any(|(name, data)| name == "entry" && data.contains("class=\"entry finished\""))
    };
    // Pages joining at the start and at the approval, and more of them
    // following the same feed.
    let paths: Vec<String> = [1, seq + 1, seq + 1, 1]
        .iter()
        .map(|from| format!("/runs/{run_id}/live?from={from}"))
        .collect();
    let follows = futures::future::join_all(
        paths
            .iter()
            .map(|path| live_events(&browser, path, finished)),
    );
    // The answer races the pages' joining: each page ends with the whole
    // text wherever it joined.
    let answer = async {
        browser
            .post(
                &format!("/runs/{run_id}/approvals/{approval_id}"),
                "outcome=allow",
            )
            .await
    };
    let (pages, answered) = tokio::join!(follows, answer);
    assert_eq!(answered.status, 200);
    for (path, live) in paths.iter().zip(&pages) {
        assert_eq!(streamed_text(live), words, "{path}");
        let pieces = live
            .iter()
            .map(|(_, data)| data.matches("class=\"text\"").count())
            .sum::<usize>();
        assert!(
            pieces < words.chars().count() / 3,
            "{path}: the deltas were gathered ({pieces} pieces)"
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_agent_is_cancelled_from_the_dashboard_and_the_run_goes_on() {
    let script = Script::new()
        .then(tool_call(
            "agent",
            json!({"description": "slow part", "prompt": "take your time", "fork": true}),
        ))
        // The fork's own model call never answers in time.
        .then(
            troupe_scripted::Turn::new(text("too late"))
                .when(troupe_scripted::Matcher::last_user_contains(
                    "take your time",
                ))
                .with_delay(std::time::Duration::from_secs(60)),
        )
        .then(text("went on without it"));
    let server = ScriptedServer::start(script).await.unwrap();
    let env = Env::new();
    let daemon = Daemon::start(&env, &server);
    let browser = Browser::log_in(&env, &daemon).await;
    let (run_id, _) = daemon
        .submit(json!({"prompt": "split", "cwd": env.root(), "mode": "bypass"}))
        .await;
    let started = daemon
        .events(&run_id, None, |events| {
            events.iter().any(|(_, e)| e["type"] == "subagent_started")
        })
        .await;
    let fork = started.last().unwrap().1["agent_path"]
        .as_str()
        .unwrap()
        .to_string();
    let page = browser.get(&format!("/runs/{run_id}")).await.text();
    assert!(page.contains(&format!("value=\"{fork}\"")), "{page}");
    let cancelled = browser
        .post(
            &format!("/runs/{run_id}/agents/cancel"),
            &format!("path={}", fork.replace('/', "%2F")),
        )
        .await;
    assert_eq!(cancelled.status, 200, "{}", cancelled.text());
    let events = daemon.events(&run_id, None, |_| false).await;
    assert!(
        events.iter().any(|(_, e)| e["type"] == "subagent_finished"
            && e["agent_path"] == fork.as_str()
            && e["status"] == "cancelled"),
        "{events:?}"
    );
    let last = &events.last().unwrap().1;
    assert_eq!(last["status"], "finished", "{last}");
    assert_eq!(last["final_text"], "went on without it");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_run_shows_its_plan_and_a_later_run_of_the_session_still_shows_it() {
    let step = |text: &str, status: &str| json!({"step": text, "status": status});
    let script = Script::new()
        .then(tool_call(
            "update_plan",
            json!({"plan": [step("Read <the> code", "completed"), step("Fix it", "in_progress")]}),
        ))
        .then(text("planned"))
        .then(text("still on it"));
    let server = ScriptedServer::start(script).await.unwrap();
    let env = Env::new();
    let daemon = Daemon::start(&env, &server);
    let browser = Browser::log_in(&env, &daemon).await;
    let (first, session_id) = daemon
        .submit(json!({"prompt": "plan", "cwd": env.root(), "mode": "bypass"}))
        .await;
    daemon.events(&first, None, |_| false).await;
    let (second, _) = daemon
        .submit(json!({"prompt": "go on", "cwd": env.root(), "session_id": session_id}))
        .await;
    daemon.events(&second, None, |_| false).await;
    for run in [&first, &second] {
        let page = browser.get(&format!("/runs/{run}")).await.text();
        assert!(page.contains("<h2>Plan</h2>"), "{run}: {page}");
        assert!(page.contains("✔ Read &lt;the&gt; code"), "{run}: {page}");
        assert!(page.contains("◼ Fix it"), "{run}: {page}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_costs_page_prices_tokens_at_the_price_the_user_configured() {
    let server = ScriptedServer::start(Script::new().then(text("hello")))
        .await
        .unwrap();
    let env = Env::new();
    let daemon = Daemon::start(&env, &server);
    let browser = Browser::log_in(&env, &daemon).await;
    let (run_id, session_id) = daemon
        .submit(json!({"prompt": "hi", "cwd": env.root()}))
        .await;
    daemon.events(&run_id, None, |_| false).await;
    let unpriced = browser.get("/costs").await.text();
    assert!(unpriced.contains("<td class=\"num\">—</td>"), "{unpriced}");
    let session = daemon
        .call("GET", &format!("/v1/sessions/{session_id}"), None)
        .await;
    let detail = session.json();
    let provider = detail["session"]["provider"]
        .as_str()
        .or_else(|| detail["provider"].as_str())
        .unwrap_or_else(|| panic!("{detail}"))
        .to_string();
    // A million tokens at $1,000,000: the cost is the token count in dollars.
    env.write_user_config(&format!(
        "[providers.{provider}]\nprice = {{ input = 1000000.0, output = 1000000.0 }}\n"
    ));
    let priced = browser.get("/costs").await.text();
    assert!(!priced.contains("<td class=\"num\">—</td>"), "{priced}");
    assert!(priced.contains(".0000</td>"), "{priced}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn troupe_dashboard_starts_the_daemon_when_none_runs() {
    let env = Env::new();
    assert!(!env.data_dir().join("daemon.json").exists());
    let url = login_url(&env);
    let state: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(env.data_dir().join("daemon.json")).unwrap())
            .unwrap();
    let addr = state["addr"].as_str().unwrap();
    assert!(url.starts_with(&format!("http://{addr}/#login=")), "{url}");
    // The URL opens a session on that daemon.
    let code = url.rsplit_once("#login=").unwrap().1;
    let body = json!({ "code": code }).to_string();
    let origin = format!("http://{addr}");
    let login = request(
        addr.parse().unwrap(),
        "POST",
        "/login",
        &[("Host", addr), ("Origin", &origin)],
        body.as_bytes(),
    )
    .await;
    assert_eq!(login.status, 204, "{}", login.text());
    crate::support::stop_daemon(&env.data_dir());
}

/// The part of a run page that lists the files the run changed.
fn files_section(page: &str) -> &str {
    let start = page
        .find("<section class=\"files\">")
        .unwrap_or_else(|| panic!("no files section: {page}"));
    let end = page[start..].find("</section>").unwrap() + start;
    &page[start..end]
}

/// A run that removes a file and creates another with `bash`, then writes
/// one with `write_file`.
fn changing_script() -> Script {
    Script::new()
        .then(tool_call(
            "bash",
            json!({"command": "rm old.txt && printf '<script>alert(6)</script>\\n' > $'evil\\e[2J<b>.txt'"}),
        ))
        .then(tool_call(
            "write_file",
            json!({"path": "notes.txt", "content": "one\n"}),
        ))
        .then(text("done"))
}

/// Runs [`changing_script`] in a project holding `old.txt`; the run page.
async fn changed_files_page(env: &Env) -> String {
    std::fs::write(env.root().join("old.txt"), "the old line\n").unwrap();
    let server = ScriptedServer::start(changing_script()).await.unwrap();
    let daemon = Daemon::start(env, &server);
    let browser = Browser::log_in(env, &daemon).await;
    let (run_id, _) = daemon
        .submit(json!({"prompt": "change files", "cwd": env.root(), "mode": "bypass"}))
        .await;
    let events = daemon.events(&run_id, None, |_| false).await;
    assert_eq!(events.last().unwrap().1["status"], "finished", "{events:?}");
    assert!(!env.root().join("old.txt").exists());
    browser.get(&format!("/runs/{run_id}")).await.text()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_files_a_run_changed_come_from_its_checkpoints_commands_included() {
    let env = Env::new();
    let page = changed_files_page(&env).await;
    let files = files_section(&page);
    assert_inert(files, "files");
    // The command's removal and creation, each with its diff.
    assert!(files.contains("<code>old.txt</code> · removed"), "{files}");
    assert!(files.contains("-the old line"), "{files}");
    assert!(
        files.contains("<code>evil&lt;b&gt;.txt</code> · added"),
        "{files}"
    );
    assert!(
        files.contains("+&lt;script&gt;alert(6)&lt;/script&gt;"),
        "{files}"
    );
    // The call's file, with the tool and agent that wrote it.
    assert!(
        files.contains("<code>notes.txt</code> · added · write_file by main"),
        "{files}"
    );
    assert!(files.contains("+one"), "{files}");
    assert!(!files.contains("could not be read"), "{files}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn without_checkpoints_the_files_come_from_the_tool_calls() {
    let env = Env::new();
    env.write_user_config("[checkpoints]\nenabled = false\n");
    let page = changed_files_page(&env).await;
    let files = files_section(&page);
    assert!(
        files.contains("<code>notes.txt</code> · write_file by main"),
        "{files}"
    );
    assert!(files.contains("+one"), "{files}");
    assert!(!files.contains("old.txt"), "{files}");
    assert!(!files.contains("evil"), "{files}");
    assert!(!files.contains("could not be read"), "{files}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_checkpoint_store_that_fails_shows_the_tool_calls_with_a_note() {
    let env = Env::new();
    std::fs::write(env.root().join("old.txt"), "the old line\n").unwrap();
    let server = ScriptedServer::start(changing_script()).await.unwrap();
    let daemon = Daemon::start(&env, &server);
    let browser = Browser::log_in(&env, &daemon).await;
    let (run_id, _) = daemon
        .submit(json!({"prompt": "change files", "cwd": env.root(), "mode": "bypass"}))
        .await;
    daemon.events(&run_id, None, |_| false).await;
    // The store's lock file can no longer be opened: every operation fails.
    let store = std::fs::read_dir(env.data_dir().join("checkpoints"))
        .unwrap()
        .flatten()
        .find(|entry| entry.path().extension().is_some_and(|ext| ext == "git"))
        .unwrap()
        .path();
    std::fs::remove_file(store.join("troupe.lock")).unwrap();
    std::fs::create_dir(store.join("troupe.lock")).unwrap();
    let page = browser.get(&format!("/runs/{run_id}")).await.text();
    let files = files_section(&page);
    assert!(
        files.contains("The checkpoints could not be read"),
        "{files}"
    );
    assert!(
        files.contains("<code>notes.txt</code> · write_file by main"),
        "{files}"
    );
    assert!(!files.contains("old.txt"), "{files}");
}
