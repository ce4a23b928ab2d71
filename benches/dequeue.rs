//! Claim+complete rate of the slot-claiming dequeue (filled in with the dequeue).
fn main() {}
