//! The layout of `zstd.dict`, the store's zstd dictionary (docs/FORMAT.md,
//! "The zstd dictionary"): a 16-byte header, then the dictionary as zstd's
//! trainer made it. Records of codec `zstd-dict` (tag 4) are zstd frames
//! compressed with it; the file is written once and never changes, since
//! every such record depends on it.

/// `magic` of `zstd.dict` (docs/FORMAT.md, "The zstd dictionary").
pub const DICT_MAGIC: [u8; 4] = *b"ZRDC";
/// `version` of `zstd.dict`.
pub const DICT_VERSION: u16 = 1;
/// Offset of the magic.
pub const DICT_MAGIC_OFFSET: usize = 0;
/// Offset of the version, a `u16`.
pub const DICT_VERSION_OFFSET: usize = DICT_MAGIC_OFFSET + DICT_MAGIC.len();
/// Offset of two reserved bytes, written as zero.
pub const DICT_RESERVED_OFFSET: usize = DICT_VERSION_OFFSET + size_of::<u16>();
/// Offset of the CRC32C of the dictionary bytes, a `u32`.
pub const DICT_CRC_OFFSET: usize = DICT_RESERVED_OFFSET + size_of::<u16>();
/// Offset of the dictionary's length in bytes, a `u32`.
pub const DICT_LEN_OFFSET: usize = DICT_CRC_OFFSET + size_of::<u32>();
/// Size of the header: the dictionary follows it.
pub const DICT_HEADER_LEN: usize = DICT_LEN_OFFSET + size_of::<u32>();
/// The largest dictionary a store keeps (and trains): zstd's own default
/// size for a trained dictionary.
pub const MAX_DICT_LEN: usize = 112_640;

/// A store's zstd dictionary.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Dictionary {
    /// The dictionary as zstd reads it.
    pub bytes: Vec<u8>,
    /// Its CRC32C: in the file, and what tells one dictionary from another
    /// in a thread's coder cache.
    pub crc: u32,
}

impl Dictionary {
    pub fn new(bytes: Vec<u8>) -> Dictionary {
        let crc = crc32c::crc32c(&bytes);
        Dictionary { bytes, crc }
    }

    /// The whole file: header, then the dictionary.
    pub fn to_file_bytes(&self) -> Vec<u8> {
        let mut b = vec![0u8; DICT_HEADER_LEN];
        b[DICT_MAGIC_OFFSET..DICT_VERSION_OFFSET].copy_from_slice(&DICT_MAGIC);
        b[DICT_VERSION_OFFSET..DICT_RESERVED_OFFSET].copy_from_slice(&DICT_VERSION.to_le_bytes());
        b[DICT_CRC_OFFSET..DICT_LEN_OFFSET].copy_from_slice(&self.crc.to_le_bytes());
        b[DICT_LEN_OFFSET..DICT_HEADER_LEN]
            .copy_from_slice(&(self.bytes.len() as u32).to_le_bytes());
        b.extend_from_slice(&self.bytes);
        b
    }

    /// Reads the file's bytes; says what is wrong with them, if anything.
    pub fn from_file_bytes(b: &[u8]) -> Result<Dictionary, String> {
        if b.len() < DICT_HEADER_LEN || b[DICT_MAGIC_OFFSET..DICT_VERSION_OFFSET] != DICT_MAGIC {
            return Err("zstd.dict has no ZRDC header".into());
        }
        let u32_at = |o: usize| u32::from_le_bytes([b[o], b[o + 1], b[o + 2], b[o + 3]]);
        let version = u16::from_le_bytes([b[DICT_VERSION_OFFSET], b[DICT_VERSION_OFFSET + 1]]);
        if version != DICT_VERSION {
            return Err(format!(
                "zstd.dict has version {version}, this build reads {DICT_VERSION}"
            ));
        }
        let len = u32_at(DICT_LEN_OFFSET) as usize;
        let bytes = &b[DICT_HEADER_LEN..];
        if bytes.len() != len || len > MAX_DICT_LEN {
            return Err(format!(
                "zstd.dict says its dictionary is {len} bytes; {} follow the header (at most \
                 {MAX_DICT_LEN})",
                bytes.len()
            ));
        }
        let dict = Dictionary::new(bytes.to_vec());
        if dict.crc != u32_at(DICT_CRC_OFFSET) {
            return Err("zstd.dict does not match its CRC32C: it is damaged".into());
        }
        Ok(dict)
    }
}

const _: () = assert!(DICT_HEADER_LEN == 16);
