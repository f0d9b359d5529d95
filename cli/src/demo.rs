//! `troupe demo` (SPEC §1.6) — filled in once the scripted model server lands.

use crate::DemoArgs;

/// Runs the demo.
pub async fn demo(_args: DemoArgs) -> u8 {
    crate::EXIT_RUNTIME
}
