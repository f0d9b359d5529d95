//! A `nats-server` in operator mode, whose clients prove who they are with
//! a `.creds` file (a user JWT and its NKey seed), as NATS's decentralised
//! authentication has them: an operator, its system account, one account
//! with JetStream, and users the account signed, their JWTs made here with
//! `nkeys` (ed25519).

use std::path::PathBuf;

use base64::Engine;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use nkeys::KeyPair;
use serde_json::{Value, json};

use crate::nats::{NatsServer, free_port};

/// A server in operator mode and `.creds` files for it.
pub struct OperatorServer {
    /// The server.
    pub server: NatsServer,
    /// A user of the server's account: it may connect.
    pub creds: PathBuf,
    /// A user an account the server does not know signed: refused.
    pub foreign_creds: PathBuf,
    _dir: tempfile::TempDir,
}

impl OperatorServer {
    /// Starts `nats-server` with an operator, its account (JetStream
    /// without limits) preloaded in a memory resolver, and writes the two
    /// users' `.creds` files.
    pub fn start() -> Self {
        let dir = tempfile::tempdir().expect("a directory for the credentials");
        let operator = KeyPair::new_operator();
        let account = KeyPair::new_account();
        let operator_jwt = signed(
            &operator,
            &operator.public_key(),
            "troupe-test-operator",
            json!({"type": "operator", "version": 2}),
        );
        let account_jwt = signed(
            &operator,
            &account.public_key(),
            "troupe-test-account",
            json!({
                "limits": {
                    "subs": -1, "data": -1, "payload": -1, "imports": -1, "exports": -1,
                    "wildcards": true, "conn": -1, "leaf": -1,
                    "mem_storage": -1, "disk_storage": -1, "streams": -1, "consumer": -1,
                },
                "default_permissions": {"pub": {}, "sub": {}},
                "type": "account",
                "version": 2,
            }),
        );
        // JetStream needs the server's own system account.
        let system = KeyPair::new_account();
        let system_jwt = signed(
            &operator,
            &system.public_key(),
            "SYS",
            json!({"limits": {"subs": -1, "conn": -1}, "type": "account", "version": 2}),
        );
        let creds = dir.path().join("node.creds");
        write_creds(&creds, &account, "node");
        let foreign_creds = dir.path().join("foreign.creds");
        write_creds(&foreign_creds, &KeyPair::new_account(), "stranger");

        let store = tempfile::tempdir().expect("a storage directory");
        let port = free_port();
        let config = dir.path().join("server.conf");
        let text = format!(
            "listen: \"127.0.0.1:{port}\"\noperator: \"{operator_jwt}\"\nsystem_account: {system}\n\
             resolver: MEMORY\nresolver_preload: {{\n  {}: \"{account_jwt}\"\n  {system}: \"{system_jwt}\"\n}}\n\
             jetstream: {{ store_dir: \"{}\" }}\n",
            account.public_key(),
            store.path().display(),
            system = system.public_key(),
        );
        std::fs::write(&config, text).expect("the server's configuration is written");
        let server = NatsServer::spawn(
            vec!["-c".into(), config.display().to_string()],
            port,
            store,
            &["Server is ready"],
        )
        .wait_ready();
        Self {
            server,
            creds,
            foreign_creds,
            _dir: dir,
        }
    }
}

/// A user of `account` named `name`, as a `.creds` file at `path`.
fn write_creds(path: &std::path::Path, account: &KeyPair, name: &str) {
    let user = KeyPair::new_user();
    let jwt = signed(
        account,
        &user.public_key(),
        name,
        json!({
            "pub": {}, "sub": {}, "subs": -1, "data": -1, "payload": -1,
            "type": "user", "version": 2,
        }),
    );
    let seed = user.seed().expect("a user's seed");
    let text = format!(
        "-----BEGIN NATS USER JWT-----\n{jwt}\n------END NATS USER JWT------\n\n\
         ************************* IMPORTANT *************************\n\
         NKEY Seed printed below can be used to sign and prove identity.\n\n\
         -----BEGIN USER NKEY SEED-----\n{seed}\n------END USER NKEY SEED------\n"
    );
    std::fs::write(path, text).expect("the credentials are written");
}

/// A NATS JWT about `subject`, issued and signed by `issuer`.
fn signed(issuer: &KeyPair, subject: &str, name: &str, nats: Value) -> String {
    let header = json!({"typ": "JWT", "alg": "ed25519-nkey"});
    let issued_at = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |since| since.as_secs());
    let claims = json!({
        "jti": format!("{subject}-{issued_at}"),
        "iat": issued_at,
        "iss": issuer.public_key(),
        "name": name,
        "sub": subject,
        "nats": nats,
    });
    let signing_input = format!(
        "{}.{}",
        URL_SAFE_NO_PAD.encode(header.to_string()),
        URL_SAFE_NO_PAD.encode(claims.to_string())
    );
    let signature = issuer
        .sign(signing_input.as_bytes())
        .expect("the issuer signs");
    format!("{signing_input}.{}", URL_SAFE_NO_PAD.encode(signature))
}
