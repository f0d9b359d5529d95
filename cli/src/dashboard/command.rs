//! `troupe dashboard`: asks the daemon (started on demand, as every client
//! does) for a one-time login code and prints the login URL on its own line
//! on stdout, the code in the URL's fragment, which a browser never sends to
//! a server. With a desktop session (`DISPLAY` or `WAYLAND_DISPLAY`, or
//! macOS) it also opens the URL in the default browser; `--no-open` only
//! prints it.

use std::process::Stdio;

use crate::client::DaemonClient;
use crate::project::Locations;

/// The program that opens a URL in the desktop's browser, when there is a
/// desktop: `open` on macOS, `xdg-open` where an X or Wayland display is
/// set, none otherwise.
pub(crate) fn opener(
    os: &str,
    display: Option<&str>,
    wayland_display: Option<&str>,
) -> Option<&'static str> {
    let set = |value: Option<&str>| value.is_some_and(|value| !value.trim().is_empty());
    match os {
        "macos" => Some("open"),
        _ if set(display) || set(wayland_display) => Some("xdg-open"),
        _ => None,
    }
}

/// The login URL of the daemon at `base` (`http://host:port`) for `code`.
pub(crate) fn login_url(base: &str, code: &str) -> String {
    format!("{}/#login={code}", base.trim_end_matches('/'))
}

/// Runs `troupe dashboard`; returns the exit code.
pub(crate) async fn dashboard(no_open: bool) -> u8 {
    let locations = match Locations::from_process() {
        Ok(locations) => locations,
        Err(err) => {
            eprintln!("troupe: {err}");
            return err.code;
        }
    };
    let client = match DaemonClient::locate_or_start(&locations).await {
        Ok(client) => client,
        Err(err) => {
            eprintln!("troupe: {err}");
            return err.code;
        }
    };
    let code = match client.dashboard_code().await {
        Ok(code) => code,
        Err(err) => {
            eprintln!("troupe: {err}");
            return err.code;
        }
    };
    let url = login_url(client.base(), &code);
    println!("{url}");
    eprintln!("troupe: the link logs one browser in once, within two minutes");
    if no_open {
        return 0;
    }
    let display = std::env::var("DISPLAY").ok();
    let wayland = std::env::var("WAYLAND_DISPLAY").ok();
    if let Some(program) = opener(std::env::consts::OS, display.as_deref(), wayland.as_deref()) {
        let opened = std::process::Command::new(program)
            .arg(&url)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn();
        if let Err(err) = opened {
            eprintln!("troupe: could not start {program} ({err}); open the URL above yourself");
        }
    }
    0
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_browser_is_opened_only_on_a_desktop() {
        assert_eq!(opener("linux", None, None), None);
        assert_eq!(opener("linux", Some(""), None), None);
        assert_eq!(opener("linux", Some(":0"), None), Some("xdg-open"));
        assert_eq!(opener("linux", None, Some("wayland-0")), Some("xdg-open"));
        assert_eq!(opener("macos", None, None), Some("open"));
    }

    #[test]
    fn the_code_travels_in_the_fragment() {
        let url = login_url("http://127.0.0.1:4000", "abc");
        assert_eq!(url, "http://127.0.0.1:4000/#login=abc");
        assert!(!url.contains('?'));
    }
}
