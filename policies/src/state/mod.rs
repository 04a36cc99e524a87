//! The engine's state of record and its bookkeeping: how gangs enter, start, stop and leave.

pub(crate) mod ledger;
