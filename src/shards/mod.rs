//! Shard writers, one module per format, and the `index.json` every output carries.
