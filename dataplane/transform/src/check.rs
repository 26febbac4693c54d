//! What a module must be before it is accepted: a component (not a core
//! module) of the `sluice:transform` world, major version 1, importing
//! nothing outside it and exporting `transformer.transform` with the
//! world's signature. Each refusal names what is wrong.

use std::fmt;

use crate::abi;

/// Why a module was refused.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum LoadError {
    /// Larger than `Limits::module_bytes_max`.
    TooLarge {
        /// Its length.
        len: usize,
        /// The limit.
        max: usize,
    },
    /// Not WebAssembly at all.
    NotWasm,
    /// A core module, not a component.
    CoreModule,
    /// The component does not validate or compile.
    Compile(String),
    /// It imports something outside the world.
    ImportOutsideWorld(String),
    /// It is built against another major version of the world.
    WrongMajor {
        /// The import or export name.
        name: String,
        /// The major version it names.
        major: u64,
    },
    /// It does not export `sluice:transform/transformer@1.x`.
    MissingExport {
        /// What it exports instead, comma-separated.
        found: String,
    },
    /// `transform` is missing from the export or has another signature, or
    /// a host function is imported with another signature.
    WrongSignature(String),
    /// It failed to instantiate (start function trapped, limits exceeded).
    Instantiate(String),
}

impl fmt::Display for LoadError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let world = abi::interface_name("*");
        match self {
            LoadError::TooLarge { len, max } => {
                write!(f, "module is {len} bytes, more than the limit of {max}")
            }
            LoadError::NotWasm => f.write_str("not a WebAssembly binary"),
            LoadError::CoreModule => f.write_str(
                "a core WebAssembly module, not a component: build it for the \
                 sluice:transform world (wasm32-wasip2, or wasm-tools component new)",
            ),
            LoadError::Compile(e) => write!(f, "the component does not compile: {e}"),
            LoadError::ImportOutsideWorld(n) => write!(
                f,
                "imports {n:?}, which is outside the world {world}: a transform may \
                 import only sluice:transform/host and sluice:transform/types"
            ),
            LoadError::WrongMajor { name, major } => write!(
                f,
                "{name:?} is version {major}.x of the world; this host runs {}.x",
                abi::VERSION.0
            ),
            LoadError::MissingExport { found } => write!(
                f,
                "does not export {:?} (it exports: {})",
                abi::interface_name(abi::EXPORT_INTERFACE),
                if found.is_empty() { "nothing" } else { found }
            ),
            LoadError::WrongSignature(e) => write!(f, "wrong signature: {e}"),
            LoadError::Instantiate(e) => write!(f, "does not instantiate: {e}"),
        }
    }
}

impl std::error::Error for LoadError {}

/// Core module and component preambles: magic, then version and layer.
const CORE_PREAMBLE: [u8; 8] = [0, b'a', b's', b'm', 1, 0, 0, 0];
const COMPONENT_PREAMBLE: [u8; 8] = [0, b'a', b's', b'm', 0x0d, 0, 1, 0];

/// Refuses what is not a component by its preamble.
pub fn preamble(bytes: &[u8]) -> Result<(), LoadError> {
    let head = bytes.get(..8).ok_or(LoadError::NotWasm)?;
    if head == CORE_PREAMBLE {
        return Err(LoadError::CoreModule);
    }
    if head[..4] != COMPONENT_PREAMBLE[..4] {
        return Err(LoadError::NotWasm);
    }
    if head != COMPONENT_PREAMBLE {
        return Err(LoadError::Compile(
            "unsupported component binary version".into(),
        ));
    }
    Ok(())
}

/// An interface name of the world: `sluice:transform/<iface>@<version>`,
/// split into the interface and the major version. `None` for names of
/// other packages.
fn world_name(name: &str) -> Option<(&str, Option<u64>)> {
    let rest = name.strip_prefix(abi::PACKAGE)?.strip_prefix('/')?;
    let (iface, version) = match rest.split_once('@') {
        Some((i, v)) => (i, Some(v)),
        None => (rest, None),
    };
    let major = version.map(|v| v.split('.').next().and_then(|m| m.parse().ok()));
    match major {
        // A version that does not parse is no version of ours.
        Some(None) => None,
        Some(Some(m)) => Some((iface, Some(m))),
        None => Some((iface, None)),
    }
}

fn check_major(name: &str, major: Option<u64>) -> Result<(), LoadError> {
    match major {
        Some(m) if m == abi::VERSION.0 => Ok(()),
        Some(m) => Err(LoadError::WrongMajor {
            name: name.to_string(),
            major: m,
        }),
        None => Err(LoadError::WrongMajor {
            name: name.to_string(),
            major: 0,
        }),
    }
}

/// Checks import names: only the world's host and types interfaces, at
/// major version 1.
pub fn imports<'a>(names: impl Iterator<Item = &'a str>) -> Result<(), LoadError> {
    for name in names {
        match world_name(name) {
            Some((iface, major))
                if iface == abi::HOST_INTERFACE || iface == abi::TYPES_INTERFACE =>
            {
                check_major(name, major)?;
            }
            Some((_, Some(m))) if m != abi::VERSION.0 => {
                return Err(LoadError::WrongMajor {
                    name: name.to_string(),
                    major: m,
                });
            }
            _ => return Err(LoadError::ImportOutsideWorld(name.to_string())),
        }
    }
    Ok(())
}

/// Finds the exported transformer interface among export names and checks
/// its major version; returns its full name.
pub fn export<'a>(names: impl Iterator<Item = &'a str> + Clone) -> Result<&'a str, LoadError> {
    for name in names.clone() {
        if let Some((iface, major)) = world_name(name)
            && iface == abi::EXPORT_INTERFACE
        {
            check_major(name, major)?;
            return Ok(name);
        }
    }
    Err(LoadError::MissingExport {
        found: names.collect::<Vec<_>>().join(", "),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_inside_and_outside_the_world() {
        assert!(
            imports(
                [
                    "sluice:transform/host@1.0.0",
                    "sluice:transform/types@1.2.0"
                ]
                .into_iter()
            )
            .is_ok()
        );
        assert_eq!(
            imports(["wasi:cli/environment@0.2.0"].into_iter()),
            Err(LoadError::ImportOutsideWorld(
                "wasi:cli/environment@0.2.0".into()
            ))
        );
        assert_eq!(
            imports(["sluice:transform/host@2.0.0"].into_iter()),
            Err(LoadError::WrongMajor {
                name: "sluice:transform/host@2.0.0".into(),
                major: 2
            })
        );
        assert!(matches!(
            imports(["sluice:transform/clock@1.0.0"].into_iter()),
            Err(LoadError::ImportOutsideWorld(_))
        ));
        assert!(matches!(
            imports(["sluice:transform/host"].into_iter()),
            Err(LoadError::WrongMajor { major: 0, .. })
        ));
        assert_eq!(
            export(["x", "sluice:transform/transformer@1.0.0"].into_iter()),
            Ok("sluice:transform/transformer@1.0.0")
        );
        assert!(matches!(
            export(["sluice:transform/transformer@3.0.0"].into_iter()),
            Err(LoadError::WrongMajor { major: 3, .. })
        ));
        assert!(matches!(
            export(["run"].into_iter()),
            Err(LoadError::MissingExport { .. })
        ));
    }

    #[test]
    fn preambles() {
        assert_eq!(preamble(b"\0asm\x01\0\0\0"), Err(LoadError::CoreModule));
        assert_eq!(preamble(b"hello world"), Err(LoadError::NotWasm));
        assert_eq!(preamble(b"\0as"), Err(LoadError::NotWasm));
        assert!(preamble(b"\0asm\x0d\0\x01\0").is_ok());
    }
}
