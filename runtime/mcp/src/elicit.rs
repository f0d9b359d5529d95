//! Answers to a server's `elicitation/create` (SPEC §8): what to send back
//! when nobody can be asked ([`default_elicitation`]), how a person's answer
//! becomes a reply checked against the requested schema
//! ([`answer_elicitation`]), and how the question is shown to that person
//! ([`question_of`]).
//!
//! A form elicitation's schema is an object of primitive fields: strings
//! (with `minLength`, `maxLength`, `format`, `enum`/`oneOf` choices),
//! numbers, integers (with `minimum`, `maximum`), booleans, and arrays of
//! choices. Everything here works on the schema as JSON, so a schema a server
//! gets wrong (a field of the wrong type, a default that does not fit its
//! field, a nested object, thousands of fields) yields a decline with a
//! reason, never a panic or an answer that breaks the schema.

use serde_json::{Map, Value};

use troupe_protocol::events::ApprovalOutcome;

/// Fields a schema may have; a larger one is declined.
pub(crate) const MAX_FIELDS: usize = 100;

/// Bytes the content of one answer may take, serialised.
pub(crate) const MAX_CONTENT_BYTES: usize = 64 * 1024;

/// Characters of the question shown to a person.
const MAX_QUESTION_CHARS: usize = 4_000;

/// What to answer a server.
#[derive(Debug, Clone, PartialEq)]
pub(crate) enum ElicitDecision {
    /// Accept with this content (it satisfies the schema).
    Accept(Map<String, Value>),
    /// Decline, for this reason (logged and shown, not sent).
    Decline(String),
    /// The person cancelled.
    Cancel,
}

/// The answer when nobody can be asked: accept with the schema's defaults
/// when every required field has one that fits its field, else decline.
pub(crate) fn default_elicitation(schema: &Value) -> ElicitDecision {
    let (fields, required) = match fields_of(schema) {
        Ok(parts) => parts,
        Err(reason) => return ElicitDecision::Decline(reason),
    };
    let content = defaults_of(fields);
    if let Some(missing) = required.iter().find(|name| !content.contains_key(*name)) {
        return ElicitDecision::Decline(format!(
            "nobody can be asked and the required field {missing:?} has no usable default"
        ));
    }
    checked(content)
}

/// The reply for a person's answer to the question: allow accepts with the
/// schema's defaults overlaid by the JSON object the person gave (if any),
/// checked against the schema; deny declines; cancel cancels.
pub(crate) fn answer_elicitation(
    schema: &Value,
    outcome: &ApprovalOutcome,
    given: Option<&str>,
) -> ElicitDecision {
    match outcome {
        ApprovalOutcome::Deny => {
            return ElicitDecision::Decline("the person declined".into());
        }
        ApprovalOutcome::Cancel => return ElicitDecision::Cancel,
        ApprovalOutcome::Allow | ApprovalOutcome::AllowAlways => {}
    }
    let (fields, required) = match fields_of(schema) {
        Ok(parts) => parts,
        Err(reason) => return ElicitDecision::Decline(reason),
    };
    let mut content = defaults_of(fields);
    if let Some(text) = given.map(str::trim).filter(|t| !t.is_empty()) {
        let given = match serde_json::from_str::<Value>(text) {
            Ok(Value::Object(given)) => given,
            Ok(_) | Err(_) => {
                return ElicitDecision::Decline(
                    "the answer is not a JSON object of field values".into(),
                );
            }
        };
        for (name, value) in given {
            let Some(field) = fields.get(&name) else {
                return ElicitDecision::Decline(format!("the form has no field {name:?}"));
            };
            if let Err(reason) = check_value(field, &value) {
                return ElicitDecision::Decline(format!("field {name:?}: {reason}"));
            }
            content.insert(name, value);
        }
    }
    if let Some(missing) = required.iter().find(|name| !content.contains_key(*name)) {
        return ElicitDecision::Decline(format!("the required field {missing:?} was not given"));
    }
    checked(content)
}

/// The question as an approval shows it: the server's message, then one line
/// per field (name, type, required, default, choices), bounded in length.
pub(crate) fn question_of(message: &str, schema: &Value) -> String {
    let mut out = message.trim().to_string();
    if let Ok((fields, required)) = fields_of(schema) {
        for (name, field) in fields {
            let kind = field.get("type").and_then(Value::as_str).unwrap_or("?");
            out.push_str(&format!("\n  {name} ({kind}"));
            if required.contains(name) {
                out.push_str(", required");
            }
            out.push(')');
            if let Some(choices) = choices_of(field) {
                let shown: Vec<String> = choices.iter().map(|c| c.to_string()).collect();
                out.push_str(&format!(" one of {}", shown.join(", ")));
            }
            if let Some(default) = field.get("default") {
                out.push_str(&format!(" [default {default}]"));
            }
        }
    }
    if out.chars().count() > MAX_QUESTION_CHARS {
        out = out.chars().take(MAX_QUESTION_CHARS).collect();
        out.push('…');
    }
    out
}

/// The schema's fields and required names, or why the schema is unusable.
fn fields_of(schema: &Value) -> Result<(&Map<String, Value>, Vec<String>), String> {
    let Some(schema) = schema.as_object() else {
        return Err("the requested schema is not an object".into());
    };
    if schema.get("type").is_some_and(|t| t != "object") {
        return Err("the requested schema is not of type object".into());
    }
    static EMPTY: std::sync::OnceLock<Map<String, Value>> = std::sync::OnceLock::new();
    let fields = match schema.get("properties") {
        None => EMPTY.get_or_init(Map::new),
        Some(Value::Object(fields)) => fields,
        Some(_) => return Err("the schema's properties are not an object".into()),
    };
    if fields.len() > MAX_FIELDS {
        return Err(format!(
            "the form has {} fields; at most {MAX_FIELDS} are answered",
            fields.len()
        ));
    }
    let required = match schema.get("required") {
        None => Vec::new(),
        Some(Value::Array(names)) => {
            let mut out = Vec::new();
            for name in names {
                match name.as_str() {
                    Some(name) => out.push(name.to_string()),
                    None => return Err("the schema's required list holds a non-string".into()),
                }
            }
            out
        }
        Some(_) => return Err("the schema's required list is not an array".into()),
    };
    Ok((fields, required))
}

/// Every field's default that fits its field.
fn defaults_of(fields: &Map<String, Value>) -> Map<String, Value> {
    fields
        .iter()
        .filter_map(|(name, field)| {
            let default = field.get("default")?;
            check_value(field, default).ok()?;
            Some((name.clone(), default.clone()))
        })
        .collect()
}

/// Accepts `content` unless it is too large to send.
fn checked(content: Map<String, Value>) -> ElicitDecision {
    let size = serde_json::to_vec(&content).map_or(usize::MAX, |bytes| bytes.len());
    if size > MAX_CONTENT_BYTES {
        return ElicitDecision::Decline(format!(
            "the answer would take {size} bytes; at most {MAX_CONTENT_BYTES} are sent"
        ));
    }
    ElicitDecision::Accept(content)
}

/// The allowed values of a choice field (`enum`, or `oneOf`/`anyOf` of
/// `const`s), if it is one.
fn choices_of(field: &Value) -> Option<Vec<&Value>> {
    if let Some(Value::Array(values)) = field.get("enum") {
        return Some(values.iter().collect());
    }
    for key in ["oneOf", "anyOf"] {
        if let Some(Value::Array(options)) = field.get(key) {
            return Some(options.iter().filter_map(|o| o.get("const")).collect());
        }
    }
    None
}

/// Whether `value` fits the primitive field `field`.
fn check_value(field: &Value, value: &Value) -> Result<(), String> {
    let Some(field) = field.as_object() else {
        return Err("the field's schema is not an object".into());
    };
    let kind = field.get("type").and_then(Value::as_str);
    match kind {
        Some("string") => {
            let Some(text) = value.as_str() else {
                return Err("expected a string".into());
            };
            let len = text.chars().count() as u64;
            if let Some(min) = field.get("minLength").and_then(Value::as_u64)
                && len < min
            {
                return Err(format!("shorter than {min} characters"));
            }
            if let Some(max) = field.get("maxLength").and_then(Value::as_u64)
                && len > max
            {
                return Err(format!("longer than {max} characters"));
            }
            if let Some(format) = field.get("format").and_then(Value::as_str) {
                check_format(format, text)?;
            }
        }
        Some("number") | Some("integer") => {
            let Some(number) = value.as_f64() else {
                return Err("expected a number".into());
            };
            if kind == Some("integer") && !(value.is_i64() || value.is_u64()) {
                return Err("expected an integer".into());
            }
            if let Some(min) = field.get("minimum").and_then(Value::as_f64)
                && number < min
            {
                return Err(format!("less than {min}"));
            }
            if let Some(max) = field.get("maximum").and_then(Value::as_f64)
                && number > max
            {
                return Err(format!("more than {max}"));
            }
        }
        Some("boolean") => {
            if !value.is_boolean() {
                return Err("expected true or false".into());
            }
        }
        Some("array") => {
            let Some(items) = value.as_array() else {
                return Err("expected an array".into());
            };
            let allowed = field.get("items").and_then(choices_of);
            for item in items {
                if !item.is_string() {
                    return Err("expected an array of strings".into());
                }
                if let Some(allowed) = &allowed
                    && !allowed.contains(&item)
                {
                    return Err(format!("{item} is not one of the choices"));
                }
            }
            let count = items.len() as u64;
            if let Some(min) = field.get("minItems").and_then(Value::as_u64)
                && count < min
            {
                return Err(format!("fewer than {min} choices"));
            }
            if let Some(max) = field.get("maxItems").and_then(Value::as_u64)
                && count > max
            {
                return Err(format!("more than {max} choices"));
            }
            return Ok(());
        }
        Some(other) => return Err(format!("fields of type {other:?} are not answered")),
        None => return Err("the field has no type".into()),
    }
    if let Some(choices) = choices_of(&Value::Object(field.clone()))
        && !choices.contains(&value)
    {
        return Err(format!("{value} is not one of the choices"));
    }
    Ok(())
}

/// The string formats of form elicitation, checked loosely.
fn check_format(format: &str, text: &str) -> Result<(), String> {
    let fits = match format {
        "email" => text
            .split_once('@')
            .is_some_and(|(user, host)| !user.is_empty() && host.contains('.')),
        "uri" => text.split_once(':').is_some_and(|(scheme, rest)| {
            !scheme.is_empty()
                && !rest.is_empty()
                && scheme
                    .chars()
                    .all(|c| c.is_ascii_alphanumeric() || "+-.".contains(c))
        }),
        "date" => chrono::NaiveDate::parse_from_str(text, "%Y-%m-%d").is_ok(),
        "date-time" => chrono::DateTime::parse_from_rfc3339(text).is_ok(),
        _ => true,
    };
    if fits {
        Ok(())
    } else {
        Err(format!("not a valid {format}"))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    /// The form of the conformance suite's defaults scenario.
    fn defaults_form() -> Value {
        json!({
            "type": "object",
            "properties": {
                "name": {"type": "string", "default": "John Doe"},
                "age": {"type": "integer", "default": 30},
                "score": {"type": "number", "default": 95.5},
                "status": {"type": "string", "enum": ["active", "inactive", "pending"], "default": "active"},
                "verified": {"type": "boolean", "default": true}
            },
            "required": ["name", "age", "score", "status", "verified"]
        })
    }

    fn accepted(decision: ElicitDecision) -> Value {
        match decision {
            ElicitDecision::Accept(content) => Value::Object(content),
            other => panic!("expected an accept, got {other:?}"),
        }
    }

    fn declined(decision: ElicitDecision) -> String {
        match decision {
            ElicitDecision::Decline(reason) => reason,
            other => panic!("expected a decline, got {other:?}"),
        }
    }

    #[test]
    fn every_required_field_with_a_default_accepts_with_the_defaults() {
        assert_eq!(
            accepted(default_elicitation(&defaults_form())),
            json!({"name": "John Doe", "age": 30, "score": 95.5, "status": "active", "verified": true})
        );
    }

    #[test]
    fn a_required_field_without_a_default_declines() {
        let schema = json!({
            "type": "object",
            "properties": {"email": {"type": "string", "format": "email"}, "n": {"type": "integer", "default": 1}},
            "required": ["email"]
        });
        assert!(declined(default_elicitation(&schema)).contains("\"email\""));
    }

    #[test]
    fn optional_fields_without_defaults_are_left_out_and_an_empty_form_accepts_empty() {
        let schema = json!({
            "type": "object",
            "properties": {"note": {"type": "string"}, "n": {"type": "integer", "default": 2}}
        });
        assert_eq!(accepted(default_elicitation(&schema)), json!({"n": 2}));
        assert_eq!(
            accepted(default_elicitation(&json!({"type": "object"}))),
            json!({})
        );
    }

    #[test]
    fn a_default_that_does_not_fit_its_field_counts_as_none() {
        let schema = json!({
            "type": "object",
            "properties": {
                "age": {"type": "integer", "default": "thirty"},
                "pick": {"type": "string", "enum": ["a", "b"], "default": "c"},
                "small": {"type": "integer", "maximum": 3, "default": 9}
            },
            "required": ["age"]
        });
        declined(default_elicitation(&schema));
        let optional = json!({"type": "object", "properties": schema["properties"].clone()});
        assert_eq!(accepted(default_elicitation(&optional)), json!({}));
    }

    #[test]
    fn hostile_schemas_decline_with_a_reason() {
        for schema in [
            json!("not a schema"),
            json!(null),
            json!({"type": "array"}),
            json!({"type": "object", "properties": []}),
            json!({"type": "object", "properties": {}, "required": "name"}),
            json!({"type": "object", "properties": {}, "required": [1]}),
            json!({"type": "object", "properties": {"x": {"type": "object", "default": {}}}, "required": ["x"]}),
            json!({"type": "object", "properties": {"x": 5}, "required": ["x"]}),
            json!({"type": "object", "properties": {"x": {"default": 1}}, "required": ["x"]}),
        ] {
            declined(default_elicitation(&schema));
        }
    }

    #[test]
    fn huge_schemas_and_huge_answers_decline() {
        let mut fields = Map::new();
        for i in 0..=MAX_FIELDS {
            fields.insert(format!("f{i}"), json!({"type": "string", "default": "x"}));
        }
        let schema = json!({"type": "object", "properties": fields});
        assert!(declined(default_elicitation(&schema)).contains("fields"));
        let big = "x".repeat(MAX_CONTENT_BYTES + 1);
        let schema =
            json!({"type": "object", "properties": {"b": {"type": "string", "default": big}}});
        assert!(declined(default_elicitation(&schema)).contains("bytes"));
    }

    #[test]
    fn deeply_nested_schemas_decline_without_recursing() {
        let mut nested = json!({"type": "string", "default": "x"});
        for _ in 0..1_000 {
            nested = json!({"type": "object", "properties": {"n": nested}, "default": {}});
        }
        let schema = json!({"type": "object", "properties": {"n": nested}, "required": ["n"]});
        declined(default_elicitation(&schema));
    }

    #[test]
    fn a_persons_answer_is_checked_against_the_schema() {
        let schema = json!({
            "type": "object",
            "properties": {
                "email": {"type": "string", "format": "email"},
                "age": {"type": "integer", "minimum": 0, "default": 20},
                "tags": {"type": "array", "items": {"enum": ["a", "b"]}, "maxItems": 2},
                "ok": {"type": "boolean"}
            },
            "required": ["email"]
        });
        let allow = ApprovalOutcome::Allow;
        assert_eq!(
            accepted(answer_elicitation(
                &schema,
                &allow,
                Some(r#"{"email": "a@b.c", "tags": ["a"]}"#)
            )),
            json!({"email": "a@b.c", "age": 20, "tags": ["a"]})
        );
        for bad in [
            r#"{"email": "nope"}"#,
            r#"{"email": "a@b.c", "age": -1}"#,
            r#"{"email": "a@b.c", "age": 1.5}"#,
            r#"{"email": "a@b.c", "tags": ["c"]}"#,
            r#"{"email": "a@b.c", "ok": "yes"}"#,
            r#"{"email": "a@b.c", "other": 1}"#,
            r#"["a@b.c"]"#,
            "not json",
        ] {
            declined(answer_elicitation(&schema, &allow, Some(bad)));
        }
        assert!(declined(answer_elicitation(&schema, &allow, None)).contains("\"email\""));
    }

    #[test]
    fn deny_declines_and_cancel_cancels() {
        let schema = defaults_form();
        declined(answer_elicitation(
            &schema,
            &ApprovalOutcome::Deny,
            Some("{}"),
        ));
        assert_eq!(
            answer_elicitation(&schema, &ApprovalOutcome::Cancel, None),
            ElicitDecision::Cancel
        );
        assert_eq!(
            accepted(answer_elicitation(
                &schema,
                &ApprovalOutcome::AllowAlways,
                Some(r#"{"name": "Ann"}"#)
            ))["name"],
            json!("Ann")
        );
    }

    #[test]
    fn the_question_lists_the_fields() {
        let text = question_of("Who are you?", &defaults_form());
        assert!(text.starts_with("Who are you?"));
        assert!(text.contains("name (string, required) [default \"John Doe\"]"));
        assert!(text.contains("status (string, required) one of \"active\""));
        let long = question_of(&"x".repeat(10_000), &json!({}));
        assert!(long.chars().count() <= MAX_QUESTION_CHARS + 1);
    }
}
