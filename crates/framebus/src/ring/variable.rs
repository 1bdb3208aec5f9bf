//! Writing and reading the frames of a variable-shape stream: each frame starts with its own
//! table of arrays (see `frame_table`), written with the frame and validated by every reader.
//! Fixed-shape streams never come here.

use std::ops::Deref;

use super::frame_table::{self, ArraySpec, FrameTable};
use super::handle::Stream;
use super::reader::FrameRef;
use super::writer::{FrameInfo, WriteGuard};
use crate::error::{Error, Result};
use crate::sync::deadline::Deadline;

impl Stream {
    /// Whether frames carry their own table of arrays (created with a capacity, not a shape).
    pub fn is_variable(&self) -> bool {
        self.spec.variable
    }

    /// Bytes of array data a frame of this variable-shape stream can hold.
    pub fn capacity(&self) -> u64 {
        self.geometry.frame_bytes.saturating_sub(frame_table::TABLE_BYTES)
    }

    fn require_variable(&self, what: &str) -> Result<()> {
        if self.spec.variable {
            return Ok(());
        }
        Err(Error::InvalidArgument(format!(
            "stream {:?} has a fixed frame shape; {what} needs a variable-shape stream (create it with a capacity instead of a shape)",
            self.name
        )))
    }

    /// Lays out a frame of `arrays` in this stream's slots (see `frame_table::plan`); nothing is
    /// claimed. Errors name the limit that was exceeded.
    pub fn plan_frame(&self, arrays: &[ArraySpec<'_>], named: bool, codec: &str) -> Result<FrameTable> {
        self.require_variable("a frame of its own shape")?;
        frame_table::plan(arrays, named, codec, self.geometry.frame_bytes)
            .map_err(|e| Error::InvalidArgument(format!("stream {:?}: {e}; nothing was written", self.name)))
    }

    /// Writes a frame laid out by `plan_frame`: its table, then `data[i]` (exactly
    /// `table.arrays[i].nbytes` bytes each) at each array's offset, committed as one frame.
    pub fn write_arrays(
        &self,
        table: &FrameTable,
        data: &[&[u8]],
        info: &FrameInfo<'_>,
        deadline: Deadline,
        check: &mut dyn FnMut() -> bool,
    ) -> Result<u64> {
        self.require_variable("write_arrays")?;
        if data.len() != table.arrays.len()
            || table.arrays.iter().zip(data).any(|(a, d)| a.nbytes != d.len() as u64)
            || table.data_end > self.geometry.frame_bytes
        {
            return Err(Error::InvalidArgument(format!("stream {:?}: the arrays given do not match the frame's table", self.name)));
        }
        self.check_frame(self.geometry.frame_bytes as usize, info)?;
        let mut guard = self.begin_write(deadline, check)?;
        guard.write_table(table);
        let payload = guard.payload_mut();
        for (a, d) in table.arrays.iter().zip(data) {
            crate::copy::copy_frame(&mut payload[a.offset as usize..(a.offset + a.nbytes) as usize], d);
        }
        guard.commit(info)
    }

    /// Writes a frame given whole, table first (as a bridge receives it): the table is
    /// validated against this stream's capacity before anything is claimed.
    pub fn write_raw_frame(
        &self,
        payload: &[u8],
        info: &FrameInfo<'_>,
        deadline: Deadline,
        check: &mut dyn FnMut() -> bool,
    ) -> Result<u64> {
        self.require_variable("write_raw_frame")?;
        let table = frame_table::decode(payload, self.geometry.frame_bytes)
            .map_err(|e| Error::InvalidFrameTable { name: self.name.clone(), reason: e.to_string() })?;
        self.check_frame(self.geometry.frame_bytes as usize, info)?;
        let len = table.data_end as usize;
        let mut guard = self.begin_write(deadline, check)?;
        crate::copy::copy_frame(&mut guard.payload_mut()[..len], &payload[..len]);
        guard.commit(info)
    }

    /// The validated table of a frame of this stream (pinned by the caller). A damaged table
    /// is `Corrupt`, never a misread.
    pub fn frame_table(&self, frame: &FrameRef<'_>) -> Result<FrameTable> {
        self.require_variable("a frame table")?;
        frame_table::decode(frame.payload, self.geometry.frame_bytes).map_err(|reason| Error::Corrupt {
            name: self.name.clone(),
            path: crate::shm::name::path(&self.name),
            reason: format!("frame {}: {reason}", frame.seq),
        })
    }
}

impl<S: Deref<Target = Stream>> WriteGuard<S> {
    /// Writes a frame's table at the start of the claimed slot (variable-shape streams). The
    /// arrays go at the offsets it gives; commit records its `data_end` as the frame's length.
    pub fn write_table(&mut self, table: &FrameTable) {
        table.encode(self.payload_mut());
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ring::{CreateOptions, ReaderMode, StreamSpec};

    fn named(tag: &str) -> String {
        format!("test-variable-{tag}-{}", std::process::id())
    }

    #[test]
    fn frames_of_any_shape_round_trip_and_bad_ones_leave_the_previous_frame() {
        let name = named("round-trip");
        let w = Stream::create(&name, &StreamSpec::variable(1 << 16), &CreateOptions::default()).unwrap();
        let r = Stream::open(&name, ReaderMode::Latest).unwrap();
        assert!(r.is_variable());
        assert_eq!(r.capacity(), 1 << 16);
        let image = vec![7u8; 6 * 5 * 3];
        let boxes: Vec<u8> = (0..2 * 4 * 4).map(|i| i as u8).collect();
        let t = w
            .plan_frame(
                &[
                    ArraySpec { name: "image", dtype: "|u1", shape: &[6, 5, 3], bytes: false },
                    ArraySpec { name: "boxes", dtype: "<f4", shape: &[2, 4], bytes: false },
                ],
                true,
                "",
            )
            .unwrap();
        w.write_arrays(&t, &[&image, &boxes], &FrameInfo::default(), Deadline::never(), &mut || true).unwrap();
        let got = r
            .read_latest(|f| {
                let t = r.frame_table(f).unwrap();
                let parts: Vec<Vec<u8>> =
                    t.arrays.iter().map(|a| f.payload[a.offset as usize..(a.offset + a.nbytes) as usize].to_vec()).collect();
                (t, parts, f.payload.len() as u64)
            })
            .unwrap();
        assert_eq!(got.0, t);
        assert_eq!(got.1, vec![image.clone(), boxes.clone()]);
        assert_eq!(got.2, t.data_end);
        // Too large: refused before a slot is claimed; the previous frame stays the newest.
        assert!(
            matches!(w.plan_frame(&[ArraySpec { name: "", dtype: "|u1", shape: &[(1 << 16) + 1], bytes: true }], false, ""), Err(Error::InvalidArgument(m)) if m.contains("capacity of 65536"))
        );
        // A raw frame with a damaged table is refused; a good one is copied as it is.
        let raw = r.read_latest(|f| f.payload.to_vec()).unwrap();
        let mut bad = raw.clone();
        bad[4] = 99;
        assert!(matches!(
            w.write_raw_frame(&bad, &FrameInfo::default(), Deadline::never(), &mut || true),
            Err(Error::InvalidFrameTable { .. })
        ));
        assert_eq!(r.latest_seq(), 1);
        w.write_raw_frame(&raw, &FrameInfo::default(), Deadline::never(), &mut || true).unwrap();
        assert_eq!(r.read_latest(|f| r.frame_table(f).unwrap()).unwrap(), t);
        // Fixed-size writes are refused on a variable stream, tables on a fixed one.
        assert!(w.write(&[0u8; 10], &FrameInfo::default(), Deadline::never(), &mut || true).is_err());
        drop((w, r));
        crate::unlink(&name).unwrap();
    }
}
