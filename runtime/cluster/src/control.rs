//! Commands to one node (drain, resume) by request/reply: any node sends
//! one to the node it names ([`Cluster::command_node`]); each node answers
//! its own ([`Cluster::serve_node_commands`]).

use async_nats::RequestErrorKind;
use futures::StreamExt;
use troupe_protocol::cluster::{ActionReply, VERSION, decode};
use troupe_protocol::cluster_control::{NodeCommand, NodeOrder};

use crate::node::ACTION_TIMEOUT;
use crate::{Cluster, ClusterError};

/// The subject on which node `node` answers commands.
pub fn command_subject(node: &str) -> String {
    format!("troupe.node.{node}.command")
}

impl Cluster {
    /// Sends `order` to node `node`: its answer, or `None` when no node of
    /// that name answers.
    pub async fn command_node(
        &self,
        node: &str,
        order: NodeOrder,
    ) -> Result<Option<ActionReply>, ClusterError> {
        let body = serde_json::to_vec(&NodeCommand {
            v: VERSION,
            node: node.to_string(),
            command: order,
        })?;
        let request = self.client().request(command_subject(node), body.into());
        let reply = match tokio::time::timeout(ACTION_TIMEOUT, request).await {
            Err(_) => {
                return Err(ClusterError::request("command a node", "no answer in time"));
            }
            Ok(Err(err)) if err.kind() == RequestErrorKind::NoResponders => return Ok(None),
            Ok(Err(err)) => return Err(ClusterError::request("command a node", err)),
            Ok(Ok(reply)) => reply,
        };
        decode::<ActionReply>(&reply.payload)
            .map(Some)
            .map_err(|err| ClusterError::request("command a node", err))
    }

    /// Answers the commands sent to this node until the subscription ends;
    /// `answer` gives each order's HTTP status and JSON body. A message
    /// that does not read as a command for this node is logged and dropped.
    pub async fn serve_node_commands<F, Fut>(&self, answer: F) -> Result<(), ClusterError>
    where
        F: Fn(NodeOrder) -> Fut,
        Fut: Future<Output = (u16, serde_json::Value)>,
    {
        let mut subscriber = self
            .client()
            .subscribe(command_subject(self.node()))
            .await
            .map_err(|err| ClusterError::request("answer the node's commands", err))?;
        while let Some(message) = subscriber.next().await {
            let Some(reply) = message.reply.clone() else {
                tracing::warn!("dropped a node command with nowhere to answer");
                continue;
            };
            let command = match decode::<NodeCommand>(&message.payload) {
                Ok(command) if command.node == self.node() => command,
                Ok(_) => {
                    tracing::warn!("dropped a node command naming another node");
                    continue;
                }
                Err(err) => {
                    tracing::warn!(bytes = message.payload.len(), %err, "dropped a node command that does not read");
                    continue;
                }
            };
            let (status, body) = answer(command.command).await;
            let reply_body = serde_json::to_vec(&ActionReply {
                v: VERSION,
                status,
                body,
            })?;
            if let Err(err) = self.client().publish(reply, reply_body.into()).await {
                tracing::warn!(%err, "a node command was not answered");
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_node_has_its_own_command_subject() {
        assert_eq!(command_subject("n-1"), "troupe.node.n-1.command");
    }
}
