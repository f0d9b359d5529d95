//! Operating the nodes of a cluster (see docs/cluster.md): draining a node
//! (`POST /v1/cluster/nodes/{node}/drain`, `…/resume` on any node, passed to
//! the node named by request/reply), and the client's environment published
//! without its secrets and completed with the taking node's own keys.
//!
//! A run may name a git `repository` and `revision`: the node that runs it
//! checks that revision out into a workspace below its own `TROUPE_HOME`
//! ([`with_workspace`], `troupe_cluster::workspace`), which becomes the
//! run's working directory.
//!
//! A draining node takes no new submission (one it fetched as the drain
//! began goes back to the queue for another node), finishes its runs, and
//! says `draining` in its record.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;

use axum::extract::{Path, State};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use tokio_util::sync::CancellationToken;
use troupe_cluster::workspace::{self, WorkspaceLimits};
use troupe_protocol::api::RunRequest;
use troupe_protocol::cluster::is_valid_token;
use troupe_protocol::cluster_control::{NodeOrder, NodeState};

use troupe_cluster::environment::{WITHHELD_LIST_VAR, public_environment, with_node_secrets};
use troupe_config::paths::{self, Env};
use troupe_process::secrets;

use super::api::ApiState;
use super::cluster::ClusterNode;
use super::error::ApiError;

/// The path of a node's drain under the API prefix.
pub(crate) const DRAIN_PATH: &str = "/cluster/nodes/{node}/drain";

/// The path of a node's resume under the API prefix.
pub(crate) const RESUME_PATH: &str = "/cluster/nodes/{node}/resume";

/// Refuses (400) a request whose repository or revision no node would
/// check out, a revision without a repository, a repository without a
/// revision, and a repository with a session to continue. Whether a
/// `file://` repository is allowed is the running node's to say.
pub(crate) fn check_workspace_request(request: &RunRequest) -> Result<(), ApiError> {
    match (&request.repository, &request.revision) {
        (None, None) => Ok(()),
        (None, Some(_)) => Err(ApiError::bad_request(
            "a revision needs a repository to check it out of",
        )),
        (Some(_), None) => Err(ApiError::bad_request(
            "a repository needs a revision (a branch, tag or commit) to check out",
        )),
        (Some(_), Some(_)) if request.session_id.is_some() => Err(ApiError::bad_request(
            "a run that continues a session works in the session's directory; a repository starts a new session",
        )),
        (Some(url), Some(revision)) => workspace::check_repository(url, true)
            .and_then(|_| workspace::check_revision(revision))
            .map(drop)
            .map_err(|err| ApiError::bad_request(err.to_string())),
    }
}

/// `request` with its repository checked out at its revision below this
/// daemon's `TROUPE_HOME/workspaces` (the checkout named after `run_id`,
/// or a new id), as its working directory; unchanged without a repository.
/// The error says why, in one sentence.
pub(crate) async fn with_workspace(
    state: &ApiState,
    mut request: RunRequest,
    run_id: Option<&str>,
) -> Result<RunRequest, String> {
    let (Some(url), Some(revision)) = (request.repository.clone(), request.revision.clone()) else {
        return Ok(request);
    };
    let allow_file = crate::project::Locations::from_process()
        .map(|locations| locations.cluster_settings().file_repositories == Some(true))
        .unwrap_or(false);
    let id = run_id.map_or_else(|| uuid::Uuid::now_v7().to_string(), str::to_string);
    let root = state.data_dir.join(workspace::WORKSPACES_DIR);
    let checkout = workspace::check_out(
        &root,
        &url,
        &revision,
        &id,
        allow_file,
        WorkspaceLimits::default(),
    )
    .await
    .map_err(|err| err.to_string())?;
    request.cwd = checkout;
    request.keep_session_cwd = false;
    Ok(request)
}

/// Waits while the node drains; `false` once the daemon stops.
pub(crate) async fn wait_while_draining(node: &ClusterNode, stopping: &CancellationToken) -> bool {
    let mut draining = node.draining.subscribe();
    tokio::select! {
        changed = draining.wait_for(|draining| !draining) => changed.is_ok(),
        () = stopping.cancelled() => false,
    }
}

/// Drains this node or takes runs again; its record says so at once.
async fn apply(node: &ClusterNode, order: NodeOrder) -> NodeState {
    let draining = order == NodeOrder::Drain;
    if node.draining.send_replace(draining) != draining {
        tracing::info!(draining, "the node's draining changed");
    }
    super::cluster::write_heartbeat(node).await;
    NodeState {
        node: node.name().to_string(),
        draining,
        running: node.running(),
    }
}

/// Answers the commands other nodes pass to this one, until the daemon
/// stops.
pub(crate) fn answer_commands(state: &ApiState, node: &Arc<ClusterNode>) {
    let (node, stopping) = (node.clone(), state.stopping.clone());
    tokio::spawn(async move {
        let answering = node.cluster.serve_node_commands(|order| {
            let node = node.clone();
            async move {
                let state = apply(&node, order).await;
                (200, serde_json::to_value(state).unwrap_or_default())
            }
        });
        tokio::select! {
            answered = answering => if let Err(err) = answered {
                tracing::warn!(%err, "the node answers no commands");
            },
            () = stopping.cancelled() => {}
        }
    });
}

/// `POST /v1/cluster/nodes/{node}/drain`.
pub(crate) async fn drain(
    State(state): State<ApiState>,
    Path(name): Path<String>,
) -> Result<Response, ApiError> {
    command(&state, &name, NodeOrder::Drain).await
}

/// `POST /v1/cluster/nodes/{node}/resume`.
pub(crate) async fn resume(
    State(state): State<ApiState>,
    Path(name): Path<String>,
) -> Result<Response, ApiError> {
    command(&state, &name, NodeOrder::Resume).await
}

/// Applies `order` to node `name`: here when it is this node, else passed
/// to it; 404 when no node of that name answers.
async fn command(state: &ApiState, name: &str, order: NodeOrder) -> Result<Response, ApiError> {
    let Some(node) = &state.cluster else {
        return Err(ApiError::not_found(
            "this daemon is not part of a cluster (start it with `troupe serve --cluster URL`)",
        ));
    };
    if !is_valid_token(name) {
        return Err(ApiError::bad_request(format!(
            "{name:?} is not a node name (1 to 128 letters, digits, `-` or `_`)"
        )));
    }
    if name == node.name() {
        return Ok(axum::Json(apply(node, order).await).into_response());
    }
    match node.cluster.command_node(name, order).await {
        Ok(Some(reply)) => {
            let status = StatusCode::from_u16(reply.status).unwrap_or(StatusCode::BAD_GATEWAY);
            Ok((status, axum::Json(reply.body)).into_response())
        }
        Ok(None) => Err(ApiError::not_found(format!(
            "no node named {name} answers in the cluster"
        ))),
        Err(err) => Err(ApiError::unavailable(err.to_string())),
    }
}

/// The client's environment as a submission may carry it: without the
/// variables that hold secrets. The key variables are the standard ones,
/// those this daemon withholds, those the client lists, and every
/// `api_key_env` of the client's user configuration and of the project of
/// `cwd`.
pub(crate) fn publishable_env(
    env: &BTreeMap<String, String>,
    cwd: &std::path::Path,
) -> BTreeMap<String, String> {
    let user_file = paths::user_config_file(env).ok();
    let root = paths::find_project_root(cwd);
    let listed = env.get(WITHHELD_LIST_VAR).map(String::as_str);
    let mut keys =
        troupe_config::keys::key_names_from_files(user_file.as_deref(), &[root.as_path()], listed);
    keys.extend(own_key_names());
    public_environment(env, &keys)
}

/// A published environment with this node's own secrets: its values of the
/// names the environment lists as removed and of its own key variables.
pub(crate) fn with_own_secrets(env: BTreeMap<String, String>) -> BTreeMap<String, String> {
    with_node_secrets(env, &own_key_names(), |name| paths::ProcessEnv.var(name))
}

/// A run the queue handed this node, made ready to prepare here: its
/// repository checked out below this node's home (when it names one) and
/// this node's own keys in place of the secrets the submission left out.
/// The error says why, in one sentence.
pub(crate) async fn taken_here(
    state: &ApiState,
    request: RunRequest,
    run_id: &str,
) -> Result<RunRequest, String> {
    let request = with_workspace(state, request, Some(run_id)).await?;
    Ok(RunRequest {
        env: request.env.map(with_own_secrets),
        ..request
    })
}

/// This daemon's key variables: the standard ones and those it withheld at
/// start-up (its user configuration's `api_key_env` among them).
fn own_key_names() -> BTreeSet<String> {
    let started = secrets::withheld_names();
    secrets::key_names(started.iter().map(String::as_str))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn request(
        repository: Option<&str>,
        revision: Option<&str>,
        session: Option<&str>,
    ) -> RunRequest {
        serde_json::from_value(serde_json::json!({
            "prompt": "p",
            "cwd": "/tmp",
            "repository": repository,
            "revision": revision,
            "session_id": session,
        }))
        .unwrap()
    }

    #[test]
    fn a_repository_and_a_revision_come_together_and_are_checked_before_anything_else() {
        assert!(check_workspace_request(&request(None, None, None)).is_ok());
        assert!(
            check_workspace_request(&request(Some("https://host/r.git"), Some("main"), None))
                .is_ok()
        );
        // file:// is the running node's to allow.
        assert!(
            check_workspace_request(&request(Some("file:///srv/r.git"), Some("v1"), None)).is_ok()
        );
        for (repository, revision, session) in [
            (None, Some("main"), None),
            (Some("https://host/r.git"), None, None),
            (Some("https://host/r.git"), Some("main"), Some("s1")),
            (Some("ext::sh -c id"), Some("main"), None),
            (Some("https://host/r.git"), Some("--output=/x"), None),
        ] {
            let refused = check_workspace_request(&request(repository, revision, session));
            assert!(refused.is_err(), "{repository:?} {revision:?} {session:?}");
        }
    }
}
