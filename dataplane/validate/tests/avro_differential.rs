//! Differential test against apache-avro, an independent encoder/decoder:
//! every value it encodes must validate, and every mutated encoding it
//! refuses (or does not consume exactly) must be refused by us too.
//!
//! Where we refuse and apache-avro accepts, the reason must be one of the
//! deliberate differences (apache-avro 0.21 is more lenient there):
//! - a section that ends inside a boolean, string or union index: it decodes
//!   a null instead of failing;
//! - a tenth varint byte above 1 (it drops the bits), an int longer than
//!   5 bytes (it accepts up to 10);
//! - a block byte size that does not match the block (it ignores the size);
//! - more than ITEMS_MAX items over several blocks (it limits one block);
//! - nesting deeper than DEPTH_MAX (it has no limit).
// Tests may unwrap and expect: a failed unwrap is a failed test (clippy.toml
// covers #[test] functions; this covers their helpers).
#![cfg_attr(test, allow(clippy::unwrap_used, clippy::expect_used))]

mod common;

use std::collections::HashMap;

use apache_avro::schema::{Name, RecordSchema, Schema};
use apache_avro::types::Value;
use apache_avro::{from_avro_datum, to_avro_datum};
use common::Rng;
use proptest::prelude::*;
use sluice_validate::avro::{AvroSchema, ITEMS_MAX};

const SCHEMA: &str = r#"{"type":"record","name":"Root","namespace":"diff","fields":[
    {"name":"b","type":"boolean"},
    {"name":"i","type":"int"},
    {"name":"l","type":"long"},
    {"name":"f","type":"float"},
    {"name":"d","type":"double"},
    {"name":"by","type":"bytes"},
    {"name":"s","type":"string"},
    {"name":"e","type":{"type":"enum","name":"Color","symbols":["R","G","B"]}},
    {"name":"fx","type":{"type":"fixed","name":"Four","size":4}},
    {"name":"arr","type":{"type":"array","items":"long"}},
    {"name":"flags","type":{"type":"array","items":"boolean"}},
    {"name":"m","type":{"type":"map","values":["null","string","Four"]}},
    {"name":"nulls","type":{"type":"array","items":"null"}},
    {"name":"date","type":{"type":"int","logicalType":"date"}},
    {"name":"next","type":["null","Root"]}
]}"#;

/// Our refusals that apache-avro may accept (see the module comment).
const LENIENT_THERE: &[&str] = &[
    "section ends inside a value",
    "varint overflows 64 bits",
    "int varint longer than 5 bytes",
    "block byte size does not match its items",
    "block byte size is negative",
    "block byte size runs past the end of the section",
    "more than ITEMS_MAX array or map items",
    "nesting deeper than limits::DEPTH_MAX",
];

impl Rng {
    /// Small values most of the time, extremes sometimes.
    fn int64(&mut self) -> i64 {
        match self.below(4) {
            0 => self.below(100) as i64 - 50,
            1 => [i64::MIN, i64::MAX, 0, -1][self.below(4) as usize],
            _ => self.next() as i64 >> self.below(64),
        }
    }
    fn bytes(&mut self) -> Vec<u8> {
        (0..self.below(8)).map(|_| self.next() as u8).collect()
    }
    fn string(&mut self) -> String {
        const CHARS: &[char] = &['a', 'Z', '0', ' ', 'é', 'ß', '€', '日', '🦀'];
        (0..self.below(6))
            .map(|_| CHARS[self.below(CHARS.len() as u64) as usize])
            .collect()
    }
}

fn named(schema: &Schema, out: &mut HashMap<Name, Schema>) {
    match schema {
        Schema::Record(RecordSchema { name, fields, .. }) => {
            out.insert(name.clone(), schema.clone());
            for f in fields {
                named(&f.schema, out);
            }
        }
        Schema::Enum(e) => {
            out.insert(e.name.clone(), schema.clone());
        }
        Schema::Fixed(f) => {
            out.insert(f.name.clone(), schema.clone());
        }
        Schema::Array(a) => named(&a.items, out),
        Schema::Map(m) => named(&m.types, out),
        Schema::Union(u) => u.variants().iter().for_each(|v| named(v, out)),
        _ => {}
    }
}

/// A random value of `schema`, built with apache-avro's own types.
fn value(schema: &Schema, names: &HashMap<Name, Schema>, rng: &mut Rng, depth: usize) -> Value {
    let few = |rng: &mut Rng| if depth > 3 { 0 } else { rng.below(4) };
    match schema {
        Schema::Null => Value::Null,
        Schema::Boolean => Value::Boolean(rng.below(2) == 1),
        Schema::Int => Value::Int(rng.int64() as i32),
        Schema::Date => Value::Date(rng.int64() as i32),
        Schema::Long => Value::Long(rng.int64()),
        Schema::Float => Value::Float(f32::from_bits(rng.next() as u32)),
        Schema::Double => Value::Double(f64::from_bits(rng.next())),
        Schema::Bytes => Value::Bytes(rng.bytes()),
        Schema::String => Value::String(rng.string()),
        Schema::Enum(e) => {
            let i = rng.below(e.symbols.len() as u64) as usize;
            Value::Enum(i as u32, e.symbols[i].clone())
        }
        Schema::Fixed(f) => Value::Fixed(f.size, (0..f.size).map(|_| rng.next() as u8).collect()),
        Schema::Array(a) => Value::Array(
            (0..few(rng))
                .map(|_| value(&a.items, names, rng, depth + 1))
                .collect(),
        ),
        Schema::Map(m) => Value::Map(
            (0..few(rng))
                .map(|_| (rng.string(), value(&m.types, names, rng, depth + 1)))
                .collect(),
        ),
        Schema::Union(u) => {
            // Deep down, take the first branch (null) so recursion ends.
            let i = if depth > 3 {
                0
            } else {
                rng.below(u.variants().len() as u64) as usize
            };
            Value::Union(
                i as u32,
                Box::new(value(&u.variants()[i], names, rng, depth + 1)),
            )
        }
        Schema::Record(r) => Value::Record(
            r.fields
                .iter()
                .map(|f| (f.name.clone(), value(&f.schema, names, rng, depth + 1)))
                .collect(),
        ),
        Schema::Ref { name } => value(&names[name], names, rng, depth),
        other => panic!("the test schema has no {other:?}"),
    }
}

struct Fixture {
    theirs: Schema,
    names: HashMap<Name, Schema>,
    ours: AvroSchema,
}

fn fixture() -> Fixture {
    // apache-avro refuses single blocks over this many items, as we refuse
    // sections over ITEMS_MAX items (its default is 512 MiB).
    apache_avro::util::max_allocation_bytes(ITEMS_MAX as usize);
    let theirs = Schema::parse_str(SCHEMA).unwrap();
    let mut names = HashMap::new();
    named(&theirs, &mut names);
    Fixture {
        theirs,
        names,
        ours: AvroSchema::compile(SCHEMA, &[]).unwrap(),
    }
}

/// apache-avro's verdict: decodes, and consumes the whole section.
fn theirs_accepts(schema: &Schema, bytes: &[u8]) -> bool {
    let mut rest = bytes;
    from_avro_datum(schema, &mut rest, None).is_ok() && rest.is_empty()
}

fn mutate(bytes: &mut Vec<u8>, rng: &mut Rng) {
    for _ in 0..=rng.below(3) {
        let at = if bytes.is_empty() {
            0
        } else {
            rng.below(bytes.len() as u64) as usize
        };
        match rng.below(6) {
            0 if !bytes.is_empty() => bytes[at] ^= 1 << rng.below(8),
            1 if !bytes.is_empty() => bytes[at] = rng.next() as u8,
            2 => bytes.truncate(at),
            3 => bytes.insert(at, rng.next() as u8),
            4 if !bytes.is_empty() => {
                bytes.remove(at);
            }
            _ => bytes.push(rng.next() as u8),
        }
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(512))]

    #[test]
    fn values_encoded_by_apache_avro_validate(seed in any::<u64>()) {
        let fx = fixture();
        let mut rng = Rng(seed);
        let v = value(&fx.theirs, &fx.names, &mut rng, 0);
        let bytes = to_avro_datum(&fx.theirs, v).unwrap();
        prop_assert!(theirs_accepts(&fx.theirs, &bytes));
        prop_assert_eq!(fx.ours.validate(&bytes), Ok(()));
        // Every strict prefix is refused: a record's last field always takes
        // bytes here.
        for cut in 0..bytes.len() {
            prop_assert!(fx.ours.validate(&bytes[..cut]).is_err(), "prefix {}", cut);
        }
    }
}

/// Deterministic seeds so that both verdicts are seen and counted.
#[test]
fn mutated_encodings_agree_with_apache_avro() {
    let fx = fixture();
    let (mut both_accept, mut both_refuse, mut lenient_there) = (0, 0, 0);
    for seed in 0..3000u64 {
        let mut rng = Rng(seed);
        let v = value(&fx.theirs, &fx.names, &mut rng, 0);
        let mut bytes = to_avro_datum(&fx.theirs, v).unwrap();
        mutate(&mut bytes, &mut rng);
        let theirs = theirs_accepts(&fx.theirs, &bytes);
        match fx.ours.validate(&bytes) {
            Ok(()) => {
                assert!(
                    theirs,
                    "seed {seed}: we accept what apache-avro refuses: {bytes:?}"
                );
                both_accept += 1;
            }
            Err(e) if theirs => {
                assert!(
                    LENIENT_THERE.contains(&e.message),
                    "seed {seed}: we refuse ({e:?}) what apache-avro accepts: {bytes:?}"
                );
                lenient_there += 1;
            }
            Err(_) => both_refuse += 1,
        }
    }
    println!(
        "both accept {both_accept}, both refuse {both_refuse}, only apache-avro accepts {lenient_there}"
    );
    // Mutations must exercise both verdicts, or the comparison says little.
    assert!(
        both_accept > 100 && both_refuse > 100,
        "{both_accept} {both_refuse}"
    );
}

#[test]
fn a_deep_chain_encoded_by_apache_avro_validates() {
    let fx = fixture();
    let mut rng = Rng(7);
    // 20 levels of `next`, each a full record (apache-avro's encoder
    // recurses deeply: more overflows a test thread's stack in debug).
    let mut v = Value::Union(0, Box::new(Value::Null));
    for _ in 0..20 {
        let Value::Record(mut fields) = value(&fx.theirs, &fx.names, &mut rng, 99) else {
            unreachable!()
        };
        fields.last_mut().unwrap().1 = v;
        v = Value::Union(1, Box::new(Value::Record(fields)));
    }
    let Value::Union(1, root) = v else {
        unreachable!()
    };
    let bytes = to_avro_datum(&fx.theirs, *root).unwrap();
    assert!(theirs_accepts(&fx.theirs, &bytes));
    assert_eq!(fx.ours.validate(&bytes), Ok(()));
}
