//! Every limit the protocol layer enforces, by name, in one place.
//!
//! The parser checks each of these at the wire, before the caller buffers or
//! allocates anything a client merely claims: a command line is refused once
//! it outgrows [`Limits::line_bytes_max`], and a storage command whose data
//! block exceeds [`Limits::item_bytes_max`] is answered and swallowed without
//! ever being buffered. The protocol constants that memcached hard-codes (key
//! length, meta flag count, opaque length) are `const`s; the limits an
//! operator may tune live in [`Limits`], which is immutable once built and may
//! be shared by every connection on every thread.

use thiserror::Error;

/// Longest key, in bytes, that any command accepts (memcached's
/// `KEY_MAX_LENGTH`). For meta commands with the `b` flag this bounds the
/// base64 text on the wire, so the decoded key is shorter still.
pub const KEY_BYTES_MAX: usize = 250;

/// Default for [`Limits::line_bytes_max`]: memcached closes a connection that
/// sends 2048 bytes without a newline (unless the line is a multiget; Larder
/// counts `gat`/`gats` lines as multigets too).
pub const LINE_BYTES_MAX_DEFAULT: usize = 2048;

/// Default for [`Limits::get_line_bytes_max`]. memcached lets `get`/`gets`
/// lines grow without bound; Larder bounds them, and `gat`/`gats` lines with
/// them, so a connection's buffer is bounded too. 256 KiB holds about a
/// thousand keys of the maximum length.
pub const GET_LINE_BYTES_MAX_DEFAULT: usize = 256 * 1024;

/// Default for [`Limits::item_bytes_max`]: 1 MiB, memcached's `-I` default.
pub const ITEM_BYTES_MAX_DEFAULT: usize = 1024 * 1024;

/// Smallest value [`Limits::item_bytes_max`] may be set to (memcached's `-I`
/// floor of 1 KiB).
pub const ITEM_BYTES_MAX_FLOOR: usize = 1024;

/// Largest value [`Limits::item_bytes_max`] may be set to (memcached's `-I`
/// ceiling of 1 GiB).
pub const ITEM_BYTES_MAX_CEILING: usize = 1024 * 1024 * 1024;

/// Most whitespace-separated tokens memcached looks at in one pass over a
/// command line (its `MAX_TOKENS`, which counts a terminal pseudo-token, so
/// 23 real tokens). Multigets re-tokenize the rest of their line.
pub const LINE_TOKENS_MAX: usize = 24;

/// Most tokens a meta command line may hold, counted as memcached counts them
/// (command, key, flags and one terminal pseudo-token; its
/// `MFLAG_MAX_OPT_LENGTH`). So `mg`, `md` and `ma` take at most 17 flags and
/// `ms` (whose data length is a token too) at most 16.
pub const META_TOKENS_MAX: usize = 20;

/// Longest opaque token (`O...`, the `O` included) a meta command accepts.
pub const META_OPAQUE_BYTES_MAX: usize = 32;

/// How many leading spaces memcached tolerates before `get `/`gets ` when it
/// decides whether an over-long line is a multiget (and so may grow; Larder
/// applies it to `gat `/`gats ` too).
pub const MULTIGET_LEADING_SPACES_MAX: usize = 100;

/// Room a multiget prefix needs to be recognised: the leading spaces plus
/// `gets `.
const MULTIGET_PREFIX_BYTES_MAX: usize = MULTIGET_LEADING_SPACES_MAX + 5;

// A command line must have room for the longest ordinary request: `cas`, a
// maximal key, four maximal numbers and `noreply`.
const _: () = assert!(KEY_BYTES_MAX + 4 * 20 + 32 < LINE_BYTES_MAX_DEFAULT);
// The multiget decision reads the line's prefix; it must fit in any line that
// can be declared too long, or the outcome would depend on how bytes arrive.
const _: () = assert!(MULTIGET_PREFIX_BYTES_MAX < LINE_BYTES_MAX_DEFAULT);
const _: () = assert!(LINE_BYTES_MAX_DEFAULT <= GET_LINE_BYTES_MAX_DEFAULT);
const _: () = assert!(ITEM_BYTES_MAX_FLOOR <= ITEM_BYTES_MAX_DEFAULT);
const _: () = assert!(ITEM_BYTES_MAX_DEFAULT <= ITEM_BYTES_MAX_CEILING);
// Data lengths are parsed as memcached does, into an `i32` that must leave
// room for the trailing `\r\n`.
const _: () = assert!(ITEM_BYTES_MAX_CEILING <= (i32::MAX as usize) - 2);
const _: () = assert!(META_OPAQUE_BYTES_MAX < LINE_BYTES_MAX_DEFAULT);
const _: () = assert!(META_TOKENS_MAX < LINE_TOKENS_MAX);

/// A limit was given a value outside the range the protocol layer supports.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Error)]
pub enum LimitsError {
    /// `item_bytes_max` must lie in
    /// [`ITEM_BYTES_MAX_FLOOR`]..=[`ITEM_BYTES_MAX_CEILING`].
    #[error("item_bytes_max {requested} is outside {floor}..={ceiling}")]
    ItemBytesMax {
        /// The value asked for.
        requested: usize,
        /// [`ITEM_BYTES_MAX_FLOOR`].
        floor: usize,
        /// [`ITEM_BYTES_MAX_CEILING`].
        ceiling: usize,
    },
    /// `line_bytes_max` must hold a maximal ordinary command line and the
    /// multiget prefix, and must not exceed `get_line_bytes_max`.
    #[error(
        "line_bytes_max {requested} is outside {floor}..={ceiling} (ceiling is get_line_bytes_max)"
    )]
    LineBytesMax {
        /// The value asked for.
        requested: usize,
        /// [`LINE_BYTES_MAX_DEFAULT`] is also the floor.
        floor: usize,
        /// The current `get_line_bytes_max`.
        ceiling: usize,
    },
    /// `get_line_bytes_max` must be at least `line_bytes_max` and at most
    /// [`ITEM_BYTES_MAX_CEILING`].
    #[error(
        "get_line_bytes_max {requested} is outside {floor}..={ceiling} (floor is line_bytes_max)"
    )]
    GetLineBytesMax {
        /// The value asked for.
        requested: usize,
        /// The current `line_bytes_max`.
        floor: usize,
        /// [`ITEM_BYTES_MAX_CEILING`].
        ceiling: usize,
    },
}

/// The tunable limits [`crate::parse`] enforces. Build one at start-up,
/// share it read-only.
///
/// Invariant (checked by the setters): `LINE_BYTES_MAX_DEFAULT <=
/// line_bytes_max <= get_line_bytes_max <= ITEM_BYTES_MAX_CEILING` and
/// `ITEM_BYTES_MAX_FLOOR <= item_bytes_max <= ITEM_BYTES_MAX_CEILING`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Limits {
    item_bytes_max: usize,
    line_bytes_max: usize,
    get_line_bytes_max: usize,
}

impl Default for Limits {
    fn default() -> Self {
        Self::DEFAULT
    }
}

impl Limits {
    /// memcached's defaults: 1 MiB items, 2 KiB command lines.
    pub const DEFAULT: Limits = Limits {
        item_bytes_max: ITEM_BYTES_MAX_DEFAULT,
        line_bytes_max: LINE_BYTES_MAX_DEFAULT,
        get_line_bytes_max: GET_LINE_BYTES_MAX_DEFAULT,
    };

    /// Largest data block (value) a storage command may carry, in bytes,
    /// not counting its trailing `\r\n`. A larger one is answered with
    /// `SERVER_ERROR object too large for cache` and swallowed. (memcached
    /// counts its ~50-byte item header and the key against `-I` too; Larder
    /// counts the value alone, so a value memcached just refuses may fit.)
    pub const fn item_bytes_max(&self) -> usize {
        self.item_bytes_max
    }

    /// Longest command line, `\n` included, other than a multiget. A longer
    /// one closes the connection without a reply, as memcached does.
    pub const fn line_bytes_max(&self) -> usize {
        self.line_bytes_max
    }

    /// Longest `get`/`gets`/`gat`/`gats` command line, `\n` included. A
    /// longer one is answered with `SERVER_ERROR` and the connection is
    /// closed.
    pub const fn get_line_bytes_max(&self) -> usize {
        self.get_line_bytes_max
    }

    /// The most bytes [`crate::parse`] may ever need buffered to make
    /// progress: the largest frame it can ask for. A connection buffer of this
    /// size never overflows.
    pub const fn frame_bytes_max(&self) -> usize {
        let storage = self.line_bytes_max + self.item_bytes_max + 2;
        if storage > self.get_line_bytes_max {
            storage
        } else {
            self.get_line_bytes_max
        }
    }

    /// Returns these limits with `item_bytes_max` changed (memcached's `-I`).
    ///
    /// # Errors
    /// [`LimitsError::ItemBytesMax`] if `bytes` is outside
    /// [`ITEM_BYTES_MAX_FLOOR`]..=[`ITEM_BYTES_MAX_CEILING`].
    pub const fn with_item_bytes_max(self, bytes: usize) -> Result<Self, LimitsError> {
        if bytes < ITEM_BYTES_MAX_FLOOR || bytes > ITEM_BYTES_MAX_CEILING {
            return Err(LimitsError::ItemBytesMax {
                requested: bytes,
                floor: ITEM_BYTES_MAX_FLOOR,
                ceiling: ITEM_BYTES_MAX_CEILING,
            });
        }
        Ok(Limits {
            item_bytes_max: bytes,
            ..self
        })
    }

    /// Returns these limits with `line_bytes_max` changed.
    ///
    /// # Errors
    /// [`LimitsError::LineBytesMax`] if `bytes` is below
    /// [`LINE_BYTES_MAX_DEFAULT`] or above `get_line_bytes_max`.
    pub const fn with_line_bytes_max(self, bytes: usize) -> Result<Self, LimitsError> {
        if bytes < LINE_BYTES_MAX_DEFAULT || bytes > self.get_line_bytes_max {
            return Err(LimitsError::LineBytesMax {
                requested: bytes,
                floor: LINE_BYTES_MAX_DEFAULT,
                ceiling: self.get_line_bytes_max,
            });
        }
        Ok(Limits {
            line_bytes_max: bytes,
            ..self
        })
    }

    /// Returns these limits with `get_line_bytes_max` changed.
    ///
    /// # Errors
    /// [`LimitsError::GetLineBytesMax`] if `bytes` is below `line_bytes_max`
    /// or above [`ITEM_BYTES_MAX_CEILING`].
    pub const fn with_get_line_bytes_max(self, bytes: usize) -> Result<Self, LimitsError> {
        if bytes < self.line_bytes_max || bytes > ITEM_BYTES_MAX_CEILING {
            return Err(LimitsError::GetLineBytesMax {
                requested: bytes,
                floor: self.line_bytes_max,
                ceiling: ITEM_BYTES_MAX_CEILING,
            });
        }
        Ok(Limits {
            get_line_bytes_max: bytes,
            ..self
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn defaults_match_memcached() {
        let limits = Limits::default();
        assert_eq!(limits.item_bytes_max(), 1024 * 1024);
        assert_eq!(limits.line_bytes_max(), 2048);
        assert_eq!(KEY_BYTES_MAX, 250);
    }

    #[test]
    fn item_bytes_max_accepts_up_to_one_gibibyte() {
        let limits = Limits::DEFAULT.with_item_bytes_max(1 << 30);
        assert_eq!(limits.map(|l| l.item_bytes_max()), Ok(1 << 30));
    }

    #[test]
    fn item_bytes_max_refuses_values_out_of_range() {
        assert!(matches!(
            Limits::DEFAULT.with_item_bytes_max((1 << 30) + 1),
            Err(LimitsError::ItemBytesMax { .. })
        ));
        assert!(matches!(
            Limits::DEFAULT.with_item_bytes_max(1023),
            Err(LimitsError::ItemBytesMax { .. })
        ));
    }

    #[test]
    fn line_limits_stay_ordered() {
        assert!(Limits::DEFAULT.with_line_bytes_max(2047).is_err());
        assert!(Limits::DEFAULT
            .with_line_bytes_max(GET_LINE_BYTES_MAX_DEFAULT + 1)
            .is_err());
        assert!(Limits::DEFAULT.with_get_line_bytes_max(2047).is_err());
        let raised = Limits::DEFAULT.with_get_line_bytes_max(1 << 20);
        assert_eq!(raised.map(|l| l.get_line_bytes_max()), Ok(1 << 20));
    }

    #[test]
    fn frame_bytes_max_covers_the_largest_storage_frame() {
        let limits = Limits::DEFAULT;
        assert_eq!(limits.frame_bytes_max(), 2048 + 1024 * 1024 + 2);
    }
}
