//! [`Schema`]: the shape of a converted key, value or header, as Kafka Connect's JSON schema
//! envelope describes it.

use std::collections::BTreeMap;
use std::fmt;
use std::sync::{Arc, LazyLock};

use crate::record::Value;

/// The type of a [`Schema`], named as in Kafka Connect's `Schema.Type`.
///
/// Every integer type converts to [`Value::Int`], both float types to [`Value::Float`]; the
/// schema keeps the declared width.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum SchemaType {
    /// An 8-bit signed integer.
    Int8,
    /// A 16-bit signed integer.
    Int16,
    /// A 32-bit signed integer.
    Int32,
    /// A 64-bit signed integer.
    Int64,
    /// A single-precision float.
    Float32,
    /// A double-precision float.
    Float64,
    /// `true` or `false`.
    Boolean,
    /// UTF-8 text.
    String,
    /// Raw bytes.
    Bytes,
    /// A list whose elements follow [`Schema::items`].
    Array,
    /// Key-value pairs following [`Schema::keys`] and [`Schema::values`].
    Map,
    /// Named fields, see [`Schema::fields`].
    Struct,
}

impl SchemaType {
    /// The name Connect's `JsonConverter` writes in a schema's `type` field (`float` and
    /// `double` for the two float types).
    ///
    /// ```
    /// use kafka_share_sink::SchemaType;
    /// assert_eq!(SchemaType::Float64.json_name(), "double");
    /// assert_eq!(SchemaType::Int32.json_name(), "int32");
    /// ```
    pub fn json_name(self) -> &'static str {
        match self {
            Self::Int8 => "int8",
            Self::Int16 => "int16",
            Self::Int32 => "int32",
            Self::Int64 => "int64",
            Self::Float32 => "float",
            Self::Float64 => "double",
            Self::Boolean => "boolean",
            Self::String => "string",
            Self::Bytes => "bytes",
            Self::Array => "array",
            Self::Map => "map",
            Self::Struct => "struct",
        }
    }

    /// The type whose [`json_name`](Self::json_name) this is.
    pub fn from_json_name(name: &str) -> Option<Self> {
        Some(match name {
            "int8" => Self::Int8,
            "int16" => Self::Int16,
            "int32" => Self::Int32,
            "int64" => Self::Int64,
            "float" => Self::Float32,
            "double" => Self::Float64,
            "boolean" => Self::Boolean,
            "string" => Self::String,
            "bytes" => Self::Bytes,
            "array" => Self::Array,
            "map" => Self::Map,
            "struct" => Self::Struct,
            _ => return None,
        })
    }

    /// The smallest and largest value of an integer type; `None` for other types.
    pub(crate) fn int_range(self) -> Option<(i64, i64)> {
        match self {
            Self::Int8 => Some((i8::MIN.into(), i8::MAX.into())),
            Self::Int16 => Some((i16::MIN.into(), i16::MAX.into())),
            Self::Int32 => Some((i32::MIN.into(), i32::MAX.into())),
            Self::Int64 => Some((i64::MIN, i64::MAX)),
            _ => None,
        }
    }
}

impl fmt::Display for SchemaType {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.json_name())
    }
}

/// A named field of a struct [`Schema`].
#[derive(Debug, Clone, PartialEq)]
pub struct Field {
    name: String,
    schema: Schema,
}

impl Field {
    /// Creates a field.
    pub fn new(name: impl Into<String>, schema: Schema) -> Self {
        Self {
            name: name.into(),
            schema,
        }
    }

    /// The field name.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// The schema of the field's value.
    pub fn schema(&self) -> &Schema {
        &self.schema
    }
}

/// The schema of a key, value or header, as in Kafka Connect: a type, whether null is
/// allowed, optional name, version, doc, parameters and default, and the schemas of elements,
/// map keys and values, or struct fields.
///
/// Logical types (Connect's `Decimal`, `Date`, `Time`, `Timestamp`) keep their physical
/// type (bytes, int32, int64) and carry their meaning in [`name`](Self::name) and
/// [`parameters`](Self::parameters) (Decimal's `scale`).
///
/// ```
/// use kafka_share_sink::{Field, Schema, SchemaType, Value};
///
/// let order = Schema::new_struct(vec![
///     Field::new("id", Schema::new(SchemaType::Int64)),
///     Field::new("note", Schema::new(SchemaType::String).optional()),
/// ])
/// .with_name("shop.Order")
/// .with_version(2);
/// assert_eq!(order.schema_type(), SchemaType::Struct);
/// assert_eq!(order.field("note").unwrap().schema().is_optional(), true);
/// assert_eq!(order.name(), Some("shop.Order"));
///
/// let tags = Schema::array(Schema::new(SchemaType::String)).with_default(Value::Array(vec![]));
/// assert_eq!(tags.items().unwrap().schema_type(), SchemaType::String);
/// ```
#[derive(Debug, Clone, PartialEq)]
pub struct Schema {
    schema_type: SchemaType,
    optional: bool,
    name: Option<String>,
    version: Option<i32>,
    doc: Option<String>,
    parameters: BTreeMap<String, String>,
    default: Option<Value>,
    fields: Vec<Field>,
    items: Option<Box<Schema>>,
    keys: Option<Box<Schema>>,
    values: Option<Box<Schema>>,
}

impl Schema {
    /// A required schema of a primitive type. For arrays, maps and structs prefer
    /// [`array`](Self::array), [`map`](Self::map) and [`new_struct`](Self::new_struct), which
    /// also set the element, key, value or field schemas.
    pub fn new(schema_type: SchemaType) -> Self {
        Self {
            schema_type,
            optional: false,
            name: None,
            version: None,
            doc: None,
            parameters: BTreeMap::new(),
            default: None,
            fields: Vec::new(),
            items: None,
            keys: None,
            values: None,
        }
    }

    /// A required array of `items`.
    pub fn array(items: Schema) -> Self {
        Self {
            items: Some(Box::new(items)),
            ..Self::new(SchemaType::Array)
        }
    }

    /// A required map from `keys` to `values`.
    pub fn map(keys: Schema, values: Schema) -> Self {
        Self {
            keys: Some(Box::new(keys)),
            values: Some(Box::new(values)),
            ..Self::new(SchemaType::Map)
        }
    }

    /// A required struct with these fields, in this order.
    pub fn new_struct(fields: Vec<Field>) -> Self {
        Self {
            fields,
            ..Self::new(SchemaType::Struct)
        }
    }

    /// The same schema, allowing null.
    pub fn optional(mut self) -> Self {
        self.optional = true;
        self
    }

    /// Sets the name (e.g. `org.apache.kafka.connect.data.Decimal`).
    pub fn with_name(mut self, name: impl Into<String>) -> Self {
        self.name = Some(name.into());
        self
    }

    /// Sets the version.
    pub fn with_version(mut self, version: i32) -> Self {
        self.version = Some(version);
        self
    }

    /// Sets the documentation.
    pub fn with_doc(mut self, doc: impl Into<String>) -> Self {
        self.doc = Some(doc.into());
        self
    }

    /// Adds a parameter (e.g. Decimal's `scale`).
    pub fn with_parameter(mut self, key: impl Into<String>, value: impl Into<String>) -> Self {
        self.parameters.insert(key.into(), value.into());
        self
    }

    /// Sets the default value, used in place of a null or missing value.
    pub fn with_default(mut self, default: Value) -> Self {
        self.default = Some(default);
        self
    }

    /// The type.
    pub fn schema_type(&self) -> SchemaType {
        self.schema_type
    }

    /// True when null is allowed.
    pub fn is_optional(&self) -> bool {
        self.optional
    }

    /// The name, if any.
    pub fn name(&self) -> Option<&str> {
        self.name.as_deref()
    }

    /// The version, if any.
    pub fn version(&self) -> Option<i32> {
        self.version
    }

    /// The documentation, if any.
    pub fn doc(&self) -> Option<&str> {
        self.doc.as_deref()
    }

    /// The parameters, sorted by key.
    pub fn parameters(&self) -> &BTreeMap<String, String> {
        &self.parameters
    }

    /// The default value, if any.
    pub fn default_value(&self) -> Option<&Value> {
        self.default.as_ref()
    }

    /// The fields of a struct schema, in order; empty for other types.
    pub fn fields(&self) -> &[Field] {
        &self.fields
    }

    /// The field with this name, in a struct schema.
    pub fn field(&self, name: &str) -> Option<&Field> {
        self.fields.iter().find(|f| f.name == name)
    }

    /// The element schema of an array schema.
    pub fn items(&self) -> Option<&Schema> {
        self.items.as_deref()
    }

    /// The key schema of a map schema.
    pub fn keys(&self) -> Option<&Schema> {
        self.keys.as_deref()
    }

    /// The value schema of a map schema.
    pub fn values(&self) -> Option<&Schema> {
        self.values.as_deref()
    }
}

/// Connect's `Schema.OPTIONAL_BYTES_SCHEMA`, shared so the byte-array path does not allocate.
pub(crate) fn optional_bytes() -> Arc<Schema> {
    static SCHEMA: LazyLock<Arc<Schema>> =
        LazyLock::new(|| Arc::new(Schema::new(SchemaType::Bytes).optional()));
    Arc::clone(&SCHEMA)
}

/// Connect's `Schema.OPTIONAL_STRING_SCHEMA`, shared.
pub(crate) fn optional_string() -> Arc<Schema> {
    static SCHEMA: LazyLock<Arc<Schema>> =
        LazyLock::new(|| Arc::new(Schema::new(SchemaType::String).optional()));
    Arc::clone(&SCHEMA)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn json_names_round_trip() {
        for t in [
            SchemaType::Int8,
            SchemaType::Int16,
            SchemaType::Int32,
            SchemaType::Int64,
            SchemaType::Float32,
            SchemaType::Float64,
            SchemaType::Boolean,
            SchemaType::String,
            SchemaType::Bytes,
            SchemaType::Array,
            SchemaType::Map,
            SchemaType::Struct,
        ] {
            assert_eq!(SchemaType::from_json_name(t.json_name()), Some(t));
        }
        assert_eq!(SchemaType::from_json_name("float64"), None);
    }

    #[test]
    fn int_ranges() {
        assert_eq!(SchemaType::Int8.int_range(), Some((-128, 127)));
        assert_eq!(
            SchemaType::Int32.int_range(),
            Some((-2147483648, 2147483647))
        );
        assert_eq!(SchemaType::String.int_range(), None);
    }

    #[test]
    fn shared_schemas_are_shared() {
        assert!(Arc::ptr_eq(&optional_bytes(), &optional_bytes()));
        assert!(optional_string().is_optional());
    }
}
