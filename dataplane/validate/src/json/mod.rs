//! JSON Schema validation of a request's JSON section, and JSON content
//! predicates for routing (issue 8).
//!
//! [`JsonSchema::compile`] runs on the control path: it parses the schema
//! and the documents it references with serde_json, indexes their schema
//! resources (index.rs: `$id` base URIs, anchors, dialects), and flattens
//! everything into a node table (indices, no boxed tree; compile.rs and
//! keywords.rs), building a DFA for each pattern (regex.rs).
//! [`JsonSchema::validate`] runs on a worker: one strict RFC 8259 pass over
//! the section that checks the node table while it parses, with no
//! allocation and no lock, not even on error paths. Applicators (`allOf`,
//! `anyOf`, `oneOf`, `not`, `if`, `$ref`/`$dynamicRef` next to other
//! keywords, `dependentSchemas`) re-scan the value's span, which the
//! enclosing pass has already checked for syntax; `unevaluated*` adds one
//! more pass over the members the others left (validate.rs, walk.rs).
//! docs/design.md ("JSON Schema") has the dialect rules, the ECMA-262
//! differences of patterns and the limits.
//!
//! Bounded work: a validation takes at most
//! `WORK_STEPS_BASE + WORK_STEPS_PER_BYTE * section.len()` steps (a step is
//! a value visited, a byte of string, number or whitespace scanned, or a
//! member compared); past that it returns [`Invalid`] with
//! [`BUDGET_EXCEEDED`], never hangs. Recursion is bounded by
//! `DEPTH_MAX * (APPLICATOR_DEPTH_MAX + 1)` frames: values nest at most
//! `DEPTH_MAX` deep and, on one value, applicators chain at most
//! `APPLICATOR_DEPTH_MAX` deep (checked at compile time, which also refuses
//! `$ref` cycles that consume no input, the alternatives of dynamic
//! references included). Measured stack need at that worst case: under
//! 256 KiB in a release build (a debug build needs up to 4 MiB), so a
//! worker thread's default 2 MiB stack is enough. Fixed-size state instead
//! of allocation: the dynamic scope (`SCOPE_MAX` entries), evaluation bit
//! sets (`EVALUATED_MAX` bits), stack buffers for escaped keys and format
//! checks.
//!
//! Numbers compare as f64. Integer literals of any size are integers; with
//! a fraction or exponent, integrality is decided on the f64 value (so
//! beyond 2^53 every such value is an integer, and `1.0` is one).
//! Duplicate object keys (RFC 8259 leaves them to the implementation) are
//! each checked against their property's schema, and counted as written by
//! `minProperties`/`maxProperties`.
//!
//! `multipleOf` is exact for integers below 2^53 and uses a relative
//! tolerance of 1e-9 on the quotient otherwise.

mod compile;
mod draft;
mod ecma;
mod format;
mod index;
mod keywords;
mod paths;
mod predicate;
mod regex;
mod scan;
mod uri;
mod validate;
mod walk;

pub use paths::{PATH_NODES_MAX, PathSet, plain_string_at};
pub use predicate::{Predicate, Spot};

use crate::{CompileError, Invalid, Reference};

/// Most properties (declared plus required) one object schema may name.
pub const PROPERTIES_MAX: usize = 1024;
/// Most names one object schema's `required`, `dependentRequired` and
/// `dependentSchemas` (or `dependencies`) may name together (a u64 bitmask
/// tracks their presence).
pub const REQUIRED_MAX: usize = 64;
/// Most patterns in one `patternProperties`.
pub const PATTERNS_MAX: usize = 64;
/// Largest DFA (bytes of tables) one `pattern` may compile to.
pub const REGEX_DFA_BYTES_MAX: usize = 4 << 20;
/// Largest total of DFA tables one schema's patterns may need.
pub const REGEX_TOTAL_BYTES_MAX: usize = 32 << 20;
/// Most members (or items) of one object (array) that `unevaluatedProperties`
/// (`unevaluatedItems`) can track one by one: evaluation bit sets are fixed
/// arrays of this many bits. A larger instance under such a schema is
/// refused with [`EVALUATED_EXCEEDED`] unless an adjacent keyword
/// (`additionalProperties`, `items`) evaluates every member.
pub const EVALUATED_MAX: usize = 256;
/// Deepest dynamic scope (schema resources entered) a validation tracks
/// for `$dynamicRef`/`$recursiveRef`.
pub const SCOPE_MAX: usize = 256;
/// Longest property name, in bytes (escaped keys are decoded into a stack
/// buffer of this size to be compared).
pub const PROPERTY_NAME_BYTES_MAX: usize = 256;
/// Most values one `enum` may list.
pub const ENUM_VALUES_MAX: usize = 256;
/// Most subschemas in one `allOf`, `anyOf` or `oneOf`.
pub const SUBSCHEMAS_MAX: usize = 64;
/// Most positional schemas in `prefixItems` (or array-form `items`).
pub const PREFIX_ITEMS_MAX: usize = 256;
/// Longest chain of applicators (`$ref`, `allOf`, `anyOf`, `oneOf`, `not`,
/// `if`/`then`/`else`) applied to one value without descending into it.
pub const APPLICATOR_DEPTH_MAX: usize = 16;
/// Largest schema text accepted, in bytes.
pub const SCHEMA_BYTES_MAX: usize = 1 << 20;
/// Validation steps allowed per section byte (see the module docs).
pub const WORK_STEPS_PER_BYTE: usize = 64;
/// Validation steps allowed whatever the section size.
pub const WORK_STEPS_BASE: usize = 1 << 16;
/// Most segments in a predicate path.
pub const PATH_SEGMENTS_MAX: usize = 8;

/// Message of the [`Invalid`] returned when the work budget runs out.
pub const BUDGET_EXCEEDED: &str = "validation work budget exceeded";
/// Message of the [`Invalid`] returned when an object or array under
/// `unevaluated*` has more than [`EVALUATED_MAX`] members to track.
pub const EVALUATED_EXCEEDED: &str =
    "more than EVALUATED_MAX members or items to track for unevaluatedProperties/unevaluatedItems";

/// Sentinel node index: no schema (anything is valid).
pub(crate) const NONE: u32 = u32::MAX;

pub(crate) const T_NULL: u8 = 1;
pub(crate) const T_BOOL: u8 = 2;
pub(crate) const T_OBJ: u8 = 4;
pub(crate) const T_ARR: u8 = 8;
pub(crate) const T_NUM: u8 = 16;
pub(crate) const T_INT: u8 = 32;
pub(crate) const T_STR: u8 = 64;
pub(crate) const T_ANY: u8 = 127;

/// A half-open range into one of the schema's side tables.
#[derive(Debug, Clone, Copy, Default)]
pub(crate) struct Span {
    pub start: u32,
    pub end: u32,
}

impl Span {
    pub fn range(self) -> std::ops::Range<usize> {
        self.start as usize..self.end as usize
    }
    pub fn is_empty(self) -> bool {
        self.start == self.end
    }
}

/// One compiled (sub)schema. Absent keywords hold neutral values.
#[derive(Debug, Clone)]
pub(crate) struct Node {
    pub types: u8,
    pub type_msg: &'static str,
    /// Draft 4: `integer` accepts only literals without fraction or exponent.
    pub integer_literal_only: bool,
    /// The `false` schema.
    pub falsy: bool,
    /// Only a `$ref`: followed in a loop, without a frame.
    pub pure_ref: bool,
    /// Any keyword that needs more than a syntax check of the value.
    pub checks: bool,
    pub applicators: bool,
    /// Any keyword other than applicators (including `type`).
    pub own: bool,
    pub numeric: bool,
    pub minimum: f64,
    pub ex_minimum: f64,
    pub maximum: f64,
    pub ex_maximum: f64,
    pub multiple_of: f64,
    pub min_length: usize,
    pub max_length: usize,
    pub min_items: usize,
    pub max_items: usize,
    pub unique_items: bool,
    /// Positional item schemas (edges).
    pub prefix: Span,
    /// Schema of items past `prefix`.
    pub items: u32,
    pub contains: u32,
    pub min_contains: usize,
    pub max_contains: usize,
    /// Property entries, sorted by `name_order`.
    pub props: Span,
    pub required_mask: u64,
    pub additional: u32,
    pub property_names: u32,
    pub min_properties: usize,
    pub max_properties: usize,
    /// `enum` values (ranges into `const_bytes`, via `consts`).
    pub enum_values: Span,
    /// `const` value index into `consts`.
    pub konst: u32,
    pub ref_: u32,
    pub all_of: Span,
    pub any_of: Span,
    pub one_of: Span,
    pub not: u32,
    pub if_: u32,
    pub then_: u32,
    pub else_: u32,
    /// Schema resource the node belongs to (for the dynamic scope).
    pub resource: u16,
    /// `$dynamicRef`/`$recursiveRef`: index into `dyn_refs`.
    pub dyn_ref: u32,
    /// `pattern`: index into `regexes`.
    pub pattern: u32,
    /// `format`, when asserted.
    pub format: format::Format,
    /// `patternProperties`: (regex, schema) pairs.
    pub pattern_props: Span,
    /// `dependentRequired`: (trigger bit, required mask) pairs.
    pub dep_required: Span,
    /// `dependentSchemas`: (trigger bit, schema) pairs.
    pub dep_schemas: Span,
    pub uneval_props: u32,
    pub uneval_items: u32,
    /// 2020-12: items `contains` matches count as evaluated.
    pub contains_marks: bool,
}

impl Node {
    pub(crate) fn any() -> Self {
        Node {
            types: T_ANY,
            type_msg: "type mismatch",
            integer_literal_only: false,
            falsy: false,
            pure_ref: false,
            checks: false,
            applicators: false,
            own: false,
            numeric: false,
            minimum: f64::NEG_INFINITY,
            ex_minimum: f64::NEG_INFINITY,
            maximum: f64::INFINITY,
            ex_maximum: f64::INFINITY,
            multiple_of: 0.0,
            min_length: 0,
            max_length: usize::MAX,
            min_items: 0,
            max_items: usize::MAX,
            unique_items: false,
            prefix: Span::default(),
            items: NONE,
            contains: NONE,
            min_contains: 1,
            max_contains: usize::MAX,
            props: Span::default(),
            required_mask: 0,
            additional: NONE,
            property_names: NONE,
            min_properties: 0,
            max_properties: usize::MAX,
            enum_values: Span::default(),
            konst: NONE,
            ref_: NONE,
            all_of: Span::default(),
            any_of: Span::default(),
            one_of: Span::default(),
            not: NONE,
            if_: NONE,
            then_: NONE,
            else_: NONE,
            resource: 0,
            dyn_ref: NONE,
            pattern: NONE,
            format: format::Format::None,
            pattern_props: Span::default(),
            dep_required: Span::default(),
            dep_schemas: Span::default(),
            uneval_props: NONE,
            uneval_items: NONE,
            contains_marks: false,
        }
    }
}

/// The first 8 bytes of a name, zero-padded, as an integer.
#[inline]
pub(crate) fn name_head(b: &[u8]) -> u64 {
    let mut a = [0u8; 8];
    let n = b.len().min(8);
    a[..n].copy_from_slice(&b[..n]);
    u64::from_le_bytes(a)
}

/// Order of an object schema's property table: by length, then the first
/// 8 bytes as an integer, then the rest, so a lookup mostly compares
/// integers (`a_head`, `b_head` are `name_head` of `a`, `b`).
#[inline]
pub(crate) fn name_order(a: &[u8], a_head: u64, b: &[u8], b_head: u64) -> std::cmp::Ordering {
    a.len()
        .cmp(&b.len())
        .then(a_head.cmp(&b_head))
        .then_with(|| a.get(8..).cmp(&b.get(8..)))
}

/// One entry of an object schema's property table.
#[derive(Debug, Clone)]
pub(crate) struct Prop {
    pub name: Box<[u8]>,
    /// `name_head(name)`.
    pub head: u64,
    /// Schema from `properties` (NONE: any value).
    pub node: u32,
    /// Presence bit (`required`, `dependent*`), or `u8::MAX` when none.
    pub bit: u8,
    /// Named in `properties` (otherwise only in `required`, and
    /// `additionalProperties` still applies).
    pub declared: bool,
}

/// A `$dynamicRef`/`$recursiveRef`: the static target, and the
/// alternatives by resource (sorted by resource) when it is dynamic.
#[derive(Debug, Clone)]
pub(crate) struct DynRef {
    pub target: u32,
    pub candidates: Span,
}

/// A JSON Schema dialect (the `$schema` of a schema resource).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Draft {
    /// Draft 4 (`http://json-schema.org/draft-04/schema#`).
    Draft4,
    /// Draft 6 (`http://json-schema.org/draft-06/schema#`).
    Draft6,
    /// Draft 7 (`http://json-schema.org/draft-07/schema#`).
    Draft7,
    /// Draft 2019-09 (`https://json-schema.org/draft/2019-09/schema`).
    Draft2019_09,
    /// Draft 2020-12 (`https://json-schema.org/draft/2020-12/schema`).
    Draft2020_12,
}

/// What `format` does.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum FormatMode {
    /// An annotation, except where the schema's dialect opts in to the
    /// 2020-12 format-assertion vocabulary (the specification's default).
    #[default]
    Annotation,
    /// An assertion for every format the validator knows, in every draft.
    Assertion,
}

/// How a schema is read.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CompileOptions {
    /// Dialect of a schema resource without `$schema`. Draft 7 by default,
    /// as Confluent Schema Registry reads JSON schemas.
    pub default_draft: Draft,
    /// Whether `format` asserts.
    pub format: FormatMode,
}

impl Default for CompileOptions {
    fn default() -> Self {
        CompileOptions {
            default_draft: Draft::Draft7,
            format: FormatMode::Annotation,
        }
    }
}

/// A JSON Schema compiled for the data plane.
#[derive(Debug, Clone)]
pub struct JsonSchema {
    pub(crate) nodes: Vec<Node>,
    pub(crate) edges: Vec<u32>,
    pub(crate) props: Vec<Prop>,
    /// Byte ranges of canonical `enum`/`const` values in `const_bytes`.
    /// (and whether the value is a string without escapes).
    pub(crate) consts: Vec<(u32, u32, bool)>,
    pub(crate) const_bytes: Vec<u8>,
    pub(crate) regexes: Vec<regex::Regex>,
    pub(crate) pattern_props: Vec<(u32, u32)>,
    pub(crate) dep_required: Vec<(u8, u64)>,
    pub(crate) dep_schemas: Vec<(u8, u32)>,
    pub(crate) dyn_refs: Vec<DynRef>,
    /// (resource, node) alternatives of dynamic references.
    pub(crate) dyn_targets: Vec<(u16, u32)>,
    /// Some reference is dynamic: the hot path tracks the dynamic scope.
    pub(crate) dynamic: bool,
    pub(crate) root: u32,
    pub(crate) unenforced: Vec<String>,
}

impl JsonSchema {
    /// Compiles `text` with [`CompileOptions::default`]: drafts 4, 6, 7,
    /// 2019-09 and 2020-12 chosen by `$schema`, draft 7 when absent (as
    /// Confluent reads JSON schemas), `format` an annotation unless the
    /// dialect opts in. `refs` are the schemas a `$ref` may name: by their
    /// name as written, by that name resolved against the base URI, or by
    /// their own `$id`; the json-schema.org meta-schemas are built in.
    pub fn compile(text: &str, refs: &[Reference<'_>]) -> Result<JsonSchema, CompileError> {
        compile::compile(text, refs, &CompileOptions::default())
    }

    /// [`JsonSchema::compile`] with explicit options.
    pub fn compile_with(
        text: &str,
        refs: &[Reference<'_>],
        options: &CompileOptions,
    ) -> Result<JsonSchema, CompileError> {
        compile::compile(text, refs, options)
    }

    /// Checks that `section` is one well-formed JSON value (RFC 8259,
    /// UTF-8) that the schema accepts. Allocates nothing and takes no lock.
    pub fn validate(&self, section: &[u8]) -> Result<(), Invalid> {
        validate::validate(self, section)
    }

    /// Keywords present in the schema that `validate` does not enforce,
    /// each as `"<keyword> at <JSON pointer>"`, so the engine can report
    /// them.
    pub fn unenforced(&self) -> &[String] {
        &self.unenforced
    }

    /// Number of nodes in the compiled table (at most `limits::NODES_MAX`).
    pub fn node_count(&self) -> usize {
        self.nodes.len()
    }
}
