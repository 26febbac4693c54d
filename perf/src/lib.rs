//! Benchmarks and load generation for Sluice.
