//! Checks for tests of tools, in this crate and in the crates that define
//! tools of their own: that an argument schema and its Rust type accept the
//! same calls, and that a schema has the shape every provider accepts.
//! Owns nothing the product uses at run time.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use serde_json::{Map, Value};

use crate::registry::ArgumentSchema;

/// Fails unless `schema` has the shape every provider accepts: an object
/// schema with closed properties, one type or an enum per property, no
/// `$ref`, `$schema`, `$defs`, titles, `null` or formats, and one that
/// compiles as a tool's argument schema.
pub fn assert_provider_shape(name: &str, schema: &Value) {
    let text = schema.to_string();
    for absent in [
        "$ref",
        "$schema",
        "$defs",
        "definitions",
        "\"title\"",
        "null",
    ] {
        assert!(!text.contains(absent), "{name}: {absent} in {text}");
    }
    assert_eq!(schema["type"], "object", "{name}");
    assert_eq!(schema["additionalProperties"], false, "{name}");
    assert!(schema["properties"].is_object(), "{name}");
    assert!(schema.get("description").is_none(), "{name}");
    for (prop, value) in schema["properties"].as_object().into_iter().flatten() {
        assert!(
            value["type"].is_string() || value["enum"].is_array(),
            "{name}.{prop}: one type or an enum: {value}"
        );
        assert!(value.get("format").is_none(), "{name}.{prop}: {value}");
    }
    ArgumentSchema::compile(name, schema).unwrap();
}

/// Which property names a schema declares and which it requires, for drift
/// checks in tests.
pub fn property_names(schema: &Value) -> (Vec<String>, Vec<String>) {
    let declared = schema["properties"]
        .as_object()
        .map(|p| p.keys().cloned().collect())
        .unwrap_or_default();
    let required = schema["required"]
        .as_array()
        .map(|r| {
            r.iter()
                .filter_map(Value::as_str)
                .map(str::to_owned)
                .collect()
        })
        .unwrap_or_default();
    (declared, required)
}

/// Values a property schema accepts, for drift checks: each `enum` value, or
/// one value of its `type` (an integer at its `minimum`).
fn samples(property: &Value) -> Vec<Value> {
    if let Some(values) = property.get("enum").and_then(Value::as_array) {
        return values.clone();
    }
    let sample = match property.get("type").and_then(Value::as_str) {
        Some("string") => Value::from("x"),
        Some("integer") => property.get("minimum").cloned().unwrap_or(Value::from(1)),
        Some("boolean") => Value::from(true),
        Some("array") => Value::Array(Vec::new()),
        other => panic!("no sample for type {other:?} in {property}"),
    };
    vec![sample]
}

/// Fails unless `schema` and the argument type `T` accept the same calls:
/// the required properties alone are accepted by both, each optional
/// property with each of its sample values is accepted by both, leaving out
/// any required property is refused by both, and so is an unknown property.
pub fn assert_schema_matches<T: serde::de::DeserializeOwned>(schema: &Value) {
    let validator = jsonschema::validator_for(schema).expect("the schema compiles");
    let both_accept = |args: &Value| {
        assert!(validator.is_valid(args), "schema refuses {args}: {schema}");
        if let Err(err) = serde_json::from_value::<T>(args.clone()) {
            panic!("the type refuses {args} ({err}) that the schema accepts: {schema}");
        }
    };
    let both_refuse = |args: &Value| {
        assert!(!validator.is_valid(args), "schema accepts {args}: {schema}");
        assert!(
            serde_json::from_value::<T>(args.clone()).is_err(),
            "the type accepts {args} that the schema refuses: {schema}"
        );
    };
    let (declared, required) = property_names(schema);
    for name in &required {
        assert!(declared.contains(name), "required `{name}` is not declared");
    }
    let mut minimal = Map::new();
    for name in &required {
        let value = samples(&schema["properties"][name]).swap_remove(0);
        minimal.insert(name.clone(), value);
    }
    both_accept(&Value::Object(minimal.clone()));
    for name in declared.iter().filter(|name| !required.contains(name)) {
        for value in samples(&schema["properties"][name]) {
            let mut args = minimal.clone();
            args.insert(name.clone(), value);
            both_accept(&Value::Object(args));
        }
    }
    for name in &required {
        let mut args = minimal.clone();
        args.remove(name);
        both_refuse(&Value::Object(args));
    }
    let mut unknown = minimal;
    unknown.insert("no_such_argument".into(), Value::from(1));
    both_refuse(&Value::Object(unknown));
}
