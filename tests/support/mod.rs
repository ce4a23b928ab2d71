//! What the integration tests stand on, apart from the tests themselves: the database
//! harness (throwaway databases and clusters, programs, log capture, waiting on events),
//! the Python PgQueuer 1.6.0 interpreter, Debian packages installed on demand, a TCP
//! proxy that injects faults, and a PgBouncer of the tests' own.

pub mod apt;
pub mod harness;
pub mod pgbouncer;
pub mod proxy;
pub mod python;
