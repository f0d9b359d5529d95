//! What a running tool call reaches of its run ([`CallReach`]): notices in
//! the run's event log (an MCP server's progress), and questions put to a
//! person through the run's approval broker (an MCP server's elicitation).
//!
//! A question is an approval like any other to the front doors: an
//! `approval_requested` event (its `tool` names who asks), answered through
//! the terminal prompt, the API or `troupe approve`, then an
//! `approval_resolved` event. The run routes the answer to the waiting call
//! instead of to an agent. With nobody to ask in the run ([`Approver::Absent`])
//! there is no question, and the caller answers on its own. Which hosts a
//! fetch may reach without asking (a redirect to another host) is the
//! agent's permission engine's answer for that host.

use std::sync::Arc;

use futures::future::BoxFuture;
use tokio_util::sync::CancellationToken;
use troupe_agent::{Approver, RunLedger};
use troupe_permissions::{PermissionEngine, PermissionRequest};
use troupe_protocol::events::{ApprovalOutcome, EventKind};
use troupe_protocol::permission::{PermissionSubject, ToolCategory};
use troupe_tools::{Answer, CallReach, Question};

use crate::account::SharedAccount;
use crate::event_log::EventSink;
use crate::tree::{TreeNews, TreePort};

/// The reach of one call of one agent.
pub(crate) struct RunReach {
    pub events: EventSink,
    pub run: TreePort,
    pub run_id: String,
    pub account: Arc<SharedAccount>,
    pub approver: Approver,
    /// The call's token: a cancelled call stops waiting for its answer.
    pub cancel: CancellationToken,
    /// The agent's permission engine: which hosts a fetch may be
    /// redirected to without asking.
    pub permissions: Arc<PermissionEngine>,
}

impl CallReach for RunReach {
    fn host_allowed(&self, host: &str) -> bool {
        self.permissions
            .decide(&PermissionRequest {
                tool_name: troupe_tools::web::WebFetch::TOOL_NAME.to_owned(),
                category: ToolCategory::Read,
                read_only: true,
                subject: PermissionSubject::Host {
                    host: host.to_owned(),
                },
            })
            .is_allow()
    }

    fn notice(&self, code: &str, text: String) {
        self.events.emit(EventKind::Notice {
            text,
            code: Some(code.to_string()),
        });
    }

    fn ask(&self, question: Question) -> Option<BoxFuture<'static, Answer>> {
        if self.approver == Approver::Absent {
            return None;
        }
        let approval_id = format!("{}-{}", self.run_id, self.account.next_approval_number());
        let (reply, answer) = tokio::sync::oneshot::channel();
        // Routed before anyone can see the request.
        let routed = self.run.send(TreeNews::QuestionOpened {
            approval_id: approval_id.clone(),
            reply,
        });
        if !routed {
            return None;
        }
        self.events.emit(EventKind::ApprovalRequested {
            approval_id: approval_id.clone(),
            tool: question.tool,
            args: question.args,
            reason: question.reason,
            always_rule: None,
        });
        let open = OpenQuestion {
            approval_id,
            run: self.run.clone(),
            events: self.events.clone(),
            resolved: false,
        };
        let cancel = self.cancel.clone();
        Some(Box::pin(async move {
            let mut open = open;
            let answer = tokio::select! {
                answer = answer => answer.unwrap_or((
                    ApprovalOutcome::Deny,
                    Some("the run ended before an answer".into()),
                )),
                _ = cancel.cancelled() => (ApprovalOutcome::Cancel, None),
            };
            open.resolve(&answer.0);
            answer
        }))
    }
}

/// A question waiting for its answer: closed in the broker when answered or
/// given up on (the call ended first).
struct OpenQuestion {
    approval_id: String,
    run: TreePort,
    events: EventSink,
    resolved: bool,
}

impl OpenQuestion {
    fn resolve(&mut self, outcome: &ApprovalOutcome) {
        self.resolved = true;
        self.events.emit(EventKind::ApprovalResolved {
            approval_id: self.approval_id.clone(),
            outcome: outcome.clone(),
        });
    }
}

impl Drop for OpenQuestion {
    fn drop(&mut self) {
        if !self.resolved {
            self.resolve(&ApprovalOutcome::Cancel);
        }
        self.run.send(TreeNews::ApprovalsClosed {
            approval_ids: vec![self.approval_id.clone()],
        });
    }
}
