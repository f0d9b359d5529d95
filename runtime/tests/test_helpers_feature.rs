//! Test helpers (`telemetry::testing`) ship only to tests: they sit behind
//! troupe-runtime's `testing` feature, which no crate's normal dependencies
//! and no default feature turn on — only dev-dependencies do.

use std::path::Path;

fn manifest(crate_dir: &str) -> toml::Table {
    let path = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("..")
        .join(crate_dir)
        .join("Cargo.toml");
    let text = std::fs::read_to_string(&path).unwrap();
    text.parse().unwrap()
}

#[test]
fn the_testing_feature_is_off_in_the_product() {
    let runtime = manifest("runtime");
    let features = runtime["features"].as_table().unwrap();
    assert!(features.contains_key("testing"));
    let defaults = features.get("default").and_then(|d| d.as_array());
    assert!(
        defaults.is_none_or(|d| !d.iter().any(|f| f.as_str() == Some("testing"))),
        "testing is a default feature"
    );
    let root = manifest(".");
    let workspace_entry = &root["workspace"]["dependencies"]["troupe-runtime"];
    assert!(
        workspace_entry.get("features").is_none(),
        "the workspace dependency enables features: {workspace_entry}"
    );
    for member in ["actors", "cli", "tests", "runtime"] {
        let table = manifest(member);
        let Some(entry) = table
            .get("dependencies")
            .and_then(|deps| deps.get("troupe-runtime"))
        else {
            continue;
        };
        let enabled = entry
            .get("features")
            .and_then(|f| f.as_array())
            .is_some_and(|f| f.iter().any(|f| f.as_str() == Some("testing")));
        assert!(!enabled, "{member} ships troupe-runtime's test helpers");
    }
}

#[test]
fn tests_get_the_helpers() {
    // Compiles only with the feature on (the dev-dependency turns it on).
    let captured = troupe_runtime::telemetry::testing::CapturedSpans::default();
    assert_eq!(captured.len(), 0);
}
