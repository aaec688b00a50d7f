//! Typed access to Arrow columns, tolerant of the layouts the Hub serves (Utf8 / LargeUtf8 /
//! Utf8View strings, List / LargeList choices, any integer answer), and a parquet row as a
//! JSON object ([`value_at`], [`batch_rows`]) for the readers that want values (mcq, decontam,
//! [`super::RowReader::values`]).

use arrow::array::{Array, ArrayRef, AsArray, RecordBatch};
use arrow::datatypes::{
    DataType, Float32Type, Float64Type, Int16Type, Int32Type, Int64Type, Int8Type, UInt16Type,
    UInt32Type, UInt64Type, UInt8Type,
};
use serde_json::{Map, Value};

/// The string at row `i`, `None` when null or not a string column.
pub fn str_at(col: &dyn Array, i: usize) -> Option<&str> {
    if col.is_null(i) {
        return None;
    }
    match col.data_type() {
        DataType::Utf8 => Some(col.as_string::<i32>().value(i)),
        DataType::LargeUtf8 => Some(col.as_string::<i64>().value(i)),
        DataType::Utf8View => Some(col.as_string_view().value(i)),
        _ => None,
    }
}

/// The integer at row `i`, `None` when null or not an integer column.
pub fn int_at(col: &dyn Array, i: usize) -> Option<i64> {
    if col.is_null(i) {
        return None;
    }
    Some(match col.data_type() {
        DataType::Int64 => col.as_primitive::<Int64Type>().value(i),
        DataType::Int32 => col.as_primitive::<Int32Type>().value(i) as i64,
        DataType::Int16 => col.as_primitive::<Int16Type>().value(i) as i64,
        DataType::Int8 => col.as_primitive::<Int8Type>().value(i) as i64,
        DataType::UInt64 => i64::try_from(col.as_primitive::<UInt64Type>().value(i)).ok()?,
        DataType::UInt32 => col.as_primitive::<UInt32Type>().value(i) as i64,
        DataType::UInt16 => col.as_primitive::<UInt16Type>().value(i) as i64,
        DataType::UInt8 => col.as_primitive::<UInt8Type>().value(i) as i64,
        // ClassLabel stored as a dictionary of strings: take the key.
        DataType::Dictionary(_, _) => {
            let d = col.as_any_dictionary();
            return int_at(d.keys(), i);
        }
        _ => return None,
    })
}

/// The list of strings at row `i` (`None` when null, not a list, or holding a null).
pub fn str_list_at(col: &dyn Array, i: usize) -> Option<Vec<String>> {
    if col.is_null(i) {
        return None;
    }
    let values: ArrayRef = match col.data_type() {
        DataType::List(_) => col.as_list::<i32>().value(i),
        DataType::LargeList(_) => col.as_list::<i64>().value(i),
        DataType::FixedSizeList(_, _) => col.as_fixed_size_list().value(i),
        _ => return None,
    };
    (0..values.len())
        .map(|j| str_at(values.as_ref(), j).map(str::to_string))
        .collect()
}

/// Row `i` of `col` as JSON (null, string, integer, float, bool, list, struct; others null).
pub fn value_at(col: &dyn Array, i: usize) -> Value {
    if col.is_null(i) {
        return Value::Null;
    }
    if let Some(s) = str_at(col, i) {
        return Value::String(s.to_string());
    }
    if let Some(n) = int_at(col, i) {
        return Value::from(n);
    }
    match col.data_type() {
        DataType::Boolean => Value::Bool(col.as_boolean().value(i)),
        DataType::Float64 => Value::from(col.as_primitive::<Float64Type>().value(i)),
        DataType::Float32 => Value::from(col.as_primitive::<Float32Type>().value(i) as f64),
        DataType::List(_) | DataType::LargeList(_) | DataType::FixedSizeList(_, _) => {
            let v = match col.data_type() {
                DataType::List(_) => col.as_list::<i32>().value(i),
                DataType::LargeList(_) => col.as_list::<i64>().value(i),
                _ => col.as_fixed_size_list().value(i),
            };
            Value::Array((0..v.len()).map(|j| value_at(v.as_ref(), j)).collect())
        }
        DataType::Struct(_) => {
            let s = col.as_struct();
            let mut m = Map::new();
            for (f, c) in s.fields().iter().zip(s.columns()) {
                m.insert(f.name().clone(), value_at(c.as_ref(), i));
            }
            Value::Object(m)
        }
        _ => Value::Null,
    }
}

/// Every row of `b` as a JSON object, appended to `out`.
pub fn batch_rows(b: &RecordBatch, out: &mut Vec<Value>) {
    let schema = b.schema();
    for i in 0..b.num_rows() {
        let mut m = Map::new();
        for (f, c) in schema.fields().iter().zip(b.columns()) {
            m.insert(f.name().clone(), value_at(c.as_ref(), i));
        }
        out.push(Value::Object(m));
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use arrow::array::{Int64Array, LargeStringArray, ListBuilder, StringBuilder};

    #[test]
    fn accessors() {
        let s = LargeStringArray::from(vec![Some("a"), None]);
        assert_eq!(str_at(&s, 0), Some("a"));
        assert_eq!(str_at(&s, 1), None);
        let n = Int64Array::from(vec![3]);
        assert_eq!(int_at(&n, 0), Some(3));
        assert_eq!(str_at(&n, 0), None);
        let mut b = ListBuilder::new(StringBuilder::new());
        b.values().append_value("x");
        b.values().append_value("y");
        b.append(true);
        let l = b.finish();
        assert_eq!(str_list_at(&l, 0), Some(vec!["x".into(), "y".into()]));
    }
}
