//! llm.c's token shard header: what identifies a shard and where its tokens begin.

/// The first int32 of a shard's header.
pub const MAGIC: i32 = 20240520;
/// The version of the format with uint16 tokens.
pub const VERSION: i32 = 1;
/// Header length, in int32s.
pub const HEADER_INTS: usize = 256;
