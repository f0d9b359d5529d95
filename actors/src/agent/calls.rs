//! Running an agent's calls: a [`ToolExecutor`] per tool call and a child
//! [`AgentActor`] per `agent` call, each linked to this agent so a panic
//! becomes that call's error result (DESIGN.md principle 3).
//!
//! A child needs one of the run's sub-agent slots while it works. An agent
//! that holds a slot lends it to the first child it starts (a parent waiting
//! for its children does no work of its own), so nested children can never
//! wait forever for slots their waiting parents hold; other children take a
//! free slot or wait for one outside the mailbox.

use std::sync::Arc;
use std::time::{Duration, Instant};

use ractor::{Actor, ActorId, ActorRef};
use tokio_util::sync::CancellationToken;
use troupe_agent::compact::offload::Ledger;
use troupe_agent::session::Transcript;
use troupe_agent::subagent::{ChildKind, MAX_DEPTH, child_panicked, child_result};
use troupe_agent::{AgentLaunch, AgentLoop, Input, RunOutcome, ToolLaunch};
use troupe_protocol::events::{EventKind, RunStatus};
use troupe_store::{ForkBase, NewSession};
use troupe_telemetry::genai::ToolErrorKind;
use troupe_telemetry::propagation::traceparent_of;
use troupe_tools::{ToolContext, ToolOutput};

use super::{AgentActor, AgentArgs, AgentMsg, AgentState, ChildEntry, Report, Work};
use crate::env::AgentSeat;
use crate::executor::{CLEANUP_GRACE, ExecutorArgs, ReportTo, ToolExecutor, ToolReport};
use crate::port::Port;
use crate::slots::SlotHolder;

impl AgentState {
    /// Spawns the executor of one tool call.
    pub(super) async fn start_tool(
        &mut self,
        myself: &ActorRef<AgentMsg>,
        launch: ToolLaunch,
    ) -> Option<Input> {
        let cancel = self.call_token(launch.epoch);
        let span = self.spans.get(launch.span);
        let timeout = launch
            .tool
            .timeout(&launch.args)
            .map(|own| own + CLEANUP_GRACE)
            .unwrap_or(self.env.tool_timeout);
        // Child processes continue the trace: TRACEPARENT of the call's span.
        let child_env = match traceparent_of(&span) {
            Some(traceparent) => {
                let mut env = (*self.env.child_env).clone();
                env.push(("TRACEPARENT".into(), traceparent));
                Arc::new(env)
            }
            None => self.env.child_env.clone(),
        };
        let context = ToolContext {
            call_id: launch.call_id,
            sandbox: self.env.sandbox.clone(),
            os_sandbox: self.env.os_sandbox.clone(),
            spill_dir: self.env.spill_dir.clone(),
            cancel: cancel.clone(),
            child_env,
            background: self.env.background.clone(),
            outside_read_approved: launch.outside_read_approved,
            reach: Some(Arc::new(crate::reach::RunReach {
                events: self.events.clone(),
                run: self.run.clone(),
                run_id: self.machine.run_id().to_string(),
                account: self.account.clone(),
                approver: self.machine.approver(),
                cancel,
                permissions: self.machine.permissions().clone(),
            })),
        };
        let agent = myself.clone();
        let report_to: ReportTo =
            Port::new(move |report| agent.cast(AgentMsg::work(Work::ToolDone(report))).is_ok());
        let (epoch, index) = (launch.epoch, launch.index);
        let args = ExecutorArgs {
            tool: launch.tool,
            args: launch.args,
            context,
            timeout,
            epoch,
            index,
            report_to,
            span,
        };
        match ToolExecutor::spawn_linked(None, ToolExecutor, args, myself.get_cell()).await {
            Ok((executor, _)) => {
                self.executors.insert(executor.get_id(), (epoch, index));
                None
            }
            Err(err) => Some(could_not_start(
                epoch,
                index,
                format!("tool could not start: {err}"),
            )),
        }
    }

    /// Starts a child agent once it has a slot: the one this agent lends, a
    /// free one, or the next one to come free.
    pub(super) async fn start_child(
        &mut self,
        myself: &ActorRef<AgentMsg>,
        launch: AgentLaunch,
    ) -> Option<Input> {
        let token = self.call_token(launch.epoch);
        if let Some(lent) = self.slot.lend() {
            return self
                .spawn_child(
                    myself,
                    launch,
                    SlotHolder::new(self.slot.pool().clone(), lent, true),
                    token,
                )
                .await;
        }
        let slots = self.slot.pool().clone();
        if let Ok(permit) = slots.clone().try_acquire_owned() {
            return self
                .spawn_child(
                    myself,
                    launch,
                    SlotHolder::new(slots.clone(), permit, false),
                    token,
                )
                .await;
        }
        let agent = myself.clone();
        self.tasks.spawn(async move {
            let (epoch, index) = (launch.epoch, launch.index);
            tokio::select! {
                permit = slots.acquire_owned() => {
                    if let Ok(permit) = permit {
                        let _ = agent.cast(AgentMsg::work(Work::SlotReady {
                            launch: Box::new(launch),
                            permit,
                            token,
                        }));
                    }
                }
                _ = token.cancelled() => {
                    let _ = agent.cast(AgentMsg::work(Work::ToolDone(ToolReport {
                        epoch,
                        index,
                        output: ToolOutput::error(troupe_tools::CANCELLED_RESULT),
                        duration: Duration::ZERO,
                        error: Some(ToolErrorKind::Cancelled),
                    })));
                }
            }
        });
        None
    }

    /// Builds the child's loop from its plan and spawns it linked to this
    /// agent; its transcript is a child session of this agent's session.
    pub(super) async fn spawn_child(
        &mut self,
        myself: &ActorRef<AgentMsg>,
        launch: AgentLaunch,
        slot: SlotHolder,
        token: CancellationToken,
    ) -> Option<Input> {
        let (epoch, index) = (launch.epoch, launch.index);
        if token.is_cancelled() {
            return Some(Input::CallFinished {
                epoch,
                index,
                output: ToolOutput::error(troupe_tools::CANCELLED_RESULT),
                duration: Duration::ZERO,
                error: Some(ToolErrorKind::Cancelled),
            });
        }
        let plan = *launch.child;
        let path = plan.spec.path.clone();
        let is_fork = plan.spec.is_fork;
        let system = plan.system_prompt(self.machine.system());
        // A fork keeps its parent's catalogue (its requests must offer the
        // same definitions); a role's catalogue follows the MCP tools.
        let mut catalogue_source: Option<Arc<dyn troupe_agent::CatalogueSource>> = None;
        let (catalogue, provider) = match &plan.kind {
            ChildKind::Fork => (self.machine.catalogue().clone(), self.provider.clone()),
            ChildKind::Role { tools, model, .. } => {
                let with_agent = plan.spec.depth < MAX_DEPTH;
                let key = crate::env::CatalogueKey {
                    role: plan.spec.role.clone(),
                    tools: tools.clone(),
                    with_agent,
                };
                let catalogue = match self.env.catalogue_for(&key) {
                    Ok(catalogue) => catalogue,
                    Err(err) => {
                        return Some(could_not_start(
                            epoch,
                            index,
                            format!("the sub-agent could not start: {err}"),
                        ));
                    }
                };
                let provider = match model {
                    Some(model) => match self.env.provider_for_model(model) {
                        Ok(provider) => provider,
                        Err(err) => {
                            return Some(could_not_start(
                                epoch,
                                index,
                                format!("the sub-agent could not use model {model}: {err}"),
                            ));
                        }
                    },
                    None => self.provider.clone(),
                };
                catalogue_source = Some(crate::env::LiveCatalogue::new(self.env.clone(), key));
                (catalogue, provider)
            }
        };
        // A fork shares its parent's stored history instead of copying it:
        // the parent saved it before any of its calls started.
        let fork_of = plan
            .shared_with_parent(self.machine.transcript().shareable_len())
            .map(|len| ForkBase {
                session: self.machine.session_id().to_string(),
                len: len as u64,
            });
        let session_id = uuid::Uuid::now_v7().to_string();
        let created = self.env.store.create_session(&NewSession {
            id: session_id.clone(),
            cwd: self.env.sandbox.project_root().to_path_buf(),
            provider: provider.name().to_string(),
            model: provider.model().to_string(),
            parent: Some(self.machine.session_id().to_string()),
            agent_path: Some(path.clone()),
            run_id: Some(self.machine.run_id().to_string()),
            fork_of: fork_of.clone(),
        });
        if let Err(err) = created {
            return Some(could_not_start(
                epoch,
                index,
                format!("the sub-agent's session could not be created: {err}"),
            ));
        }
        let transcript = match &fork_of {
            Some(base) => Transcript::forked(plan.history, base.len as usize),
            None => {
                let mut transcript = Transcript::new();
                for message in plan.history {
                    transcript.push(message);
                }
                transcript
            }
        };
        let machine = AgentLoop::new(self.env.loop_setup(AgentSeat {
            spec: plan.spec,
            run_id: self.machine.run_id().to_string(),
            session_id,
            cache_key: self.root_session.clone(),
            task: Some(plan.task),
            system,
            catalogue,
            catalogue_source,
            permissions: self.machine.permissions().clone(),
            account: self.account.clone(),
            approver: self.machine.approver(),
            provider: provider.clone(),
            transcript,
            // A fork sends its parent's history as its parent sent it.
            ledger: if fork_of.is_some() {
                self.machine.ledger().forked()
            } else {
                Ledger::default()
            },
            resumed: false,
            compact_only: false,
        }));
        let events = self.events.for_agent(path.clone());
        let args = AgentArgs {
            machine,
            env: self.env.clone(),
            provider,
            events: events.clone(),
            run: self.run.clone(),
            root_session: self.root_session.clone(),
            report: Report::Parent {
                agent: myself.clone(),
                epoch,
                index,
            },
            slot,
            token: token.clone(),
            account: self.account.clone(),
            parent_span: self.spans.get(launch.span),
        };
        match Actor::spawn_linked(None, AgentActor, args, myself.get_cell()).await {
            Ok((child, _)) => {
                self.children.insert(
                    child.get_id(),
                    ChildEntry {
                        epoch,
                        index,
                        path,
                        is_fork,
                        token,
                        events,
                        started: Instant::now(),
                    },
                );
                None
            }
            Err(err) => Some(could_not_start(
                epoch,
                index,
                format!("the sub-agent could not start: {err}"),
            )),
        }
    }

    /// A child ended: its outcome becomes the call's result; a lent slot
    /// comes back.
    pub(super) fn on_child_done(
        &mut self,
        epoch: u64,
        index: usize,
        outcome: RunOutcome,
        slot: Option<tokio::sync::OwnedSemaphorePermit>,
    ) -> Option<Input> {
        if let Some(permit) = slot {
            self.slot.returned(permit);
        }
        let id = self
            .children
            .iter()
            .find(|(_, child)| child.epoch == epoch && child.index == index)
            .map(|(id, _)| *id)?;
        let child = self.children.remove(&id)?;
        let (text, is_error) = child_result(&child.path, child.is_fork, &outcome);
        Some(Input::CallFinished {
            epoch,
            index,
            output: if is_error {
                ToolOutput::error(text)
            } else {
                ToolOutput::ok(text)
            },
            duration: child.started.elapsed(),
            error: is_error.then_some(ToolErrorKind::Failed),
        })
    }

    /// An executor or a child failed (panicked): that call's error result.
    pub(super) fn on_child_failed(&mut self, id: ActorId, panic: String) -> Option<Input> {
        if let Some((epoch, index)) = self.executors.remove(&id) {
            tracing::warn!(%panic, "tool panicked");
            return Some(Input::CallFinished {
                epoch,
                index,
                output: ToolOutput::error(format!("tool panicked: {panic}")),
                duration: Duration::ZERO,
                error: Some(ToolErrorKind::Panicked),
            });
        }
        let child = self.children.remove(&id)?;
        tracing::error!(path = %child.path, %panic, "sub-agent failed");
        child.token.cancel();
        child.events.emit(EventKind::SubagentFinished {
            status: RunStatus::Error,
        });
        self.run.send(crate::tree::TreeNews::AgentEnded {
            path: child.path.clone(),
        });
        Some(Input::CallFinished {
            epoch: child.epoch,
            index: child.index,
            output: ToolOutput::error(child_panicked(&child.path, &panic)),
            duration: child.started.elapsed(),
            error: Some(ToolErrorKind::Panicked),
        })
    }
}

fn could_not_start(epoch: u64, index: usize, text: String) -> Input {
    Input::CallFinished {
        epoch,
        index,
        output: ToolOutput::error(text),
        duration: Duration::ZERO,
        error: Some(ToolErrorKind::Failed),
    }
}
