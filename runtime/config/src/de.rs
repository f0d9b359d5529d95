//! Deserialising a parsed TOML tree into the file shape with errors that keep
//! their structure: which kind of problem (unknown key, unknown value, missing
//! key, wrong type or value), the names involved, and where in the text it is.
//!
//! A small serde `Deserializer` over toml's spanned tree ([`DeValue`]) whose
//! error type is [`Problem`]: serde's derived code reports unknown fields,
//! missing fields and wrong types through the constructors of
//! `serde::de::Error`, which [`Problem`] records as values instead of English
//! sentences. [`describe`] turns a problem into the configuration's own words.
//! Nothing here reads files or knows the configuration keys.

use std::fmt;
use std::ops::Range;

use serde::de::{self, IntoDeserializer, Visitor};
use toml::Spanned;
use toml::de::{DeTable, DeValue};

/// What serde found wrong, as values.
#[derive(Debug, Clone, PartialEq)]
pub(super) enum ProblemKind {
    /// A key the table does not take; `expected` lists the keys it takes.
    UnknownKey {
        /// The key as written.
        key: String,
        /// The keys the table takes.
        expected: &'static [&'static str],
    },
    /// A value not among the accepted names.
    UnknownValue {
        /// The value as written.
        value: String,
        /// The accepted names.
        expected: &'static [&'static str],
    },
    /// A required key is absent.
    MissingKey {
        /// The key.
        key: &'static str,
    },
    /// A value of the wrong type, or of the right type but out of range.
    Invalid {
        /// What was written (`integer 3`, `a table`).
        found: String,
        /// What is accepted, as the receiving type describes itself.
        expected: String,
    },
    /// An array of the wrong length.
    Length {
        /// Its length.
        len: usize,
        /// What is accepted.
        expected: String,
    },
    /// Anything a type reported in its own words.
    Other(String),
}

/// A deserialisation problem and the span of the text it is about (the
/// innermost key or value being read when it arose).
#[derive(Debug, Clone, PartialEq)]
pub(super) struct Problem {
    /// What is wrong.
    pub kind: ProblemKind,
    /// Byte range in the file, when known.
    pub span: Option<Range<usize>>,
}

impl Problem {
    fn new(kind: ProblemKind) -> Self {
        Self { kind, span: None }
    }

    /// Locates a problem that has no place yet at `span`.
    fn at(mut self, span: Range<usize>) -> Self {
        if self.span.is_none() {
            self.span = Some(span);
        }
        self
    }
}

impl fmt::Display for Problem {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&describe(&self.kind))
    }
}

impl std::error::Error for Problem {}

impl de::Error for Problem {
    fn custom<T: fmt::Display>(msg: T) -> Self {
        Self::new(ProblemKind::Other(msg.to_string()))
    }

    fn invalid_type(unexpected: de::Unexpected<'_>, expected: &dyn de::Expected) -> Self {
        Self::new(ProblemKind::Invalid {
            found: found(&unexpected),
            expected: expected.to_string(),
        })
    }

    fn invalid_value(unexpected: de::Unexpected<'_>, expected: &dyn de::Expected) -> Self {
        Self::invalid_type(unexpected, expected)
    }

    fn invalid_length(len: usize, expected: &dyn de::Expected) -> Self {
        Self::new(ProblemKind::Length {
            len,
            expected: expected.to_string(),
        })
    }

    fn unknown_variant(variant: &str, expected: &'static [&'static str]) -> Self {
        Self::new(ProblemKind::UnknownValue {
            value: variant.to_owned(),
            expected,
        })
    }

    fn unknown_field(field: &str, expected: &'static [&'static str]) -> Self {
        Self::new(ProblemKind::UnknownKey {
            key: field.to_owned(),
            expected,
        })
    }

    fn missing_field(field: &'static str) -> Self {
        Self::new(ProblemKind::MissingKey { key: field })
    }
}

/// A written value in the configuration's words.
fn found(unexpected: &de::Unexpected<'_>) -> String {
    use de::Unexpected as U;
    match unexpected {
        U::Bool(b) => format!("boolean `{b}`"),
        U::Unsigned(n) => format!("integer `{n}`"),
        U::Signed(n) => format!("integer `{n}`"),
        U::Float(x) => format!("floating point `{x}`"),
        U::Char(c) => format!("string {:?}", c.to_string()),
        U::Str(s) => format!("string {s:?}"),
        U::Map => "a table".to_owned(),
        U::Seq => "an array".to_owned(),
        other => other.to_string(),
    }
}

/// What a receiving type accepts, in the configuration's words: serde's
/// containers describe themselves as maps, sequences and structs; a TOML file
/// has tables and arrays.
fn accepted(expected: &str) -> String {
    if expected == "a map" || expected.starts_with("struct ") {
        return "a table".to_owned();
    }
    if expected == "a sequence" {
        return "an array".to_owned();
    }
    expected.to_owned()
}

/// A problem in the configuration's vocabulary (keys, tables, arrays), saying
/// what is expected.
pub(super) fn describe(kind: &ProblemKind) -> String {
    match kind {
        ProblemKind::UnknownKey { expected: [], .. } => {
            "unknown key (this table takes no keys)".to_owned()
        }
        ProblemKind::UnknownKey { expected, .. } => {
            format!("unknown key (expected one of: {})", expected.join(", "))
        }
        ProblemKind::UnknownValue { value, expected } => format!(
            "unknown value {value:?} (expected one of: {})",
            expected.join(", ")
        ),
        ProblemKind::MissingKey { key } => format!("missing required key `{key}`"),
        ProblemKind::Invalid { found, expected } => {
            format!("invalid type: {found}, expected {}", accepted(expected))
        }
        ProblemKind::Length { len, expected } => {
            format!("invalid length {len}, expected {}", accepted(expected))
        }
        ProblemKind::Other(message) => message.clone(),
    }
}

/// Deserialises `T` from a parsed document, with the key path of a problem
/// (`providers.a.model`, `.` for the top level).
pub(super) fn from_tree<T: de::DeserializeOwned>(
    tree: &Spanned<DeTable<'_>>,
) -> Result<T, serde_path_to_error::Error<Problem>> {
    serde_path_to_error::deserialize(TableDe {
        table: tree.get_ref(),
        span: tree.span(),
    })
}

/// A value of the tree.
struct ValueDe<'a, 'i> {
    value: &'a DeValue<'i>,
    span: Range<usize>,
}

impl<'a, 'i> ValueDe<'a, 'i> {
    fn of(value: &'a Spanned<DeValue<'i>>) -> Self {
        Self {
            value: value.get_ref(),
            span: value.span(),
        }
    }
}

/// A table of the tree.
struct TableDe<'a, 'i> {
    table: &'a DeTable<'i>,
    span: Range<usize>,
}

/// A key of a table.
struct KeyDe<'a> {
    key: &'a str,
    span: Range<usize>,
}

impl<'de> IntoDeserializer<'de, Problem> for ValueDe<'_, '_> {
    type Deserializer = Self;
    fn into_deserializer(self) -> Self {
        self
    }
}

impl<'de> IntoDeserializer<'de, Problem> for KeyDe<'_> {
    type Deserializer = Self;
    fn into_deserializer(self) -> Self {
        self
    }
}

/// The number in an integer's text (TOML allows `_` separators and radix
/// prefixes; the parser keeps the digits and the radix).
fn integer<'de, V: Visitor<'de>>(text: &str, radix: u32, visitor: V) -> Result<V::Value, Problem> {
    let digits: String = text.chars().filter(|c| *c != '_').collect();
    if let Ok(n) = i64::from_str_radix(&digits, radix) {
        return visitor.visit_i64(n);
    }
    if let Ok(n) = u64::from_str_radix(&digits, radix) {
        return visitor.visit_u64(n);
    }
    Err(Problem::new(ProblemKind::Other(format!(
        "integer {text} does not fit in 64 bits"
    ))))
}

/// The number in a float's text (`inf`, `nan` with signs included).
fn float<'de, V: Visitor<'de>>(text: &str, visitor: V) -> Result<V::Value, Problem> {
    let digits: String = text.chars().filter(|c| *c != '_').collect();
    let value = match digits.trim_start_matches(['+', '-']) {
        "inf" => f64::INFINITY,
        "nan" => f64::NAN,
        _ => digits
            .parse::<f64>()
            .map_err(|_| Problem::new(ProblemKind::Other(format!("invalid float {text}"))))?,
    };
    visitor.visit_f64(if digits.starts_with('-') && !value.is_sign_negative() {
        -value
    } else {
        value
    })
}

impl<'de> de::Deserializer<'de> for ValueDe<'_, '_> {
    type Error = Problem;

    fn deserialize_any<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value, Problem> {
        let span = self.span.clone();
        let result = match self.value {
            DeValue::String(s) => visitor.visit_str(s),
            DeValue::Integer(n) => integer(n.as_str(), n.radix(), visitor),
            DeValue::Float(x) => float(x.as_str(), visitor),
            DeValue::Boolean(b) => visitor.visit_bool(*b),
            DeValue::Datetime(d) => visitor.visit_string(d.to_string()),
            DeValue::Array(items) => {
                let mut seq = de::value::SeqDeserializer::new(items.iter().map(ValueDe::of));
                visitor
                    .visit_seq(&mut seq)
                    .and_then(|value| seq.end().map(|()| value))
            }
            DeValue::Table(table) => TableDe {
                table,
                span: span.clone(),
            }
            .deserialize_any(visitor),
        };
        result.map_err(|problem| problem.at(span))
    }

    fn deserialize_option<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value, Problem> {
        visitor.visit_some(self)
    }

    fn deserialize_newtype_struct<V: Visitor<'de>>(
        self,
        _name: &'static str,
        visitor: V,
    ) -> Result<V::Value, Problem> {
        visitor.visit_newtype_struct(self)
    }

    fn deserialize_enum<V: Visitor<'de>>(
        self,
        _name: &'static str,
        _variants: &'static [&'static str],
        visitor: V,
    ) -> Result<V::Value, Problem> {
        let span = self.span.clone();
        match self.value {
            DeValue::String(s) => {
                let name: de::value::StrDeserializer<'_, Problem> = s.as_ref().into_deserializer();
                visitor.visit_enum(name).map_err(|problem| problem.at(span))
            }
            _ => self.deserialize_any(visitor),
        }
    }

    serde::forward_to_deserialize_any! {
        bool i8 i16 i32 i64 i128 u8 u16 u32 u64 u128 f32 f64 char str string
        bytes byte_buf unit unit_struct seq tuple tuple_struct map struct
        identifier ignored_any
    }
}

impl<'de> de::Deserializer<'de> for TableDe<'_, '_> {
    type Error = Problem;

    fn deserialize_any<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value, Problem> {
        let span = self.span.clone();
        let mut map = de::value::MapDeserializer::new(self.table.iter().map(|(key, value)| {
            (
                KeyDe {
                    key: key.get_ref(),
                    span: key.span(),
                },
                ValueDe::of(value),
            )
        }));
        visitor
            .visit_map(&mut map)
            .and_then(|value| map.end().map(|()| value))
            .map_err(|problem| problem.at(span))
    }

    serde::forward_to_deserialize_any! {
        bool i8 i16 i32 i64 i128 u8 u16 u32 u64 u128 f32 f64 char str string
        bytes byte_buf option unit unit_struct newtype_struct seq tuple
        tuple_struct map struct enum identifier ignored_any
    }
}

impl<'de> de::Deserializer<'de> for KeyDe<'_> {
    type Error = Problem;

    fn deserialize_any<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value, Problem> {
        let span = self.span;
        visitor
            .visit_str(self.key)
            .map_err(|problem: Problem| problem.at(span))
    }

    serde::forward_to_deserialize_any! {
        bool i8 i16 i32 i64 i128 u8 u16 u32 u64 u128 f32 f64 char str string
        bytes byte_buf option unit unit_struct newtype_struct seq tuple
        tuple_struct map struct enum identifier ignored_any
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde::Deserialize;

    #[derive(Debug, Deserialize, PartialEq)]
    #[serde(deny_unknown_fields)]
    struct Shape {
        name: String,
        #[serde(default)]
        count: Option<u32>,
        #[serde(default)]
        kind: Option<Kind>,
        #[serde(default)]
        ratio: Option<f64>,
        #[serde(default)]
        tags: Vec<String>,
        #[serde(default)]
        inner: Option<Inner>,
    }

    #[derive(Debug, Deserialize, PartialEq)]
    #[serde(rename_all = "lowercase")]
    enum Kind {
        Plain,
        Fancy,
    }

    #[derive(Debug, Deserialize, PartialEq)]
    #[serde(deny_unknown_fields)]
    struct Inner {
        level: u8,
    }

    fn parse(text: &str) -> Result<Shape, (String, ProblemKind, Option<Range<usize>>)> {
        let tree = DeTable::parse(text).unwrap();
        from_tree::<Shape>(&tree).map_err(|e| {
            let path = e.path().to_string();
            let problem = e.into_inner();
            (path, problem.kind, problem.span)
        })
    }

    #[test]
    fn values_of_every_type_arrive() {
        let shape = parse(
            "name = 'n'\ncount = 1_000\nkind = 'fancy'\nratio = -0.5\ntags = ['a', 'b']\n\
             [inner]\nlevel = 0x10\n",
        )
        .unwrap();
        assert_eq!(
            shape,
            Shape {
                name: "n".into(),
                count: Some(1000),
                kind: Some(Kind::Fancy),
                ratio: Some(-0.5),
                tags: vec!["a".into(), "b".into()],
                inner: Some(Inner { level: 16 }),
            }
        );
        assert!(parse("name = 'n'\nratio = -inf\n").unwrap().ratio == Some(f64::NEG_INFINITY));
        assert!(
            parse("name = 'n'\nratio = nan\n")
                .unwrap()
                .ratio
                .unwrap()
                .is_nan()
        );
    }

    #[test]
    fn problems_are_values_with_their_place() {
        let text = "name = 'n'\n[inner]\nlevle = 1\n";
        let (path, kind, span) = parse(text).unwrap_err();
        assert_eq!(path, "inner.levle");
        assert_eq!(
            kind,
            ProblemKind::UnknownKey {
                key: "levle".into(),
                expected: &["level"],
            }
        );
        assert_eq!(&text[span.unwrap()], "levle");

        let (path, kind, _) = parse("name = 'n'\nkind = 'odd'\n").unwrap_err();
        assert_eq!(path, "kind");
        assert_eq!(
            kind,
            ProblemKind::UnknownValue {
                value: "odd".into(),
                expected: &["plain", "fancy"],
            }
        );

        let (_, kind, _) = parse("count = 1\n").unwrap_err();
        assert_eq!(kind, ProblemKind::MissingKey { key: "name" });

        let text = "name = 'n'\ncount = 'many'\n";
        let (path, kind, span) = parse(text).unwrap_err();
        assert_eq!(path, "count");
        assert!(
            matches!(kind, ProblemKind::Invalid { ref found, .. } if found == "string \"many\"")
        );
        assert_eq!(&text[span.unwrap()], "'many'");

        let (_, kind, _) = parse("name = 'n'\ninner = 3\n").unwrap_err();
        assert_eq!(
            describe(&kind),
            "invalid type: integer `3`, expected a table"
        );
        let (_, kind, _) = parse("name = 'n'\ntags = 'a'\n").unwrap_err();
        assert_eq!(
            describe(&kind),
            "invalid type: string \"a\", expected an array"
        );
        let (_, kind, _) = parse("name = 'n'\n[inner]\nlevel = 300\n").unwrap_err();
        assert_eq!(describe(&kind), "invalid type: integer `300`, expected u8");
    }

    #[test]
    fn descriptions_use_the_configuration_words() {
        let unknown = |expected| ProblemKind::UnknownKey {
            key: "x".into(),
            expected,
        };
        assert_eq!(
            describe(&unknown(&["protocol", "model"])),
            "unknown key (expected one of: protocol, model)"
        );
        assert_eq!(
            describe(&unknown(&[])),
            "unknown key (this table takes no keys)"
        );
        assert_eq!(
            describe(&ProblemKind::UnknownValue {
                value: "gemini".into(),
                expected: &["anthropic", "openai"],
            }),
            "unknown value \"gemini\" (expected one of: anthropic, openai)"
        );
        assert_eq!(
            describe(&ProblemKind::MissingKey { key: "output" }),
            "missing required key `output`"
        );
    }
}
