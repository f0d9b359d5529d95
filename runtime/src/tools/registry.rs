//! Temporary registry shape (replaced by the tool layer).
use super::Tool;
use crate::llm::ToolDefinition;
use std::sync::Arc;
/// Registry.
#[derive(Default)]
pub struct ToolRegistry {
    tools: Vec<Arc<dyn Tool>>,
}
impl ToolRegistry {
    /// Lookup.
    pub fn get(&self, name: &str) -> Option<Arc<dyn Tool>> {
        self.tools.iter().find(|t| t.name() == name).cloned()
    }
    /// Read-only.
    pub fn is_read_only(&self, name: &str) -> bool {
        self.get(name).is_some_and(|t| t.read_only())
    }
    /// Definitions.
    pub fn definitions(&self) -> Vec<ToolDefinition> {
        Vec::new()
    }
    /// Validate.
    pub fn validate(&self, _name: &str, raw: &str) -> Result<serde_json::Value, String> {
        serde_json::from_str(raw).map_err(|e| e.to_string())
    }
}
