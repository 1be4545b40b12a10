//! Packing variable-length samples into rows of a fixed length.
//!
//! A window of samples, in order, is placed into rows of `row_length`
//! tokens: each sample (or piece of one) goes into the first row with room
//! for it ([`PackMethod::FirstFit`]) or the fullest row with room for it
//! ([`PackMethod::BestFit`]), a new row when none has room. A sample longer
//! than a row is cut into rows' worth and a last piece
//! ([`LongSamples::Split`]), or left out ([`LongSamples::Drop`]). Within a
//! row, pieces follow each other in placement order, numbered 1, 2, ... as
//! segments; the rest of the row is padding (segment 0).
//!
//! The placement is a pure function of the lengths, so a window packs the
//! same way whoever packs it; both searches take O(log rows) per piece.

use std::collections::BTreeSet;

/// Where a piece goes when several rows have room.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum PackMethod {
    /// The first (oldest) row with room.
    FirstFit,
    /// The row with the least room that still fits, the oldest of equals.
    BestFit,
}

/// What happens to a sample longer than a row.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum LongSamples {
    /// Cut into pieces of a row's length and a last, shorter piece.
    Split,
    /// Left out of the rows.
    Drop,
}

/// One piece of a sample in a row.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Piece {
    /// The sample's place in the window.
    pub sample: u32,
    /// The piece's first token in the sample.
    pub start: u32,
    /// Its tokens.
    pub len: u32,
    /// Its row.
    pub row: u32,
    /// Its first token's place in the row.
    pub offset: u32,
    /// Its segment number in the row, from 1.
    pub segment: u32,
}

/// A window packed into rows.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Packed {
    /// How many rows the window fills.
    pub rows: u32,
    /// Every piece, in placement order.
    pub pieces: Vec<Piece>,
    /// The samples left out ([`LongSamples::Drop`]).
    pub dropped: Vec<u32>,
}

/// Packs samples of `lengths` tokens into rows of `row_length` (at least
/// 1). Empty samples take no place.
pub fn pack(lengths: &[u32], row_length: u32, method: PackMethod, long: LongSamples) -> Packed {
    assert!(row_length > 0, "rows need room for a token");
    let mut rows = Rows::new(method, row_length);
    let mut packed = Packed::default();
    for (sample, &len) in (0u32..).zip(lengths) {
        if len > row_length && long == LongSamples::Drop {
            packed.dropped.push(sample);
            continue;
        }
        let mut start = 0;
        while start < len {
            let piece = (len - start).min(row_length);
            let (row, offset, segment) = rows.place(piece);
            packed.pieces.push(Piece {
                sample,
                start,
                len: piece,
                row,
                offset,
                segment,
            });
            start += piece;
        }
    }
    packed.rows = rows.fill.len() as u32;
    packed
}

/// The rows opened so far and the search for one with room.
struct Rows {
    row_length: u32,
    /// Tokens and segments in each open row.
    fill: Vec<u32>,
    segments: Vec<u32>,
    search: Search,
}

enum Search {
    /// A max-tree over every row's room (rows not yet opened have a whole
    /// row's room), to find the leftmost row with room in O(log rows).
    FirstFit { room: Vec<u32>, leaves: usize },
    /// The open rows by (room, row).
    BestFit(BTreeSet<(u32, u32)>),
}

impl Rows {
    fn new(method: PackMethod, row_length: u32) -> Rows {
        let search = match method {
            PackMethod::FirstFit => Search::FirstFit {
                room: vec![row_length; 2],
                leaves: 1,
            },
            PackMethod::BestFit => Search::BestFit(BTreeSet::new()),
        };
        Rows {
            row_length,
            fill: Vec::new(),
            segments: Vec::new(),
            search,
        }
    }

    /// Places a piece of `len` tokens (`1..=row_length`): its row, offset
    /// and segment.
    fn place(&mut self, len: u32) -> (u32, u32, u32) {
        let row = match &mut self.search {
            Search::FirstFit { room, leaves } => {
                if self.fill.len() == *leaves {
                    // Twice the leaves, the new ones with a whole row's room.
                    let old = std::mem::take(room);
                    *leaves *= 2;
                    *room = vec![self.row_length; 2 * *leaves];
                    room[*leaves..*leaves + old.len() / 2].copy_from_slice(&old[old.len() / 2..]);
                    for node in (1..*leaves).rev() {
                        room[node] = room[2 * node].max(room[2 * node + 1]);
                    }
                }
                // The leftmost leaf with room: there is one, an unopened row.
                let mut node = 1;
                while node < *leaves {
                    node = if room[2 * node] >= len {
                        2 * node
                    } else {
                        2 * node + 1
                    };
                }
                let row = node - *leaves;
                room[node] -= len;
                while node > 1 {
                    node /= 2;
                    room[node] = room[2 * node].max(room[2 * node + 1]);
                }
                row
            }
            Search::BestFit(open) => match open.range((len, 0)..).next().copied() {
                Some((room, row)) => {
                    open.remove(&(room, row));
                    if room > len {
                        open.insert((room - len, row));
                    }
                    row as usize
                }
                None => {
                    let row = self.fill.len();
                    if self.row_length > len {
                        open.insert((self.row_length - len, row as u32));
                    }
                    row
                }
            },
        };
        if row == self.fill.len() {
            self.fill.push(0);
            self.segments.push(0);
        }
        let offset = self.fill[row];
        self.fill[row] += len;
        self.segments[row] += 1;
        (row as u32, offset, self.segments[row])
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rows_of(p: &Packed) -> Vec<Vec<(u32, u32)>> {
        let mut rows = vec![Vec::new(); p.rows as usize];
        for piece in &p.pieces {
            rows[piece.row as usize].push((piece.sample, piece.len));
        }
        rows
    }

    #[test]
    fn first_fit_takes_the_oldest_row_best_fit_the_fullest() {
        // Rows of 10: 6 and 7 open two rows (4 and 3 left); 3 goes into the
        // first with first-fit, the second (fuller) with best-fit.
        let lengths = [6, 7, 3];
        let first = pack(&lengths, 10, PackMethod::FirstFit, LongSamples::Split);
        assert_eq!(rows_of(&first), [vec![(0, 6), (2, 3)], vec![(1, 7)]]);
        let best = pack(&lengths, 10, PackMethod::BestFit, LongSamples::Split);
        assert_eq!(rows_of(&best), [vec![(0, 6)], vec![(1, 7), (2, 3)]]);
        assert_eq!(best.pieces[2].offset, 7);
        assert_eq!(best.pieces[2].segment, 2);
    }

    #[test]
    fn long_samples_split_or_drop() {
        let split = pack(&[25, 0, 4], 10, PackMethod::FirstFit, LongSamples::Split);
        let pieces: Vec<_> = split
            .pieces
            .iter()
            .map(|p| (p.sample, p.start, p.len, p.row))
            .collect();
        assert_eq!(
            pieces,
            [(0, 0, 10, 0), (0, 10, 10, 1), (0, 20, 5, 2), (2, 0, 4, 2)]
        );
        let dropped = pack(&[25, 3], 10, PackMethod::BestFit, LongSamples::Drop);
        assert_eq!((dropped.dropped, dropped.rows), (vec![0], 1));
    }
}
