//! Reads the `schema` part of a JsonConverter envelope into a [`Schema`].

use std::collections::BTreeMap;

use super::path::Path;
use super::payload::{CopyBudget, to_value};
use super::tree::{Json, MAX_DEPTH};
use crate::convert::schema::{Field, Schema, SchemaType};

const TYPES: &str = "int8, int16, int32, int64, float, double, boolean, string, bytes, array, map, \
                     struct";

/// The schema described by `json`, as Connect's `JsonConverter.asConnectSchema` reads it;
/// the error says where and what is wrong.
pub(crate) fn parse_schema(
    json: &Json,
    path: &Path<'_>,
    depth: usize,
    budget: &mut CopyBudget,
) -> Result<Schema, String> {
    if depth > MAX_DEPTH {
        return Err(format!(
            "{path}: schema nested deeper than {MAX_DEPTH} levels"
        ));
    }
    let Json::Object(_) = json else {
        return Err(format!(
            "{path}: a schema must be an object, found {}",
            json.kind()
        ));
    };
    let schema_type = match json.member("type") {
        Some(Json::String(name)) => SchemaType::from_json_name(name).ok_or_else(|| {
            format!("{path}.type: unknown schema type `{name}`; expected one of {TYPES}")
        })?,
        Some(other) => {
            return Err(format!(
                "{path}.type: must be a string (one of {TYPES}), found {}",
                other.kind()
            ));
        }
        None => return Err(format!("{path}: a schema needs a `type` (one of {TYPES})")),
    };
    let mut schema = match schema_type {
        SchemaType::Array => {
            let items = required_member(json, path, "an array", "items")?;
            Schema::array(parse_schema(
                items,
                &path.member("items"),
                depth + 1,
                budget,
            )?)
        }
        SchemaType::Map => {
            let keys = required_member(json, path, "a map", "keys")?;
            let values = required_member(json, path, "a map", "values")?;
            Schema::map(
                parse_schema(keys, &path.member("keys"), depth + 1, budget)?,
                parse_schema(values, &path.member("values"), depth + 1, budget)?,
            )
        }
        SchemaType::Struct => Schema::new_struct(parse_fields(json, path, depth, budget)?),
        primitive => Schema::new(primitive),
    };
    match json.member("optional") {
        None | Some(Json::Null) | Some(Json::Bool(false)) => {}
        Some(Json::Bool(true)) => schema = schema.optional(),
        Some(other) => {
            return Err(format!(
                "{path}.optional: must be true or false, found {}",
                other.kind()
            ));
        }
    }
    if let Some(name) = optional_string(json, path, "name")? {
        schema = schema.with_name(name);
    }
    if let Some(doc) = optional_string(json, path, "doc")? {
        schema = schema.with_doc(doc);
    }
    match json.member("version") {
        None | Some(Json::Null) => {}
        Some(Json::Int(v)) if i32::try_from(*v).is_ok() => {
            schema = schema.with_version(*v as i32);
        }
        Some(other) => {
            return Err(format!(
                "{path}.version: must be a 32-bit integer, found {}",
                other.kind()
            ));
        }
    }
    match json.member("parameters") {
        None | Some(Json::Null) => {}
        Some(Json::Object(members)) => {
            let mut parameters = BTreeMap::new();
            for (key, value) in members {
                let Json::String(value) = value else {
                    return Err(format!(
                        "{path}.parameters.{key}: must be a string, found {}",
                        value.kind()
                    ));
                };
                parameters.insert(key.clone(), value.clone());
            }
            for (key, value) in parameters {
                schema = schema.with_parameter(key, value);
            }
        }
        Some(other) => {
            return Err(format!(
                "{path}.parameters: must be an object of strings, found {}",
                other.kind()
            ));
        }
    }
    match json.member("default") {
        None | Some(Json::Null) => {}
        Some(default) => {
            let default_path = path.member("default");
            let value = to_value(&schema, default.clone(), &default_path, true, depth, budget)?;
            schema = schema.with_default(value);
        }
    }
    Ok(schema)
}

fn required_member<'j>(
    json: &'j Json,
    path: &Path<'_>,
    what: &str,
    name: &str,
) -> Result<&'j Json, String> {
    match json.member(name) {
        None | Some(Json::Null) => Err(format!("{path}: {what} schema needs `{name}`")),
        Some(member) => Ok(member),
    }
}

fn optional_string(json: &Json, path: &Path<'_>, name: &str) -> Result<Option<String>, String> {
    match json.member(name) {
        None | Some(Json::Null) => Ok(None),
        Some(Json::String(s)) => Ok(Some(s.clone())),
        Some(other) => Err(format!(
            "{path}.{name}: must be a string, found {}",
            other.kind()
        )),
    }
}

fn parse_fields(
    json: &Json,
    path: &Path<'_>,
    depth: usize,
    budget: &mut CopyBudget,
) -> Result<Vec<Field>, String> {
    let fields_path = path.member("fields");
    let entries = match json.member("fields") {
        Some(Json::Array(entries)) => entries,
        Some(other) => {
            return Err(format!(
                "{fields_path}: must be an array of fields, found {}",
                other.kind()
            ));
        }
        None => return Err(format!("{path}: a struct schema needs `fields`")),
    };
    let mut fields: Vec<Field> = Vec::with_capacity(entries.len());
    for (i, entry) in entries.iter().enumerate() {
        let field_path = fields_path.index(i);
        let name = match entry.member("field") {
            Some(Json::String(name)) => name,
            _ => {
                return Err(format!(
                    "{field_path}: a struct field needs its name in a string `field`"
                ));
            }
        };
        if fields.iter().any(|f| f.name() == name) {
            return Err(format!("{field_path}: field `{name}` appears twice"));
        }
        fields.push(Field::new(
            name.clone(),
            parse_schema(entry, &field_path, depth + 1, budget)?,
        ));
    }
    Ok(fields)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(text: &str) -> Result<Schema, String> {
        parse_schema(
            &Json::parse(text.as_bytes()).unwrap(),
            &Path::Root("schema"),
            0,
            &mut CopyBudget::for_input(text.len()),
        )
    }

    #[test]
    fn reads_every_attribute() {
        let schema = parse(
            r#"{"type":"struct","name":"shop.Order","version":3,"doc":"an order","optional":true,
                "fields":[
                  {"field":"id","type":"int64"},
                  {"field":"price","type":"bytes","name":"org.apache.kafka.connect.data.Decimal",
                   "parameters":{"scale":"2"}},
                  {"field":"tags","type":"array","items":{"type":"string"},"default":["new"]},
                  {"field":"attrs","type":"map","keys":{"type":"int32"},"values":{"type":"double","optional":true}}
                ]}"#,
        )
        .unwrap();
        assert_eq!(schema.schema_type(), SchemaType::Struct);
        assert!(schema.is_optional());
        assert_eq!(schema.name(), Some("shop.Order"));
        assert_eq!(schema.version(), Some(3));
        assert_eq!(schema.doc(), Some("an order"));
        let names: Vec<&str> = schema.fields().iter().map(Field::name).collect();
        assert_eq!(names, ["id", "price", "tags", "attrs"]);
        let price = schema.field("price").unwrap().schema();
        assert_eq!(
            price.parameters().get("scale").map(String::as_str),
            Some("2")
        );
        let tags = schema.field("tags").unwrap().schema();
        assert_eq!(
            tags.default_value(),
            Some(&crate::record::Value::Array(vec!["new".into()]))
        );
        let attrs = schema.field("attrs").unwrap().schema();
        assert_eq!(attrs.keys().unwrap().schema_type(), SchemaType::Int32);
        assert!(attrs.values().unwrap().is_optional());
    }

    #[test]
    fn errors_say_where() {
        let cases = [
            (r#"{"optional":true}"#, "schema: a schema needs a `type`"),
            (
                r#"{"type":"float64"}"#,
                "schema.type: unknown schema type `float64`",
            ),
            (r#"{"type":7}"#, "schema.type: must be a string"),
            (
                r#"{"type":"array"}"#,
                "schema: an array schema needs `items`",
            ),
            (
                r#"{"type":"map","keys":{"type":"string"}}"#,
                "schema: a map schema needs `values`",
            ),
            (
                r#"{"type":"struct","fields":{}}"#,
                "schema.fields: must be an array",
            ),
            (
                r#"{"type":"struct","fields":[{"type":"int8"}]}"#,
                "schema.fields[0]: a struct field needs its name",
            ),
            (
                r#"{"type":"struct","fields":[{"field":"a","type":"int8"},{"field":"a","type":"int8"}]}"#,
                "schema.fields[1]: field `a` appears twice",
            ),
            (
                r#"{"type":"int8","optional":"yes"}"#,
                "schema.optional: must be true or false",
            ),
            (
                r#"{"type":"int8","version":1.5}"#,
                "schema.version: must be a 32-bit integer",
            ),
            (
                r#"{"type":"int8","default":300}"#,
                "schema.default: 300 is out of range for int8",
            ),
            (
                r#"[]"#,
                "schema: a schema must be an object, found an array",
            ),
        ];
        for (text, expected) in cases {
            let err = parse(text).unwrap_err();
            assert!(err.starts_with(expected), "{text}: {err}");
        }
    }
}
