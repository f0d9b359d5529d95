//! Test helpers (`troupe_telemetry::testing`, `troupe_tools::testing`) ship
//! only to tests: they sit behind each crate's `testing` feature, which no
//! crate's normal dependencies and no default feature turn on — only
//! dev-dependencies do.

use std::path::Path;

fn manifest(crate_dir: &str) -> toml::Table {
    let path = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../..")
        .join(crate_dir)
        .join("Cargo.toml");
    let text = std::fs::read_to_string(&path).unwrap();
    text.parse().unwrap()
}

/// The crates whose test helpers sit behind a `testing` feature.
const WITH_HELPERS: [(&str, &str); 2] = [
    ("runtime/telemetry", "troupe-telemetry"),
    ("runtime/tools", "troupe-tools"),
];

/// Every member of the workspace, as a path from its root.
fn members() -> Vec<String> {
    let root = manifest(".");
    root["workspace"]["members"]
        .as_array()
        .unwrap()
        .iter()
        .map(|member| member.as_str().unwrap().to_owned())
        .collect()
}

#[test]
fn the_testing_feature_is_off_in_the_product() {
    let root = manifest(".");
    for (dir, name) in WITH_HELPERS {
        let table = manifest(dir);
        let features = table["features"].as_table().unwrap();
        assert!(features.contains_key("testing"), "{name}");
        let defaults = features.get("default").and_then(|d| d.as_array());
        assert!(
            defaults.is_none_or(|d| !d.iter().any(|f| f.as_str() == Some("testing"))),
            "testing is a default feature of {name}"
        );
        let workspace_entry = &root["workspace"]["dependencies"][name];
        assert!(
            workspace_entry.get("features").is_none(),
            "the workspace dependency on {name} enables features: {workspace_entry}"
        );
        for member in members() {
            let table = manifest(&member);
            let Some(entry) = table.get("dependencies").and_then(|deps| deps.get(name)) else {
                continue;
            };
            let enabled = entry
                .get("features")
                .and_then(|f| f.as_array())
                .is_some_and(|f| f.iter().any(|f| f.as_str() == Some("testing")));
            assert!(!enabled, "{member} ships {name}'s test helpers");
        }
    }
}

#[test]
fn tests_get_the_helpers() {
    // Compiles only with the feature on (the dev-dependency turns it on).
    let captured = troupe_telemetry::testing::CapturedSpans::default();
    assert_eq!(captured.len(), 0);
}
