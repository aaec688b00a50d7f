//! Streaming readers: each input format turns files into documents with provenance.
