//! Byte-range arithmetic for one lock-owner's locks on one file
//! (RFC 8881 §9.2 / POSIX `fcntl` semantics: merge, split, upgrade,
//! downgrade).
//!
//! A lock-owner's locks on a file are kept as a sorted list of
//! non-overlapping, inclusive ranges in canonical form: two ranges of
//! the same type never touch (they would have been merged).

use crate::{LockType, StateError};

/// One locked range, inclusive on both ends (`end == u64::MAX` is "to EOF").
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Range {
    pub(crate) start: u64,
    pub(crate) end: u64,
    pub(crate) kind: LockType,
}

impl Range {
    /// Whether `self` overlaps the inclusive range `[start, end]`.
    pub(crate) fn overlaps(&self, start: u64, end: u64) -> bool {
        self.start <= end && start <= self.end
    }

    /// The NFS `offset` of this range.
    pub(crate) fn offset(&self) -> u64 {
        self.start
    }

    /// The NFS `length` of this range (`u64::MAX` means "to EOF").
    pub(crate) fn length(&self) -> u64 {
        if self.end == u64::MAX {
            u64::MAX
        } else {
            // end >= start always, and end < u64::MAX, so no overflow.
            self.end - self.start + 1
        }
    }
}

/// Validates an NFS (offset, length) pair and returns the inclusive range.
///
/// RFC 8881 §18.10.3/§18.10.4: a length of zero is `NFS4ERR_INVAL`; a
/// length of all ones means "to the end of file"; otherwise an
/// `offset + length` that does not fit in 64 bits is `NFS4ERR_INVAL`.
pub(crate) fn validate(offset: u64, length: u64) -> Result<(u64, u64), StateError> {
    if length == 0 {
        return Err(StateError::Inval);
    }
    if length == u64::MAX {
        return Ok((offset, u64::MAX));
    }
    let end_excl = offset.checked_add(length).ok_or(StateError::Inval)?;
    // length >= 1 so end_excl >= 1.
    Ok((offset, end_excl - 1))
}

/// Returns the owner's new lock list after setting `[start, end]` to
/// `kind` (`None` = unlock), POSIX style: whatever the owner held in the
/// range is replaced, partially covered ranges are split, and adjacent or
/// overlapping ranges of the same type are merged.
pub(crate) fn apply(ranges: &[Range], start: u64, end: u64, kind: Option<LockType>) -> Vec<Range> {
    let mut out: Vec<Range> = Vec::with_capacity(ranges.len() + 2);
    for r in ranges {
        if !r.overlaps(start, end) {
            out.push(*r);
            continue;
        }
        if r.start < start {
            out.push(Range {
                start: r.start,
                end: start - 1,
                kind: r.kind,
            });
        }
        if r.end > end {
            out.push(Range {
                start: end + 1,
                end: r.end,
                kind: r.kind,
            });
        }
    }
    if let Some(kind) = kind {
        out.push(Range { start, end, kind });
    }
    out.sort_by_key(|r| r.start);
    let mut merged: Vec<Range> = Vec::with_capacity(out.len());
    for r in out {
        if let Some(last) = merged.last_mut() {
            if last.kind == r.kind && last.end.checked_add(1) == Some(r.start) {
                last.end = r.end;
                continue;
            }
        }
        merged.push(r);
    }
    merged
}

#[cfg(test)]
mod tests {
    use super::*;

    fn r(start: u64, end: u64, kind: LockType) -> Range {
        Range { start, end, kind }
    }

    #[test]
    fn validate_ranges() {
        assert_eq!(validate(0, 0), Err(StateError::Inval));
        assert_eq!(validate(5, u64::MAX), Ok((5, u64::MAX)));
        assert_eq!(validate(0, 10), Ok((0, 9)));
        assert_eq!(validate(u64::MAX - 1, 1), Ok((u64::MAX - 1, u64::MAX - 1)));
        assert_eq!(validate(u64::MAX, 1), Err(StateError::Inval));
        assert_eq!(validate(2, u64::MAX - 1), Err(StateError::Inval));
        assert_eq!(validate(1, u64::MAX - 1), Ok((1, u64::MAX - 1)));
    }

    #[test]
    fn split_and_merge() {
        use LockType::*;
        let v = apply(&[], 0, 99, Some(Read));
        assert_eq!(v, vec![r(0, 99, Read)]);
        let v = apply(&v, 10, 19, Some(Write));
        assert_eq!(v, vec![r(0, 9, Read), r(10, 19, Write), r(20, 99, Read)]);
        let v = apply(&v, 10, 19, Some(Read));
        assert_eq!(v, vec![r(0, 99, Read)]);
        let v = apply(&v, 50, u64::MAX, None);
        assert_eq!(v, vec![r(0, 49, Read)]);
        let v = apply(&v, 50, u64::MAX, Some(Read));
        assert_eq!(v, vec![r(0, u64::MAX, Read)]);
        let v = apply(&v, 0, u64::MAX, None);
        assert!(v.is_empty());
    }
}
