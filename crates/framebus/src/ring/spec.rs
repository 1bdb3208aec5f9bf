//! What a stream holds: the frame spec (dtype, shape) and the ring geometry chosen at creation.

use super::layout::{Geometry, DTYPE_LEN, MAX_META, MAX_NDIM, MAX_READERS, MAX_SLOTS};
use crate::error::{Error, Result};

/// Parameters of a new stream.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct StreamSpec {
    /// NumPy dtype descriptor string (`dtype.str`), for example `<f4` or `|u1`.
    pub dtype: String,
    /// Bytes per element.
    pub itemsize: u32,
    /// Frame shape (1 to 8 dimensions, each at least 1).
    pub shape: Vec<u64>,
    /// Frames in the ring (2 to 64).
    pub slots: u32,
    /// Bytes of user metadata each frame can carry.
    pub meta_capacity: u32,
    /// Handles that may be attached at once.
    pub max_readers: u32,
}

impl StreamSpec {
    /// A spec with the default ring (4 slots, 256 metadata bytes, 64 handles).
    pub fn new(dtype: impl Into<String>, itemsize: u32, shape: Vec<u64>) -> StreamSpec {
        StreamSpec { dtype: dtype.into(), itemsize, shape, slots: 4, meta_capacity: 256, max_readers: 64 }
    }

    /// Bytes of one frame.
    pub fn frame_bytes(&self) -> Option<u64> {
        self.shape.iter().try_fold(u64::from(self.itemsize), |acc, &d| acc.checked_mul(d))
    }

    /// Checks every field and lays out the segment.
    pub fn geometry(&self) -> Result<Geometry> {
        let bad = |msg: String| Err(Error::InvalidArgument(msg));
        if self.shape.is_empty() || self.shape.len() > MAX_NDIM {
            return bad(format!("shape must have 1 to {MAX_NDIM} dimensions, got {:?}", self.shape));
        }
        if self.shape.contains(&0) {
            return bad(format!("shape dimensions must be positive, got {:?}", self.shape));
        }
        if self.itemsize == 0 {
            return bad("dtype itemsize must be positive".into());
        }
        if self.dtype.is_empty() || self.dtype.len() >= DTYPE_LEN || !self.dtype.is_ascii() {
            return bad(format!("dtype descriptor {:?} must be 1 to {} ASCII characters", self.dtype, DTYPE_LEN - 1));
        }
        if !(2..=MAX_SLOTS).contains(&self.slots) {
            return bad(format!("slots must be between 2 and {MAX_SLOTS}, got {}", self.slots));
        }
        if self.meta_capacity > MAX_META {
            return bad(format!("meta_capacity must be at most {MAX_META} bytes, got {}", self.meta_capacity));
        }
        if !(1..=MAX_READERS).contains(&self.max_readers) {
            return bad(format!("max_readers must be between 1 and {MAX_READERS}, got {}", self.max_readers));
        }
        let frame_bytes = self
            .frame_bytes()
            .filter(|&b| b <= isize::MAX as u64 / 128)
            .ok_or_else(|| Error::InvalidArgument(format!("a frame of shape {:?} and itemsize {} is too large", self.shape, self.itemsize)))?;
        Geometry::new(self.slots, self.max_readers, frame_bytes, self.meta_capacity)
            .filter(|g| g.total_bytes <= isize::MAX as u64 / 2)
            .ok_or_else(|| Error::InvalidArgument(format!("{} slots of {frame_bytes} bytes are too large", self.slots)))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn validates_fields() {
        let ok = StreamSpec::new("<f4", 4, vec![128, 128]);
        assert_eq!(ok.geometry().unwrap().frame_bytes, 65536);
        for bad in [
            StreamSpec { shape: vec![], ..ok.clone() },
            StreamSpec { shape: vec![1, 0], ..ok.clone() },
            StreamSpec { shape: vec![1; 9], ..ok.clone() },
            StreamSpec { slots: 1, ..ok.clone() },
            StreamSpec { slots: 65, ..ok.clone() },
            StreamSpec { max_readers: 0, ..ok.clone() },
            StreamSpec { shape: vec![u64::MAX, 2], ..ok.clone() },
            StreamSpec { dtype: "x".repeat(40), ..ok.clone() },
        ] {
            assert!(matches!(bad.geometry(), Err(Error::InvalidArgument(_))), "{bad:?}");
        }
    }
}
