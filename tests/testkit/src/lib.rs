//! Tools the VM suites run: `label-observer` and `relabel-bench`.
