//! Page format and checksums, relation files, and the control file (DESIGN §2).
//! See README.md beside this file.
#![doc = include_str!("README.md")]

pub mod control;
pub mod dir_lock;
pub mod page;
pub mod relfile;
