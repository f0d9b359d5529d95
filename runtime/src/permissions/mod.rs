//! Temporary permission shape (replaced by the permission engine).
use crate::config::{PermissionMode, RuleEntry};
use crate::tools::{PermissionSubject, ToolCategory};
/// Request.
#[derive(Debug, Clone)]
pub struct PermissionRequest {
    pub tool_name: String,
    pub category: ToolCategory,
    pub read_only: bool,
    pub subject: PermissionSubject,
}
/// Decision.
pub enum Decision {
    Allow { reason: String },
    Ask { reason: String },
    Deny { reason: String },
}
/// Engine.
pub struct PermissionEngine;
impl PermissionEngine {
    /// Decide.
    pub fn decide_in_mode(&self, _r: &PermissionRequest, _m: PermissionMode) -> Decision {
        Decision::Allow {
            reason: String::new(),
        }
    }
    /// Add.
    pub fn add_session_rule(&mut self, _r: RuleEntry) {}
}
/// Rule.
pub fn always_rule_for(r: &PermissionRequest) -> String {
    r.tool_name.clone()
}
/// Offered.
pub fn offered_in_mode(m: PermissionMode, ro: bool) -> bool {
    ro || m != PermissionMode::Plan
}
