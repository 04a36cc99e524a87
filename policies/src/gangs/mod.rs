//! The gangs the engine tracks: the request a gang comes with, the table of records with every
//! index over them (pending order, by request, by id), the kept placements, and how a gang
//! enters, starts, stops and leaves.

pub(crate) mod by_id;
pub(crate) mod by_request;
pub(crate) mod kept_placements;
pub(crate) mod pending;
pub(crate) mod record;
pub(crate) mod request;
pub(crate) mod table;
#[cfg(test)]
mod table_tests;
