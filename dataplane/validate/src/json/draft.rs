//! Control path: dialects. Which keywords each draft defines, the
//! vocabularies a 2019-09/2020-12 meta-schema turns on, and the bundled
//! meta-schemas (json-schema.org's published documents, in meta/) that a
//! `$ref` or `$schema` may name without them being pushed.

use super::Draft;

/// Meta-schema documents every compile can resolve: (URI, text).
pub(crate) const BUNDLED: &[(&str, &str)] = &[
    (
        "http://json-schema.org/draft-04/schema",
        include_str!("meta/draft4.json"),
    ),
    (
        "http://json-schema.org/draft-06/schema",
        include_str!("meta/draft6.json"),
    ),
    (
        "http://json-schema.org/draft-07/schema",
        include_str!("meta/draft7.json"),
    ),
    (
        "https://json-schema.org/draft/2019-09/schema",
        include_str!("meta/draft2019-09/schema.json"),
    ),
    (
        "https://json-schema.org/draft/2019-09/meta/core",
        include_str!("meta/draft2019-09/core.json"),
    ),
    (
        "https://json-schema.org/draft/2019-09/meta/applicator",
        include_str!("meta/draft2019-09/applicator.json"),
    ),
    (
        "https://json-schema.org/draft/2019-09/meta/validation",
        include_str!("meta/draft2019-09/validation.json"),
    ),
    (
        "https://json-schema.org/draft/2019-09/meta/meta-data",
        include_str!("meta/draft2019-09/meta-data.json"),
    ),
    (
        "https://json-schema.org/draft/2019-09/meta/format",
        include_str!("meta/draft2019-09/format.json"),
    ),
    (
        "https://json-schema.org/draft/2019-09/meta/content",
        include_str!("meta/draft2019-09/content.json"),
    ),
    (
        "https://json-schema.org/draft/2020-12/schema",
        include_str!("meta/draft2020-12/schema.json"),
    ),
    (
        "https://json-schema.org/draft/2020-12/meta/core",
        include_str!("meta/draft2020-12/core.json"),
    ),
    (
        "https://json-schema.org/draft/2020-12/meta/applicator",
        include_str!("meta/draft2020-12/applicator.json"),
    ),
    (
        "https://json-schema.org/draft/2020-12/meta/unevaluated",
        include_str!("meta/draft2020-12/unevaluated.json"),
    ),
    (
        "https://json-schema.org/draft/2020-12/meta/validation",
        include_str!("meta/draft2020-12/validation.json"),
    ),
    (
        "https://json-schema.org/draft/2020-12/meta/meta-data",
        include_str!("meta/draft2020-12/meta-data.json"),
    ),
    (
        "https://json-schema.org/draft/2020-12/meta/format-annotation",
        include_str!("meta/draft2020-12/format-annotation.json"),
    ),
    (
        "https://json-schema.org/draft/2020-12/meta/format-assertion",
        include_str!("meta/draft2020-12/format-assertion.json"),
    ),
    (
        "https://json-schema.org/draft/2020-12/meta/content",
        include_str!("meta/draft2020-12/content.json"),
    ),
];

/// The draft whose standard meta-schema `uri` names (trailing `#` and an
/// `http`/`https` difference ignored), if any.
pub(crate) fn standard(uri: &str) -> Option<Draft> {
    let u = uri.trim_end_matches('#');
    let u = u
        .strip_prefix("https://")
        .or_else(|| u.strip_prefix("http://"))?;
    Some(match u {
        "json-schema.org/draft-04/schema" => Draft::Draft4,
        "json-schema.org/draft-06/schema" => Draft::Draft6,
        "json-schema.org/draft-07/schema" => Draft::Draft7,
        "json-schema.org/draft/2019-09/schema" => Draft::Draft2019_09,
        "json-schema.org/draft/2020-12/schema" => Draft::Draft2020_12,
        _ => return None,
    })
}

/// Vocabularies in force for a schema resource (2019-09 and later; older
/// drafts have everything on and format as an annotation).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Vocab {
    pub applicator: bool,
    pub unevaluated: bool,
    pub validation: bool,
    pub format_assertion: bool,
}

impl Vocab {
    pub(crate) const STANDARD: Vocab = Vocab {
        applicator: true,
        unevaluated: true,
        validation: true,
        format_assertion: false,
    };

    /// The vocabularies a meta-schema's `$vocabulary` declares, for a
    /// dialect based on `draft`. Unknown vocabularies declared `true` are
    /// an error (the specification requires refusing the schema); `false`
    /// ones are ignored.
    pub(crate) fn declared(
        draft: Draft,
        decl: &serde_json::Map<String, serde_json::Value>,
    ) -> Result<Vocab, String> {
        let mut v = Vocab {
            applicator: false,
            unevaluated: false,
            validation: false,
            format_assertion: false,
        };
        let prefix = match draft {
            Draft::Draft2019_09 => "https://json-schema.org/draft/2019-09/vocab/",
            _ => "https://json-schema.org/draft/2020-12/vocab/",
        };
        for (uri, required) in decl {
            let required = required.as_bool().unwrap_or(false);
            match uri.strip_prefix(prefix) {
                Some("core" | "meta-data" | "content" | "format-annotation") => {}
                Some("applicator") => {
                    v.applicator = true;
                    // 2019-09 has no separate unevaluated vocabulary.
                    v.unevaluated |= draft == Draft::Draft2019_09;
                }
                Some("unevaluated") => v.unevaluated = true,
                Some("validation") => v.validation = true,
                Some("format-assertion") => v.format_assertion = true,
                // 2019-09: a true format vocabulary asks for assertion.
                Some("format") if draft == Draft::Draft2019_09 => {
                    v.format_assertion = required;
                }
                _ if required => {
                    return Err(format!(
                        "the meta-schema requires vocabulary {uri:?}, which this validator does not know"
                    ));
                }
                _ => {}
            }
        }
        Ok(v)
    }
}

/// Which vocabulary a keyword belongs to, for gating.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Family {
    Core,
    Applicator,
    Unevaluated,
    Validation,
    Format,
}

/// Whether `kw` is a keyword of `draft` (with `vocab` in force).
pub(crate) fn active(draft: Draft, vocab: Vocab, kw: &str) -> bool {
    use Draft::*;
    let (family, from, until) = match kw {
        "$ref" | "definitions" => (Family::Core, Draft4, Draft2020_12),
        "id" => (Family::Core, Draft4, Draft4),
        "$id" => (Family::Core, Draft6, Draft2020_12),
        "$anchor" | "$defs" => (Family::Core, Draft2019_09, Draft2020_12),
        "$recursiveRef" | "$recursiveAnchor" => (Family::Core, Draft2019_09, Draft2019_09),
        "$dynamicRef" | "$dynamicAnchor" => (Family::Core, Draft2020_12, Draft2020_12),
        "allOf"
        | "anyOf"
        | "oneOf"
        | "not"
        | "items"
        | "properties"
        | "patternProperties"
        | "additionalProperties" => (Family::Applicator, Draft4, Draft2020_12),
        "additionalItems" => (Family::Applicator, Draft4, Draft2019_09),
        "dependencies" => (Family::Applicator, Draft4, Draft7),
        "contains" | "propertyNames" => (Family::Applicator, Draft6, Draft2020_12),
        "if" | "then" | "else" => (Family::Applicator, Draft7, Draft2020_12),
        "dependentSchemas" => (Family::Applicator, Draft2019_09, Draft2020_12),
        "prefixItems" => (Family::Applicator, Draft2020_12, Draft2020_12),
        "unevaluatedItems" | "unevaluatedProperties" => {
            (Family::Unevaluated, Draft2019_09, Draft2020_12)
        }
        "multipleOf" | "maximum" | "minimum" | "exclusiveMaximum" | "exclusiveMinimum"
        | "maxLength" | "minLength" | "pattern" | "maxItems" | "minItems" | "uniqueItems"
        | "maxProperties" | "minProperties" | "required" | "enum" | "type" => {
            (Family::Validation, Draft4, Draft2020_12)
        }
        "const" => (Family::Validation, Draft6, Draft2020_12),
        "maxContains" | "minContains" | "dependentRequired" => {
            (Family::Validation, Draft2019_09, Draft2020_12)
        }
        "format" => (Family::Format, Draft4, Draft2020_12),
        _ => return false,
    };
    if draft < from || draft > until {
        return false;
    }
    if draft < Draft2019_09 {
        return true;
    }
    match family {
        Family::Core | Family::Format => true,
        Family::Applicator => vocab.applicator,
        Family::Unevaluated => vocab.unevaluated,
        Family::Validation => vocab.validation,
    }
}

/// Whether some draft defines `kw`.
pub(crate) fn known(kw: &str) -> bool {
    [
        Draft::Draft4,
        Draft::Draft6,
        Draft::Draft7,
        Draft::Draft2019_09,
        Draft::Draft2020_12,
    ]
    .into_iter()
    .any(|d| active(d, Vocab::STANDARD, kw))
}

/// Name of a draft, for messages.
pub(crate) fn name(d: Draft) -> &'static str {
    match d {
        Draft::Draft4 => "draft-04",
        Draft::Draft6 => "draft-06",
        Draft::Draft7 => "draft-07",
        Draft::Draft2019_09 => "2019-09",
        Draft::Draft2020_12 => "2020-12",
    }
}
