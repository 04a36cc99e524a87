//! Manager mode: the fleet of worker clusters as one more level of the tree. Each worker's
//! nodes, pods and DRA slices and claims ([`devices`]) are merged into the one live picture
//! under a `trainyard.io/cluster` level ([`merge`]); an admitted gang's copy, with its record in
//! the worker's names, is what the manager writes there and reads back ([`copies`]); [`workers`]
//! keeps the links (made from each WorkerCluster's Secret, [`credentials`]), tells lost workers
//! from reached ones and removes copies a worker should no longer run before writing anything
//! there.

pub mod copies;
pub mod credentials;
pub mod devices;
pub mod events;
mod feeds;
pub mod merge;
pub mod workers;
