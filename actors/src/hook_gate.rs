//! The hooks at a prompt's door: SessionStart when a run opens a session
//! (new, or resumed from the store), UserPromptSubmit for every prompt
//! before it enters the history — the run's prompt and text written during
//! a run. A block keeps the prompt out of the history and out of every
//! request; notes go before the prompt.

use tokio_util::sync::CancellationToken;
use troupe_hooks::{HookContext, HookEvent, HookPayload, HookPlace, HookVerdict};

use crate::env::AgentEnv;

/// How a run opened its session.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum SessionOpening {
    /// A new session.
    Startup,
    /// A stored session, opened by this process.
    Resume,
}

impl SessionOpening {
    /// The SessionStart `trigger` (and matcher subject).
    pub(crate) fn as_str(self) -> &'static str {
        match self {
            Self::Startup => "startup",
            Self::Resume => "resume",
        }
    }
}

fn context(
    env: &AgentEnv,
    session_id: &str,
    run_id: &str,
    cancel: CancellationToken,
) -> HookContext {
    HookContext {
        place: HookPlace {
            session_id: session_id.to_owned(),
            run_id: run_id.to_owned(),
            agent_path: "main".to_owned(),
            cwd: env.sandbox.project_root().to_path_buf(),
        },
        child_env: env.child_env.clone(),
        parent_span: tracing::Span::none(),
        cancel,
        sandbox: std::sync::Arc::new(env.os_sandbox.for_hooks()),
    }
}

/// Whether a run of `job` that opened its session as `opening` has hooks
/// at its door (SessionStart, UserPromptSubmit) to run before it starts.
pub(crate) fn has_door_hooks(
    env: &AgentEnv,
    job: troupe_agent::run::RunJob,
    opening: Option<SessionOpening>,
) -> bool {
    job == troupe_agent::run::RunJob::Prompt
        && (opening.is_some_and(|opening| {
            env.hooks
                .any_for(HookEvent::SessionStart, Some(opening.as_str()))
        }) || env.hooks.any_for(HookEvent::UserPromptSubmit, None))
}

/// Runs the SessionStart hooks (when the session was opened) and the
/// UserPromptSubmit hooks of `prompt`; the verdicts of both, in that order.
pub(crate) async fn before_prompt(
    env: &AgentEnv,
    session_id: &str,
    run_id: &str,
    opening: Option<SessionOpening>,
    prompt: &str,
    cancel: CancellationToken,
) -> HookVerdict {
    let ctx = context(env, session_id, run_id, cancel);
    let mut verdict = HookVerdict::default();
    if let Some(opening) = opening
        && env
            .hooks
            .any_for(HookEvent::SessionStart, Some(opening.as_str()))
    {
        let mut payload = HookPayload::new(HookEvent::SessionStart, &ctx.place);
        payload.trigger = Some(opening.as_str().to_owned());
        verdict.extend(
            troupe_hooks::fire(
                &env.hooks,
                HookEvent::SessionStart,
                Some(opening.as_str()),
                payload,
                &ctx,
            )
            .await,
        );
    }
    verdict.extend(prompt_submitted(env, &ctx, prompt).await);
    verdict
}

/// Runs the UserPromptSubmit hooks of text written during run `run_id`.
pub(crate) async fn message_written(
    env: &AgentEnv,
    session_id: &str,
    run_id: &str,
    text: &str,
    cancel: CancellationToken,
) -> HookVerdict {
    let ctx = context(env, session_id, run_id, cancel);
    prompt_submitted(env, &ctx, text).await
}

async fn prompt_submitted(env: &AgentEnv, ctx: &HookContext, prompt: &str) -> HookVerdict {
    if !env.hooks.any_for(HookEvent::UserPromptSubmit, None) {
        return HookVerdict::default();
    }
    let mut payload = HookPayload::new(HookEvent::UserPromptSubmit, &ctx.place);
    payload.prompt = Some(prompt.to_owned());
    troupe_hooks::fire(&env.hooks, HookEvent::UserPromptSubmit, None, payload, ctx).await
}
