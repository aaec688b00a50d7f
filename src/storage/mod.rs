//! Object storage: every path a command takes may be a local path or a bucket URL
//! (`s3://`, `gs://`, `az://` through the Apache Arrow `object_store` crate; `file://`;
//! `hf://datasets/...` for inputs), parsed once into a [`Location`].
//!
//! - [`location`]: the one path type and its parser (an unsupported scheme refused by name);
//! - [`guard`]: the raw-argument check that refuses a URL where a command takes none yet;
//! - [`store`]: [`Bucket`], a blocking facade over the store with errors that name the object
//!   and the operation and never carry a query string or a secret;
//! - [`lease`]: one writer per bucket output (a conditional-PUT lease object, exit 75);
//! - [`staging`], [`mirror`], [`output`]: a directory output written through a local staging
//!   copy by the unchanged local writer, uploaded as it is journaled, `index.json` last;
//! - [`file_output`]: a single-object output (distilled.json, a dropped prompts file), the
//!   files beside it first and the object last;
//! - [`settings`]: the `DLM_DATA_*` variables this layer reads;
//! - [`materialize`]: a committed bucket output copied locally for the reading commands
//!   (`inspect`, `audit --shards`, `merge`'s parts).

pub mod file_output;
pub mod guard;
pub mod lease;
pub mod location;
pub mod materialize;
pub mod mirror;
pub mod output;
pub mod settings;
pub mod staging;
pub mod store;

pub use location::{HubPath, Location, ObjectUrl, Scheme};
pub use store::Bucket;
