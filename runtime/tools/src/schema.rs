//! The argument schemas the built-in tools offer, derived from their argument
//! types (`#[derive(Deserialize, JsonSchema)]`), so a schema cannot say
//! something the type does not accept.
//!
//! [`of`] generates the schema with `schemars` and `provider_ready` puts it
//! in the form the model providers' function calling accepts: one inline
//! object schema (no `$schema`, `$defs` or `$ref`), without the type's name or
//! doc comment at the top (the tool has its own description), without
//! non-standard `format`s such as `uint64`, with every optional property
//! non-nullable (a call leaves it out instead of sending `null`), and with a
//! choice of constants (a Rust enum of unit variants) offered as a plain
//! `enum` (the tool's description explains the values).

use schemars::JsonSchema;
use schemars::generate::SchemaSettings;
use schemars::transform::RestrictFormats;
use serde_json::{Map, Value};

/// The provider-ready argument schema of `T` (see the module docs). The same
/// type always gives the same value, keys in a stable order.
pub fn of<T: JsonSchema>() -> Value {
    // Draft 2020-12 with every subschema inline; the meta-schema stays until
    // `provider_ready` so that `RestrictFormats` knows which formats are
    // standard and drops the others.
    let settings = SchemaSettings::draft2020_12()
        .with(|s| s.inline_subschemas = true)
        .with_transform(RestrictFormats::default());
    let schema = settings.into_generator().into_root_schema_for::<T>();
    provider_ready(schema.to_value())
}

/// `schema` as a tool definition offers it to the model: without the
/// top-level `"additionalProperties": false` and without a boolean
/// property's `"default": false`. Every request carries every definition, and
/// neither says anything the model needs: it sends the properties it is
/// offered, and an absent flag is off. A call is still validated against the
/// whole schema, so an unknown property is refused with the reason.
pub fn offered(mut offered: Value) -> Value {
    let Value::Object(root) = &mut offered else {
        return offered;
    };
    if root.get("additionalProperties") == Some(&Value::Bool(false)) {
        root.remove("additionalProperties");
    }
    if let Some(Value::Object(properties)) = root.get_mut("properties") {
        for property in properties.values_mut() {
            if let Value::Object(property) = property
                && property.get("type").and_then(Value::as_str) == Some("boolean")
                && property.get("default") == Some(&Value::Bool(false))
            {
                property.remove("default");
            }
        }
    }
    offered
}

/// Keys at the top of a generated schema that providers do not need: the
/// meta-schema, the type's name and its doc comment, and definitions (every
/// subschema is inline).
const ROOT_KEYS_DROPPED: [&str; 5] = ["$schema", "title", "description", "$defs", "definitions"];

/// `schema` in provider-ready form: the root keys of `ROOT_KEYS_DROPPED`
/// removed, `"type": "object"` and `"properties"` present, each property a
/// plain `enum` where it is a choice of constants (`constants_as_enum`), and
/// each property outside `required` made non-nullable (`without_null`).
pub(crate) fn provider_ready(schema: Value) -> Value {
    let Value::Object(mut root) = schema else {
        return schema;
    };
    for key in ROOT_KEYS_DROPPED {
        root.remove(key);
    }
    root.insert("type".into(), "object".into());
    let required: Vec<String> = root
        .get("required")
        .and_then(Value::as_array)
        .map(|names| {
            names
                .iter()
                .filter_map(Value::as_str)
                .map(str::to_owned)
                .collect()
        })
        .unwrap_or_default();
    let properties = root
        .entry("properties")
        .or_insert_with(|| Value::Object(Map::new()));
    if let Value::Object(properties) = properties {
        for (name, property) in properties.iter_mut() {
            if !required.contains(name) {
                without_null(property);
            }
            constants_as_enum(property);
        }
    }
    Value::Object(root)
}

/// Turns `{"oneOf": [{"type": "string", "const": "a", "description": …}, …]}`
/// (what `schemars` makes of an enum whose variants have doc comments) into
/// `{"type": "string", "enum": ["a", …]}`. Anything else is left as it is.
fn constants_as_enum(property: &mut Value) {
    let Value::Object(obj) = property else {
        return;
    };
    let Some(Value::Array(branches)) = obj.get("oneOf") else {
        return;
    };
    let mut kind = None;
    let mut values = Vec::with_capacity(branches.len());
    for branch in branches {
        let Some(branch) = branch.as_object() else {
            return;
        };
        let only_a_constant = branch
            .keys()
            .all(|key| matches!(key.as_str(), "const" | "type" | "description"));
        let (Some(value), true) = (branch.get("const"), only_a_constant) else {
            return;
        };
        match (&kind, branch.get("type")) {
            (None, Some(t)) => kind = Some(t.clone()),
            (Some(k), Some(t)) if k == t => {}
            _ => return,
        }
        values.push(value.clone());
    }
    obj.remove("oneOf");
    if let Some(kind) = kind {
        obj.insert("type".into(), kind);
    }
    obj.insert("enum".into(), Value::Array(values));
}

/// Removes `null` from what a property schema accepts: from a `type` list
/// (`["integer", "null"]` becomes `"integer"`), from an `enum`, and from an
/// `anyOf` whose other branch then stands alone.
fn without_null(property: &mut Value) {
    let Value::Object(obj) = property else {
        return;
    };
    if let Some(Value::Array(types)) = obj.get_mut("type") {
        types.retain(|t| t != "null");
        if let [only] = types.as_slice() {
            let only = only.clone();
            obj.insert("type".into(), only);
        }
    }
    if let Some(Value::Array(values)) = obj.get_mut("enum") {
        values.retain(|v| !v.is_null());
    }
    let any_of = match obj.get_mut("anyOf") {
        Some(Value::Array(branches)) => branches,
        _ => return,
    };
    any_of.retain(|branch| branch.get("type").and_then(Value::as_str) != Some("null"));
    if any_of.len() != 1 {
        return;
    }
    let Some(Value::Object(branch)) = any_of.pop() else {
        return;
    };
    obj.remove("anyOf");
    for (key, value) in branch {
        // The property's own keys (its description) win over the branch's.
        obj.entry(key).or_insert(value);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testing::{assert_schema_matches, property_names};
    use serde::Deserialize;
    use serde_json::json;

    /// What the argument types of the built-in tools use: required and
    /// optional fields, a range, a default, an enum, unknown fields denied.
    #[derive(Debug, Deserialize, JsonSchema)]
    #[serde(deny_unknown_fields)]
    #[allow(dead_code)] // Only its schema is read.
    struct Sample {
        /// A path.
        path: String,
        /// A page size.
        #[schemars(range(min = 1))]
        limit: Option<u64>,
        /// A switch.
        #[serde(default)]
        all: bool,
        /// A mode.
        mode: Option<Mode>,
    }

    #[derive(Debug, Deserialize, JsonSchema)]
    #[serde(rename_all = "snake_case")]
    #[allow(dead_code)] // Only its schema is read.
    enum Mode {
        Fast,
        Slow,
    }

    #[test]
    fn a_struct_becomes_an_inline_strict_object_schema() {
        let schema = of::<Sample>();
        let text = schema.to_string();
        for absent in [
            "$schema",
            "$ref",
            "$defs",
            "definitions",
            "null",
            "uint64",
            "title",
        ] {
            assert!(!text.contains(absent), "{absent} in {text}");
        }
        assert_eq!(schema["type"], "object");
        assert_eq!(schema["additionalProperties"], false);
        assert_eq!(schema["required"], json!(["path"]));
        assert!(schema.get("description").is_none());
        assert_eq!(
            schema["properties"]["path"],
            json!({"type": "string", "description": "A path."})
        );
        assert_eq!(schema["properties"]["limit"]["type"], "integer");
        assert_eq!(schema["properties"]["limit"]["minimum"], 1);
        assert_eq!(schema["properties"]["all"]["type"], "boolean");
        assert_eq!(
            schema["properties"]["mode"]["enum"],
            json!(["fast", "slow"])
        );
        assert_eq!(schema["properties"]["mode"]["description"], "A mode.");
    }

    #[test]
    fn the_same_type_gives_the_same_bytes() {
        assert_eq!(of::<Sample>().to_string(), of::<Sample>().to_string());
    }

    #[test]
    fn optional_properties_lose_null_required_ones_are_untouched() {
        let schema = provider_ready(json!({
            "$schema": "https://json-schema.org/draft/2020-12/schema",
            "title": "Args",
            "description": "The arguments.",
            "type": "object",
            "properties": {
                "a": {"type": ["integer", "null"], "minimum": 1},
                "b": {"enum": ["x", "y", null]},
                "c": {"description": "C", "anyOf": [{"type": "string", "enum": ["p"]}, {"type": "null"}]},
                "d": {"type": ["string", "null"]}
            },
            "required": ["d"]
        }));
        assert_eq!(
            schema,
            json!({
                "type": "object",
                "properties": {
                    "a": {"type": "integer", "minimum": 1},
                    "b": {"enum": ["x", "y"]},
                    "c": {"description": "C", "type": "string", "enum": ["p"]},
                    "d": {"type": ["string", "null"]}
                },
                "required": ["d"]
            })
        );
    }

    #[test]
    fn a_choice_of_documented_constants_becomes_a_plain_enum() {
        #[derive(Deserialize, JsonSchema)]
        #[serde(rename_all = "snake_case")]
        #[allow(dead_code)] // Only its schema is read.
        enum Documented {
            /// The first.
            First,
            /// The second.
            Second,
        }
        #[derive(Deserialize, JsonSchema)]
        #[allow(dead_code)] // Only its schema is read.
        struct WithChoice {
            /// Which one.
            choice: Documented,
            maybe: Option<Documented>,
        }
        let schema = of::<WithChoice>();
        assert_eq!(
            schema["properties"]["choice"],
            json!({"description": "Which one.", "type": "string", "enum": ["first", "second"]})
        );
        assert_eq!(
            schema["properties"]["maybe"]["enum"],
            json!(["first", "second"])
        );
        assert_eq!(schema["properties"]["maybe"]["type"], "string");

        let mut mixed = json!({"oneOf": [{"const": "a", "type": "string"}, {"type": "object"}]});
        let before = mixed.clone();
        constants_as_enum(&mut mixed);
        assert_eq!(mixed, before, "not only constants: left as it is");
    }

    #[test]
    #[should_panic(expected = "the type refuses")]
    fn a_schema_that_drifted_from_its_type_is_caught() {
        // `limit` was made required in the type but is optional here.
        #[derive(Deserialize)]
        #[allow(dead_code)] // Only deserialised.
        struct Drifted {
            path: String,
            limit: u64,
        }
        assert_schema_matches::<Drifted>(&json!({
            "type": "object",
            "properties": {"path": {"type": "string"}, "limit": {"type": "integer"}},
            "required": ["path"],
            "additionalProperties": false
        }));
    }

    #[test]
    #[should_panic(expected = "the type accepts")]
    fn a_type_that_takes_more_than_its_schema_is_caught() {
        // The type accepts unknown fields that the schema refuses.
        #[derive(Deserialize)]
        #[allow(dead_code)] // Only deserialised.
        struct Lax {
            path: String,
        }
        assert_schema_matches::<Lax>(&json!({
            "type": "object",
            "properties": {"path": {"type": "string"}},
            "required": ["path"],
            "additionalProperties": false
        }));
    }

    #[test]
    fn the_schema_of_a_type_matches_it() {
        assert_schema_matches::<Sample>(&of::<Sample>());
    }

    #[test]
    fn an_empty_struct_still_has_properties() {
        #[derive(Deserialize, JsonSchema)]
        #[serde(deny_unknown_fields)]
        struct NoArgs {}
        let schema = of::<NoArgs>();
        assert_eq!(
            schema,
            json!({"type": "object", "properties": {}, "additionalProperties": false})
        );
    }

    #[test]
    fn property_names_lists_declared_and_required() {
        let (declared, required) = property_names(&of::<Sample>());
        assert_eq!(declared.len(), 4);
        assert_eq!(required, ["path"]);
    }

    #[test]
    fn the_offered_form_drops_only_what_the_model_does_not_need() {
        let schema = json!({
            "type": "object",
            "additionalProperties": false,
            "properties": {
                "off": {"type": "boolean", "default": false, "description": "d"},
                "on": {"type": "boolean", "default": true},
                "count": {"type": "integer", "default": 0, "minimum": 0},
                "nested": {"type": "object", "additionalProperties": false}
            },
            "required": ["count"]
        });
        assert_eq!(
            offered(schema),
            json!({
                "type": "object",
                "properties": {
                    "off": {"type": "boolean", "description": "d"},
                    "on": {"type": "boolean", "default": true},
                    "count": {"type": "integer", "default": 0, "minimum": 0},
                    "nested": {"type": "object", "additionalProperties": false}
                },
                "required": ["count"]
            })
        );
        // Additional properties a schema allows or describes stay.
        let open = json!({"type": "object", "additionalProperties": {"type": "string"}});
        assert_eq!(offered(open.clone()), open);
    }
}
