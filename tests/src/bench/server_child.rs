//! The scripted model server in a child process of a bench, so the requests
//! it records do not count against the memory the bench measures. The bench
//! binary starts itself again with a variable set; in that mode it serves a
//! script, prints the server's base URL on stdout and exits once stdin closes.

use std::io::{BufRead, BufReader, Read, Write};
use std::process::{Child, Command, Stdio};

use troupe_scripted::{Script, ScriptedServer};

/// Child mode: serves `script`, prints the base URL, waits for stdin to close
/// (the parent is done or gone), reports protocol violations on stderr as
/// `name`, then stops.
pub fn serve(name: &str, script: Script) -> Result<(), String> {
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .map_err(|e| e.to_string())?;
    runtime.block_on(async move {
        let server = ScriptedServer::start(script)
            .await
            .map_err(|e| format!("scripted server: {e}"))?;
        let mut stdout = std::io::stdout().lock();
        writeln!(stdout, "{}", server.anthropic_base_url()).map_err(|e| e.to_string())?;
        stdout.flush().map_err(|e| e.to_string())?;
        drop(stdout);
        tokio::task::spawn_blocking(|| {
            let mut sink = Vec::new();
            let _ = std::io::stdin().read_to_end(&mut sink);
        })
        .await
        .map_err(|e| e.to_string())?;
        let violations = server.take_violations();
        if !violations.is_empty() {
            eprintln!("{name} server: {} violation(s)", violations.len());
            for violation in violations.iter().take(5) {
                eprintln!("  {violation}");
            }
        }
        server.shutdown().await;
        Ok(())
    })
}

/// Starts this bench binary again with `var=value` (its child mode) and
/// returns the child and the server's base URL. Closing the child's stdin
/// stops it.
pub fn spawn(var: &str, value: &str) -> Result<(Child, String), String> {
    let exe = std::env::current_exe().map_err(|e| e.to_string())?;
    let mut child = Command::new(exe)
        .env(var, value)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .spawn()
        .map_err(|e| format!("cannot start the server child: {e}"))?;
    let stdout = child.stdout.take().ok_or("server child has no stdout")?;
    let mut line = String::new();
    BufReader::new(stdout)
        .read_line(&mut line)
        .map_err(|e| format!("server child: {e}"))?;
    let url = line.trim().to_string();
    if !url.starts_with("http://127.0.0.1:") {
        return Err(format!("server child printed {line:?}"));
    }
    Ok((child, url))
}
