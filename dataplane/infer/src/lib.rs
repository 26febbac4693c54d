//! Placeholder; being written.
#![deny(unsafe_code)]
