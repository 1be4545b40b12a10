/// How a [`Sampler`](crate::Sampler) maps positions to record indices.
///
/// The discriminants are part of the Python API (loaderx 0.5.0 already uses
/// `0 = SEQUENTIAL`, `1 = IID`), so they must never be renumbered.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[repr(u32)]
pub enum Mode {
    /// A sliding window over the circular index space: `0, 1, 2, …, length-1, 0, 1, …`.
    Sequential = 0,
    /// Every position independently uniform over `0..length` (with replacement).
    Iid = 1,
    /// Every epoch of `length` consecutive positions is a fresh pseudo-random
    /// permutation of `0..length` (without replacement).
    Shuffle = 2,
}

impl Mode {
    /// The mode with the given numeric value, or `None` if no mode has it.
    pub fn from_u32(value: u32) -> Option<Mode> {
        match value {
            0 => Some(Mode::Sequential),
            1 => Some(Mode::Iid),
            2 => Some(Mode::Shuffle),
            _ => None,
        }
    }

    /// The numeric value of this mode (inverse of [`Mode::from_u32`]).
    pub fn as_u32(self) -> u32 {
        self as u32
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn numeric_values_round_trip() {
        for mode in [Mode::Sequential, Mode::Iid, Mode::Shuffle] {
            assert_eq!(Mode::from_u32(mode.as_u32()), Some(mode));
        }
        assert_eq!(Mode::Sequential.as_u32(), 0);
        assert_eq!(Mode::Iid.as_u32(), 1);
        assert_eq!(Mode::Shuffle.as_u32(), 2);
        assert_eq!(Mode::from_u32(3), None);
        assert_eq!(Mode::from_u32(u32::MAX), None);
    }
}
