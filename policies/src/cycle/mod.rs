//! One scheduling cycle's walk over the pending gangs, in the order they are visited, and its
//! shortcuts: passing over gangs that are settled, stopping once nothing left can start, the
//! blanket reason over the gangs it did not reach, and failures a what-if copy can infer
//! without a search. The engine (`engine/`) runs the walk; the walk reads the gang table
//! (`gangs/`), the quotas (`quota/`) and the reservation (`backfill/`).

pub(crate) mod blanket;
pub(crate) mod carried;
pub(crate) mod early_stop;
pub(crate) mod inferred_failures;
pub(crate) mod order;
pub(crate) mod pass_over;
pub(crate) mod walk;
