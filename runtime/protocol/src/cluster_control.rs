//! Commands to one node of a cluster, sent by request/reply to the node
//! they name from whichever node's API received them ([`NodeCommand`],
//! answered by a [`crate::cluster::ActionReply`]). Read with
//! [`crate::cluster::decode`], as every cluster message is.

use serde::{Deserialize, Serialize};

use crate::cluster::Versioned;

/// A command to one node.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct NodeCommand {
    /// [`crate::cluster::VERSION`].
    pub v: u32,
    /// The node it is for.
    pub node: String,
    /// What to do.
    pub command: NodeOrder,
}

/// What a [`NodeCommand`] asks.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum NodeOrder {
    /// Take no new runs; finish the current ones.
    Drain,
    /// Take runs again.
    Resume,
}

impl Versioned for NodeCommand {
    fn ids(&self) -> Vec<&str> {
        vec![&self.node]
    }
}

/// The state of a node after a command (the body of the answer).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct NodeState {
    /// The node.
    pub node: String,
    /// It takes no new runs.
    pub draining: bool,
    /// The runs it runs now.
    pub running: Vec<String>,
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cluster::{MessageError, decode};

    #[test]
    fn a_node_command_reads_only_with_a_valid_node_and_a_known_order() {
        let drain: NodeCommand = decode(br#"{"v":1,"node":"n-1","command":"drain"}"#).unwrap();
        assert_eq!(drain.command, NodeOrder::Drain);
        assert!(matches!(
            decode::<NodeCommand>(br#"{"v":1,"node":"a.b","command":"drain"}"#),
            Err(MessageError::InvalidId(_))
        ));
        assert!(matches!(
            decode::<NodeCommand>(br#"{"v":1,"node":"n","command":"explode"}"#),
            Err(MessageError::Malformed(_))
        ));
        assert!(matches!(
            decode::<NodeCommand>(br#"{"v":2,"node":"n","command":"drain"}"#),
            Err(MessageError::ForeignVersion(2))
        ));
    }
}
